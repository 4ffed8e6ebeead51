// turnstream/react's useTurnstream under StrictMode, with React 19 and React 18 (each scenario
// with its own server): state updates, respond answering the agent's question, usePresence across
// two browsers (contract v1.3), one live client
// and subscription after the double mount and none after unmount, and a sessionId change
// reconnecting.
import { assert, assertEq, until } from "../support.mjs";

export const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

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
      assert(await page.evaluate(() => window.sameCheck()), "send, respond, cancel and loadOlder keep their identity across renders");
      // Cancel without a turn id cancels the running turn.
      await page.evaluate(() => window.app.send("/deltas 1000"));
      await until("the turn to stream", async () => (await hookView(page)).messages[3]?.status === "streaming");
      const cancelled = await page.evaluate(() => window.app.cancel());
      assertEq(cancelled.state, "cancelled", "cancel() cancelled the running turn");
      await until("the state to show it cancelled", async () => (await hookView(page)).messages[3]?.status === "cancelled");
      // The agent asks; respond answers and the turn goes on (contract v1.2).
      await page.evaluate(() => window.app.send("/ask Which one?"));
      const asked = await until("the question in the state", async () => {
        const r = (await hookView(page)).messages[5];
        return r?.status === "waiting" && r.requests[0]?.prompt === "Which one?" && r.requests[0];
      });
      await page.evaluate((id) => window.app.respond(id, { text: "the left one" }), asked.requestId);
      await until("the reply to the answer", async () => {
        const r = (await hookView(page)).messages[5];
        return r?.status === "complete" && r.content === "You answered: the left one";
      });
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

  scenario(`${react}: usePresence: two browsers list each other, this one first; setTyping shows in the other; no second subscription`,
    [], async ({ browser, context, server, session }) => {
      const other = await browser.newContext();
      try {
        const pages = [await openHook(context, server), await openHook(other, server)];
        for (const p of pages) await p.evaluate((s) => window.app.mount(s, "memory"), session);
        const listed = (p) => until("two members, this browser first", async () => {
          const v = (await hookView(p))?.presence;
          return v?.count === 2 && v.members.length === 2 && v.members[0].self && !v.members[1].self && v;
        });
        const [a, b] = [await listed(pages[0]), await listed(pages[1])];
        assertEq(a.members.map((m) => m.id), [b.members[1].id, b.members[0].id], "the same two members, each its own first");
        await pages[0].evaluate(() => window.app.setTyping());
        await until("the other browser to show it typing", async () => (await hookView(pages[1])).presence.typing[0] === a.members[0].id);
        assertEq((await hookView(pages[0])).presence.typing, [], "a browser does not list itself typing");
        assertEq((await counts(pages[0])).subscriptions, 1, "usePresence adds no subscription of its own");
        return pages[1];
      } finally {
        await other.close();
      }
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
