// The AI SDK majors the adapter is tested on, as installed side by side in this folder (see
// package.json): each one's `streamText` and `tool`, its mock language model, and how that mock
// spells a stream's finish (V2: flat usage and a string reason; V3 and V4: nested ones).
import * as ai5 from "ai5";
import * as ai6 from "ai6";
import * as ai7 from "ai7";
import * as test5 from "ai5/test";
import * as test6 from "ai6/test";
import * as test7 from "ai7/test";
import { z } from "zod";

export { z };

const flat = (input, output) => ({
  finishReason: "stop",
  usage: { inputTokens: input, outputTokens: output, totalTokens: input + output },
});
const nested = (input, output) => ({
  finishReason: { unified: "stop", raw: "stop" },
  usage: {
    inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: output, text: output, reasoning: 0 },
  },
});

// ai 7 runs V3 models (what providers for ai 6 give) and its own V4 ones: both are tested.
export const MAJORS = [
  { name: "ai 5", id: "ai5", ai: ai5, Mock: test5.MockLanguageModelV2, finish: flat, approvals: false },
  { name: "ai 6", id: "ai6", ai: ai6, Mock: test6.MockLanguageModelV3, finish: nested, approvals: true },
  { name: "ai 7", id: "ai7", ai: ai7, Mock: test7.MockLanguageModelV3, finish: nested, approvals: true },
  { name: "ai 7, a V4 model", id: "ai7v4", ai: ai7, Mock: test7.MockLanguageModelV4, finish: nested, approvals: true },
];
