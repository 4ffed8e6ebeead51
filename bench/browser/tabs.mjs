// Figure 7 of the turnstream bench: how many streams the server holds for N tabs of one origin.
// Started by the Rust bench (bench/src/tabs.rs), which runs the server; this script only drives
// the browser and prints one JSON line on stdout.
//
// Usage: node tabs.mjs '{"url":…,"tabs":[1,6,12,20],"chromium":…}'
//
// For each N: a new browser context (one origin, plain HTTP/1.1: six connections at most), N tabs
// of the demo page, each on its own session; once every tab says `live`, the server's own count
// of open streams (`turnstream_connections` in /metrics), read again a second later. Then the
// context closes and the server must drop back to no stream before the next N.
import { chromium } from "playwright-core";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const LIVE_TIMEOUT_MS = cfg.liveTimeoutMs ?? 60_000;
const ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-dev-shm-usage",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
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

async function openStreams() {
  const text = await (await fetch(cfg.url + "/metrics")).text();
  const m = /^turnstream_connections (\S+)$/m.exec(text);
  if (!m) throw new Error("no turnstream_connections in /metrics");
  return Number(m[1]);
}

/** Polls `check` until it returns a truthy value; throws after `ms`. */
async function until(what, check, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await check();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const live = (page) => page.evaluate(() => window.chat?.state().connection === "live").catch(() => false);

async function measure(browser, n, k) {
  await until("the server to hold no stream", async () => (await openStreams()) === 0, 10_000);
  const context = await browser.newContext();
  try {
    const started = Date.now();
    const pages = [];
    for (let i = 0; i < n; i++) {
      const page = await context.newPage();
      await page.goto(`${cfg.url}/?session=tabs-${k}-${n}-${i + 1}`);
      pages.push(page);
    }
    await until(`${n} tabs to be live`, async () => (await Promise.all(pages.map(live))).every(Boolean), LIVE_TIMEOUT_MS);
    const allLive = Date.now() - started;
    const streams = await openStreams();
    await new Promise((r) => setTimeout(r, 1000));
    const after = await openStreams();
    return { tabs: n, sessions: n, streams, streams_1s_later: after, all_live_ms: allLive };
  } finally {
    await context.close();
  }
}

try {
  const browser = await chromium.launch({ executablePath: cfg.chromium, args: ARGS });
  const runs = [];
  for (const [k, n] of (cfg.tabs ?? [1, 6, 12, 20]).entries()) runs.push(await measure(browser, n, k));
  const version = browser.version();
  await browser.close();
  process.stdout.write(JSON.stringify({ browser: version, runs }) + "\n");
  process.exit(0);
} catch (e) {
  fail(e);
}
