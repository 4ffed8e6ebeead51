// One stream per browser: the tabs of one origin elect a leader that holds the only stream, on the
// multiplexed route, for every session any tab shows, and relays it to the others. Each scenario
// opens many tabs of the demo page over plain HTTP/1.1 (six connections per origin) against the
// real server, and reads the server's own count of open streams from /metrics.
// The last line printed is "N passed, N failed".
import { until, assert, assertEq, view, assistants, openPage, send, deltasText, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

const openStreams = (server) => server.metric("turnstream_connections");
const streamsOpened = (server) => server.metric("turnstream_connections_total");

async function openTabs(context, server, session, n, query = "") {
  const pages = [];
  for (let i = 0; i < n; i++) pages.push(await openPage(context, server, session + query));
  return pages;
}

/** Every tab must show exactly `expected` ([role, text] pairs), every reply complete. */
async function allShow(pages, expected) {
  for (const [i, page] of pages.entries()) {
    await until(`tab ${i + 1} to show every reply`, async () => {
      const v = await view(page);
      return v.messages.length === expected.length && assistants(v).every((a) => a.status === "complete");
    });
    const v = await view(page);
    assertEq(v.messages.map((m) => [m.role, m.text]), expected, `tab ${i + 1} shows each message and reply once`);
    assertEq(v.connection, "live", `tab ${i + 1} says live`);
  }
}

/** Sends from `page`; the server must have the message within `ms` (no queueing behind streams). */
async function sendAtOnce(page, server, session, text, ms = 3000) {
  const started = Date.now();
  await send(page, text);
  await until(`the server to receive "${text}"`, async () => (await server.history(session)).messages.some((m) => m.content === text), ms);
  return Date.now() - started;
}

function sharesOneStream(query, what) {
  return async ({ context, server, session }) => {
    const tabs = await openTabs(context, server, session, 12, query);
    assertEq(await openStreams(server), 1, `the server counts one stream for 12 tabs (${what})`);
    await sendAtOnce(tabs[11], server, session, "/echo from the twelfth tab");
    await sendAtOnce(tabs[0], server, session, "/echo from the first tab");
    await sendAtOnce(tabs[5], server, session, "/echo from the sixth tab");
    await allShow(tabs, [
      ["user", "/echo from the twelfth tab"], ["assistant", "from the twelfth tab"],
      ["user", "/echo from the first tab"], ["assistant", "from the first tab"],
      ["user", "/echo from the sixth tab"], ["assistant", "from the sixth tab"],
    ]);
    assertEq(await openStreams(server), 1, "still one stream");
    return tabs[11];
  };
}

scenario("12 tabs of one origin on one session: a send from any tab reaches the server at once, every tab shows every reply, one stream",
  ["--demo-delay-ms", "5"], sharesOneStream("", "indexeddb"));

scenario("the same with storage \"memory\": sharing the stream is about connections, not storage",
  ["--demo-delay-ms", "5"], sharesOneStream("&storage=memory", "memory"));

/** Starts a long reply from `pages[1]`, takes the leader (`pages[0]`) away with `leave`, and checks the
 *  others: one of them holds the stream within `within` ms, and every one gets the exact reply. */
async function leaderGoesMidTurn({ context, server, session }, leave, within = 2000) {
  const pages = await openTabs(context, server, session, 3);
  const [leader, ...others] = pages;
  assertEq(await openStreams(server), 1, "one stream for 3 tabs");
  const opened = await streamsOpened(server);
  await send(others[0], "/deltas 150");
  await until("the reply to stream in every tab", async () => {
    for (const p of others) if ((assistants(await view(p))[0]?.text.length ?? 0) < 40) return false;
    return true;
  });
  const gone = Date.now();
  await leave(leader, others);
  await until("another tab to open a stream", async () => (await streamsOpened(server)) > opened, 5000);
  const tookOver = Date.now() - gone;
  assert(tookOver <= within, `another tab took over within ${within} ms (took ${tookOver} ms)`);
  for (const [i, page] of others.entries()) {
    await until(`tab ${i + 2} to see the reply complete`, async () => assistants(await view(page))[0]?.status === "complete");
    const v = await view(page);
    assertEq(v.messages.map((m) => [m.role, m.text]), [["user", "/deltas 150"], ["assistant", deltasText(150)]], `tab ${i + 2}: the exact reply, no gap, no duplicate`);
  }
  await until("the others live again", async () => {
    for (const p of others) if ((await view(p)).connection !== "live") return false;
    return true;
  });
  await until("the server to count one stream again", async () => (await openStreams(server)) === 1, 10_000);
  return { pages, others };
}

scenario("the leader tab closed mid-turn: another tab takes over within 2 s, every tab gets the exact reply",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async (ctx) => {
    const { others } = await leaderGoesMidTurn(ctx, (leader) => leader.close());
    assertEq(await openStreams(ctx.server), 1, "one stream after the takeover");
    return others[0];
  });

scenario("the leader tab crashed mid-turn: another tab takes over within 2 s, every tab gets the exact reply",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async (ctx) => {
    const { others } = await leaderGoesMidTurn(ctx, async (leader) => {
      const cdp = await ctx.context.newCDPSession(leader);
      // The renderer dies: no pagehide, no goodbye; the browser frees its lock.
      cdp.send("Page.crash").catch(() => {});
    });
    return others[0];
  });

// A browser freezing a background tab first dispatches the Page Lifecycle `freeze` event, then
// runs nothing more in it. Headless Chromium freezes no page (CDP's setWebLifecycleState leaves a
// visible page running and dispatches no event), so the test does the same by hand: `freeze`, then
// the main thread stops in the next task. The leader must step down in `freeze`, so another tab
// takes over at once (~100 ms here), sooner than it could notice a silent leader: that takes
// 0.7-1.7 s (QUIET_MS of 1.2 s since the last heartbeat, which was 0-0.5 s before; checked every
// 0.5 s), so the limit of 0.6 s fails when `freeze` is not handled.
scenario("the leader tab frozen mid-turn (Page Lifecycle freeze): it steps down and another tab takes over at once, every tab gets the exact reply",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async (ctx) => {
    let frozen;
    const { pages, others } = await leaderGoesMidTurn(ctx, async (leader) => {
      frozen = leader.evaluate(() => new Promise((resolve) => {
        document.dispatchEvent(new Event("freeze"));
        setTimeout(() => { const end = Date.now() + 4000; while (Date.now() < end); resolve(); }, 0);
      })).catch(() => {});
    }, 600);
    await frozen;
    await until("the unfrozen tab to show the exact reply", async () => assistants(await view(pages[0]))[0]?.status === "complete");
    assertEq(assistants(await view(pages[0]))[0].text, deltasText(150), "the unfrozen tab: no gap, no duplicate");
    await until("the unfrozen tab live again", async () => (await view(pages[0])).connection === "live");
    await until("one stream", async () => (await openStreams(ctx.server)) === 1, 5000);
    return others[0];
  });

// Headless Chromium does not freeze pages on request (CDP's setWebLifecycleState leaves their
// timers running), so a frozen leader is played by a hung one: its main thread stops, as in a
// freeze that came without a `freeze` event. The others must notice the silence, say so, and
// take the lead within 2 s; the hung tab catches up once it runs again.
scenario("the leader tab hung mid-turn: a follower stops saying live and takes over within 2 s; the hung one catches up",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async (ctx) => {
    let hung;
    const { pages, others } = await leaderGoesMidTurn(ctx, async (leader, followers) => {
      // Every state a follower shows from here on.
      await followers[0].evaluate(() => { window.shown = []; window.chat.subscribe((s) => window.shown.push(s.connection)); });
      hung = leader.evaluate(() => { const end = Date.now() + 6000; while (Date.now() < end); }).catch(() => {});
    });
    const shown = await others[0].evaluate(() => window.shown);
    assert(shown.some((c) => c !== "live"), `a follower stopped saying live while its leader was silent (showed ${shown.join(", ")})`);
    await hung;
    await until("the hung tab to show the exact reply", async () => assistants(await view(pages[0]))[0]?.status === "complete");
    assertEq(assistants(await view(pages[0]))[0].text, deltasText(150), "the hung tab: no gap, no duplicate");
    await until("the hung tab live again", async () => (await view(pages[0])).connection === "live");
    await until("one stream", async () => (await openStreams(ctx.server)) === 1, 5000);
    return others[0];
  });

scenario("two sessions in two tabs share one stream, and each tab shows only its own",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const a = await openPage(context, server, session + "-a");
    const b = await openPage(context, server, session + "-b");
    assertEq(await openStreams(server), 1, "one stream for two sessions");
    await sendAtOnce(a, server, session + "-a", "/echo in session a");
    await sendAtOnce(b, server, session + "-b", "/echo in session b");
    await allShow([a], [["user", "/echo in session a"], ["assistant", "in session a"]]);
    await allShow([b], [["user", "/echo in session b"], ["assistant", "in session b"]]);
    // A third tab opening a session changes the subscription without losing an event.
    await send(a, "/deltas 60");
    const c = await openPage(context, server, session + "-c");
    await until("session a's reply to complete", async () => assistants(await view(a))[1]?.status === "complete");
    assertEq(assistants(await view(a))[1].text, deltasText(60), "no event lost while the subscription changed");
    await sendAtOnce(c, server, session + "-c", "/echo in session c");
    await allShow([c], [["user", "/echo in session c"], ["assistant", "in session c"]]);
    assertEq(await openStreams(server), 1, "still one stream for three sessions");
    return a;
  });

runScenarios("shared-stream", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
