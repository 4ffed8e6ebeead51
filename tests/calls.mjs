// Agent-to-agent calls (contract v1.3) on the demo page: `/call researcher CHILD /sleep ...` opens
// a call whose child turn runs in session CHILD. The caller's reply shows a call card linking to
// the child session, `running` until the child ended, then its state and text, and then the
// caller's own reply; the child session's tab shows the child's message and reply live; a reload
// mid-call shows the card from the cache and the server; a browser that never saw it reads it from
// history. The last line printed is "N passed, N failed".
import { until, assert, assertEq, view, assistants, openPage, send, runScenarios } from "./support.mjs";

/** The call cards a page shows. */
async function calls(page) {
  return page.evaluate(() => [...document.querySelectorAll("[data-testid=call]")].map((c) => ({
    requestId: c.dataset.requestId,
    state: c.dataset.state,
    href: c.querySelector("[data-testid=call-link]")?.getAttribute("href"),
    text: c.querySelector(".request-answer")?.textContent ?? null,
  })));
}

/** The call as the SDK's state has it, on the caller's reply. */
async function callOf(page) {
  return page.evaluate(() => window.chat.state().messages.find((m) => m.role === "assistant")?.requests.find((r) => r.kind === "agent_call") ?? null);
}

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("the demo's /call: a call card linking to the child session, the child's reply in its tab, the caller's reply, across a reload mid-call",
  [], async ({ browser, context, server, session }) => {
    const child = `${session}-child`;
    const caller = await openPage(context, server, session);
    const second = await openPage(context, server, session);
    await send(caller, `/call researcher ${child} /sleep 4000 hello`);

    // The card, in both tabs of the caller's session, while the child runs.
    for (const [who, p] of [["the caller", caller], ["its other tab", second]]) {
      await until(`${who} to show the call running`, async () => (await calls(p))[0]?.state === "running");
    }
    const [card] = await calls(caller);
    assertEq(card.href, `?session=${child}`, "the card links to the child session");
    const call = await callOf(caller);
    assertEq([call.call.agent, call.call.sessionId, call.call.state, call.answer], ["researcher", child, "running", null],
      "the state's request: agent, session, running, no answer yet");
    assert(call.call.turnId && call.call.messageId, "the child turn's ids");
    assertEq(assistants(await view(caller))[0].status, "waiting", "the caller waits on the call");

    // The child session, opened from the card's link in a tab of its own.
    const childPage = await context.newPage();
    childPage.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
    await childPage.goto(`${server.url}/${card.href}`);
    await until("the child's tab to be live", async () => (await view(childPage)).connection === "live");
    await until("the child's tab to show its message", async () => (await view(childPage)).messages.some((m) => m.role === "user"));
    const childState = await childPage.evaluate(() => window.chat.state());
    const asked = childState.messages.find((m) => m.role === "user");
    assertEq([asked.content, asked.author], ["/sleep 4000 hello", "agent:default"], "the child's message, from the calling agent");
    assertEq(childState.messages.find((m) => m.role === "assistant")?.turnId, call.call.turnId, "the child turn is the call's");

    // A reload of the caller mid-call: the card comes back, still running.
    await caller.reload();
    await until("the reloaded caller to be live", async () => (await view(caller)).connection === "live");
    const back = await until("the reloaded caller to show the call", async () => (await calls(caller))[0]);
    assertEq(back.state, "running", "mid-call after the reload");

    // The child ends: its reply in its tab, the card answered, the caller's reply.
    await until("the child's reply", async () => assistants(await view(childPage))[0]?.status === "complete", 20_000);
    assertEq(assistants(await view(childPage))[0].text, "hello", "the child's reply");
    for (const [who, p] of [["the caller", caller], ["its other tab", second]]) {
      await until(`${who} to show the call completed`, async () => (await calls(p))[0]?.state === "completed");
      assertEq((await calls(p))[0].text, "hello", `${who}: the child's text on the card`);
      await until(`${who} to show its reply`, async () => assistants(await view(p))[0]?.status === "complete");
      assertEq(assistants(await view(p))[0].text, "researcher answered: hello", `${who}: the caller's reply`);
    }
    const done = await callOf(caller);
    assertEq([done.call.state, done.call.text, done.answeredBy], ["completed", "hello", `turn:${call.call.turnId}`], "the answer is the child's end");

    // Another browser reads it all from history.
    const other = await browser.newContext({ viewport: { width: 900, height: 720 } });
    try {
      const fresh = await openPage(other, server, session);
      await until("a new browser to show the answered call", async () => (await calls(fresh))[0]?.state === "completed");
      assertEq((await calls(fresh))[0].href, `?session=${child}`, "from history, the same card");
      assertEq(assistants(await view(fresh))[0].text, "researcher answered: hello", "and the reply");
    } finally {
      await other.close();
    }
    return caller;
  });

await runScenarios("calls", scenarios);
