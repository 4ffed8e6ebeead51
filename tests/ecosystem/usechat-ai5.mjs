// turnstream/ai-sdk under AI SDK 5's useChat, chunk by chunk, against the demo agent (each
// scenario with its own server and delay): a reply with reasoning, a tool call and text exactly as
// journaled, stop() cancelling the turn (also before the POST got through), a failed turn as an
// error, a reload mid-turn resumed with `resume: true` with no duplicate text (a plain reply, one
// after thinking and a tool call, one over messages from `transport.messages`), and
// reconnectToStream answering null when nothing is in flight. majors.mjs runs what a user sees
// with AI SDK 5, 6 and 7.
import { assert, assertEq, deltasText, until } from "../support.mjs";
import { chatView, chunkTypes, openChat, part, parts, requests, turnOf } from "./chat-page.mjs";

export const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("useChat + TurnstreamChatTransport: a reply with reasoning, a tool call and text, exactly as the server journaled it",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const page = await openChat(context, server, session);
    await page.evaluate(() => window.chat.sendMessage({ text: "hello there" }));
    const v = await until("the reply to end", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v.messages.length === 2 && v;
    });
    assertEq(v.error, null, "no error");
    const [user, reply] = v.messages;
    assertEq([user.role, user.parts.map((p) => [p.type, p.text])], ["user", [["text", "hello there"]]], "the user's message");
    assertEq(reply.role, "assistant", "then the reply");
    const turn = await server.turn(turnOf(reply));
    assertEq(turn.state, "completed", "the message id names the turn, which completed");
    assertEq(parts(reply), [
      { type: "reasoning", text: turn.thinking, state: "done" },
      { type: "tool-lookup", toolCallId: "call_lookup", state: "output-available", input: { query: "hello there" },
        output: "11 characters, 2 words", errorText: undefined, providerExecuted: true },
      { type: "text", text: turn.text, state: "done" },
    ], "reasoning, the tool call and the text, each once");
    assertEq(turn.thinking, "Reading the message and deciding how to answer.", "the demo agent's thinking");
    assert(turn.text.startsWith('You said: "hello there".'), "the demo agent's reply");
    const [req] = await requests(page);
    assertEq(chunkTypes(req.chunks), ["start", "reasoning-start", "reasoning-delta", "reasoning-end", "tool-input-available",
      "tool-output-available", "text-start", "text-delta", "text-end", "finish"], "the chunks, in order");
    assertEq(req.chunks[0], { type: "start", messageId: `turn:${turn.turn_id}` }, "start names the turn");
    assert(req.chunks.filter((c) => c.type === "text-delta").length > 3, "the text streamed in several deltas");
    assert(req.closed, "the stream closed after finish");
    // The page shows it too.
    assertEq(await page.locator("[data-testid=message][data-role=assistant] [data-part=text]").textContent(), turn.text, "rendered text");
    return page;
  });

scenario("stop() aborts the request and cancels the turn on the server; the partial reply stays",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openChat(context, server, session);
    await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 1000" }); });
    const streaming = await until("some text to stream", async () => {
      const v = await chatView(page);
      const text = v.messages[1]?.parts.find((p) => p.type === "text")?.text ?? "";
      return v.status === "streaming" && text.length > 20 && v;
    });
    await page.evaluate(() => window.chat.stop());
    const turnId = turnOf(streaming.messages[1]);
    const turn = await until("the turn to end cancelled", async () => {
      const t = await server.turn(turnId);
      return t.state !== "running" && t;
    });
    assertEq(turn.state, "cancelled", "the server cancelled the turn");
    assert(turn.text.length < deltasText(1000).length, "before the reply was done");
    const v = await until("useChat to be ready", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v;
    });
    assertEq(v.error, null, "a stop is not an error");
    const shown = v.messages[1].parts.find((p) => p.type === "text").text;
    assert(shown.length > 20 && deltasText(1000).startsWith(shown), "the partial reply stays, a prefix of the deltas");
    // The next message goes through as usual.
    await page.evaluate(() => window.chat.sendMessage({ text: "/echo after the stop" }));
    const after = await until("the next reply", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v.messages.length === 4 && v;
    });
    assertEq(parts(after.messages[3]), [{ type: "text", text: "after the stop", state: "done" }], "the next reply, whole");
    return page;
  });

scenario("stop() before the message reached the server: the turn is cancelled as soon as it exists",
  ["--demo-delay-ms", "30"], async ({ context, server, session }) => {
    const page = await openChat(context, server, session);
    // Hold the POST, as a slow network would.
    let release;
    const released = new Promise((r) => (release = r));
    let held = 0;
    await page.route("**/api/sessions/*/messages", async (route) => {
      held++;
      await released;
      await route.continue();
    });
    await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 1000" }); });
    await until("the POST to be held", async () => held > 0);
    assertEq((await chatView(page)).status, "submitted", "useChat waits for the turn");
    await page.evaluate(() => window.chat.stop());
    assertEq((await chatView(page)).status, "ready", "stop() returned");
    release();
    const turnId = await until("the message to reach the server", async () =>
      (await server.history(session)).messages.find((m) => m.role === "user")?.turn_id);
    const turn = await until("the turn to end", async () => {
      const t = await server.turn(turnId);
      return t.state !== "queued" && t.state !== "running" && t;
    });
    assertEq(turn.state, "cancelled", "the transport cancelled it once its id was known");
    assertEq((await chatView(page)).messages.map((m) => m.role), ["user"], "useChat shows no reply");
    return page;
  });

scenario("a failed turn surfaces as useChat's error, with the server's reason",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const page = await openChat(context, server, session);
    await page.evaluate(() => { window.chat.sendMessage({ text: "/fail the model is down" }).catch(() => {}); });
    const v = await until("useChat's error", async () => {
      const v = await chatView(page);
      return v.status === "error" && v;
    });
    assertEq(v.error, "the model is down", "the error is the turn's failure reason");
    const turn = await server.turn(turnOf(v.messages[1]));
    assertEq(turn.state, "failed", "the turn failed on the server");
    const [req] = await requests(page);
    assertEq(chunkTypes(req.chunks), ["start", "reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta", "text-end", "error"],
      "the partial reply's chunks, then error");
    assertEq(req.chunks.at(-1), { type: "error", errorText: "the model is down" }, "the error chunk");
    assertEq(await page.locator("[data-testid=error]").textContent(), "the model is down", "shown on the page");
    return page;
  });

scenario("a reload mid-turn: useChat({ resume: true }) shows the whole reply once, replayed from its start",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    let page = await openChat(context, server, session, { resume: true });
    await until("the idle resume to answer", async () => (await requests(page)).length === 1);
    assertEq((await requests(page))[0], { kind: "reconnect", chunks: null }, "nothing to resume on an empty session");
    await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 300" }); });
    const before = await until("30 deltas shown", async () => {
      const v = await chatView(page);
      const text = v.messages[1]?.parts.find((p) => p.type === "text")?.text ?? "";
      return text.includes("x30 ") && v;
    });
    const turnId = turnOf(before.messages[1]);
    await page.reload();
    await until("the resumed page to render", () => page.evaluate(() => !!window.view));
    const resumed = await until("the resumed stream to show text", async () => {
      const v = await chatView(page);
      return v.messages.length === 1 && v.messages[0].parts.some((p) => p.type === "text") && v;
    });
    assertEq((await server.turn(turnId)).state, "running", "the turn was still running when the page resumed it");
    assertEq(resumed.messages[0].id, `turn:${turnId}`, "the resumed message is the turn's");
    const v = await until("the resumed reply to end", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v;
    });
    assertEq(v.error, null, "no error");
    assertEq(v.messages.map((m) => [m.role, m.id]), [["assistant", `turn:${turnId}`]], "one reply (useChat keeps no messages across a reload)");
    assertEq(parts(v.messages[0]), [{ type: "text", text: deltasText(300), state: "done" }], "the whole reply, once");
    const reqs = await requests(page);
    assertEq(reqs.map((r) => r.kind), ["reconnect"], "one request: the resume");
    const chunks = reqs[0].chunks;
    assertEq(chunks[0], { type: "start", messageId: `turn:${turnId}` }, "the resumed stream starts with start");
    assertEq(chunks[1].type, "text-start", "then the text part opens");
    assert(chunks[2].type === "text-delta" && chunks[2].delta.startsWith("x1 x2 x3 "), "its first delta replays the reply from its first word");
    assert(chunks.filter((c) => c.type === "text-delta").length > 2, "then live deltas followed");
    assertEq(chunks.at(-1), { type: "finish" }, "and it finished");
    return page;
  });

scenario("a reload mid-reply after thinking and a tool call: the resumed message has every part once, in order",
  ["--demo-delay-ms", "150"], async ({ context, server, session }) => {
    let page = await openChat(context, server, session, { resume: true });
    await page.evaluate(() => { window.chat.sendMessage({ text: "what is durable?" }); });
    const before = await until("the reply's text to start", async () => {
      const v = await chatView(page);
      const text = v.messages[1]?.parts.find((p) => p.type === "text")?.text ?? "";
      return text.split(" ").length > 3 && v;
    });
    const turnId = turnOf(before.messages[1]);
    await page.reload();
    await until("the resumed page to render", () => page.evaluate(() => !!window.view));
    await until("the resumed stream to show text", async () =>
      (await chatView(page)).messages[0]?.parts.some((p) => p.type === "text"));
    assertEq((await server.turn(turnId)).state, "running", "the turn was still running when the page resumed it");
    const v = await until("the resumed reply to end", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v;
    });
    const turn = await server.turn(turnId);
    assertEq(turn.state, "completed", "the turn completed");
    assertEq(v.messages.map((m) => m.id), [`turn:${turnId}`], "one message");
    assertEq(parts(v.messages[0]), [
      { type: "reasoning", text: turn.thinking, state: "done" },
      { type: "tool-lookup", toolCallId: "call_lookup", state: "output-available", input: { query: "what is durable?" },
        output: "16 characters, 3 words", providerExecuted: true },
      { type: "text", text: turn.text, state: "done" },
    ], "reasoning, the tool call and the text, each once");
    const [req] = await requests(page);
    assertEq(chunkTypes(req.chunks), ["start", "reasoning-start", "reasoning-delta", "reasoning-end", "tool-input-available",
      "tool-output-available", "text-start", "text-delta", "text-end", "finish"], "the replay, then the live deltas");
    assertEq(req.chunks[2], { type: "reasoning-delta", id: req.chunks[1].id, delta: turn.thinking }, "the thinking replayed whole, in one delta");
    return page;
  });

scenario("a reload mid-turn with useChat's messages from transport.messages: the resumed reply replaces its entry, shown once",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openChat(context, server, session, { resume: true, initial: true });
    await page.evaluate(() => { window.chat.sendMessage({ text: "/echo before" }); });
    await until("the first reply", async () => {
      const v = await chatView(page);
      return v.status === "ready" && v.messages.length === 2;
    });
    await page.evaluate(() => { window.chat.sendMessage({ text: "/deltas 300" }); });
    const before = await until("30 deltas shown", async () => {
      const v = await chatView(page);
      const text = v.messages[3]?.parts.find((p) => p.type === "text")?.text ?? "";
      return text.includes("x30 ") && v;
    });
    const turnId = turnOf(before.messages[3]);
    await page.reload();
    await until("the resumed page to render", () => page.evaluate(() => !!window.view));
    const { fromCache, messages: initial } = await page.evaluate(() => window.initial);
    assertEq(fromCache, false, "the messages are the server's");
    assertEq(initial.map((m) => [m.role, m.parts.map((p) => p.type)]),
      [["user", ["text"]], ["assistant", ["text"]], ["user", ["text"]], ["assistant", ["text"]]], "useChat started with every message");
    assertEq(initial[3].id, `turn:${turnId}`, "the reply in flight under its key");
    assert(initial[3].parts[0].state === "streaming" && initial[3].parts[0].text.includes("x30 "), "still streaming, as far as it got");
    const v = await until("the resumed reply to end", async () => {
      const v = await chatView(page);
      return v.status === "ready" && (await requests(page)).length === 1 && v;
    });
    assertEq(v.error, null, "no error");
    assertEq(v.messages.map((m) => [m.role, m.parts.map(part)]), [
      ["user", [{ type: "text", text: "/echo before", state: undefined }]],
      ["assistant", [{ type: "text", text: "before", state: "done" }]],
      ["user", [{ type: "text", text: "/deltas 300", state: undefined }]],
      ["assistant", [{ type: "text", text: deltasText(300), state: "done" }]],
    ], "every message once, the resumed reply whole");
    assertEq(v.messages[3].id, `turn:${turnId}`, "in place of its cached entry");
    assertEq((await requests(page)).map((r) => r.kind), ["reconnect"], "it was resumed");
    return page;
  });

scenario("reconnectToStream answers null when nothing is in flight, and a stream for a queued turn",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const done = await server.post(session, "/echo finished before the page opened");
    await until("the turn to complete", async () => (await server.turn(done.turn_id)).state === "completed");
    const page = await openChat(context, server, session, { resume: true });
    await until("useChat's resume to answer", async () => (await requests(page)).length === 1);
    assertEq((await requests(page))[0], { kind: "reconnect", chunks: null }, "useChat's resume got null");
    assertEq(await page.evaluate((s) => window.transport.reconnectToStream({ chatId: s }).then((r) => r), session), null, "null after a completed turn");
    const other = `${session}-empty`;
    assertEq(await page.evaluate((s) => window.transport.reconnectToStream({ chatId: s }).then((r) => r), other), null, "null on a session with no messages");
    assertEq((await chatView(page)).status, "ready", "useChat is ready");
    // A turn in flight (queued behind a running one) is found by the same call.
    await server.post(session, "/sleep 3000 first");
    await server.post(session, "/echo second");
    // What the call looks at is the page's view: wait until the stream has brought both there
    // (before that, nothing is in flight as far as the page knows, and null is right).
    await until("the page's view to hold both messages", () => page.evaluate(async (s) =>
      (await window.transport.client(s)).state().messages.filter((m) => m.role === "user").length === 3, session));
    const kinds = await page.evaluate(async (s) => {
      const stream = await window.transport.reconnectToStream({ chatId: s });
      if (!stream) return null;
      const out = [];
      for (const reader = stream.getReader(); ;) {
        const { done, value } = await reader.read();
        if (done) return out;
        out.push(value.type === "text-delta" ? value.delta : value.type);
      }
    }, session);
    assertEq(kinds, ["start", "text-start", "first", "text-end", "finish"], "the running turn, resumed to its end");
    return page;
  });
