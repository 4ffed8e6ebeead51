// What `@ai-sdk/openai` is in the tests that run the README's agent and the example: `openai(id)`
// is ai 7's mock model, which asks to deploy prod, and once the tool's result is back says
// "Done: <result>." (or, when the user denied it, "Not deployed.").
import { MockLanguageModelV3 } from "ai7/test";

const finish = (reason) => ({
  type: "finish",
  finishReason: { unified: reason, raw: reason },
  usage: { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } },
});

function chunks(prompt) {
  const last = prompt.at(-1);
  if (last.role !== "tool") {
    return [
      { type: "text-start", id: "t" },
      { type: "text-delta", id: "t", delta: "Deploying prod. " },
      { type: "text-end", id: "t" },
      { type: "tool-call", toolCallId: "call_deploy", toolName: "deploy", input: '{"target":"prod"}' },
      finish("tool-calls"),
    ];
  }
  const output = last.content[0].output;
  const said = output.type === "error-text" ? "Not deployed." : `Done: ${output.value}.`;
  return [{ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: said }, { type: "text-end", id: "t" }, finish("stop")];
}

export function openai(modelId) {
  return new MockLanguageModelV3({
    modelId,
    doStream: async ({ prompt }) => ({
      stream: new ReadableStream({
        start(c) {
          for (const chunk of chunks(prompt)) c.enqueue(chunk);
          c.close();
        },
      }),
    }),
  });
}
export const createOpenAI = () => openai;
