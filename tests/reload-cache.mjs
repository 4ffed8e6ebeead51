// A reload never shows less: the cache is written when the page is hidden or leaves, so a page
// reloaded mid-turn shows, before any network answer, at least the text that was on screen; and
// a tab that is behind another, reloaded, does not erase what the other cached.
// The last line printed is "N passed, N failed".
import { until, assert, view, assistants, openPage, send, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("a reload mid-turn shows, before any network answer, at least the text on screen before it",
  ["--demo-delay-ms", "15", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openPage(context, server, session);
    await send(page, "/deltas 2000");
    for (const at of [200, 600, 1200]) {
      await until(`the reply to pass ${at} characters`, async () => (assistants(await view(page))[0]?.text.length ?? 0) > at);
      const before = assistants(await view(page))[0].text;
      // From here on the reloaded page hears nothing from the server: it shows the cache alone.
      await page.route("**/api/**", () => {});
      await page.reload();
      const after = await until("the cached reply to show", async () => assistants(await view(page))[0]);
      assert(after.text.length >= before.length && after.text.startsWith(before),
        `after the reload the reply shows ${after.text.length} characters, before it ${before.length}`);
      await page.unroute("**/api/**");
      await page.reload();
      await until("live again", async () => (await view(page)).connection === "live");
    }
    return page;
  });

// A cache write held open (as behind a slow disk: its transaction stays busy, and the SDK never
// hears its read) when the reload comes: the page's leaving write, queued behind it, would be
// aborted with the page's connection, and the reload would show the held write's older view.
const holdNextCacheWrite = () => {
  const get = IDBObjectStore.prototype.get;
  IDBObjectStore.prototype.get = function (key) {
    const req = get.call(this, key);
    if (this.transaction.mode !== "readwrite" || window.cacheWriteHeld) return req;
    window.cacheWriteHeld = true;
    const store = this;
    req.addEventListener("success", (e) => {
      e.stopImmediatePropagation();
      const spin = () => { get.call(store, key).onsuccess = spin; };
      spin();
    });
    return req;
  };
};

scenario("a reload while a cache write is still open shows at least the text on screen before it",
  ["--demo-delay-ms", "15", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openPage(context, server, session);
    await send(page, "/deltas 2000");
    const length = async () => assistants(await view(page))[0]?.text.length ?? 0;
    await until("the reply to pass 200 characters", async () => (await length()) > 200);
    await page.evaluate(holdNextCacheWrite);
    await until("a cache write to be held open", () => page.evaluate(() => window.cacheWriteHeld === true));
    // What arrives from here on is in no cache write but the one the page makes as it leaves.
    const held = await length();
    await until("the reply to grow past what the held write has", async () => (await length()) > held + 100);
    const before = assistants(await view(page))[0].text;
    await page.route("**/api/**", () => {});
    await page.reload();
    const after = await until("the cached reply to show", async () => assistants(await view(page))[0]);
    assert(after.text.length >= before.length && after.text.startsWith(before),
      `after the reload the reply shows ${after.text.length} characters, before it ${before.length} (the held write had ${held})`);
    await page.unroute("**/api/**");
    await page.reload();
    await until("live again", async () => (await view(page)).connection === "live");
    return page;
  });

/** The session's cache record as IndexedDB holds it (what the tabs' saves joined), or null. */
const cached = (page, session) => page.evaluate((key) => new Promise((resolve, reject) => {
  const open = indexedDB.open("turnstream");
  open.onerror = () => reject(open.error);
  open.onsuccess = () => {
    const get = open.result.transaction("sessions").objectStore("sessions").get(key);
    get.onsuccess = () => {
      open.result.close();
      resolve(get.result ?? null);
    };
    get.onerror = () => reject(get.error);
  };
}), `${new URL(page.url()).origin}|${session}`);

scenario("a tab that is behind, reloaded, does not erase what another tab cached",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const { turn_id } = await server.post(session, "/echo asked elsewhere");
    await until("the reply on the server", async () => (await server.turn(turn_id)).state === "completed");
    // Tab P never gets the server's history: its view holds only what it does itself.
    const behind = await context.newPage();
    await behind.route("**/api/sessions/*/history*", () => {});
    await behind.goto(`${server.url}/?session=${session}`);
    await until("tab P to connect", () => behind.evaluate(() => !!window.chat));
    // Tab Q reads the history, and its save puts the reply in the cache.
    const other = await openPage(context, server, session);
    await until("Q's view in the cache", async () => (await cached(other, session))?.includes("asked elsewhere"));
    // P sends (the POST goes through), then reloads: the page writes its view as it goes.
    await behind.evaluate(() => window.chat.send("/echo from the tab that is behind"));
    await until("P's message accepted", async () =>
      (await behind.evaluate(() => window.chat.state().messages.some((m) => m.role === "user" && m.status === "sent"))));
    await behind.reload();
    const v = await until("P's cache to show both messages", async () => {
      const v = await view(behind);
      return v.messages.some((m) => m.text === "/echo from the tab that is behind") && v;
    });
    assert(v.messages.some((m) => m.role === "assistant" && m.text === "asked elsewhere"),
      `the reply Q cached is still there after P's reload: ${JSON.stringify(v.messages.map((m) => [m.role, m.text]))}`);
    assert(v.messages.some((m) => m.role === "user" && m.text === "/echo asked elsewhere"), "with its message");
    return behind;
  });

runScenarios("reload-cache", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
