// The package's subpath exports in a real browser, in pages built by esbuild against pkg/:
// - turnstream/ai-sdk under the AI SDK 5's useChat (@ai-sdk/react, React 19): a streamed reply
//   with reasoning, tool and text parts, stop() cancelling the turn (also before the POST got
//   through), a failed turn as an error,
//   a reload mid-turn resumed with `resume: true` with no duplicate text (a plain reply, one
//   after thinking and a tool call, one over messages from toUIMessages), and reconnectToStream
//   answering null when nothing is in flight;
// - turnstream/react's useTurnstream under StrictMode, with React 19 and React 18: state updates,
//   one live client and subscription after the double mount and none after unmount, and a
//   sessionId change reconnecting;
// - tsc --strict on a TypeScript consumer of both entries (the transport as ai@5's ChatTransport).
// Each scenario gets its own server (the real binary, serving the built pages) and browser
// context. The last line printed is "N passed, N failed".
import { chromium } from "playwright-core";
import { spawn, execFile } from "node:child_process";
import { createInterface } from "node:readline";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { Server, BIN, CHROMIUM, ARTIFACTS, until, assert, assertEq, timeout, deltasText } from "../support.mjs";
import { buildPages, DIST } from "./build.mjs";

/** The real server binary, serving the built test pages instead of the demo page. */
class PagesServer extends Server {
  async start() {
    this.proc = spawn(BIN, ["serve", "--listen", `127.0.0.1:${this.port}`, "--db", join(this.dir, "ts.db"), "--www", DIST, ...this.flags], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
    });
    const exited = new Promise((_, reject) => this.proc.once("exit", (c) => reject(new Error(`server exited (${c}) before listening`))));
    const line = await Promise.race([
      new Promise((resolve) => createInterface({ input: this.proc.stdout }).once("line", resolve)),
      exited,
      timeout(10_000, "server start"),
    ]);
    const m = /listening on (http:\/\/\S+)/.exec(line);
    if (!m) throw new Error(`unexpected server output: ${line}`);
    this.url = m[1];
    this.port = Number(new URL(this.url).port);
    return this;
  }
}

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags: ["--messages-per-minute", "0", ...flags], fn });

// ---------------------------------------------------------------- turnstream/ai-sdk + useChat

async function openChat(context, server, session, { resume = false, initial = false } = {}) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await page.goto(`${server.url}/ai.html?session=${session}${resume ? "&resume=1" : ""}${initial ? "&initial=1" : ""}`);
  await until("useChat to render", () => page.evaluate(() => !!window.view));
  return page;
}

const chatView = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.view)));
const requests = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.requests)));
const turnOf = (message) => message.id.replace(/^turn:/, "");
/** A UI message part, with the fields this suite checks (useChat adds bookkeeping of its own). */
const part = (p) => p.type === "text" || p.type === "reasoning"
  ? { type: p.type, text: p.text, state: p.state }
  : { type: p.type, toolCallId: p.toolCallId, state: p.state, input: p.input, output: p.output, errorText: p.errorText, providerExecuted: p.providerExecuted };
const parts = (m) => m.parts.map(part);
const chunkTypes = (chunks) => chunks.map((c) => c.type).filter((t, i, a) => !(t.endsWith("-delta") && a[i - 1] === t));

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

scenario("a reload mid-turn with useChat's messages from toUIMessages: the resumed reply replaces its cached entry, shown once",
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
    const initial = await page.evaluate(() => window.initial);
    assertEq(initial.map((m) => [m.role, m.parts.map((p) => p.type)]),
      [["user", ["text"]], ["assistant", ["text"]], ["user", ["text"]], ["assistant", ["text"]]], "useChat started with the cached messages");
    assertEq(initial[3].id, `turn:${turnId}`, "the cached reply under its key");
    assert(initial[3].parts[0].state === "streaming" && initial[3].parts[0].text.includes("x30 "), "still streaming in the cache");
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

// ---------------------------------------------------------------- turnstream/react

for (const react of ["react19", "react18"]) {
  const major = react === "react19" ? "19." : "18.";

  const openHook = async (context, server) => {
    const page = await context.newPage();
    page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
    await page.goto(`${server.url}/${react}.html`);
    await until("the page to load", () => page.evaluate(() => !!window.app));
    assert((await page.evaluate(() => window.app.reactVersion)).startsWith(major), `the page runs React ${major}x`);
    return page;
  };
  const hookView = (page) => page.evaluate(() => window.view && JSON.parse(JSON.stringify(window.view)));
  const counts = (page) => page.evaluate(() => window.app.counts());

  scenario(`${react}: useTurnstream under StrictMode: state updates, one live client and subscription, none after unmount`,
    ["--demo-delay-ms", "10"], async ({ context, server, session }) => {
      const page = await openHook(context, server);
      await page.evaluate((s) => window.app.mount(s, "memory"), session);
      await until("connecting, then live", async () => (await hookView(page))?.connection === "live");
      const c = await until("one client and one subscription left after the double mount", async () => {
        const c = await counts(page);
        return c.connects === 2 && c.clients === 1 && c.subscriptions === 1 && c;
      });
      assertEq(c.closes, 1, "StrictMode's first mount was closed");
      await until("the server to count one stream", async () => (await server.metric("turnstream_connections")) === 1);
      const same = await page.evaluate(() => { window.sameCheck = window.app.sameCallbacks(); return true; });
      assert(same, "captured");
      await page.evaluate(() => window.app.send("/echo hello from React"));
      const v = await until("the reply in the state", async () => {
        const v = await hookView(page);
        return v.messages.length === 2 && v.messages[1].status === "complete" && v;
      });
      assertEq(v.messages.map((m) => [m.role, m.content]), [["user", "/echo hello from React"], ["assistant", "hello from React"]], "the state");
      assertEq(await page.locator("li[data-role=assistant]").textContent(), "hello from React", "rendered");
      assert(await page.evaluate(() => window.sameCheck()), "send, cancel and loadOlder keep their identity across renders");
      // Cancel without a turn id cancels the running turn.
      await page.evaluate(() => window.app.send("/deltas 1000"));
      await until("the turn to stream", async () => (await hookView(page)).messages[3]?.status === "streaming");
      const cancelled = await page.evaluate(() => window.app.cancel());
      assertEq(cancelled.state, "cancelled", "cancel() cancelled the running turn");
      await until("the state to show it cancelled", async () => (await hookView(page)).messages[3]?.status === "cancelled");
      assertEq((await counts(page)).subscriptions, 1, "still one subscription");
      await page.evaluate(() => window.app.unmount());
      await until("no client and no subscription after unmount", async () => {
        const c = await counts(page);
        return c.clients === 0 && c.subscriptions === 0;
      });
      await until("the server to count no stream", async () => (await server.metric("turnstream_connections")) === 0);
      const renders = (await counts(page)).renders;
      const last = await server.post(session, "/echo nobody listens");
      await until("that turn to end", async () => (await server.turn(last.turn_id)).state === "completed");
      assertEq((await counts(page)).renders, renders, "nothing renders after unmount");
      return page;
    });

  scenario(`${react}: a new sessionId closes the old client and connects the new one (IndexedDB storage)`,
    ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
      const a = `${session}-a`, b = `${session}-b`;
      await server.post(a, "/echo in a");
      await server.post(b, "/echo in b");
      await until("both replies written", async () =>
        (await server.history(a)).messages.length === 2 && (await server.history(b)).messages.length === 2);
      const page = await openHook(context, server);
      await page.evaluate((s) => window.app.mount(s), a);
      const shown = async (s, text) => until(`${s} shown`, async () => {
        const v = await hookView(page);
        return v.sessionId === s && v.connection === "live" && v.messages.map((m) => m.content).join("|") === text && v;
      });
      await shown(a, "/echo in a|in a");
      await page.evaluate((s) => window.app.setSession(s), b);
      await shown(b, "/echo in b|in b");
      await until("one client, one subscription", async () => {
        const c = await counts(page);
        return c.clients === 1 && c.subscriptions === 1;
      });
      await page.evaluate(() => window.app.send("/echo more in b"));
      await shown(b, "/echo in b|in b|/echo more in b|more in b");
      await page.evaluate((s) => window.app.setSession(s), a);
      await shown(a, "/echo in a|in a");
      const c = await counts(page);
      assertEq([c.clients, c.subscriptions], [1, 1], "still one client and one subscription");
      await until("the server to count one stream", async () => (await server.metric("turnstream_connections")) === 1);
      assertEq((await server.history(a)).messages.length, 2, "nothing was sent to a");
      await page.evaluate(() => window.app.unmount());
      await until("no client after unmount", async () => (await counts(page)).clients === 0);
      await until("the server to count no stream", async () => (await server.metric("turnstream_connections")) === 0);
      return page;
    });
}

// ---------------------------------------------------------------- types

/** tsc (strict, libraries checked too) on what a TypeScript app writes with both entries. */
function typeCheck() {
  const tsc = join(import.meta.dirname, "node_modules", "typescript", "bin", "tsc");
  const args = ["--noEmit", "--strict", "--target", "es2022", "--module", "esnext", "--moduleResolution", "bundler",
    "--lib", "es2022,dom,dom.iterable,esnext.disposable", "--types", "node,react", join(DIST, "consumer.ts")];
  return new Promise((resolve) => execFile(process.execPath, [tsc, ...args], { cwd: import.meta.dirname }, (err, stdout, stderr) =>
    resolve(err ? `${stdout}${stderr}`.trim() || String(err) : null)));
}

// ---------------------------------------------------------------- runner

async function main() {
  if (!existsSync(BIN)) throw new Error(`no server binary at ${BIN} (cargo build -p turnstream-server)`);
  await buildPages();
  mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"],
  });
  const only = process.env.E2E_ONLY;
  let passed = 0, failed = 0;
  if (!only || "types".includes(only)) {
    const started = Date.now();
    const errors = await typeCheck();
    if (errors) {
      failed++;
      console.log(`not ok 0 - types: the declarations under tsc --strict\n  ${errors.split("\n").slice(0, 12).join("\n  ")}`);
    } else {
      passed++;
      console.log(`ok 0 - types: the declarations under tsc --strict, as ai@5's ChatTransport and with useChat (${Date.now() - started} ms)`);
    }
  }
  for (const [i, s] of scenarios.entries()) {
    if (only && !s.name.includes(only)) continue;
    const server = await new PagesServer(s.flags).start();
    const context = await browser.newContext({ viewport: { width: 900, height: 720 } });
    const session = `eco-${i + 1}-${Date.now().toString(36)}`;
    const started = Date.now();
    let page;
    try {
      page = await Promise.race([s.fn({ browser, context, server, session }), timeout(120_000, "scenario")]);
      passed++;
      console.log(`ok ${i + 1} - ${s.name} (${Date.now() - started} ms)`);
    } catch (e) {
      failed++;
      console.log(`not ok ${i + 1} - ${s.name}\n  ${String(e.stack ?? e).split("\n").slice(0, 6).join("\n  ")}`);
      page = context.pages().at(-1);
    }
    try {
      if (page) await page.screenshot({ path: join(ARTIFACTS, `ecosystem-${String(i + 1).padStart(2, "0")}.png`), fullPage: true });
    } catch {}
    await context.close();
    await server.stop();
  }
  await browser.close();
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
