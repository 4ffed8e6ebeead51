// A group session: several users, each with a token of their own for the same session, each in a
// browser of their own (a Playwright context: its own storage, its own stream). The sender's tab
// closes mid-turn; another member whose page is open, a member who opens the page mid-turn and
// one who opens it once the turn has ended all get the whole reply, once, with its author.
// Tokens come from the server binary's `turnstream token`. The last line printed is "N passed, N failed".
import { execFileSync } from "node:child_process";
import { BIN, until, assert, assertEq, view, assistants, users, send, deltasText, runScenarios } from "./support.mjs";

const SECRET = "group-session-suite-secret-0123456789";

/** A token for `sub` on `session`, minted by the binary as a backend's script would. */
function token(sub, session) {
  return execFileSync(BIN, ["token", "--sub", sub, "--session", session, "--ttl", "1h"], {
    env: { ...process.env, TURNSTREAM_AUTH_SECRET: SECRET },
  }).toString().trim();
}

/** A member's browser: a context of its own whose pages get `sub`'s token. */
async function member(browser, context, sub, session) {
  const ctx = context ?? await browser.newContext({ viewport: { width: 900, height: 720 } });
  const t = token(sub, session);
  await ctx.exposeFunction("turnstreamToken", () => t);
  return { ctx, sub, token: t };
}

async function open(m, server, session) {
  const page = await m.ctx.newPage();
  page.on("pageerror", (e) => console.error(`  [page error, ${m.sub}] ${e.message}`));
  await page.goto(`${server.url}/?session=${session}`);
  await until(`${m.sub}'s page to be live`, async () => (await view(page)).connection === "live");
  return page;
}

/** A GET of the API with `m`'s token. */
async function get(server, m, path) {
  const res = await fetch(server.url + path, { headers: { authorization: `Bearer ${m.token}` } });
  assertEq(res.status, 200, `GET ${path}`);
  return res.json();
}

/** What `page` shows once the reply is complete: the user's message and the whole reply, each
 *  once, the same in the SDK's state with the sender as author. */
async function showsWholeReply(page, who, expected) {
  await until(`${who} to show the reply complete`, async () => assistants(await view(page))[0]?.status === "complete");
  const v = await view(page);
  assertEq(v.messages.map((m) => [m.role, m.text]), expected.map((m) => [m.role, m.content]),
    `${who}: the message and the whole reply, each once (no gap, no duplicate)`);
  const state = await page.evaluate(() => window.chat.state());
  assertEq(state.messages.map((m) => [m.role, m.content, m.author]), expected.map((m) => [m.role, m.content, m.author]),
    `${who}: the state says who wrote each message`);
}

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags: ["--auth-secret", SECRET, ...flags], fn });

scenario("a group session: the sender's tab closes mid-turn; a member live, one opening mid-turn and one opening after it get the whole reply",
  ["--demo-delay-ms", "30", "--coalesce-ms", "0"], async ({ browser, context, server, session }) => {
    const ann = await member(browser, context, "ann", session);
    const bob = await member(browser, null, "bob", session);
    const others = [bob.ctx];
    try {
      const annPage = await open(ann, server, session);
      const bobPage = await open(bob, server, session);
      const reply = deltasText(300);
      await send(annPage, "/deltas 300");
      await until("the reply to stream on both pages", async () => {
        for (const p of [annPage, bobPage]) if ((assistants(await view(p))[0]?.text.length ?? 0) < 40) return false;
        return true;
      });
      const sent = (await get(server, bob, `/api/sessions/${session}/history`)).messages[0];
      assertEq([sent.role, sent.author], ["user", "ann"], "the message is ann's");
      await annPage.close();
      const turn = await get(server, bob, `/api/turns/${sent.turn_id}`);
      assertEq(turn.state, "running", "closing the sender's tab did not end the turn");

      // Another member opens the page while the turn still runs, on a browser with nothing cached.
      const cid = await member(browser, null, "cid", session);
      others.push(cid.ctx);
      const cidPage = await open(cid, server, session);
      const joined = await until("cid to show the turn in progress", async () => {
        const a = assistants(await view(cidPage))[0];
        return a && a.status === "streaming" && a.text.length > 0 && a;
      });
      assertEq((await get(server, cid, `/api/turns/${sent.turn_id}`)).state, "running", "cid joined mid-turn");
      assert(reply.startsWith(joined.text), `cid's first view of the reply starts at its start: ${JSON.stringify(joined.text.slice(0, 40))}`);

      // Until the end, both members' pages only ever show a beginning of the reply (the end's
      // full text would cover a gap or a duplicate shown while it streamed).
      const wrong = [];
      const ended = await until("the turn to end", async () => {
        for (const [who, p] of [["bob", bobPage], ["cid", cidPage]]) {
          const text = assistants(await view(p))[0]?.text ?? "";
          if (!reply.startsWith(text)) wrong.push(`${who}: ${JSON.stringify(text.slice(-40))}`);
        }
        const t = await get(server, bob, `/api/turns/${sent.turn_id}`);
        return t.state !== "running" && t.state !== "queued" && t;
      });
      assertEq(wrong, [], "mid-turn, each page shows the reply so far, no gap, no duplicate");
      assertEq(ended.state, "completed", "the turn completed");
      const history = (await get(server, bob, `/api/sessions/${session}/history`)).messages;
      const expected = history.map(({ role, content, author }) => ({ role, content, author }));
      assertEq(expected, [
        { role: "user", content: "/deltas 300", author: "ann" },
        { role: "assistant", content: reply, author: null },
      ], "the server's history");

      await showsWholeReply(bobPage, "bob (live all along)", expected);
      await showsWholeReply(cidPage, "cid (opened mid-turn)", expected);
      // Bob on another device once the turn has ended, and ann back on her browser (whose cache
      // had the reply cut where her tab closed).
      const bob2 = await member(browser, null, "bob", session);
      others.push(bob2.ctx);
      await showsWholeReply(await open(bob2, server, session), "bob (a cold page after the turn)", expected);
      const annAgain = await open(ann, server, session);
      await showsWholeReply(annAgain, "ann (back after closing her tab)", expected);
      assertEq(users(await view(annAgain)).length, 1, "ann sees her message once");
      return annAgain;
    } finally {
      // The runner takes its screenshot of the page returned; the other browsers close here.
      for (const c of others) await c.close().catch(() => {});
    }
  });

runScenarios("group-session", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
