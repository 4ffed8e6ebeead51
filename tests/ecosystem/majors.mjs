// What a user of useChat sees, with each AI SDK major (5, 6, 7; the latest of each, with its
// @ai-sdk/react), the pages using `transport.messages` and `transport.watch` as docs/sdk.md shows.
// All of it on one server (the openai agent, answered by the in-process FakeUpstream), each
// scenario in a fresh browser context and session:
// - a new browser context (no cache) shows the server's whole history, exact text;
// - a message sent in tab A appears in tab B's useChat within 2 s, with its reply; B's own reply
//   then streams with nothing shown twice in either tab; B reloaded shows every reply whole from
//   the cache (history held back), then from the server;
// - a reply already streaming when the send resolves is shown once, and only grows;
// - stop() cancels the turn; `resume: true` after a reload mid-turn shows the reply once, whole;
// - a message with two image attachments: through history, and to the upstream as image parts;
// - the useChat snippets of docs/sdk.md (each major) and the README (the latest), as written.
import { assert, assertEq, deltasText, until } from "../support.mjs";
import { AI_MAJORS, SNIPPETS } from "./build.mjs";
import { assertNothingTwice, chatUrl, chatView, openChat, parts, requests, textOf, texts, turnOf } from "./chat-page.mjs";
import { youSaid } from "./fake-upstream.mjs";

export const scenarios = [];
const each = (name, fn) => {
  for (const major of AI_MAJORS) scenarios.push({ name: `ai@${major}: ${name}`, shared: true, major, fn });
};

/** The documented setup: the server's messages first, then kept in step. */
const USUAL = { initial: true, watch: true };

const clientState = (page, session) =>
  page.evaluate(async (s) => JSON.parse(JSON.stringify((await window.transport.client(s)).state())), session);

const ready = (page, count) => until(`useChat ready with ${count} messages`, async () => {
  const v = await chatView(page);
  return v.status === "ready" && v.messages.length === count && v;
});

/** The key the client gives a message of the server's history. */
const keyOf = (m) => (m.role === "user" ? m.client_message_id ?? m.message_id : `turn:${m.turn_id}`);

each("a chat opened in a new browser context shows the server's whole history, exact text", async ({ context, server, session, major }) => {
  // The conversation happened on another device.
  for (const text of ["first question", "/deltas 5", "a third one, with more words"]) {
    const { turn_id } = await server.post(session, text);
    await until(`"${text}" answered`, async () => (await server.turn(turn_id)).state === "completed");
  }
  const history = (await server.history(session)).messages;
  assertEq(history.length, 6, "three messages and their replies on the server");
  const expected = history.map((m) => [m.role, m.content]);
  assertEq(expected[1], ["assistant", youSaid("first question")], "the upstream's reply");
  const page = await openChat(context, server, session, { major, ...USUAL });
  assert((await page.evaluate(() => window.aiVersion)).startsWith(`${major}.`), `the page runs ai@${major}`);
  const { fromCache, messages } = await page.evaluate(() => window.initial);
  assertEq(fromCache, false, "transport.messages answered with the server's history");
  assertEq(texts(messages), expected, "every message, exact text, in order");
  assertEq(messages.map((m) => m.id), history.map(keyOf), "each under its entry's key");
  const v = await ready(page, 6);
  assertEq(texts(v.messages), expected, "useChat shows them");
  assert(v.messages.filter((m) => m.role === "assistant").every((m) => m.parts.every((p) => p.state === "done")), "finished replies");
  return page;
});

each("a message sent in tab A appears in tab B's useChat within 2 s; B's own reply streams once; B reloaded shows every reply whole, before and after the network answers",
  async ({ context, server, session, major }) => {
    const options = { major, ...USUAL, resume: true };
    const a = await openChat(context, server, session, options);
    const b = await openChat(context, server, session, options);
    for (const [tab, page] of [["A", a], ["B", b]]) {
      await until(`tab ${tab} live`, async () => (await clientState(page, session)).connection === "live");
    }
    const sent = Date.now();
    await a.evaluate(() => { window.chat.sendMessage({ text: "/deltas 40" }); });
    await until("A's message in B's useChat", async () =>
      (await chatView(b)).messages.some((m) => m.role === "user" && textOf(m) === "/deltas 40"), 2000);
    const took = Date.now() - sent;
    assert(took < 2000, `within 2 s (${took} ms)`);
    console.log(`  ai@${major}: A's message in B's useChat after ${took} ms`);
    const first = [["user", "/deltas 40"], ["assistant", deltasText(40)]];
    await until("A's reply, whole, in B", async () => JSON.stringify(texts((await chatView(b)).messages)) === JSON.stringify(first));
    await ready(a, 2);

    await b.evaluate(() => { window.chat.sendMessage({ text: "and now from B" }); });
    const all = [...first, ["user", "and now from B"], ["assistant", youSaid("and now from B")]];
    const vb = await until("B's own reply to end", async () => {
      const v = await chatView(b);
      return v.status === "ready" && JSON.stringify(texts(v.messages)) === JSON.stringify(all) && v;
    });
    assertEq(vb.messages[3].parts.map((p) => p.type), ["reasoning", "text"], "B's reply streamed with its reasoning");
    const reqs = await requests(b);
    assertEq(reqs.map((r) => [r.kind, r.chunks && r.chunks.at(-1).type]), [["reconnect", null], ["send", "finish"]],
      "B resumed nothing on load, then streamed its own reply (A's came through watch)");
    assertEq(reqs[1].chunks[0], { type: "start", messageId: vb.messages[3].id }, "its stream names the reply's key");
    await until("B's message and reply in A", async () => JSON.stringify(texts((await chatView(a)).messages)) === JSON.stringify(all));
    const renders = await assertNothingTwice(b, "tab B", { grows: true });
    await assertNothingTwice(a, "tab A", { grows: true });
    assert(renders > 5, "tab B rendered the streams");

    // Reloaded with the server's history held back: the cache has every reply B showed.
    await b.route("**/api/sessions/*/history*", () => {});
    await b.goto(chatUrl(server, session, major, { ...options, wait: 500 }));
    await until("the reloaded page to render", () => b.evaluate(() => !!window.view));
    const cached = await b.evaluate(() => window.initial);
    assertEq(cached.fromCache, true, "no history: messages answered from the cache after its wait");
    assertEq(texts(cached.messages), all, "every reply whole, before the network answers");
    // (Its resume waits for the stream, which waits for history: AI SDK 5 says "submitted" meanwhile.)
    await until("useChat to show them", async () => JSON.stringify(texts((await chatView(b)).messages)) === JSON.stringify(all));
    await b.unroute("**/api/sessions/*/history*");
    await b.goto(chatUrl(server, session, major, options));
    await until("the reloaded page to render", () => b.evaluate(() => !!window.view));
    const served = await b.evaluate(() => window.initial);
    assertEq(served.fromCache, false, "then from the server");
    assertEq(texts(served.messages), all, "every reply whole after the network answered");
    assertEq(texts((await ready(b, 4)).messages), all, "and useChat shows them");
    return b;
  });

each("a reply that streams in before the send resolves (the disk slow, another tab posted the message) is shown once and only grows",
  async ({ context, server, session, major }) => {
    const page = await openChat(context, server, session, { major, ...USUAL });
    await until("the client live", async () => (await clientState(page, session)).connection === "live");
    // `send` resolves once the message is on disk; the post can come first (a sibling tab's
    // outbox), and its reply with it. Here `send` waits for 5 of the reply's deltas.
    await page.evaluate(async (s) => {
      const client = await window.transport.client(s);
      const send = client.send.bind(client);
      client.send = async (...args) => {
        const sent = await send(...args);
        await new Promise((resolve) => {
          const shown = (st) => st.messages.some((m) => m.role === "assistant" && m.content.includes("x5 "));
          let off = null;
          const check = (st) => shown(st) && (off?.(), resolve());
          off = client.subscribe(check);
          check(client.state());
        });
        return sent;
      };
    }, session);
    await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 40" }); });
    const v = await ready(page, 2);
    assertEq(texts(v.messages), [["user", "/deltas 40"], ["assistant", deltasText(40)]], "the message and its whole reply");
    assertEq((await requests(page)).map((r) => [r.kind, r.chunks && r.chunks.at(-1).type]), [["send", "finish"]],
      "the reply came through the send's stream");
    await assertNothingTwice(page, "the page", { grows: true });
    return page;
  });

each("stop() cancels the turn on the server; the partial reply stays, as the server ended it", async ({ context, server, session, major }) => {
  const page = await openChat(context, server, session, { major, ...USUAL });
  await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 400" }); });
  const streaming = await until("some text to stream", async () => {
    const v = await chatView(page);
    return v.status === "streaming" && (v.messages[1] ? textOf(v.messages[1]) : "").length > 20 && v;
  });
  await page.evaluate(() => window.chat.stop());
  const turn = await until("the turn to end", async () => {
    const t = await server.turn(turnOf(streaming.messages[1]));
    return t.state !== "running" && t;
  });
  assertEq(turn.state, "cancelled", "the server cancelled the turn");
  assert(turn.text.length < deltasText(400).length && deltasText(400).startsWith(turn.text), "before the reply was done");
  const v = await until("useChat to show the reply as the server ended it", async () => {
    const v = await chatView(page);
    return v.status === "ready" && v.messages.length === 2 && textOf(v.messages[1]) === turn.text && v;
  });
  assertEq(v.error, null, "a stop is not an error");
  await assertNothingTwice(page, "the page");
  return page;
});

each("resume: true after a reload mid-turn shows the reply once, whole", async ({ context, server, session, major }) => {
  const options = { major, ...USUAL, resume: true };
  const page = await openChat(context, server, session, options);
  await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 300" }); });
  const before = await until("30 deltas shown", async () => {
    const v = await chatView(page);
    return v.messages[1] && textOf(v.messages[1]).includes("x30 ") && v;
  });
  const turnId = turnOf(before.messages[1]);
  await page.reload();
  await until("the reloaded page to render", () => page.evaluate(() => !!window.view));
  const { fromCache, messages } = await page.evaluate(() => window.initial);
  assertEq(fromCache, false, "from the server");
  assertEq(messages.map((m) => m.id)[1], `turn:${turnId}`, "the reply in flight under its key");
  await until("the resumed stream to show text", async () => (await requests(page))[0]?.chunks?.some((c) => c.type === "text-delta"));
  assertEq((await server.turn(turnId)).state, "running", "the turn was still running when the page resumed it");
  const v = await until("the resumed reply to end", async () => {
    const v = await chatView(page);
    return v.status === "ready" && (await requests(page))[0]?.closed && v;
  });
  assertEq(v.error, null, "no error");
  assertEq(texts(v.messages), [["user", "/deltas 300"], ["assistant", deltasText(300)]], "the message and the whole reply, once");
  assertEq(v.messages[1].id, `turn:${turnId}`, "in place of the entry it started with");
  const reqs = await requests(page);
  assertEq(reqs.map((r) => r.kind), ["reconnect"], "one request: the resume");
  assertEq(reqs[0].chunks[0], { type: "start", messageId: `turn:${turnId}` }, "the resumed stream starts with start");
  assertEq(reqs[0].chunks.at(-1), { type: "finish" }, "and it finished");
  await assertNothingTwice(page, "the reloaded page");
  return page;
});

each("a message with two image attachments: posted, in history, shown back as file parts, sent upstream as image parts",
  async ({ browser, context, server, session, major, upstream }) => {
    const page = await openChat(context, server, session, { major, ...USUAL });
    const files = [
      { type: "file", mediaType: "image/png", filename: "red.png", url: "https://files.example.com/red.png" },
      { type: "file", mediaType: "image/jpeg", filename: "blue.jpg", url: "https://files.example.com/blue.jpg" },
    ];
    const text = "what is in these pictures?";
    await page.evaluate(([text, files]) => { window.chat.sendMessage({ text, files }); }, [text, files]);
    const v = await until("the reply", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v.messages.length === 2 && textOf(v.messages[1]) === youSaid(text) && v;
    });
    const shown = [...files, { type: "text", text, state: undefined }];
    assertEq(parts(v.messages[0]), shown, "useChat shows the files, then the text");
    const [user] = (await server.history(session)).messages;
    assertEq(user.attachments, files.map((f) => ({ url: f.url, media_type: f.mediaType, name: f.filename })),
      "the server keeps both attachments with the message");
    const upstreamContent = upstream.requestFor(text)?.messages.at(-1).content;
    assertEq(Array.isArray(upstreamContent) && upstreamContent.filter((p) => p.type === "image_url").map((p) => p.image_url.url),
      files.map((f) => f.url), "the upstream got both images as image parts");
    // Round trip: another browser reads them from history.
    const other = await browser.newContext();
    try {
      const fresh = await openChat(other, server, session, { major, ...USUAL });
      const { fromCache, messages } = await fresh.evaluate(() => window.initial);
      assertEq(fromCache, false, "from the server");
      assertEq(parts(messages[0]), shown, "the files come back as file parts, before the text");
      assertEq(texts(messages), [["user", text], ["assistant", youSaid(text)]], "and the reply");
    } finally {
      await other.close();
    }
    return page;
  });

each("the useChat snippets of docs/sdk.md and the README, as written: history, a send, another device's message", async ({ browser, context, server, session, major }) => {
  const { turn_id } = await server.post(session, "asked on another device");
  await until("the reply on the server", async () => (await server.turn(turn_id)).state === "completed");
  const open = async (ctx, name) => {
    const page = await ctx.newPage();
    page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
    await page.goto(`${server.url}/snippet-${name}${major}.html?session=${session}`);
    return page;
  };
  const shown = (page) => page.evaluate(() => [...document.querySelectorAll("p[data-role]")].map((p) => [p.dataset.role, p.textContent]));
  const showing = (page, what, expected, ms) => until(what, async () => JSON.stringify(await shown(page)) === JSON.stringify(expected), ms);
  let expected = [["user", "asked on another device"], ["assistant", youSaid("asked on another device")]];
  const page = await open(context, "docs");
  await showing(page, "the server's history", expected);
  await page.fill("input[name=text]", "typed into the page");
  await page.click("form button");
  expected = [...expected, ["user", "typed into the page"], ["assistant", youSaid("typed into the page")]];
  await showing(page, "the message and its reply", expected);
  await server.post(session, "/deltas 3");
  expected = [...expected, ["user", "/deltas 3"], ["assistant", deltasText(3)]];
  await showing(page, "another device's message and its reply, within 2 s", expected, 2000);
  if (SNIPPETS.find((s) => s.name === "readme").majors.includes(major)) {
    const other = await browser.newContext();
    try {
      await showing(await open(other, "readme"), "the README's snippet, in a new browser, shows it all", expected);
    } finally {
      await other.close();
    }
  }
  return page;
});
