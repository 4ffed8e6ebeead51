// Agents that ask (contract v1.2) through turnstream/ai-sdk under useChat, against the demo
// agent (each scenario with its own server): a call of another agent (contract v1.3,
// `/call ...`, a tool-agent_call part the server runs) with AI SDK 5 and 7; a client tool (`/clienttool get_location`) run by
// the page's `onToolCall` with AI SDK 5 and 7, and an approval (`/approve ...`) answered with
// `addToolApprovalResponse` with AI SDK 7. Each ends with the exact reply in the same reply
// message, each part once, and no second user message; the server recorded the answer once.
import { assert, assertEq, until } from "../support.mjs";
import { chatView, chunkTypes, openChat, parts, requests, textOf, turnOf } from "./chat-page.mjs";

export const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

/** useChat done with two messages whose reply ends with `text`. */
const answered = (page, text) => until(`useChat to show "${text}"`, async () => {
  const v = await chatView(page);
  return v.status === "ready" && v.messages.length === 2 && textOf(v.messages[1]) === text && v;
});

for (const major of [5, 7]) {
  scenario(`ai@${major}: a client tool runs in the page (onToolCall, ${major === 5 ? "addToolResult" : "addToolOutput"}) and the same turn streams on`,
    ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
      const page = await openChat(context, server, session, { major, asks: true });
      await page.evaluate(() => { window.chat.sendMessage({ text: "/clienttool get_location" }); });
      const location = await page.evaluate(() => window.LOCATION);
      const text = `The tool returned: ${JSON.stringify(location)}`;
      const v = await answered(page, text);
      assertEq(v.error, null, "no error");
      const [user, reply] = v.messages;
      assertEq(user.parts.map((p) => p.text), ["/clienttool get_location"], "one user message");
      const turn = await server.turn(turnOf(reply));
      assertEq([turn.state, turn.text], ["completed", text], "the turn completed with the exact reply");
      assertEq(turn.requests.map((r) => r.answer), [{ output: location }], "the output, recorded once");
      assertEq(parts(reply).filter((p) => p.type !== "step-start"), [
        { type: "tool-get_location", toolCallId: "call_client_tool", state: "output-available", input: {}, output: location,
          errorText: undefined, providerExecuted: undefined },
        { type: "text", text, state: "done" },
      ], "the tool call and the reply's text, each once");
      const sent = await requests(page);
      assertEq(sent.map((r) => r.kind), ["send", "send"], "the message, then the tool's output");
      assertEq(chunkTypes(sent[0].chunks), ["start", "tool-input-available", "finish"], "the first request ends at the tool call");
      assertEq(chunkTypes(sent[1].chunks), ["start", "start-step", "text-start", "text-delta", "text-end", "finish"],
        "the second streams the rest of the same reply");
      assertEq(sent[1].chunks[0].messageId, reply.id, "into the same reply");
      return page;
    });
}

scenario("ai@7: an approval (tool part in approval-requested) answered with addToolApprovalResponse; the same turn streams on",
  ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
    const page = await openChat(context, server, session, { major: 7, asks: true });
    await page.evaluate(() => { window.chat.sendMessage({ text: "/approve deploy to prod" }); });
    const asked = await until("the approval to be requested", async () => {
      const v = await chatView(page);
      const p = v.messages[1]?.parts.find((q) => q.type === "tool-demo_action");
      return v.status === "ready" && p?.state === "approval-requested" && p;
    });
    assertEq(asked.input, { action: "deploy to prod" }, "the tool call asked about");
    await page.evaluate((id) => window.chat.addToolApprovalResponse({ id, approved: false, reason: "not on a Friday" }), asked.approval.id);
    const text = "Denied: deploy to prod (not on a Friday)";
    const v = await answered(page, text);
    assertEq(v.error, null, "no error");
    const reply = v.messages[1];
    const turn = await server.turn(turnOf(reply));
    assertEq([turn.state, turn.text], ["completed", text], "the turn completed with the exact reply");
    assertEq(turn.requests.map((r) => r.answer), [{ approved: false, reason: "not on a Friday" }], "the answer, recorded once");
    const shown = reply.parts.filter((p) => p.type !== "step-start");
    assertEq(shown.map((p) => [p.type, p.state]), [["tool-demo_action", "approval-responded"], ["text", "done"]],
      "the approval and the reply's text, each once");
    assertEq(shown[0].approval, { id: asked.approval.id, approved: false, reason: "not on a Friday" }, "with the answer given");
    const sent = await requests(page);
    assertEq(chunkTypes(sent[0].chunks), ["start", "tool-input-available", "tool-approval-request", "finish"],
      "the first request ends at the approval");
    assertEq(chunkTypes(sent[1].chunks), ["start", "start-step", "text-start", "text-delta", "text-end", "finish"],
      "the second streams the rest of the same reply");
    assert(sent.length === 2, `two requests: ${sent.length}`);
    return page;
  });

for (const major of [5, 7]) {
  scenario(`ai@${major}: a call of another agent (contract v1.3) is a tool-agent_call part the server runs, and the same reply streams on`,
    ["--demo-delay-ms", "5"], async ({ context, server, session }) => {
      const child = `${session}-child`;
      const page = await openChat(context, server, session, { major, asks: true });
      await page.evaluate((text) => { window.chat.sendMessage({ text }); }, `/call researcher ${child} /echo hello`);
      const text = "researcher answered: hello";
      const v = await answered(page, text);
      assertEq(v.error, null, "no error");
      const reply = v.messages[1];
      const turn = await server.turn(turnOf(reply));
      assertEq([turn.state, turn.text], ["completed", text], "the turn completed with the exact reply");
      const call = turn.requests[0];
      assertEq([call.kind, call.call.agent, call.call.session_id, call.answer.state, call.answer.text],
        ["agent_call", "researcher", child, "completed", "hello"], "the server's call and its answer");
      assertEq(parts(reply).filter((p) => p.type !== "step-start"), [
        { type: "tool-agent_call", toolCallId: call.request_id, state: "output-available", input: { agent: "researcher", content: "/echo hello" },
          output: { state: "completed", text: "hello" }, errorText: undefined, providerExecuted: true },
        { type: "text", text, state: "done" },
      ], "the call, with its input and the child's end as output, then the reply's text, each once");
      const sent = await requests(page);
      assertEq(sent.map((r) => r.kind), ["send"], "one request: nothing for useChat to answer");
      assertEq(chunkTypes(sent[0].chunks), ["start", "tool-input-available", "tool-output-available", "text-start", "text-delta", "text-end", "finish"],
        "the call's input, its output once the child ended, then the text, in one stream");
      return page;
    });
}
