// Agents that ask (contract v1.2), in the browser: the demo agent's `/approve`, `/ask` and
// `/clienttool` requests shown on the reply in every tab, answered with `chat.respond`.
// - An approval shows in three tabs (two of one browser, one of another device); two of them
//   answer differently at the same moment: exactly one answer wins, the other `respond`
//   rejects with `input_already_given` naming the winner, and all three show the winner's answer
//   and the reply it led to, streamed in each.
// - A page reloaded while a question waits shows it from its cache before any network answer,
//   then from the server (and so does a new device); answered, the turn ends with the reply.
// - A client tool's answer given offline shows at once and is posted once when back, even when
//   the tab granted the outbox next has not heard its sibling yet.
// - `send(text, { onBusy })` while a turn waits: "reject" refuses, "interrupt" cancels it.
// Pages of one origin over HTTP/1.1, against the real server binary. The last line printed is
// "N passed, N failed".
import { until, assert, assertEq, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

/** A page of the server's origin that holds one `ChatClient` (`window.chat`) and nothing else. */
async function openClient(context, server, session) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await context.route(`${server.url}/interactive`, (route) => route.fulfill({
    contentType: "text/html",
    body: `<!doctype html><meta charset="utf-8"><title>interactive</title>
      <script type="importmap">{ "imports": { "turnstream": "./pkg/turnstream.js" } }</script>`,
  }));
  await page.goto(`${server.url}/interactive`);
  await connect(page, session);
  return page;
}

async function connect(page, session) {
  await page.evaluate(async (sessionId) => {
    const { default: init, ChatClient } = await import("turnstream");
    await init();
    window.chat = await ChatClient.connect({ baseUrl: location.origin, sessionId });
  }, session);
}

const state = (page) => page.evaluate(() => window.chat.state());
const live = (page) => until("the page to be live", async () => (await state(page)).connection === "live");

/** The last reply of the page and its first request, once the reply has one. */
async function asked(page, kind) {
  return until(`a ${kind} request on the reply`, async () => {
    const reply = (await state(page)).messages.filter((m) => m.role === "assistant").at(-1);
    const r = reply?.requests[0];
    return r?.kind === kind && { reply, request: r };
  });
}

/** Waits until the page's last reply has status `status` and content `content`. */
async function replied(page, status, content, what) {
  let last;
  try {
    return await until(what, async () => {
      last = (await state(page)).messages.filter((m) => m.role === "assistant").at(-1);
      return last?.status === status && last.content === content && last;
    });
  } catch (e) {
    throw new Error(`${e.message}\n  the reply is ${JSON.stringify(last)?.slice(0, 600)}`);
  }
}

/** `chat.respond` in the page, settled: `{ ok, value }` or `{ ok: false, code, answer, answeredBy }`. */
const respond = (page, requestId, answer) => page.evaluate(([id, a]) => window.chat.respond(id, a).then(
  (value) => ({ ok: true, value }),
  (e) => ({ ok: false, code: e.code, message: e.message, answer: e.answer, answeredBy: e.answeredBy }),
), [requestId, answer]);

scenario("an approval shows in three tabs; two answer at once, one wins, all show it and its reply",
  ["--demo-delay-ms", "30"], async ({ browser, context, server, session }) => {
    const device = await browser.newContext();
    try {
      const tabs = [await openClient(context, server, session), await openClient(context, server, session),
        await openClient(device, server, session)];
      for (const t of tabs) await live(t);
      // Only the continuation's reply is counted: the text streamed after the answer.
      await tabs[0].evaluate(() => window.chat.send("/approve deploy to prod"));
      const seen = [];
      for (const t of tabs) {
        const { reply, request } = await asked(t, "approval");
        assertEq(reply.status, "waiting", "the reply waits for the answer");
        assertEq(request.tool?.name, "demo_action", "the tool asked about");
        assertEq(request.tool?.input, { action: "deploy to prod" }, "its input, as JSON");
        assertEq(request.answer, null, "not answered yet");
        seen.push(request.requestId);
      }
      assert(seen.every((id) => id === seen[0]), `one request in every tab: ${seen}`);
      // Streamed deltas of the continuation, per tab, to show the reply arrives live in each.
      for (const t of tabs) {
        await t.evaluate(() => {
          window.grew = 0;
          let last = "";
          window.chat.subscribe((s) => {
            const r = s.messages.filter((m) => m.role === "assistant").at(-1);
            if (r && r.status === "streaming" && r.content !== last) window.grew++;
            last = r?.content ?? "";
          });
        });
      }
      const [yes, no] = await Promise.all([
        respond(tabs[1], seen[0], { approved: true }),
        respond(tabs[2], seen[0], { approved: false, reason: "not on a Friday" }),
      ]);
      assert(yes.ok !== no.ok, `exactly one answer wins: ${JSON.stringify([yes, no])}`);
      const [won, lost] = yes.ok ? [{ approved: true }, no] : [{ approved: false, reason: "not on a Friday" }, yes];
      assertEq(lost.code, "input_already_given", "the other answer is refused as already given");
      assertEq(lost.answer, won, "the refusal names the answer that won");
      const text = yes.ok ? "Approved: deploy to prod" : "Denied: deploy to prod (not on a Friday)";
      for (const [i, t] of tabs.entries()) {
        const reply = await replied(t, "complete", text, `tab ${i + 1} to show the reply the winning answer led to`);
        assertEq(reply.requests.map((r) => r.answer), [won], `tab ${i + 1} shows the winning answer`);
        assert(await t.evaluate(() => window.grew) >= 1, `tab ${i + 1} saw the reply stream in`);
      }
      const turn = await server.turn((await state(tabs[0])).messages.at(-1).turnId);
      assertEq(turn.requests?.map((r) => r.answer), [won], "the server recorded the winner once");
      return tabs[0];
    } finally {
      await device.close();
    }
  });

scenario("a page reloaded while a question waits shows it from its cache, then from the server",
  ["--demo-delay-ms", "5"], async ({ browser, context, server, session }) => {
    const page = await openClient(context, server, session);
    await live(page);
    await page.evaluate(() => window.chat.send("/ask Which file did you mean?"));
    const { request } = await asked(page, "question");
    assertEq(request.prompt, "Which file did you mean?", "the question's prompt");
    // The cache is written when the page goes away; the reloaded page hears nothing from the
    // server, so what it shows is the cache alone.
    await page.route("**/api/**", () => {});
    await page.reload();
    await connect(page, session);
    const cached = await asked(page, "question");
    assertEq(cached.reply.status, "waiting", "the cached reply waits");
    assertEq(cached.request.requestId, request.requestId, "the same request, from the cache");
    assertEq((await state(page)).historyLoaded, false, "nothing came from the server");
    await page.unroute("**/api/**");
    await page.reload();
    await connect(page, session);
    await until("the server's history", async () => (await state(page)).historyLoaded);
    await live(page);
    assertEq((await asked(page, "question")).request.answer, null, "still open on the server");
    // A new device, with no cache, reads it from the server alone.
    const device = await browser.newContext();
    try {
      const other = await openClient(device, server, session);
      const fresh = await asked(other, "question");
      assertEq([fresh.reply.status, fresh.request.requestId, fresh.request.prompt],
        ["waiting", request.requestId, "Which file did you mean?"], "the other device shows the open question");
      const r = await respond(page, request.requestId, { text: "notes.txt" });
      assert(r.ok, `the answer is taken: ${JSON.stringify(r)}`);
      for (const p of [page, other]) {
        const reply = await replied(p, "complete", "You answered: notes.txt", "the reply to the answer");
        assertEq(reply.requests[0].answer, { text: "notes.txt" }, "the answer shows");
      }
    } finally {
      await device.close();
    }
    return page;
  });

scenario("a client tool answered offline shows at once in both tabs and is posted once when back",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const page = await openClient(context, server, session);
    const sibling = await openClient(context, server, session);
    await live(page);
    await live(sibling);
    const posts = [];
    for (const p of [page, sibling]) {
      p.on("response", (r) => {
        if (r.request().method() === "POST" && /\/api\/turns\/[^/]+\/input$/.test(r.url())) posts.push(r.status());
      });
    }
    await page.evaluate(() => window.chat.send("/clienttool get_location"));
    const { request } = await asked(page, "client_tool");
    assertEq(request.tool?.name, "get_location", "the tool the page runs");
    await context.setOffline(true);
    await until("the page to say it is offline", async () => (await state(page)).connection === "offline");
    const output = { lat: 48.85, lon: 2.35, label: "Paris \"centre\"" };
    await page.evaluate(([id, output]) => {
      window.answered = window.chat.respond(id, { output }).then((v) => ({ ok: true, v }), (e) => ({ ok: false, code: e.code }));
    }, [request.requestId, output]);
    const shown = await asked(page, "client_tool");
    assertEq(shown.request.answer, { output }, "the answer shows at once, offline");
    assert(shown.reply.status !== "waiting", "the reply no longer waits on this page");
    await until("the other tab to show it too, offline", async () =>
      JSON.stringify((await asked(sibling, "client_tool")).request.answer) === JSON.stringify({ output }));
    assertEq(posts.length, 0, "nothing reached the server while offline");
    await context.setOffline(false);
    assertEq(await page.evaluate(() => window.answered), { ok: true }, "respond resolves once the server has it");
    for (const p of [page, sibling]) await replied(p, "complete", `The tool returned: ${JSON.stringify(output)}`, "the reply to the tool's output");
    assertEq(posts, [200], "the answer was posted once, by one of the tabs");
    const turn = await server.turn(shown.reply.turnId);
    assertEq(turn.requests?.map((r) => r.answer), [{ output }], "the server has it once");
    return page;
  });

/**
 * Lets a test hold back what the pages of `context` hear: the sibling tabs' channel (not the
 * shared stream's relay) while `window.holdSiblings` is set, delivered in order by
 * `releaseSiblings()`; and the server's account of the journal (the stream, turn statuses) from
 * `hold()` until `release()`. Answers' posts are never held.
 */
async function holdable(context, server) {
  await context.addInitScript(() => {
    const Real = window.BroadcastChannel;
    const held = [];
    window.holdSiblings = false;
    window.releaseSiblings = () => {
      window.holdSiblings = false;
      for (const [channel, data] of held.splice(0)) channel.dispatchEvent(new MessageEvent("message", { data }));
    };
    window.BroadcastChannel = class extends Real {
      constructor(name) {
        super(name);
        if (!String(name).startsWith("turnstream:")) return;
        // Registered before the SDK's handler, so it runs first and can stop it.
        this.addEventListener("message", (e) => {
          if (!window.holdSiblings) return;
          e.stopImmediatePropagation();
          held.push([this, e.data]);
        });
      }
    };
  });
  let open = Promise.resolve();
  let release = () => {};
  const journal = (url) => url.origin === server.url && (url.pathname === "/api/stream" || url.pathname.startsWith("/api/turns/"));
  await context.route(journal, async (route) => {
    if (route.request().method() === "GET") await open;
    await route.continue();
  });
  return {
    hold: () => { open = new Promise((r) => { release = r; }); },
    release: () => release(),
  };
}

/** No tab of the page's origin holds or waits for an outbox's lock. */
const outboxIdle = (page) => page.evaluate(async () => {
  const { held = [], pending = [] } = await navigator.locks.query();
  return ![...held, ...pending].some((l) => l.name?.startsWith("turnstream-outbox:"));
});

scenario("the tab granted the outbox after its sibling posted an answer does not post it again, unheard",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const gate = await holdable(context, server);
    const tabs = [await openClient(context, server, session), await openClient(context, server, session)];
    for (const t of tabs) await live(t);
    const posts = [];
    for (const t of tabs) {
      t.on("response", (r) => {
        if (r.request().method() === "POST" && /\/api\/turns\/[^/]+\/input$/.test(r.url())) posts.push(r.status());
      });
    }
    await tabs[0].evaluate(() => window.chat.send("/clienttool get_location"));
    const { request } = await asked(tabs[0], "client_tool");
    await asked(tabs[1], "client_tool");
    await context.setOffline(true);
    for (const t of tabs) await until("the tab to say it is offline", async () => (await state(t)).connection === "offline");
    const output = { lat: 1, lon: 2 };
    await tabs[0].evaluate(([id, output]) => { window.answered = window.chat.respond(id, { output }); }, [request.requestId, output]);
    // Both tabs hold the answer: each wants the outbox's lock, and one of them has it.
    await until("the sibling to hold the answer", async () =>
      JSON.stringify((await asked(tabs[1], "client_tool")).request.answer) === JSON.stringify({ output }));
    // From here neither tab hears the other nor the journal: the one granted the lock second
    // knows the answer went only from what the first one stored.
    for (const t of tabs) await t.evaluate(() => { window.holdSiblings = true; });
    gate.hold();
    await context.setOffline(false);
    await until("the answer to be posted", async () => posts.length > 0);
    await until("both tabs to be done with the outbox", async () => await outboxIdle(tabs[0]) && await outboxIdle(tabs[1]));
    assertEq(posts, [200], "posted once, by the first tab granted the lock");
    gate.release();
    for (const t of tabs) await t.evaluate(() => window.releaseSiblings());
    for (const t of tabs) await replied(t, "complete", `The tool returned: ${JSON.stringify(output)}`, "the reply to the tool's output");
    await tabs[0].evaluate(() => window.answered);
    assertEq(posts, [200], "and not again once they hear each other");
    return tabs[0];
  });

scenario("send with onBusy while a turn waits: reject refuses, interrupt cancels the waiting turn",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const page = await openClient(context, server, session);
    await live(page);
    await page.evaluate(() => window.chat.send("/approve wait for me"));
    const { reply } = await asked(page, "approval");
    await page.evaluate(() => window.chat.send("/echo too soon", { onBusy: "reject" }));
    const refused = await until("the refused message", async () =>
      (await state(page)).messages.find((m) => m.role === "user" && m.content === "/echo too soon" && m.status === "rejected"));
    assertEq(refused.error?.code, "session_busy", "refused because the session is busy");
    await page.evaluate(() => window.chat.send("/echo go ahead", { onBusy: "interrupt" }));
    await replied(page, "complete", "go ahead", "the interrupting message's reply");
    const waited = (await state(page)).messages.find((m) => m.key === reply.key);
    assertEq(waited.status, "cancelled", "the waiting turn was cancelled");
    const r = await respond(page, reply.requests[0].requestId, { approved: true });
    assertEq([r.ok, r.code], [false, "turn_ended"], "an answer to a cancelled turn is refused");
    return page;
  });

runScenarios("interactive", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
