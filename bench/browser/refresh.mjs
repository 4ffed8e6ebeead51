// Figure 5 of the turnstream bench: the demo page refreshed in headless Chromium while a turn is
// in flight. Started by the Rust bench (bench/src/refresh.rs), which runs the server and the turn;
// this script only drives the browser and prints one JSON line on stdout.
//
// Usage: node refresh.mjs '{"url":…,"session":…,"turn":…,"reps":5,"chromium":…}'
//
// Each run opens `/?session=S&bench_n=N`, where N is the number of deltas the server had journaled
// just before the navigation (read from GET /api/turns/{turn}). A script injected before any of the
// page's own code times, with performance.now() (0 = navigation start), the page's milestones:
// the wasm instantiated, IndexedDB open, `window.chat` set (ChatClient.connect returned), the
// stream's open and snapshot, the moment the assistant bubble's text first holds all N deltas (a
// MutationObserver: the time of the DOM update itself) and the animation frame after it; and how
// long each of the page's renders takes (it marks them with performance.measure). The page reports through a function
// exposed by Playwright, which needs no idle time on the page's main thread.
//
// Cold runs use a new browser context each (no HTTP cache, no IndexedDB); each is followed by a
// warm run: the same tab navigated to the page again after the SDK has written its cache.
import { chromium } from "playwright-core";
import { gzipSync, constants as zlib } from "node:zlib";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const RUN_TIMEOUT_MS = cfg.runTimeoutMs ?? 30_000;
// The SDK writes its IndexedDB cache at most every 300 ms while a turn streams: a user who
// refreshes has been looking at the page for longer than that.
const WARM_AFTER_MS = cfg.warmAfterMs ?? 1_000;
const ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-dev-shm-usage",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

// The bench holds our stdin open; when it goes away (even killed), so do we and the browser.
process.stdin.on("end", () => process.exit(3));
process.stdin.on("error", () => process.exit(3));
process.stdin.resume();
const hardStop = setTimeout(() => fail(new Error("the whole run took more than 4 minutes")), 240_000);
hardStop.unref();

function fail(e) {
  process.stdout.write(JSON.stringify({ error: String(e?.stack ?? e) }) + "\n");
  process.exit(1);
}

/** Runs in the page before its own scripts. */
function instrument() {
  const marks = { init_script: performance.now() };
  const mark = (name) => {
    if (!(name in marks)) marks[name] = performance.now();
  };
  const n = Number(new URLSearchParams(location.search).get("bench_n") || 0);
  // "x1 x2 … xN ": the length is arithmetic; the text itself is compared after the clock stops.
  let want = 0;
  for (let i = 1; i <= n; i++) want += String(i).length + 2;
  // [start, duration, characters in the bubble after] of every subscriber call.
  const renders = [];
  window.__bench = { marks, renders };

  // init(): the glue instantiates the wasm with one of these.
  for (const fn of ["instantiateStreaming", "instantiate"]) {
    const orig = WebAssembly[fn];
    if (typeof orig !== "function") continue;
    WebAssembly[fn] = function (...args) {
      mark("wasm_instantiate_start");
      return orig.apply(this, args).then((r) => {
        mark("wasm_instantiated");
        return r;
      });
    };
  }
  // ChatClient.connect opens IndexedDB first.
  const idbOpen = IDBFactory.prototype.open;
  IDBFactory.prototype.open = function (...args) {
    mark("idb_open_start");
    const req = idbOpen.apply(this, args);
    req.addEventListener("success", () => mark("idb_opened"));
    return req;
  };
  const bubble = () => document.querySelector("[data-testid=message][data-role=assistant] .text");
  // app.js sets window.chat right after ChatClient.connect resolves, then subscribes its render.
  let chat;
  Object.defineProperty(window, "chat", {
    configurable: true,
    get: () => chat,
    set: (v) => {
      mark("chat_set");
      chat = v;
    },
  });
  // The page measures each render ("turnstream:render"; it renders at most once a frame).
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (e.name === "turnstream:render") renders.push([e.startTime, e.duration, bubble()?.textContent.length ?? 0]);
    }
  }).observe({ type: "measure" });
  const ES = window.EventSource;
  window.EventSource = class extends ES {
    constructor(...args) {
      super(...args);
      mark("stream_created");
      this.addEventListener("open", () => mark("stream_open"));
      this.addEventListener("snapshot", () => mark("snapshot"));
    }
  };

  let finished = false;
  const check = () => {
    if (finished) return;
    const el = bubble();
    if (!el) return;
    const len = el.textContent.length;
    if (len > 0) mark("first_text");
    if (n === 0 || len < want) return;
    mark("shown");
    finished = true;
    observer.disconnect();
    const text = el.textContent;
    let expected = "";
    for (let i = 1; i <= n; i++) expected += `x${i} `;
    const resources = performance.getEntriesByType("resource").map((r) => ({
      name: r.name,
      start: r.startTime,
      end: r.responseEnd,
      transfer: r.transferSize,
      body: r.encodedBodySize,
    }));
    const nav = performance.getEntriesByType("navigation")[0];
    window.__benchReport("shown", {
      ok: text.startsWith(expected),
      shown_chars: len,
      marks: { ...marks },
      nav: nav && { response_end: nav.responseEnd },
      resources,
    });
    requestAnimationFrame(() => window.__benchReport("frame", performance.now()));
  };
  const observer = new MutationObserver(check);
  observer.observe(document, { childList: true, subtree: true, characterData: true });
}

/** Deltas the server has journaled so far, and whether the turn is still running. */
async function deltasSoFar() {
  const res = await fetch(`${cfg.url}/api/turns/${cfg.turn}`);
  if (!res.ok) throw new Error(`GET /api/turns: ${res.status}`);
  const t = await res.json();
  const words = t.text.trimEnd().split(" ");
  const n = t.text ? words.length : 0;
  if (n > 0 && words[n - 1] !== `x${n}`) throw new Error(`unexpected turn text ending ${JSON.stringify(t.text.slice(-40))}`);
  if (t.state !== "running") throw new Error(`the turn is ${t.state}, not in flight`);
  return n;
}

const sleep = (ms, v) => new Promise((r) => setTimeout(r, ms, v));

/** A context whose pages are instrumented and report to `inbox`. */
async function instrumentedContext(browser) {
  const context = await browser.newContext();
  const inbox = { waiters: {}, got: {} };
  await context.exposeFunction("__benchReport", (kind, data) => {
    inbox.got[kind] = data;
    inbox.waiters[kind]?.(data);
  });
  await context.addInitScript(instrument);
  return { context, inbox };
}

function waitFor(inbox, kind, ms) {
  if (kind in inbox.got) return Promise.resolve(inbox.got[kind]);
  return Promise.race([new Promise((r) => (inbox.waiters[kind] = r)), sleep(ms, null)]);
}

/** The page's own answer, or null when it is too busy to give one within `ms`. */
function ask(page, fn, ms) {
  return Promise.race([page.evaluate(fn).catch(() => null), sleep(ms, null)]);
}

/** One navigation of `page`, measured; `settle` ms later, the renders it did meanwhile. */
async function measure(page, inbox, settle) {
  inbox.got = {};
  inbox.waiters = {};
  const n = await deltasSoFar();
  await page.goto(`${cfg.url}/?session=${encodeURIComponent(cfg.session)}&bench_n=${n}`, { waitUntil: "commit", timeout: RUN_TIMEOUT_MS });
  const shown = await waitFor(inbox, "shown", RUN_TIMEOUT_MS);
  if (!shown) {
    const seen = await ask(
      page,
      () => ({
        marks: window.__bench?.marks,
        chars: document.querySelector("[data-testid=message][data-role=assistant] .text")?.textContent.length,
        connection: document.querySelector("[data-testid=connection]")?.textContent,
      }),
      5_000,
    );
    throw new Error(`${n} deltas were not shown within ${RUN_TIMEOUT_MS} ms: ${JSON.stringify(seen) ?? "the page did not answer within 5 s"}`);
  }
  if (!shown.ok) throw new Error("the bubble's text does not start with the deltas journaled before the navigation");
  const frame = await waitFor(inbox, "frame", 2_000);
  await sleep(settle);
  const renders = await ask(page, () => window.__bench.renders, 5_000);
  const { ok: _, ...rest } = shown;
  return { n, ...rest, marks: { ...shown.marks, ...(frame === null ? {} : { frame }) }, renders };
}

/** A load that is not measured: warms the browser up and records the code the page loads. */
async function codeSizes(browser) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const bodies = [];
  let wasmDone;
  const wasm = new Promise((r) => (wasmDone = r));
  page.on("response", (r) => {
    const path = new URL(r.url()).pathname;
    if (!/\.(m?js|wasm)$/.test(path)) return;
    const size = r.body().then(
      (b) => ({ path, bytes: b.length, gzip: gzipSync(b, { level: zlib.Z_BEST_COMPRESSION }).length }),
      (e) => ({ path, error: String(e) }),
    );
    bodies.push(size);
    // The wasm is the last code the page fetches (init() asks for it).
    if (path.endsWith(".wasm")) size.then(wasmDone);
  });
  await page.goto(`${cfg.url}/?session=${encodeURIComponent(cfg.session)}`, { waitUntil: "commit", timeout: RUN_TIMEOUT_MS });
  if (!(await Promise.race([wasm, sleep(RUN_TIMEOUT_MS, null)]))) throw new Error(`the page fetched no .wasm within ${RUN_TIMEOUT_MS} ms`);
  const sizes = await Promise.all(bodies);
  await context.close();
  return sizes;
}

async function main() {
  const browser = await chromium.launch({ executablePath: cfg.chromium, args: ARGS, headless: true });
  try {
    const out = { browser: browser.version(), sizes: await codeSizes(browser), cold: [], warm: [] };
    for (let i = 0; i < (cfg.reps ?? 5); i++) {
      const { context, inbox } = await instrumentedContext(browser);
      const page = await context.newPage();
      const errors = [];
      page.on("pageerror", (e) => errors.push(e.message));
      out.cold.push(await measure(page, inbox, WARM_AFTER_MS));
      out.warm.push(await measure(page, inbox, 0));
      await context.close();
      if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    await browser.close();
  }
}

main().then(
  () => process.exit(0),
  (e) => fail(e),
);
