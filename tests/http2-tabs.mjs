// HTTP/2 over TLS in a real browser: the server with --tls-cert/--tls-key (a self-signed
// certificate made here, which the browser context accepts), the demo page served over https,
// 12 tabs of one session. Every request of the page must have gone over h2, the tabs must still
// share one stream, and a send from the twelfth tab must reach every tab.
// The last line printed is "N passed, N failed".
import { chromium } from "playwright-core";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, readFileSync, existsSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { BIN, WWW, ARTIFACTS, CHROMIUM, until, timeout, assert, assertEq, view, assistants, openPage, send } from "./support.mjs";

/** The server over HTTPS with a fresh self-signed certificate for localhost and 127.0.0.1. */
class TlsServer {
  constructor(flags = []) {
    this.flags = flags;
    this.dir = mkdtempSync(join(tmpdir(), "turnstream-h2-"));
  }
  async start() {
    const cert = join(this.dir, "cert.pem"), key = join(this.dir, "key.pem");
    try {
      execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], { stdio: ["ignore", "ignore", "pipe"] });
    } catch (e) {
      throw new Error(`cannot make a self-signed certificate with the openssl command: ${e.message}`);
    }
    this.ca = readFileSync(cert);
    this.proc = spawn(BIN, ["serve", "--listen", "127.0.0.1:0", "--db", join(this.dir, "ts.db"), "--www", WWW,
      "--tls-cert", cert, "--tls-key", key, ...this.flags], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
    });
    const exited = new Promise((_, reject) => this.proc.once("exit", (c) => reject(new Error(`server exited (${c}) before listening`))));
    const line = await Promise.race([
      new Promise((resolve) => createInterface({ input: this.proc.stdout }).once("line", resolve)),
      exited,
      timeout(10_000, "server start"),
    ]);
    const m = /listening on (https:\/\/\S+)/.exec(line);
    if (!m) throw new Error(`expected an https:// address, got: ${line}`);
    this.url = m[1];
    return this;
  }
  async stop() {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      const done = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGKILL");
      await done;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
  /** GET over the test's own TLS connection, trusting only this server's certificate. */
  get(path) {
    return new Promise((resolve, reject) => {
      const req = request(this.url + path, { ca: this.ca, timeout: 10_000 }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      });
      req.on("timeout", () => req.destroy(new Error(`GET ${path} timed out`)));
      req.on("error", reject);
      req.end();
    });
  }
  async metric(name) {
    const { body } = await this.get("/metrics");
    const m = new RegExp(`^${name} (\\S+)$`, "m").exec(body);
    if (!m) throw new Error(`no metric ${name}`);
    return Number(m[1]);
  }
  async history(session) {
    return JSON.parse((await this.get(`/api/sessions/${session}/history?limit=1000`)).body);
  }
}

/** The protocol each finished request of the page went over (navigation and resources). */
const protocols = (page) => page.evaluate(() =>
  [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")]
    .map((e) => ({ name: e.name, protocol: e.nextHopProtocol })));

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("12 tabs of one session over HTTP/2: every request is h2, one stream, a send from the twelfth tab reaches every tab",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const tabs = [];
    for (let i = 0; i < 12; i++) tabs.push(await openPage(context, server, session));
    for (const [i, tab] of tabs.entries()) {
      const entries = await protocols(tab);
      assert(entries.length >= 2, `tab ${i + 1} loaded the page and its code (${entries.length} entries)`);
      const notH2 = entries.filter((e) => e.protocol !== "h2");
      assertEq(notH2, [], `tab ${i + 1}: every request went over h2`);
    }
    assertEq(await server.metric("turnstream_connections"), 1, "the server counts one stream for 12 tabs");
    await send(tabs[11], "/echo from the twelfth tab over h2");
    await until("the server to receive the message", async () =>
      (await server.history(session)).messages.some((m) => m.content === "/echo from the twelfth tab over h2"), 5000);
    for (const [i, tab] of tabs.entries()) {
      await until(`tab ${i + 1} to show the reply`, async () => assistants(await view(tab))[0]?.status === "complete");
      const v = await view(tab);
      assertEq(v.messages.map((m) => [m.role, m.text]),
        [["user", "/echo from the twelfth tab over h2"], ["assistant", "from the twelfth tab over h2"]],
        `tab ${i + 1} shows the message and its reply once`);
      assertEq(v.connection, "live", `tab ${i + 1} says live`);
    }
    // The API calls the send made went over h2 as well.
    const sent = (await protocols(tabs[11])).filter((e) => e.name.includes("/api/"));
    assert(sent.length > 0, "the twelfth tab's API requests are in its resource timings");
    assertEq(sent.filter((e) => e.protocol !== "h2"), [], "the twelfth tab's API requests went over h2");
    return tabs[11];
  });

async function main() {
  if (!existsSync(BIN)) throw new Error(`no server binary at ${BIN} (cargo build -p turnstream-server)`);
  if (!existsSync(join(WWW, "pkg", "turnstream.js"))) throw new Error("www/pkg is missing (./run pkg copies the package there)");
  mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"],
  });
  let passed = 0, failed = 0;
  for (const [i, s] of scenarios.entries()) {
    const server = await new TlsServer(s.flags).start();
    // The certificate is the test's own: the context accepts it (and only this context).
    const context = await browser.newContext({ viewport: { width: 900, height: 720 }, ignoreHTTPSErrors: true });
    const session = `h2-${i + 1}-${Date.now().toString(36)}`;
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
      if (page) await page.screenshot({ path: join(ARTIFACTS, `http2-tabs-${String(i + 1).padStart(2, "0")}.png`), fullPage: true });
    } catch {}
    await context.close();
    await server.stop();
  }
  await browser.close();
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`not ok - ${e.message}`);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
