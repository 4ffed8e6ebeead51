// Starts the real turnstream binary on port 0 with a temporary database, in worker mode.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

const here = dirname(fileURLToPath(import.meta.url));
export const SERVICE_KEY = "svc-node-client-test";

export async function startServer(extra = []) {
  const bin = process.env.TURNSTREAM_BIN ?? resolve(here, "../../../target/debug/turnstream");
  const dir = mkdtempSync(join(tmpdir(), "turnstream-node-"));
  const child = spawn(
    bin,
    ["serve", "--listen", "127.0.0.1:0", "--db", join(dir, "t.db"), "--agent", "worker",
      "--service-key", SERVICE_KEY, ...extra],
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, RUST_LOG: "warn" } },
  );
  const line = await new Promise((ok, fail) => {
    const rl = createInterface({ input: child.stdout });
    rl.once("line", ok);
    child.once("exit", (code) => fail(new Error(`server exited with ${code}`)));
    setTimeout(() => fail(new Error("server did not start in 30 s")), 30000).unref();
  });
  const url = line.replace("turnstream listening on ", "").trim();
  const api = async (method, path, body) => {
    const res = await fetch(`${url}/api${path}`, {
      method,
      headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  };
  return {
    url,
    api,
    /** The turn's info once `done(info)` holds (within 30 s). */
    async waitTurn(turnId, done, what = "the condition") {
      const deadline = Date.now() + 30000;
      for (;;) {
        const { body } = await api("GET", `/turns/${turnId}`);
        if (done(body)) return body;
        if (Date.now() > deadline) throw new Error(`turn ${turnId}: no ${what} in 30 s: ${JSON.stringify(body)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    waitTurnEnd(turnId) {
      return this.waitTurn(turnId, (t) => !["queued", "running", "waiting"].includes(t.state), "end");
    },
    /** The turn's info once it waits with `n` requests open. */
    waitOpenRequests(turnId, n = 1) {
      const open = (t) => (t.requests ?? []).filter((r) => r.answer === undefined).length;
      return this.waitTurn(turnId, (t) => t.state === "waiting" && open(t) === n, `wait with ${n} open requests`);
    },
    stop() {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
