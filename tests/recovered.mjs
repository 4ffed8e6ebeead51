// `recovered`, the guard for side effects, on the demo page: a reply that completes live plays
// the page's new-reply cue once; replies read from history, and a reply whose turn completed
// while the page was closed (it comes back `recovered`, quietly marked), play none. Also what
// the ecosystem scenarios share for closing a page mid-turn and coming back.
// The last line printed is "N passed, N failed".
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ROOT, until, assert, assertEq, view, assistants, openPage, send, deltasText, runScenarios } from "./support.mjs";

/**
 * Whether this page's IndexedDB cache holds turn `turnId` in flight (no end yet): once it does,
 * closing the page leaves it open in the cache for the next one. The session's records are
 * `<baseUrl>|<session>` (baseUrl "" when the page's origin is implied) and the leaving page's.
 */
export async function cachedInFlight(page, session, turnId) {
  const records = await page.evaluate((suffix) => new Promise((resolve, reject) => {
    const open = indexedDB.open("turnstream");
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      if (!db.objectStoreNames.contains("sessions")) {
        db.close();
        return resolve([]);
      }
      const store = db.transaction("sessions").objectStore("sessions");
      const keys = store.getAllKeys();
      const values = store.getAll();
      values.onsuccess = () => {
        db.close();
        const ours = (k) => k.endsWith(suffix) || k.endsWith(`${suffix}|leaving`);
        resolve(values.result.filter((_, i) => ours(String(keys.result[i]))));
      };
      values.onerror = () => reject(values.error);
    };
  }), `|${session}`);
  const open = (v) => !!v && typeof v === "object" &&
    ((v.turn_id === turnId && "final" in v && v.final === null) || Object.values(v).some(open));
  return records.some((r) => open(typeof r === "string" ? JSON.parse(r) : r));
}

/** The turn id of the user message `content` in the server's history (once it has it). */
export async function turnOf(server, session, content) {
  const m = (await server.history(session)).messages.find((m) => m.role === "user" && m.content === content);
  return m?.turn_id ?? null;
}

/**
 * Holds back a page's history reads and turn-status checks until `release()`: a reloaded page
 * then shows what its cache has (a reply in flight) before the network settles it, as on any
 * network slower than IndexedDB, so the test knows the page saw it in flight.
 */
export async function holdBackSettling(page) {
  let release;
  const released = new Promise((r) => (release = r));
  const held = [];
  const handler = async (route) => {
    held.push(route.request().url());
    await released;
    await route.continue().catch(() => {});
  };
  await page.route("**/api/sessions/*/history*", handler);
  await page.route("**/api/turns/*", handler);
  return { release, held };
}

const cues = (page) => page.evaluate(() => Number(document.documentElement.dataset.replyCues));

/**
 * Tells the page it is hidden, or shown again (headless Chromium keeps every page visible, and
 * has no way to hide one): the page reads `visibilityState` and hears `visibilitychange`.
 */
const setHidden = (page, hidden) => page.evaluate((hidden) => {
  for (const [k, v] of [["hidden", hidden], ["visibilityState", hidden ? "hidden" : "visible"]]) {
    Object.defineProperty(document, k, { configurable: true, get: () => v });
  }
  document.dispatchEvent(new Event("visibilitychange"));
}, hidden);

/** The code of the block after `<!-- snippet: name -->` in docs/sdk.md. */
const docsSnippet = (name) => {
  const text = readFileSync(join(ROOT, "docs", "sdk.md"), "utf8");
  const at = text.indexOf(`<!-- snippet: ${name} -->`);
  const block = at < 0 ? null : /```js\n([\s\S]*?)\n```/.exec(text.slice(at));
  if (!block) throw new Error(`no js block after <!-- snippet: ${name} --> in docs/sdk.md`);
  return block[1];
};

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("the demo page's new-reply cue is docs/sdk.md's snippet, as written", [], async () => {
  const app = readFileSync(join(ROOT, "www", "app.js"), "utf8");
  const block = /\n\/\/ snippet: recovered-sdk\n([\s\S]*?)\n\/\/ end snippet\n/.exec(app);
  assert(block, "www/app.js has the block between // snippet: recovered-sdk and // end snippet");
  assertEq(block[1], docsSnippet("recovered-sdk"), "the block in www/app.js is the docs' snippet");
});

scenario("a live reply plays the new-reply cue once (a count in the title while the tab is hidden); replies from history play none",
  ["--demo-delay-ms", "20"], async ({ context, server, session }) => {
    const page = await openPage(context, server, session);
    assertEq(await cues(page), 0, "no cue on an empty session");
    await send(page, "/deltas 20");
    await until("the reply to complete", async () => assistants(await view(page))[0]?.status === "complete");
    assertEq(await cues(page), 1, "one cue for the reply sent from this page");
    await setHidden(page, true);
    // Another device's message: its reply is live in this page too.
    await server.post(session, "/deltas 20");
    await until("that reply to complete", async () => assistants(await view(page))[1]?.status === "complete");
    assertEq(await cues(page), 2, "one cue for the reply to another device's message, and still one for the first");
    assertEq(await page.title(), "(1) turnstream demo", "while hidden, the title counts the cues the tab has not shown");
    await setHidden(page, false);
    assertEq(await page.title(), "turnstream demo", "shown again, the title is cleared");
    const v = await view(page);
    assertEq(assistants(v).map((m) => [m.text, m.recovered]), [[deltasText(20), false], [deltasText(20), false]], "both replies live, none recovered");
    assertEq(await page.locator("[data-testid=recovered]:visible").count(), 0, "no recovered mark");
    assertEq(await cues(page), 2, "still two");
    // Reloaded, the page reads both replies from its cache and from history: no cue.
    await page.reload();
    await until("the page to be live with both replies", async () => {
      const v = await view(page);
      return v.connection === "live" && assistants(v).length === 2 && assistants(v).every((m) => m.status === "complete");
    });
    assertEq(await cues(page), 0, "no cue for replies read from the cache and history");
    return page;
  });

scenario("a reply that completed while the page was closed comes back recovered, quietly marked, with no cue; a live one after it cues once",
  ["--demo-delay-ms", "20"], async ({ context, server, session }) => {
    const page = await openPage(context, server, session);
    await send(page, "/deltas 200");
    await until("the reply to stream", async () => assistants(await view(page))[0]?.status === "streaming");
    const turnId = await until("the turn on the server", () => turnOf(server, session, "/deltas 200"));
    await until("the cache to hold the reply in flight", () => cachedInFlight(page, session, turnId));
    await page.close();
    await until("the turn to complete on the server, no page open", async () => (await server.turn(turnId)).state === "completed");

    const back = await context.newPage();
    back.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
    const gate = await holdBackSettling(back);
    await back.goto(`${server.url}/?session=${session}`);
    const cached = await until("the page to show the cached reply in flight", async () => {
      const r = assistants(await view(back))[0];
      return (r?.status === "streaming" || r?.status === "queued") && r;
    });
    assert(!cached.recovered, "not recovered while in flight");
    assertEq(await cues(back), 0, "no cue yet");
    gate.release();
    const r = await until("the reply to complete, recovered", async () => {
      const r = assistants(await view(back))[0];
      return r?.status === "complete" && r;
    });
    assertEq([r.text, r.recovered], [deltasText(200), true], "the reply's final text, recovered");
    assert(await back.locator("[data-testid=message][data-role=assistant] [data-testid=recovered]").isVisible(), "the quiet recovered mark shows");
    assertEq(await cues(back), 0, "no cue for the recovered reply");
    // A live reply on the same page cues, once.
    await send(back, "/deltas 10");
    await until("the live reply to complete", async () => assistants(await view(back))[1]?.status === "complete");
    assertEq(await cues(back), 1, "one cue, for the live reply");
    assertEq(assistants(await view(back)).map((m) => m.recovered), [true, false], "only the first reply is recovered");
    assertEq(await back.locator("[data-testid=recovered]:visible").count(), 1, "one recovered mark");
    await until("the page to be live", async () => (await view(back)).connection === "live");
    assertEq(await cues(back), 1, "still one");
    return back;
  });

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  runScenarios("recovered", scenarios).catch((e) => {
    console.error(e);
    console.log("0 passed, 1 failed");
    process.exit(1);
  });
}
