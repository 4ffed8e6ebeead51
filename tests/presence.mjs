// Presence and typing (contract v1.3) on the demo page: browsers are Playwright contexts (each its
// own storage, so its own presence member); the tabs of one context share one stream and are one
// member. Two browsers see each other join, type and leave; three tabs are one member whose state
// any tab sets; a reload shows no leave in the other browser; a browser that was offline shows the
// roster as it is when it is back; a typing tab that closes stops typing at once.
// The last line printed is "N passed, N failed".
import { until, assert, assertEq, view, openPage, send, runScenarios } from "./support.mjs";

/** What the page shows of presence: "N here", a dot per member, and the typing line. */
async function presence(page) {
  return page.evaluate(() => {
    const box = document.querySelector("[data-testid=presence]");
    return {
      count: Number(box?.dataset.count ?? 0),
      shown: !!box?.checkVisibility(),
      members: [...document.querySelectorAll("[data-testid=member]")].map((m) => ({
        id: m.dataset.memberId, self: m.dataset.self === "true", typing: m.dataset.typing === "true",
      })),
      typing: !!document.querySelector("[data-testid=typing]")?.checkVisibility(),
    };
  });
}

const ids = (p) => p.members.map((m) => m.id).sort();

/** Waits until `page` lists exactly `expected` member ids, its own first and marked. */
async function lists(page, who, expected, self) {
  await until(`${who} to list ${expected.length} member(s)`, async () => {
    const p = await presence(page);
    return JSON.stringify(ids(p)) === JSON.stringify([...expected].sort()) && p.count === expected.length;
  });
  const p = await presence(page);
  assert(p.shown, `${who}: "N here" is shown`);
  if (self) {
    assertEq([p.members[0].id, p.members[0].self], [self, true], `${who}: its own member first, marked self`);
    assertEq(p.members.filter((m) => m.self).length, 1, `${who}: one member is self`);
  }
  return p;
}

/** The member id of the browser `page` is in (its own member). */
async function selfId(page) {
  const id = await until("the page to list itself", async () => (await presence(page)).members.find((m) => m.self)?.id);
  return id;
}

/** Records in the page every presence it is shown, for checks of what happened in between. */
async function record(page) {
  await page.evaluate(() => {
    window.__seen = [];
    window.chat.subscribe((s) => window.__seen.push(s.presence.map((m) => m.memberId)));
  });
}

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("two browsers see each other join, type (typing: true, then false when idle and after a send) and leave",
  ["--presence-grace-ms", "500", "--typing-ttl-secs", "30"], async ({ browser, context, server, session }) => {
    const a = await openPage(context, server, session);
    const aId = await selfId(a);
    await lists(a, "A alone", [aId], aId);
    const other = await browser.newContext({ viewport: { width: 900, height: 720 } });
    try {
      const b = await openPage(other, server, session);
      const bId = await selfId(b);
      assert(aId !== bId, "two browsers are two members");
      await lists(a, "A", [aId, bId], aId);
      await lists(b, "B", [aId, bId], bId);
      assertEq((await a.textContent("[data-testid=presence] .here")).trim(), "2 here", "A says 2 here");

      // A types: B shows someone typing, and A's dot typing; A never shows itself typing.
      await a.type("[data-testid=input]", "hel");
      await until("B to show A typing", async () => {
        const p = await presence(b);
        return p.typing && p.members.find((m) => m.id === aId)?.typing;
      });
      assert(!(await presence(a)).typing, "A does not show its own typing as someone else's");
      // Idle for 3 s: typing: false (the server's TTL is 30 s here, so it is the SDK's).
      const stopped = Date.now();
      await until("B to show A stopped typing", async () => !(await presence(b)).typing, 10_000);
      const idle = Date.now() - stopped;
      assert(idle >= 2000 && idle < 8000, `typing ended about 3 s after the last key (${idle} ms)`);

      // Typing then sending: false right after the send, not 3 s later.
      await a.type("[data-testid=input]", "/echo hi");
      await until("B to show A typing again", async () => (await presence(b)).typing);
      const sent = Date.now();
      await a.click("[data-testid=send]");
      await until("B to show A stopped typing after the send", async () => !(await presence(b)).typing, 10_000);
      assert(Date.now() - sent < 2500, `typing ended with the send (${Date.now() - sent} ms)`);

      // A session's presence is never journaled: the history has the message and its reply only.
      await until("the reply", async () => (await view(b)).messages.some((m) => m.role === "assistant" && m.status === "complete"));
      const h = await server.history(session);
      assertEq(h.messages.map((m) => m.role), ["user", "assistant"], "presence is not in the history");

      // B's browser goes away: A sees it leave once the grace is over.
      await other.close();
      await lists(a, "A after B left", [aId], aId);
      assertEq((await a.textContent("[data-testid=presence] .here")).trim(), "1 here", "A says 1 here");
    } finally {
      await other.close().catch(() => {});
    }
    return a;
  });

scenario("three tabs of one browser are one member; a state set in any tab is the browser's (merged)",
  [], async ({ browser, context, server, session }) => {
    const tabs = [];
    for (let i = 0; i < 3; i++) tabs.push(await openPage(context, server, session));
    const other = await browser.newContext({ viewport: { width: 900, height: 720 } });
    try {
      const b = await openPage(other, server, session);
      const bId = await selfId(b);
      const aId = await selfId(tabs[0]);
      for (const [i, t] of tabs.entries()) {
        assertEq(await selfId(t), aId, `tab ${i + 1} is the same member`);
        await lists(t, `tab ${i + 1}`, [aId, bId], aId);
      }
      await lists(b, "B", [aId, bId], bId);
      // Keys set in two tabs (a follower, then another) merge into the browser's one state.
      await tabs[2].evaluate(() => window.chat.setPresence({ status: "away" }));
      await tabs[1].evaluate(() => window.chat.setPresence({ mood: "calm" }));
      const stateOf = (page, id) => page.evaluate((id) => window.chat.state().presence.find((m) => m.memberId === id)?.state, id);
      await until("B to see both keys of A's state", async () => {
        const s = await stateOf(b, aId);
        return s?.status === "away" && s?.mood === "calm";
      });
      for (const [i, t] of tabs.entries()) {
        await until(`tab ${i + 1} to see its browser's state`, async () => (await stateOf(t, aId))?.mood === "calm");
      }
      // The server's roster says the same: one member for the three tabs.
      const { status, body } = await server.api(`/api/sessions/${session}/presence`);
      assertEq(status, 200, "GET presence");
      assertEq(body.members.map((m) => m.member_id).sort(), [aId, bId].sort(), "the server lists two members");
      const merged = body.members.find((m) => m.member_id === aId).state;
      assertEq([Object.keys(merged).sort(), merged.status, merged.mood], [["mood", "status"], "away", "calm"], "the merged state");
      // One tab of three closes: the browser stays.
      await tabs[0].close();
      await record(b);
      await tabs[1].evaluate(() => window.chat.setPresence({ mood: "busy" }));
      await until("B to see the update of a tab that stayed", async () => (await stateOf(b, aId))?.mood === "busy");
      const seen = await b.evaluate(() => window.__seen);
      assert(seen.every((l) => l.includes(aId)), "closing one tab of three showed no leave");
    } finally {
      await other.close();
    }
    return tabs[1];
  });

scenario("a reload shows no leave and no join in the other browser", [], async ({ browser, context, server, session }) => {
  const a = await openPage(context, server, session);
  const aId = await selfId(a);
  const other = await browser.newContext({ viewport: { width: 900, height: 720 } });
  try {
    const b = await openPage(other, server, session);
    const bId = await selfId(b);
    await lists(b, "B", [aId, bId], bId);
    await record(b);
    for (let i = 0; i < 2; i++) {
      await a.reload();
      await until("A to be live again", async () => (await view(a)).connection === "live");
      assertEq(await selfId(a), aId, "the reloaded page is the same member");
      await lists(a, "A after the reload", [aId, bId], aId);
    }
    // Longer than the 3 s grace: a leave would have shown by now.
    await new Promise((r) => setTimeout(r, 3500));
    const seen = await b.evaluate(() => window.__seen);
    assert(seen.every((l) => l.includes(aId)), `B never showed A leave: ${JSON.stringify(seen)}`);
    await lists(b, "B", [aId, bId], bId);
  } finally {
    await other.close();
  }
  return a;
});

scenario("the roster is right after offline and back: replaced by the fresh one, not patched",
  ["--presence-grace-ms", "300"], async ({ browser, context, server, session }) => {
    const a = await openPage(context, server, session);
    const aId = await selfId(a);
    const bCtx = await browser.newContext({ viewport: { width: 900, height: 720 } });
    const cCtx = await browser.newContext({ viewport: { width: 900, height: 720 } });
    try {
      const b = await openPage(bCtx, server, session);
      const bId = await selfId(b);
      await lists(a, "A", [aId, bId], aId);
      await context.setOffline(true);
      await until("A to be offline", async () => (await view(a)).connection === "offline");
      // While A is away: B goes, C comes, and B sees A leave (past its grace).
      await bCtx.close();
      const c = await openPage(cCtx, server, session);
      const cId = await selfId(c);
      await lists(c, "C", [cId], cId);
      await context.setOffline(false);
      await until("A to be live again", async () => (await view(a)).connection === "live");
      await lists(a, "A back", [aId, cId], aId);
      await lists(c, "C", [aId, cId], cId);
    } finally {
      await bCtx.close().catch(() => {});
      await cCtx.close();
    }
    return a;
  });

scenario("a typing tab that closes stops typing at once (pagehide), its browser staying",
  ["--typing-ttl-secs", "30"], async ({ browser, context, server, session }) => {
    const a1 = await openPage(context, server, session);
    const a2 = await openPage(context, server, session);
    const aId = await selfId(a1);
    const other = await browser.newContext({ viewport: { width: 900, height: 720 } });
    try {
      const b = await openPage(other, server, session);
      const bId = await selfId(b);
      await lists(b, "B", [aId, bId], bId);
      await a2.type("[data-testid=input]", "typing then gone");
      await until("B to show A typing", async () => (await presence(b)).typing);
      const closed = Date.now();
      await a2.close({ runBeforeUnload: true });
      await until("B to show A stopped typing", async () => !(await presence(b)).typing, 10_000);
      assert(Date.now() - closed < 2500, `typing ended with the page (${Date.now() - closed} ms)`);
      await lists(b, "B", [aId, bId], bId);
    } finally {
      await other.close();
    }
    return a1;
  });

await runScenarios("presence", scenarios);
