// A tab that joins the shared stream at any moment shows every reply after it, whole and once.
// Tab A is open and live; tab B connects (`ChatClient.connect`, as an app does) on the same
// session; then, after a delay swept from 0 to 2.5 s, A sends, and once both show that reply, B
// sends. Every reply must show in both tabs, whole and once, within 10 s, and both must say "live". The same with
// storage "memory", and with A closed right after its message was accepted (B becomes leader).
// Pages of one origin in one browser context over HTTP/1.1, against the real server.
// JOIN_RACE_SWEEPS repeats each scenario (default 1). The last line printed is "N passed, N failed".
import { until, assertEq, runScenarios } from "./support.mjs";

const DELAYS = [0, 50, 150, 300, 600, 1000, 1500, 2500];
const SWEEPS = Number(process.env.JOIN_RACE_SWEEPS ?? 1);
const WITHIN = 10_000;

const scenarios = [];

/** A page of the server's origin that holds one `ChatClient` and nothing else. */
async function openClient(context, server, session, storage) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await page.goto(`${server.url}/join-race`);
  await connect(page, session, storage);
  return page;
}

/** Connects a client for `session` in `page` (the page's earlier client stays open). */
async function connect(page, session, storage) {
  await page.evaluate(async ([sessionId, storage]) => {
    window.earlier = [...(window.earlier ?? []), window.chat].filter(Boolean);
    const { default: init, ChatClient } = await import("turnstream");
    await init();
    window.chat = await ChatClient.connect({ baseUrl: location.origin, sessionId, storage });
  }, [session, storage]);
}

/** `[role, content, status]` of every entry the page's client shows. */
const entries = (page) => page.evaluate(() => window.chat.state().messages.map((m) => [m.role, m.content, m.status]));

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** Both tabs must show exactly `expected`, and say live. */
async function show(pages, expected, what) {
  for (const [name, page] of pages) {
    let seen;
    try {
      await until(`tab ${name} to show every reply (${what})`, async () => {
        seen = await entries(page);
        return JSON.stringify(seen) === JSON.stringify(expected);
      }, WITHIN);
    } catch (e) {
      const s = await page.evaluate(() => { const s = window.chat.state(); return { connection: s.connection, busy: s.busy, gap: s.gap }; });
      throw new Error(`${e.message}\n  tab ${name} shows ${JSON.stringify(seen)}\n  and says ${JSON.stringify(s)}`);
    }
    await until(`tab ${name} to say live (${what})`, () => page.evaluate(() => window.chat.state().connection === "live"), WITHIN);
  }
}

/** `joins`: "tab" (B is a new tab), or "session" (B is a tab already open on another session
 *  that adds this one); `leaderLeaves`: A is closed once its message is accepted. */
function sweep(storage, { joins = "tab", leaderLeaves = false } = {}) {
  return async ({ context, server, session }) => {
    await context.route(`${server.url}/join-race`, (route) => route.fulfill({
      contentType: "text/html",
      body: `<!doctype html><meta charset="utf-8"><title>join race</title>
        <script type="importmap">{ "imports": { "turnstream": "./pkg/turnstream.js" } }</script>`,
    }));
    let last;
    for (const [i, delay] of DELAYS.entries()) {
      const what = `send ${delay} ms after B connected`;
      // A session of its own for each moment: B joins a stream that A holds for it alone.
      const s = `${session}-${i}`;
      const a = await openClient(context, server, s, storage);
      await until(`tab A to be live (${what})`, () => a.evaluate(() => window.chat.state().connection === "live"), WITHIN);
      let b;
      if (joins === "tab") {
        b = await openClient(context, server, s, storage);
      } else {
        b = await openClient(context, server, `${s}-other`, storage);
        await until(`tab B to be live on its first session (${what})`, () => b.evaluate(() => window.chat.state().connection === "live"), WITHIN);
        await connect(b, s, storage);
      }
      // The moment of the send is what this test sweeps.
      if (delay) await pause(delay);
      const fromA = `/echo from a, ${what}`;
      await a.evaluate((t) => window.chat.send(t), fromA);
      const expected = [["user", fromA, "sent"], ["assistant", fromA.slice(6), "complete"]];
      if (leaderLeaves) {
        await until(`the server to accept A's message (${what})`, async () =>
          (await server.history(s)).messages.some((m) => m.content === fromA), WITHIN);
        await a.close();
      }
      const tabs = leaderLeaves ? [["B", b]] : [["A", a], ["B", b]];
      await show(tabs, expected, what);
      const fromB = `/echo from b, ${what}`;
      await b.evaluate((t) => window.chat.send(t), fromB);
      expected.push(["user", fromB, "sent"], ["assistant", fromB.slice(6), "complete"]);
      await show(tabs, expected, what);
      assertEq((await server.history(s)).messages.map((m) => [m.role, m.content]),
        expected.map(([role, content]) => [role, content]), `the server holds each message and reply once (${what})`);
      if (!leaderLeaves) await a.close();
      last = b;
      if (i + 1 < DELAYS.length) await b.close();
    }
    return last;
  };
}

for (let round = 1; round <= SWEEPS; round++) {
  const scenario = (name, flags, fn) => scenarios.push({ name: SWEEPS > 1 ? `${name} [sweep ${round}]` : name, flags, fn });
  scenario("a tab that joins at any moment shows the next replies, whole and once (indexeddb)",
    [], sweep("indexeddb"));
  scenario("the same with storage \"memory\"",
    [], sweep("memory"));
  scenario("the same with the joining tab becoming leader right after the send (the first tab closed)",
    [], sweep("indexeddb", { leaderLeaves: true }));
  scenario("the same when an open tab adds the session (a second client in its page)",
    [], sweep("indexeddb", { joins: "session" }));
}

await runScenarios("join-race", scenarios);
