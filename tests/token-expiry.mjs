// Tokens: the page's `getToken` is asked for a token, which goes as `Authorization: Bearer` on
// requests and `access_token` on the stream. A stream whose token expires ends with
// `token_expired`; the SDK gets a new token and resumes from its last event id with no gap. A
// token the server keeps refusing shows as `unauthorized` with the server's error, and nothing
// else in the view is lost. The server runs with --auth-secret; tokens are minted here (HS256).
// The last line printed is "N passed, N failed".
import { createHmac } from "node:crypto";
import { until, assert, assertEq, view, assistants, users, send, deltasText, runScenarios } from "./support.mjs";

const SECRET = "token-expiry-suite-secret-0123456789";
const b64 = (v) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64url");

function mint(session, ttlSecs) {
  const head = b64({ alg: "HS256", typ: "JWT" });
  const body = b64({ sub: "user-1", exp: Math.floor(Date.now() / 1000) + ttlSecs, sessions: [session] });
  const sig = createHmac("sha256", SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags: ["--auth-secret", SECRET, "--messages-per-minute", "0", ...flags], fn });

/** A page whose getToken answers with `tokens()`; counts the calls. */
async function openWithTokens(context, server, session, tokens) {
  const asked = { n: 0 };
  await context.exposeFunction("turnstreamToken", () => { asked.n++; return tokens(); });
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await page.goto(`${server.url}/?session=${session}`);
  return { page, asked };
}

async function serverHistory(server, session) {
  const res = await fetch(`${server.url}/api/sessions/${session}/history?limit=1000`, { headers: { authorization: `Bearer ${mint(session, 60)}` } });
  assertEq(res.status, 200, "history with a token");
  return (await res.json()).messages;
}

scenario("a token that expires mid-turn: the stream ends with token_expired, the SDK gets a new token and resumes with no gap",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    // Each token lives 2 s: a 6 s reply outlives three of them.
    const { page, asked } = await openWithTokens(context, server, session, () => mint(session, 2));
    await until("live", async () => (await view(page)).connection === "live");
    await send(page, "/deltas 200");
    await until("the reply to complete", async () => assistants(await view(page))[0]?.status === "complete", 30_000);
    const v = await view(page);
    assertEq(assistants(v)[0].text, deltasText(200), "the exact reply: no gap, no duplicate");
    assertEq(users(v).length, 1, "one user bubble");
    assert(asked.n >= 3, `getToken was asked again as tokens expired (asked ${asked.n} times)`);
    const h = await serverHistory(server, session);
    assertEq(h.map((m) => m.content), ["/deltas 200", deltasText(200)], "the server has it once");
    assertEq(h[0].author, "user-1", "posted as the token's user");
    const state = await page.evaluate(() => window.chat.state());
    assertEq(state.messages.map((m) => [m.role, m.author]), [["user", "user-1"], ["assistant", null]], "the state carries the author");
    return page;
  });

scenario("a token the server keeps refusing: connection says unauthorized with the server's error, and the view keeps what it had",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    let good = true;
    const { page } = await openWithTokens(context, server, session, () => (good ? mint(session, 60) : "not-a-token"));
    await until("live", async () => (await view(page)).connection === "live");
    await send(page, "/echo kept");
    await until("the reply", async () => assistants(await view(page))[0]?.status === "complete");
    good = false;
    await page.reload();
    const v = await until("unauthorized", async () => {
      const s = await page.evaluate(() => window.chat.state());
      return s.connection === "unauthorized" && s;
    });
    assertEq(v.error?.code, "invalid_token", "the server's error is shown");
    assertEq(v.messages.map((m) => [m.role, m.content]), [["user", "/echo kept"], ["assistant", "kept"]], "nothing else in the view is lost");
    assertEq(v.messages.map((m) => m.author), ["user-1", null], "the author came back from the cache");
    // Tokens work again: the next attempt goes through.
    good = true;
    await until("live again", async () => (await view(page)).connection === "live", 45_000);
    return page;
  });

runScenarios("token-expiry", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
