// Loaded with `node --import` by the tests that run the README's AI SDK agent and the example
// as written: `ai` and `zod` resolve to this folder's ai 7 and zod, and the provider package to
// a mock provider (mock-provider.mjs), so the agent runs offline.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
