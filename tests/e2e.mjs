// End-to-end suite: the demo page (www/) in headless Chromium, driven by playwright-core, against
// the real `turnstream` binary. Each scenario starts its own server on a free port with a fresh
// SQLite file, acts as a user would, and saves a screenshot under tests/artifacts/.
// The last line printed is "N passed, N failed".
import { Server, until, assert, assertEq, view, assistants, users, openPage, send, deltasText, runScenarios } from "./support.mjs";

/** The stream's first frame after `retry:` from `cursor` (a live stream is cut after a second). */
async function firstFrame(server, session, cursor) {
  const res = await fetch(`${server.url}/api/stream?session=${session}&cursor=${cursor}`, { signal: AbortSignal.timeout(1000) });
  const reader = res.body.getReader();
  let text = "";
  try {
    while (!/\n\n(?!$)[^]*\n\n/.test(text)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
  } catch {
    // Aborted: the stream was live, with nothing to say.
  } finally {
    reader.cancel().catch(() => {});
  }
  return text;
}

/**
 * The page's conversation must equal the server's history, message for message. History is in
 * write order (a reply is written when its turn ends, so a message sent meanwhile comes before it);
 * a chat shows each reply under its message, so compare in that order.
 */
async function assertMatchesHistory(page, server, session) {
  const h = await server.history(session);
  const replies = new Map(h.messages.filter((m) => m.role === "assistant").map((m) => [m.turn_id, m]));
  const expected = [];
  for (const m of h.messages.filter((m) => m.role === "user")) {
    expected.push(["user", m.content]);
    const r = replies.get(m.turn_id);
    if (r) expected.push(["assistant", r.content]);
  }
  const v = await view(page);
  assertEq(v.messages.map((m) => [m.role, m.text]), expected, "the page shows exactly the server's history");
}

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("send a message: thinking, a tool call and the streamed reply complete", ["--demo-delay-ms", "30"], async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  await send(page, "hello from the end-to-end suite");
  // While it streams: the user bubble, then an assistant bubble with thinking and a tool.
  await until("thinking and a tool call to show", async () => {
    const a = assistants(await view(page))[0];
    return a && a.thinking.length > 0 && a.tools.length > 0;
  });
  assert((await view(page)).busy, "the busy indicator shows while the turn runs");
  const done = await until("the reply to complete", async () => {
    const a = assistants(await view(page))[0];
    return a?.status === "complete" && a;
  });
  assert(done.text.includes("hello from the end-to-end suite"), "the reply quotes the message");
  assertEq(done.tools, ["finished"], "the tool call finished");
  assert(done.thinking.length > 0, "thinking is kept");
  assertEq(users(await view(page)).length, 1, "one user bubble");
  assert(!(await view(page)).busy, "not busy once the turn ended");
  await assertMatchesHistory(page, server, session);
  return page;
});

scenario("reload mid-turn: the in-flight turn reappears with its thinking and text so far, then completes once", ["--demo-delay-ms", "60"], async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  await send(page, "please stream a long answer for the reload test");
  const before = await until("some reply text", async () => {
    const a = assistants(await view(page))[0];
    return a && a.text.length > 40 && a;
  });
  await page.reload();
  const after = await until("the turn to reappear after the reload", async () => {
    const a = assistants(await view(page))[0];
    return a && a.text.length >= before.text.length && a;
  });
  assert(after.text.startsWith(before.text), "the text so far survives the reload");
  assert(after.thinking.length > 0, "the thinking survives the reload");
  assert(after.status === "streaming" || after.status === "complete", `status after reload: ${after.status}`);
  const done = await until("completion", async () => {
    const a = assistants(await view(page))[0];
    return a?.status === "complete" && a;
  });
  assertEq(assistants(await view(page)).length, 1, "one assistant bubble");
  assertEq(users(await view(page)).length, 1, "one user bubble");
  const h = await server.history(session);
  assertEq(done.text, h.messages[1].content, "no duplicated or missing text");
  return page;
});

scenario("two tabs on one session: a message sent in one appears in the other with its reply, once", ["--demo-delay-ms", "20"], async ({ context, browser, server, session }) => {
  const a = await openPage(context, server, session);
  const b = await openPage(context, server, session);
  // A third tab in another browser profile: another device, no shared storage.
  const other = await browser.newContext();
  const c = await openPage(other, server, session);
  await send(a, "/echo sent from tab A");
  for (const [name, page] of [["B", b], ["C", c], ["A", a]]) {
    await until(`tab ${name} to show the reply`, async () => assistants(await view(page))[0]?.status === "complete");
    const v = await view(page);
    assertEq(v.messages.map((m) => [m.role, m.text]), [["user", "/echo sent from tab A"], ["assistant", "sent from tab A"]], `tab ${name} shows it exactly once`);
  }
  await other.close();
  return b;
});

scenario("offline mid-turn, then online: the reply completes with no gap, and a message typed offline is delivered once", ["--demo-delay-ms", "40", "--coalesce-ms", "0"], async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  await send(page, "/deltas 100");
  await until("some text", async () => (assistants(await view(page))[0]?.text.length ?? 0) > 20);
  await context.setOffline(true);
  await until("the page to say it is offline", async () => (await view(page)).connection === "offline");
  const frozen = assistants(await view(page))[0].text;
  const turnId = (await server.history(session)).messages[0].turn_id;
  // The turn goes on on the server while the browser is away.
  await until("the server to move on", async () => (await server.turn(turnId)).text.length > frozen.length + 40);
  assertEq(assistants(await view(page))[0].text, frozen, "nothing arrives while offline (the stream really was down)");
  await send(page, "/echo typed while offline");
  await until("the offline message to wait in the outbox", async () => users(await view(page)).some((m) => m.text === "/echo typed while offline" && m.status === "sending"));
  await context.setOffline(false);
  await until("the first reply to complete", async () => assistants(await view(page))[0]?.status === "complete");
  await until("the offline message's reply", async () => assistants(await view(page))[1]?.status === "complete");
  const v = await view(page);
  assertEq(assistants(v)[0].text, deltasText(100), "the reply has no gap and no duplicate");
  assert(!v.gap, "a contiguous resume is not a gap");
  assertEq(users(v).filter((m) => m.text === "/echo typed while offline").length, 1, "delivered once on the page");
  const h = await server.history(session);
  assertEq(h.messages.filter((m) => m.content === "/echo typed while offline").length, 1, "delivered once to the server");
  await assertMatchesHistory(page, server, session);
  return page;
});

scenario("server killed (SIGKILL) mid-turn and restarted: the turn shows interrupted with its partial text, and the next message works", ["--demo-delay-ms", "40", "--coalesce-ms", "0"], async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  await send(page, "/deltas 400");
  await until("some text", async () => (assistants(await view(page))[0]?.text.length ?? 0) > 30);
  await server.kill("SIGKILL");
  await until("the page to notice", async () => (await view(page)).connection !== "live");
  await server.restart();
  const a = await until("the turn to show interrupted", async () => {
    const x = assistants(await view(page))[0];
    return x?.status === "interrupted" && x;
  }, 45_000);
  assert(a.text.length > 0 && deltasText(400).startsWith(a.text), "the partial text is kept");
  await until("live again", async () => (await view(page)).connection === "live");
  await send(page, "/echo after the restart");
  await until("the next reply", async () => assistants(await view(page))[1]?.status === "complete");
  assertEq(assistants(await view(page))[1].text, "after the restart", "the next message works");
  await assertMatchesHistory(page, server, session);
  return page;
});

scenario("cancel a running turn: it ends cancelled in every tab", ["--demo-delay-ms", "40"], async ({ context, server, session }) => {
  const a = await openPage(context, server, session);
  const b = await openPage(context, server, session);
  await send(a, "/deltas 500");
  await until("tab B to see it stream", async () => (assistants(await view(b))[0]?.text.length ?? 0) > 10);
  await a.click("[data-testid=message][data-role=assistant] [data-testid=cancel]");
  for (const [name, page] of [["A", a], ["B", b]]) {
    await until(`tab ${name} to show cancelled`, async () => assistants(await view(page))[0]?.status === "cancelled");
    assert(!(await view(page)).busy, `tab ${name} is no longer busy`);
    await assertMatchesHistory(page, server, session);
  }
  return b;
});

scenario("the agent asks: an approval card in two tabs, answered in one; a question answered by text; a tool the page runs", ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
  const a = await openPage(context, server, session);
  const b = await openPage(context, server, session);
  const card = (kind) => `[data-testid=message][data-role=assistant] [data-testid=request][data-kind=${kind}]`;
  await send(a, "/approve deploy prod");
  for (const [name, page] of [["A", a], ["B", b]]) {
    await until(`tab ${name} to show the approval card`, async () => page.locator(`${card("approval")}[data-state=open]`).count());
  }
  assertEq(assistants(await view(b))[0].status, "waiting", "the reply waits for the answer");
  await b.click(`${card("approval")} [data-testid=approve]`);
  for (const [name, page] of [["A", a], ["B", b]]) {
    await until(`tab ${name} to show the approved reply`, async () => assistants(await view(page))[0]?.text === "Approved: deploy prod");
    await until(`tab ${name} to show the card answered`, async () => page.locator(`${card("approval")}[data-state=answered]`).count());
  }
  await send(a, "/ask your name?");
  await until("the question card", async () => a.locator(`${card("question")}[data-state=open]`).count());
  await a.fill(`${card("question")} [data-testid=answer-input]`, "Ada");
  await a.click(`${card("question")} [data-testid=answer]`);
  await until("the answered reply", async () => assistants(await view(a))[1]?.text === "You answered: Ada");
  await send(a, "/clienttool page_info");
  const ran = await until("the tool's output in the reply", async () => {
    const t = assistants(await view(a))[2]?.text ?? "";
    return t.startsWith("The tool returned: ") && t;
  });
  const output = JSON.parse(ran.slice("The tool returned: ".length));
  assertEq(output.title, "turnstream demo", "the page ran the tool");
  await assertMatchesHistory(a, server, session);
  return b;
});

scenario("versions on the demo page: regenerate a reply, switch back with ‹ ›, edit a message", ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  const reply = "[data-testid=message][data-role=assistant]";
  const question = "[data-testid=message][data-role=user]";
  await send(page, "/context");
  await until("the first reply", async () => assistants(await view(page))[0]?.status === "complete");
  await page.click(`${reply} [data-testid=regenerate]`);
  await until("the new reply, version 2 of 2", async () =>
    (await page.textContent(`${reply} [data-testid=branch]`)) === "2/2" && assistants(await view(page))[0]?.status === "complete");
  await page.click(`${reply} [data-testid=branch-prev]`);
  await until("version 1 of 2 after the switch", async () => (await page.textContent(`${reply} [data-testid=branch]`)) === "1/2");
  await page.click(`${question} [data-testid=edit]`);
  await page.fill("[data-testid=edit-input]", "/echo edited");
  await page.press("[data-testid=edit-input]", "Enter");
  await until("the edited message's reply", async () => {
    const v = await view(page);
    return users(v)[0]?.text === "/echo edited" && assistants(v)[0]?.text === "edited";
  });
  assertEq(await page.textContent(`${question} [data-testid=branch]`), "2/2", "the edit is version 2 of 2");
  await assertMatchesHistory(page, server, session);
  return page;
});

scenario("a cursor older than retention: the page resyncs and shows the right history", ["--demo-delay-ms", "5", "--retention-secs", "1", "--cleanup-interval-secs", "1"], async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  await send(page, "/echo before going away");
  await until("the first reply", async () => assistants(await view(page))[0]?.status === "complete");
  await context.setOffline(true);
  await until("offline", async () => (await view(page)).connection === "offline");
  // While the page is away, another device talks in the session, and retention removes those
  // events from the journal: the page's cursor can no longer be replayed.
  const h0 = await server.history(session);
  const t = await server.post(session, "/echo said while you were away");
  await until("that turn to end", async () => (await server.turn(t.turn_id)).state === "completed");
  await until("its events to expire", async () => (await firstFrame(server, session, h0.cursor)).includes('"reason":"expired"'));
  await context.setOffline(false);
  await until("the page to show the missed messages", async () => (await view(page)).messages.length === 4);
  const v = await view(page);
  assert(v.gap, "the page says it had to reload");
  await until("live again", async () => (await view(page)).connection === "live");
  await assertMatchesHistory(page, server, session);
  return page;
});

runScenarios("e2e", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
