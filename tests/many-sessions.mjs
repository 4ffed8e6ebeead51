// More sessions than one stream carries: the leader tab holds one stream for at most 32 sessions,
// so the union of the sessions every tab shows takes ceil(n / 32) streams, however many tabs show
// them. Three tabs of the demo page over plain HTTP/1.1 (six connections per origin) each connect
// more clients in the page (storage "memory"), 40 sessions in all, some shown in two tabs; the
// server's own count of open streams comes from /metrics.
// The last line printed is "N passed, N failed".
import { until, assertEq, openPage, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

const openStreams = (server) => server.metric("turnstream_connections");

/** Connects a client for each session in `page` (next to the demo page's own), once each is live. */
async function connectMore(page, sessions) {
  await page.evaluate(async (sessions) => {
    const { ChatClient } = await import("turnstream");
    window.more ??= {};
    for (const sessionId of sessions) {
      window.more[sessionId] = await ChatClient.connect({ baseUrl: location.origin, sessionId, storage: "memory" });
    }
  }, sessions);
  await until(`${sessions.length} more clients to be live`, () =>
    page.evaluate((sessions) => sessions.every((s) => window.more[s].state().connection === "live"), sessions));
}

/** `[role, content, status]` of each entry of `session` as the client in `page` has it. */
const entries = (page, session) => page.evaluate((s) =>
  window.more[s].state().messages.map((m) => [m.role, m.content, m.status]), session);

/** Sends `text` (an `/echo`) on `session` from `from`; every page in `shown` must show it and its reply. */
async function sendReachesAll(from, session, text, shown) {
  await from.evaluate(([s, t]) => window.more[s].send(t), [session, text]);
  const want = [["user", text, "sent"], ["assistant", text.replace(/^\/echo /, ""), "complete"]];
  for (const [i, page] of shown.entries()) {
    await until(`tab ${i + 1} to show the reply on ${session}`, async () =>
      JSON.stringify(await entries(page, session)) === JSON.stringify(want));
  }
}

scenario("40 sessions across three tabs: two streams (ceil(40/32)), never one per tab, and a send on a session of the second stream reaches every tab that shows it",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const s = (i) => `${session}-${String(i).padStart(2, "0")}`;
    const range = (from, to) => Array.from({ length: to - from }, (_, k) => s(from + k));
    // Tab A: sessions 0-17; tab B: 18-31 (32 in all: one stream so far).
    const a = await openPage(context, server, s(0));
    await connectMore(a, range(1, 18));
    const b = await openPage(context, server, s(18));
    await connectMore(b, range(19, 32));
    await until("one stream for 32 sessions", async () => (await openStreams(server)) === 1);
    // Tab C: 28-39 (four already shown by B, eight new); then A shows 32-35 as well.
    const c = await openPage(context, server, s(28));
    await connectMore(c, range(29, 40));
    await connectMore(a, range(32, 36));
    await until("two streams for 40 sessions", async () => (await openStreams(server)) === 2);
    // Sessions 32-39 joined once the first stream was full: they are on the second one.
    await sendReachesAll(a, s(33), "/echo on the second stream, from a", [a, c]);
    await sendReachesAll(c, s(38), "/echo on the second stream, from c", [c]);
    await sendReachesAll(c, s(30), "/echo on the first stream, from c", [b, c]);
    assertEq(await openStreams(server), 2, "still two streams for 40 sessions in three tabs");
    return c;
  });

runScenarios("many-sessions", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
