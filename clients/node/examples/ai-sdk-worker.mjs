// A turnstream worker that is an AI SDK agent: a model from a provider package (here
// @ai-sdk/openai; any provider works), a system prompt, a tool that needs the user's approval
// and a tool the browser runs. Needs `npm i ai @ai-sdk/openai zod` beside turnstream-worker.
//
//   TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=... OPENAI_API_KEY=... \
//   OPENAI_MODEL=gpt-4o-mini node examples/ai-sdk-worker.mjs
import { openai } from "@ai-sdk/openai";
import { tool } from "ai";
import { z } from "zod";
import { WorkerClient, runWorker } from "../src/index.js";
import { aiSdkAgent } from "../src/ai-sdk.js";

export const agent = aiSdkAgent({
  model: openai(process.env.OPENAI_MODEL ?? "gpt-4o-mini"), // reads OPENAI_API_KEY
  system: "You are a concise assistant. Deploy only when asked to.",
  maxSteps: 5,
  tools: {
    deploy: tool({
      description: "Deploys a target (prod, staging).",
      inputSchema: z.object({ target: z.string() }),
      needsApproval: true, // the user says yes or no first (ai 6 and 7)
      execute: async ({ target }) => `${target} is live`,
    }),
    get_location: tool({
      description: "Where the user is; the browser answers.",
      inputSchema: z.object({}),
    }),
  },
});

if (import.meta.url === `file://${process.argv[1]}`) {
  const client = new WorkerClient({
    baseUrl: process.env.TURNSTREAM_URL ?? "http://127.0.0.1:8080",
    serviceKey: process.env.TURNSTREAM_SERVICE_KEY,
    workerId: process.env.TURNSTREAM_WORKER_ID,
  });
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  process.once("SIGTERM", () => stop.abort());
  await runWorker(client, agent, { signal: stop.signal });
}
