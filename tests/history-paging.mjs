// Older history: `chat.loadOlder()` pages back with `before` while `state.hasMore` says there is
// more; older pages merge with no duplicate and every entry keeps its key.
// The last line printed is "N passed, N failed".
import { until, assert, assertEq, openPage, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("loadOlder over 1,000 messages returns each exactly once, in order, keys unchanged",
  ["--demo-delay-ms", "0", "--messages-per-minute", "0", "--max-active-turns", "1000"], async ({ context, server, session }) => {
    // 500 messages and their 500 replies, written by the server.
    const posted = [];
    for (let i = 0; i < 500; i += 50) {
      const batch = [];
      for (let j = i; j < i + 50; j++) batch.push(server.post(session, `/echo m${j}`));
      posted.push(...(await Promise.all(batch)));
      await until(`turns up to ${i + 50} to end`, async () => (await server.turn(posted.at(-1).turn_id)).state === "completed");
    }
    await until("every reply written", async () => (await server.history(session)).messages.length === 1000);
    const history = (await server.history(session)).messages;

    const page = await openPage(context, server, session);
    const first = await until("the newest page", async () => {
      const s = await page.evaluate(() => window.chat.state());
      return s.messages.length === 100 && s;
    });
    assert(first.hasMore, "hasMore says older messages exist");
    const keys = new Map(first.messages.map((m) => [m.key, m.content]));
    let added = 0;
    let calls = 0;
    while ((await page.evaluate(() => window.chat.state().hasMore)) && calls < 50) {
      const r = await page.evaluate(() => window.chat.loadOlder());
      added += r.added;
      calls++;
      const s = await page.evaluate(() => window.chat.state());
      // Every entry shown before is still there with the same key and content.
      for (const [k, c] of keys) assert(s.messages.some((m) => m.key === k && m.content === c), `entry ${k} kept`);
      for (const m of s.messages) keys.set(m.key, m.content);
    }
    assertEq(calls, 9, "nine older pages of 100");
    assertEq(await page.evaluate(() => window.chat.loadOlder()), { added: 0 }, "nothing older at the start of history");
    const s = await page.evaluate(() => window.chat.state());
    assertEq(added, 900, "the pages added 900 entries");
    assertEq(new Set(s.messages.map((m) => m.key)).size, 1000, "1,000 distinct keys");
    // A chat shows each reply under its message: the server's history in that order.
    const replies = new Map(history.filter((m) => m.role === "assistant").map((m) => [m.turn_id, m.content]));
    const expected = history.filter((m) => m.role === "user").flatMap((m) => [["user", m.content], ["assistant", replies.get(m.turn_id)]]);
    assertEq(s.messages.map((m) => [m.role, m.content]), expected, "each message once, in order");
    return page;
  });

runScenarios("history-paging", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
