// The package's subpath exports in a real browser, in pages built by esbuild against pkg/:
// - usechat-ai5.mjs: turnstream/ai-sdk under AI SDK 5's useChat, chunk by chunk, against the
//   demo agent (each scenario with its own server);
// - usechat-asks.mjs: the demo agent's approvals and client tools answered through useChat
//   (ai 5: a client tool; ai 7: both);
// - usechat-branches.mjs: regenerate() and an edit (sendMessage with a messageId) through
//   useChat, ai 5 and ai 7 (contract v1.2);
// - majors.mjs: what a useChat user sees with AI SDK 5, 6 and 7 (history in a new browser,
//   other tabs, reloads, stop, resume, attachments), all on one server whose openai agent
//   talks to an in-process fake upstream (fake-upstream.mjs);
// - react-scenarios.mjs: turnstream/react's useTurnstream under React 19 and React 18;
// - recovered-scenarios.mjs: `recovered` as the guard for side effects, through the docs'
//   snippets: useTurnstream's effect (React 19 and 18) and useChat's onFinish (ai 7);
// - aisdk-agent-scenarios.mjs: an AI SDK agent (turnstream-worker/ai-sdk) whose tool needs
//   approval, approved through useChat (ai 7);
// - tsc --strict on a TypeScript consumer of both entries, once per AI SDK major (run while the
//   browser scenarios run).
// One browser; each scenario gets its own browser context. E2E_ONLY=<text> runs the scenarios
// whose name includes it. The last line printed is "N passed, N failed".
import { chromium } from "playwright-core";
import { spawn, execFile } from "node:child_process";
import { createInterface } from "node:readline";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { Server, BIN, CHROMIUM, ARTIFACTS, timeout } from "../support.mjs";
import { AI_MAJORS, buildPages, DIST } from "./build.mjs";
import { FakeUpstream } from "./fake-upstream.mjs";
import { scenarios as aiSdkAgent } from "./aisdk-agent-scenarios.mjs";
import { scenarios as majors } from "./majors.mjs";
import { scenarios as hook } from "./react-scenarios.mjs";
import { scenarios as recovered } from "./recovered-scenarios.mjs";
import { scenarios as chunks } from "./usechat-ai5.mjs";
import { scenarios as asks } from "./usechat-asks.mjs";
import { scenarios as branches } from "./usechat-branches.mjs";

/** The real server binary, serving the built test pages instead of the demo page. */
class PagesServer extends Server {
  async start() {
    this.proc = spawn(BIN, ["serve", "--listen", `127.0.0.1:${this.port}`, "--db", join(this.dir, "ts.db"), "--www", DIST, ...this.flags], {
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
}

// ---------------------------------------------------------------- types

/** tsc (strict, libraries checked too) on what a TypeScript app writes, with AI SDK `major`. */
function typeCheck(major) {
  const tsc = join(import.meta.dirname, "node_modules", "typescript", "bin", "tsc");
  return new Promise((resolve) => execFile(process.execPath, [tsc, "-p", join(DIST, `tsconfig.ai${major}.json`)],
    { cwd: import.meta.dirname }, (err, stdout, stderr) => resolve(err ? `${stdout}${stderr}`.trim() || String(err) : null)));
}

// ---------------------------------------------------------------- runner

/** The server the major scenarios share: the openai agent, answered by a fake upstream. */
async function sharedServer() {
  const upstream = await new FakeUpstream().start();
  const server = await new PagesServer(["--messages-per-minute", "0", "--agent", "openai",
    "--openai-base-url", upstream.url, "--openai-model", "fake-model", "--openai-max-retries", "0"]).start();
  return { server, upstream };
}

async function main() {
  if (!existsSync(BIN)) throw new Error(`no server binary at ${BIN} (cargo build -p turnstream-server)`);
  await buildPages();
  mkdirSync(ARTIFACTS, { recursive: true });
  const only = process.env.E2E_ONLY;
  const wanted = (name) => !only || name.includes(only);
  let passed = 0, failed = 0;
  const started = Date.now();
  // The type checks take a while on one core: they run one after another beside the browser.
  let chain = Promise.resolve();
  const types = AI_MAJORS.filter((m) => wanted(`types: ai@${m}`)).map((major) => ({ major, errors: (chain = chain.then(() => typeCheck(major))) }));
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"],
  });
  const all = [...chunks, ...asks, ...branches, ...majors, ...hook, ...recovered, ...aiSdkAgent];
  let shared = null;
  for (const [i, s] of all.entries()) {
    if (!wanted(s.name)) continue;
    let own = null;
    if (s.shared) shared ??= await sharedServer();
    else own = await new PagesServer(["--messages-per-minute", "0", ...s.flags]).start();
    const server = own ?? shared.server;
    const context = await browser.newContext({ viewport: { width: 900, height: 720 } });
    const session = `eco-${i + 1}-${Date.now().toString(36)}`;
    const t0 = Date.now();
    let page;
    try {
      page = await Promise.race([s.fn({ browser, context, server, session, major: s.major, upstream: shared?.upstream }), timeout(120_000, "scenario")]);
      passed++;
      console.log(`ok ${i + 1} - ${s.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`not ok ${i + 1} - ${s.name}\n  ${String(e.stack ?? e).split("\n").slice(0, 6).join("\n  ")}`);
      page = context.pages().at(-1);
    }
    try {
      if (page) await page.screenshot({ path: join(ARTIFACTS, `ecosystem-${String(i + 1).padStart(2, "0")}.png`), fullPage: true });
    } catch {}
    await context.close();
    if (own) await own.stop();
  }
  await browser.close();
  if (shared) {
    await shared.server.stop();
    await shared.upstream.stop();
  }
  for (const { major, errors } of types) {
    const e = await errors;
    if (e) {
      failed++;
      console.log(`not ok - types: ai@${major}: the declarations under tsc --strict\n  ${e.split("\n").slice(0, 12).join("\n  ")}`);
    } else {
      passed++;
      console.log(`ok - types: ai@${major}: the declarations under tsc --strict, as ai@${major}'s ChatTransport and with its useChat`);
    }
  }
  console.log(`(${Math.round((Date.now() - started) / 1000)} s)`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
