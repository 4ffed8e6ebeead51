// Module resolution hooks (see register.mjs): the user's `ai`, `zod` and provider imports.
const here = new URL("./", import.meta.url);
const PROVIDERS = ["@ai-sdk/openai"];

export async function resolve(specifier, context, next) {
  if (PROVIDERS.includes(specifier)) return { url: new URL("mock-provider.mjs", here).href, shortCircuit: true };
  if (specifier === "ai") return next("ai7", { ...context, parentURL: here.href });
  if (specifier === "zod") return next("zod", { ...context, parentURL: here.href });
  return next(specifier, context);
}
