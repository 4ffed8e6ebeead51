// Builds the test pages with esbuild against the built package (pkg/), the way an app would:
// the package is copied to dist/node_modules/turnstream and imported by name, so its `exports`
// map decides what `turnstream/ai-sdk` and `turnstream/react` are. The useChat page is built once
// per AI SDK major, `@ai-sdk/react` aliased to that major's npm alias (ai-react5, -6, -7, each
// with the `ai` it depends on); React 18 pages alias react and react-dom to react18 and
// react-dom18.
import { build } from "esbuild";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const PKG = join(HERE, "..", "..", "pkg");
export const DIST = join(HERE, "dist");
/** The AI SDK majors the suite runs: `ai<major>` and `ai-react<major>` in package.json. */
export const AI_MAJORS = [5, 6, 7];

/**
 * The docs' snippets the suite runs as written: `<!-- snippet: name -->` before a jsx block,
 * built once per AI SDK major in `majors` (snippet-<name><major>.html) or once per React major
 * in `reacts` (snippet-<name><react>.html, e.g. snippet-recovered-react19.html).
 */
export const SNIPPETS = [
  { name: "docs", file: join(HERE, "..", "..", "docs", "sdk.md"), marker: "usechat-docs", majors: AI_MAJORS },
  { name: "readme", file: join(HERE, "..", "..", "README.md"), marker: "usechat-readme", majors: [AI_MAJORS.at(-1)] },
  { name: "recovered-usechat", file: join(HERE, "..", "..", "docs", "sdk.md"), marker: "recovered-usechat", majors: [AI_MAJORS.at(-1)] },
  { name: "recovered-react", file: join(HERE, "..", "..", "docs", "sdk.md"), marker: "recovered-react", reacts: [19, 18] },
];

/** The code of the jsx block after `<!-- snippet: marker -->` in a Markdown file. */
function snippetOf(file, marker) {
  const text = readFileSync(file, "utf8");
  const at = text.indexOf(`<!-- snippet: ${marker} -->`);
  const block = at < 0 ? null : /```jsx\n([\s\S]*?)\n```/.exec(text.slice(at));
  if (!block) throw new Error(`no jsx block after <!-- snippet: ${marker} --> in ${file}`);
  return block[1];
}

/** The version of the `ai` package that `ai-react<major>` (its `@ai-sdk/react`) imports. */
export function aiVersionOf(major) {
  const require = createRequire(join(HERE, "node_modules", `ai-react${major}`, "package.json"));
  let dir = dirname(require.resolve("ai"));
  while (!existsSync(join(dir, "package.json"))) dir = dirname(dir);
  return JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
}

export async function buildPages() {
  if (!existsSync(join(PKG, "ai-sdk.js"))) throw new Error("pkg/ has no ai-sdk.js (./run pkg builds the package)");
  rmSync(DIST, { recursive: true, force: true });
  mkdirSync(join(DIST, "node_modules"), { recursive: true });
  cpSync(PKG, join(DIST, "node_modules", "turnstream"), { recursive: true });
  // The glue loads its wasm from next to the script that imports it: next to each bundle.
  cpSync(join(PKG, "turnstream_bg.wasm"), join(DIST, "turnstream_bg.wasm"));
  // The TypeScript consumer is checked from here, where `turnstream` resolves like the pages',
  // once per major: `ai` and `@ai-sdk/react` mapped to that major's aliases, everywhere in the
  // program (the package's declarations and @ai-sdk/react's own import of `ai` included).
  cpSync(join(HERE, "types", "consumer.ts"), join(DIST, "consumer.ts"));
  for (const major of AI_MAJORS) {
    const modules = join(HERE, "node_modules");
    writeFileSync(join(DIST, `tsconfig.ai${major}.json`), JSON.stringify({
      compilerOptions: {
        noEmit: true, strict: true, target: "es2022", module: "esnext", moduleResolution: "bundler",
        lib: ["es2022", "dom", "dom.iterable", "esnext.disposable"], types: ["node", "react"],
        typeRoots: [join(modules, "@types")],
        paths: { ai: [join(modules, `ai${major}`)], "@ai-sdk/react": [join(modules, `ai-react${major}`)] },
      },
      files: ["consumer.ts"],
    }, null, 2));
  }
  const pages = [
    ...AI_MAJORS.map((major) => ({
      name: `ai${major}`, entry: "pages/ai-chat.jsx", alias: { "@ai-sdk/react": `ai-react${major}`, "ai-helpers": `ai${major}` },
      define: { __AI_VERSION__: JSON.stringify(aiVersionOf(major)) },
    })),
    ...SNIPPETS.flatMap((sn) => (sn.majors ?? []).map((major) => ({
      name: `snippet-${sn.name}${major}`, entry: "pages/snippet.jsx",
      alias: { "@ai-sdk/react": `ai-react${major}`, snippet: `./dist/snippets/${sn.name}.jsx` },
      inject: [join(HERE, "pages", "snippet-globals.js")],
    }))),
    ...SNIPPETS.flatMap((sn) => (sn.reacts ?? []).map((react) => ({
      name: `snippet-${sn.name}${react}`, entry: "pages/snippet.jsx",
      alias: { snippet: `./dist/snippets/${sn.name}.jsx`, ...(react === 18 ? { react: "react18", "react-dom": "react-dom18" } : {}) },
      inject: [join(HERE, "pages", "snippet-globals.js")],
    }))),
    { name: "react19", entry: "pages/react-hook.jsx", alias: {} },
    { name: "react18", entry: "pages/react-hook.jsx", alias: { react: "react18", "react-dom": "react-dom18" } },
  ];
  mkdirSync(join(DIST, "snippets"));
  for (const sn of SNIPPETS) writeFileSync(join(DIST, "snippets", `${sn.name}.jsx`), snippetOf(sn.file, sn.marker));
  for (const p of pages) {
    await build({
      entryPoints: [join(HERE, p.entry)],
      bundle: true,
      format: "esm",
      outfile: join(DIST, `${p.name}.js`),
      jsx: "automatic",
      // Development React: StrictMode mounts twice only there.
      define: { "process.env.NODE_ENV": '"development"', ...p.define },
      alias: p.alias,
      inject: p.inject,
      nodePaths: [join(DIST, "node_modules")],
      absWorkingDir: HERE,
      logLevel: "warning",
    });
    writeFileSync(join(DIST, `${p.name}.html`),
      `<!doctype html><meta charset="utf-8"><title>${p.name}</title><div id="root"></div><script type="module" src="./${p.name}.js"></script>\n`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildPages();
