// What the browser suites share: the real server binary on a free port with a fresh SQLite file,
// waiting on conditions with a deadline, reading the demo page as a user sees it, and the runner
// that gives each scenario its own server and browser context.
import { chromium } from "playwright-core";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const BIN = process.env.TURNSTREAM_BIN ?? join(ROOT, "target", "debug", "turnstream");
export const WWW = join(ROOT, "www");
export const ARTIFACTS = join(ROOT, "tests", "artifacts");
export const CHROMIUM = process.env.CHROMIUM ?? findChromium();
export const STEP_TIMEOUT = 30_000;

function findChromium() {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    try {
      return execFileSync("sh", ["-c", `command -v ${name}`]).toString().trim();
    } catch {}
  }
  throw new Error("no chromium on PATH (./run setup installs Debian's)");
}

export const deltasText = (n) => Array.from({ length: n }, (_, i) => `x${i + 1} `).join("");

/** The real server binary on a fixed loopback port (so a restarted server keeps the page's origin). */
export class Server {
  constructor(flags = []) {
    this.flags = flags;
    this.dir = mkdtempSync(join(tmpdir(), "turnstream-e2e-"));
    this.port = 0;
    /** The folder served with `--www` (a suite may serve a copy it changes). */
    this.www = WWW;
  }
  async start() {
    const listen = `127.0.0.1:${this.port}`;
    this.proc = spawn(BIN, ["serve", "--listen", listen, "--db", join(this.dir, "ts.db"), "--www", this.www, ...this.flags], {
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
  async kill(signal = "SIGKILL") {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const done = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill(signal);
    await done;
  }
  async restart() {
    await this.kill("SIGKILL");
    return this.start();
  }
  async stop() {
    await this.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
  async api(path, init) {
    const res = await fetch(this.url + path, init);
    return { status: res.status, body: await res.json() };
  }
  async post(session, content) {
    const { status, body } = await this.api(`/api/sessions/${session}/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ content }),
    });
    if (status !== 202) throw new Error(`POST ${status}: ${JSON.stringify(body)}`);
    return body;
  }
  /** A value of the server's Prometheus `/metrics`, read over its own connection. */
  async metric(name) {
    const text = await (await fetch(this.url + "/metrics")).text();
    const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
    if (!m) throw new Error(`no metric ${name}`);
    return Number(m[1]);
  }
  async history(session) {
    return (await this.api(`/api/sessions/${session}/history?limit=1000`)).body;
  }
  async turn(id) {
    return (await this.api(`/api/turns/${id}`)).body;
  }
}

export function timeout(ms, what) {
  return new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms));
}

/** Polls `check` (async, returns a truthy value when done) until the deadline. */
export async function until(what, check, ms = STEP_TIMEOUT) {
  if (process.env.E2E_VERBOSE) console.log(`  … ${what}`);
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}${last ? ` (last error: ${last.message})` : ""}`);
}

export function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

export function assertEq(a, b, msg) {
  if (JSON.stringify(a) !== JSON.stringify(b)) {
    throw new Error(`assertion failed: ${msg}\n  got:      ${JSON.stringify(a)?.slice(0, 400)}\n  expected: ${JSON.stringify(b)?.slice(0, 400)}`);
  }
}

/** What the page shows, read from the DOM as a user would see it. */
export async function view(page) {
  return page.evaluate(() => ({
    connection: document.querySelector("[data-testid=connection]")?.textContent,
    // What is visible, not what an attribute says (CSS decides what a user sees).
    busy: !!document.querySelector("[data-testid=busy]")?.checkVisibility(),
    gap: !!document.querySelector("[data-testid=gap]")?.checkVisibility(),
    messages: [...document.querySelectorAll("[data-testid=message]")].map((m) => ({
      key: m.dataset.key,
      role: m.dataset.role,
      status: m.dataset.status,
      recovered: m.dataset.recovered === "true",
      text: m.querySelector(".text")?.textContent ?? "",
      thinking: m.querySelector(".thinking-text")?.textContent ?? "",
      tools: [...m.querySelectorAll("[data-testid=tool]")].map((t) => t.dataset.status),
    })),
  }));
}

export const assistants = (v) => v.messages.filter((m) => m.role === "assistant");
export const users = (v) => v.messages.filter((m) => m.role === "user");

export async function openPage(context, server, session) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await page.goto(`${server.url}/?session=${session}`);
  await until("the page to be live", async () => (await view(page)).connection === "live");
  return page;
}

export async function send(page, text) {
  await page.fill("[data-testid=input]", text);
  await page.click("[data-testid=send]");
}


/** Runs `scenarios` ({name, flags, fn}) one after another; prints "N passed, N failed" last. */
export async function runScenarios(suite, scenarios) {
  if (!existsSync(BIN)) throw new Error(`no server binary at ${BIN} (cargo build -p turnstream-server)`);
  if (!existsSync(join(WWW, "pkg", "turnstream.js"))) throw new Error("www/pkg is missing (./run pkg copies the package there)");
  mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"],
  });
  const only = process.env.E2E_ONLY;
  let passed = 0, failed = 0;
  for (const [i, s] of scenarios.entries()) {
    if (only && !s.name.includes(only)) continue;
    const server = await new Server(s.flags).start();
    const context = await browser.newContext({ viewport: { width: 900, height: 720 } });
    const session = `${suite}-${i + 1}-${Date.now().toString(36)}`;
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
      if (page) await page.screenshot({ path: join(ARTIFACTS, `${suite}-${String(i + 1).padStart(2, "0")}.png`), fullPage: true });
    } catch {}
    await context.close();
    await server.stop();
  }
  await browser.close();
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
