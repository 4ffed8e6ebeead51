// Branches (contract v1.2) in the browser, through `ChatClient`'s `regenerate` and
// `switchBranch`, in pages of one origin over HTTP/1.1 against the real server binary:
// - two tabs: a regeneration asked in one streams its new reply in both, each then showing
//   the reply as version 2 of 2; a switch back to version 1 in the other tab is followed by the
//   first, and the server's history agrees;
// - a page reloaded while a regeneration streams resumes it whole (the text the server wrote,
//   once), still on the new branch;
// - a regeneration asked while the server cannot be reached, then a reload: the reloaded page
//   still has it (from its cache) and posts it once the server is back: one new version, 2/2.
// The last line printed is "N passed, N failed".
import { until, assert, assertEq, deltasText, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

/** A page of the server's origin that holds one `ChatClient` (`window.chat`) and nothing else. */
async function openClient(context, server, session) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await context.route(`${server.url}/branches`, (route) => route.fulfill({
    contentType: "text/html",
    body: `<!doctype html><meta charset="utf-8"><title>branches</title>
      <script type="importmap">{ "imports": { "turnstream": "./pkg/turnstream.js" } }</script>`,
  }));
  await page.goto(`${server.url}/branches`);
  await page.evaluate(async (sessionId) => {
    const { default: init, ChatClient } = await import("turnstream");
    await init();
    window.chat = await ChatClient.connect({ baseUrl: location.origin, sessionId });
    // Every account of a reply this page showed, to check it never went backwards.
    window.shown = [];
    window.chat.subscribe((s) => {
      for (const m of s.messages) if (m.role === "assistant") window.shown.push([m.turnId, m.content]);
    });
  }, session);
  await until("the page to be live", async () => (await state(page)).connection === "live");
  return page;
}

const state = (page) => page.evaluate(() => window.chat.state());
const reply = async (page) => (await state(page)).messages.filter((m) => m.role === "assistant").at(-1);

/** Waits until the page's last reply satisfies `ok`. */
const replyWhere = (page, what, ok) => until(what, async () => {
  const r = await reply(page);
  return r && ok(r) && r;
});

/** Each reply's text in `page` only ever grew (no text shown twice, none taken back). */
async function assertGrew(page, what) {
  const shown = await page.evaluate(() => window.shown);
  const last = new Map();
  for (const [turn, text] of shown) {
    const before = last.get(turn) ?? "";
    assert(text.startsWith(before), `${what}: ${turn} went from "…${before.slice(-30)}" to "…${text.slice(-30)}"`);
    last.set(turn, text);
  }
}

const TEXT = deltasText(40);

scenario("two tabs: a regeneration streams in both, 2/2 in both; a switch back to 1/2 in the other is followed",
  ["--demo-delay-ms", "40", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const a = await openClient(context, server, session);
    const b = await openClient(context, server, session);
    await a.evaluate(() => window.chat.send("/deltas 40"));
    const first = await replyWhere(a, "the first reply", (r) => r.status === "complete" && r.content === TEXT);
    await replyWhere(b, "the first reply in the other tab", (r) => r.turnId === first.turnId && r.status === "complete");
    assertEq(first.branch, { index: 0, count: 1 }, "one version before");

    await a.evaluate((key) => window.chat.regenerate(key), first.key);
    // The new reply streams in both tabs: each sees it partway, then whole.
    for (const [page, name] of [[a, "the tab that asked"], [b, "the other tab"]]) {
      await replyWhere(page, `the new reply streaming in ${name}`, (r) =>
        r.turnId !== first.turnId && r.status === "streaming" && r.content.length > 0 && r.content.length < TEXT.length);
    }
    const regen = {};
    for (const [page, name] of [[a, "a"], [b, "b"]]) {
      const r = await replyWhere(page, `the new reply whole in ${name}`, (r) => r.turnId !== first.turnId && r.status === "complete");
      assertEq(r.content, TEXT, `${name}: the whole new reply, once`);
      assertEq(r.branch, { index: 1, count: 2 }, `${name}: 2/2`);
      const v = await state(page);
      assertEq(v.messages.map((m) => m.role), ["user", "assistant"], `${name}: the branch, not both versions`);
      regen[name] = r;
    }
    assertEq(regen.a.turnId, regen.b.turnId, "the same new turn in both tabs");

    // The other tab switches back to the first version: the first tab follows.
    await b.evaluate((key) => window.chat.switchBranch(key, 0), regen.b.key);
    for (const [page, name] of [[b, "the tab that switched"], [a, "the first tab"]]) {
      const r = await replyWhere(page, `${name} to show version 1`, (r) => r.turnId === first.turnId);
      assertEq([r.content, r.branch], [TEXT, { index: 0, count: 2 }], `${name}: 1/2`);
      assertEq((await state(page)).messages.length, 2, `${name}: one reply shown`);
    }
    const history = await server.history(session);
    assertEq(history.messages[1].turn_id, first.turnId, "the server's active branch is version 1");
    assertEq(history.messages[1].siblings?.count, 2, "with both versions kept");
    await assertGrew(a, "tab a");
    await assertGrew(b, "tab b");
    return a;
  });

scenario("a page reloaded while a regeneration streams resumes it whole, on the new branch",
  ["--demo-delay-ms", "40", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openClient(context, server, session);
    await page.evaluate(() => window.chat.send("/deltas 60"));
    const whole = deltasText(60);
    const first = await replyWhere(page, "the first reply", (r) => r.status === "complete" && r.content === whole);
    await page.evaluate((key) => window.chat.regenerate(key), first.key);
    const partway = await replyWhere(page, "the new reply partway", (r) =>
      r.turnId !== first.turnId && r.status === "streaming" && r.content.length > 20);
    await page.reload();
    await page.evaluate(async (sessionId) => {
      const { default: init, ChatClient } = await import("turnstream");
      await init();
      window.chat = await ChatClient.connect({ baseUrl: location.origin, sessionId });
    }, session);
    const r = await replyWhere(page, "the new reply whole after the reload", (r) => r.turnId === partway.turnId && r.status === "complete");
    assertEq(r.content, whole, "the whole reply, once");
    const turn = await server.turn(partway.turnId);
    assertEq([turn.state, turn.text], ["completed", whole], "as the server wrote it");
    const v = await state(page);
    assertEq(v.messages.map((m) => [m.role, m.turnId ?? null]).map(([role]) => role), ["user", "assistant"], "the branch only");
    assertEq(r.branch, { index: 1, count: 2 }, "2/2 after the reload");
    return page;
  });

scenario("a regeneration queued offline survives a reload and makes exactly one new version",
  ["--demo-delay-ms", "5", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openClient(context, server, session);
    await page.evaluate(() => window.chat.send("/deltas 10"));
    const whole = deltasText(10);
    const first = await replyWhere(page, "the first reply", (r) => r.status === "complete" && r.content === whole);
    // The server cannot be reached for regenerations: each attempt fails as offline.
    const attempts = [];
    const bodies = [];
    const offline = (route) => {
      attempts.push(route.request().url());
      bodies.push(route.request().postDataJSON());
      return route.abort("internetdisconnected");
    };
    await context.route("**/regenerate", offline);
    await page.evaluate((key) => window.chat.regenerate(key), first.key);
    await until("a first attempt, refused", async () => attempts.length >= 1);
    await page.reload();
    const before = attempts.length;
    await page.evaluate(async (sessionId) => {
      const { default: init, ChatClient } = await import("turnstream");
      await init();
      window.chat = await ChatClient.connect({ baseUrl: location.origin, sessionId });
    }, session);
    await until("the reloaded page to try it again", async () => attempts.length > before);
    const ids = new Set(bodies.map((b) => b?.client_request_id));
    assertEq(ids.size, 1, "every attempt, before and after the reload, carries the same client_request_id");
    assert(typeof [...ids][0] === "string" && [...ids][0].length > 0, "a client_request_id is sent");
    const posted = [];
    page.on("response", (r) => {
      if (r.request().method() === "POST" && r.url().endsWith("/regenerate")) posted.push(r.status());
    });
    await context.unroute("**/regenerate", offline);
    const r = await replyWhere(page, "the new reply whole", (r) => r.turnId !== first.turnId && r.status === "complete");
    assertEq([r.content, r.branch], [whole, { index: 1, count: 2 }], "the new version, 2/2");
    assertEq(posted, [202], "posted once once the server was back");
    const history = await server.history(session);
    assertEq(history.messages.map((m) => m.role), ["user", "assistant"], "the server's active branch");
    assertEq(history.messages[1].turn_id, r.turnId, "is the new version");
    assertEq(history.messages[1].siblings?.count, 2, "exactly one new version on the server");
    return page;
  });

await runScenarios("branches", scenarios);
