// An AI SDK agent (turnstream-worker/ai-sdk's aiSdkAgent, ai 7 with its mock model, in a worker
// of this process) behind useChat (ai 7) over turnstream/ai-sdk: its tool that needs approval
// shows as a part in approval-requested, addToolApprovalResponse answers yes, the tool runs once
// in the same turn and the same reply streams on to the model's answer.
import { tool, streamText } from "ai7";
import { MockLanguageModelV3 } from "ai7/test";
import { z } from "zod";
import { WorkerClient, runWorker } from "../../clients/node/src/index.js";
import { aiSdkAgent } from "../../clients/node/src/ai-sdk.js";
import { assertEq, until } from "../support.mjs";
import { chatView, openChat, textOf, turnOf } from "./chat-page.mjs";

export const scenarios = [];
const KEY = "svc-ecosystem-ai-sdk-agent";

/** ai 7's mock model: asks to deploy prod, then says what the tool returned. */
function deployModel() {
  const finish = (reason) => ({ type: "finish", finishReason: { unified: reason, raw: reason },
    usage: { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } } });
  const say = (delta) => [{ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta }, { type: "text-end", id: "t" }];
  return new MockLanguageModelV3({
    doStream: async ({ prompt }) => {
      const last = prompt.at(-1);
      const chunks = last.role === "tool"
        ? [...say(`Done: ${last.content[0].output.value}.`), finish("stop")]
        : [...say("Deploying prod. "), { type: "tool-call", toolCallId: "call_deploy", toolName: "deploy", input: '{"target":"prod"}' }, finish("tool-calls")];
      return { stream: new ReadableStream({ start(c) { for (const k of chunks) c.enqueue(k); c.close(); } }) };
    },
  });
}

scenarios.push({
  name: "ai@7: an AI SDK agent's tool that needs approval, approved in useChat (addToolApprovalResponse): it runs once and the same reply streams on",
  flags: ["--agent", "worker", "--service-key", KEY],
  fn: async ({ context, server, session }) => {
    // The page's requests carry the backend's key: a server with a service key wants a credential.
    await context.route(`${server.url}/api/**`, (route) =>
      route.continue({ headers: { ...route.request().headers(), authorization: `Bearer ${KEY}` } }));
    const deployed = [];
    const agent = aiSdkAgent({
      model: deployModel(),
      streamText,
      tools: {
        deploy: tool({
          description: "Deploys a target.",
          inputSchema: z.object({ target: z.string() }),
          needsApproval: true,
          execute: async ({ target }) => (deployed.push(target), `${target} is live`),
        }),
      },
    });
    const stop = new AbortController();
    const worker = runWorker(new WorkerClient({ baseUrl: server.url, serviceKey: KEY }), agent, { waitMs: 500, signal: stop.signal });
    try {
      const page = await openChat(context, server, session, { major: 7, asks: true });
      await page.evaluate(() => { window.chat.sendMessage({ text: "deploy prod" }); });
      const asked = await until("the approval to be requested", async () => {
        const v = await chatView(page);
        const p = v.messages[1]?.parts.find((q) => q.type === "tool-deploy");
        return v.status === "ready" && p?.state === "approval-requested" && p;
      });
      assertEq([asked.toolCallId, asked.input, asked.approval.id], ["call_deploy", { target: "prod" }, "call_deploy"], "the call asked about");
      assertEq(deployed, [], "nothing ran before the answer");
      await page.evaluate((id) => window.chat.addToolApprovalResponse({ id, approved: true }), asked.approval.id);
      const text = "Deploying prod. Done: prod is live.";
      const v = await until(`useChat to show "${text}"`, async () => {
        const view = await chatView(page);
        return view.status === "ready" && view.messages.length === 2 && textOf(view.messages[1]) === text && view;
      });
      assertEq(v.error, null, "no error");
      assertEq(deployed, ["prod"], "the tool ran once");
      const turn = (await (await fetch(`${server.url}/api/turns/${turnOf(v.messages[1])}`, { headers: { authorization: `Bearer ${KEY}` } })).json());
      assertEq([turn.state, turn.text], ["completed", text], "the turn completed with the exact reply");
      assertEq(turn.requests.map((r) => r.answer), [{ approved: true }], "the answer, recorded once");
      assertEq(turn.tools.map((t) => [t.call_id, t.name, t.status, t.output_preview]), [["call_deploy", "deploy", "finished", '"prod is live"']], "the tool call");
      return page;
    } finally {
      stop.abort();
      await worker;
    }
  },
});
