// Branches (contract v1.2) through turnstream/ai-sdk under useChat, ai 5 and ai 7, against the
// demo agent (each scenario with its own server): `regenerate()` ends with a new reply, the
// server holding both versions; an edit through `sendMessage({ text, messageId })` shows the new
// branch, which the server's history and the agent's context (`/context`) agree with.
import { assert, assertEq, until } from "../support.mjs";
import { chatView, openChat, textOf, turnOf } from "./chat-page.mjs";

export const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

/** useChat ready with `n` messages, the last a reply with text, and `ok(view)`. */
const settledWith = (page, n, ok = () => true) => until(`useChat to show ${n} messages`, async () => {
  const v = await chatView(page);
  const last = v.messages.at(-1);
  return v.status === "ready" && v.messages.length === n && last?.role === "assistant" && textOf(last) && ok(v) && v;
});

/** The server's history of the active branch as [role, text] pairs. */
const branchOf = async (server, session) => (await server.history(session)).messages.map((m) => [m.role, m.content]);

for (const major of [5, 7]) {
  scenario(`ai@${major}: regenerate() streams a new reply; the server holds both versions`,
    ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
      const page = await openChat(context, server, session, { major });
      await page.evaluate(() => { window.chat.sendMessage({ text: "hello there" }); });
      const first = await settledWith(page, 2);
      const before = first.messages[1];
      await page.evaluate(() => { window.chat.regenerate(); });
      const v = await settledWith(page, 2, (w) => w.messages[1].id !== before.id);
      assertEq(v.error, null, "no error");
      const [user, reply] = v.messages;
      assertEq(textOf(user), "hello there", "the same user message");
      const turn = await server.turn(turnOf(reply));
      assertEq([turn.state, turn.text], ["completed", textOf(reply)], "the new turn completed with the reply shown");
      assert(turnOf(reply) !== turnOf(before), "a new turn");
      assertEq(reply.metadata?.branch, { index: 1, count: 2 }, "the reply is version 2 of 2");
      const history = await server.history(session);
      assertEq(history.messages.map((m) => m.role), ["user", "assistant"], "the active branch: the message and its new reply");
      const last = history.messages[1];
      assertEq(last.turn_id, turnOf(reply), "the server's active reply is the new one");
      assertEq(last.siblings?.count, 2, "the server holds both replies");
      assertEq(last.siblings.ids[0], (await server.turn(turnOf(before))).message.message_id, "the first reply kept");
      return page;
    });

  scenario(`ai@${major}: sendMessage({ text, messageId }) edits that message; the branch shown is the server's`,
    ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
      const page = await openChat(context, server, session, { major, watch: true });
      await page.evaluate(() => { window.chat.sendMessage({ text: "one" }); });
      await settledWith(page, 2);
      await page.evaluate(() => { window.chat.sendMessage({ text: "two" }); });
      const before = await settledWith(page, 4);
      const edited = before.messages[2];
      await page.evaluate((id) => { window.chat.sendMessage({ text: "/context", messageId: id }); }, edited.id);
      const v = await settledWith(page, 4, (w) => textOf(w.messages[2]) === "/context" && w.messages[2].metadata?.branch?.count === 2);
      assertEq(v.error, null, "no error");
      const shown = v.messages.map((m) => [m.role, textOf(m)]);
      const reply1 = textOf(before.messages[1]);
      assertEq(shown.slice(0, 3), [["user", "one"], ["assistant", reply1], ["user", "/context"]], "the new branch");
      assertEq(textOf(v.messages[3]), `user: one\nassistant: ${reply1}\nuser: /context`, "the agent saw this branch only");
      assertEq(v.messages[2].metadata?.branch, { index: 1, count: 2 }, "the edit is version 2 of 2");
      await until("the server's history to agree", async () =>
        JSON.stringify(await branchOf(server, session)) === JSON.stringify(shown));
      const history = await server.history(session);
      assertEq(history.messages[2].siblings?.count, 2, "the server holds both versions of the message");
      return page;
    });
}
