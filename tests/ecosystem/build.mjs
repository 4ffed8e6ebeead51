// Builds the test pages with esbuild against the built package (pkg/), the way an app would:
// the package is copied to dist/node_modules/turnstream and imported by name, so its `exports`
// map decides what `turnstream/ai-sdk` and `turnstream/react` are. React 18 pages alias
// react and react-dom to the npm aliases react18 and react-dom18.
import { build } from "esbuild";
import { cpSync, existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const PKG = join(HERE, "..", "..", "pkg");
export const DIST = join(HERE, "dist");

export async function buildPages() {
  if (!existsSync(join(PKG, "ai-sdk.js"))) throw new Error("pkg/ has no ai-sdk.js (./run pkg builds the package)");
  rmSync(DIST, { recursive: true, force: true });
  mkdirSync(join(DIST, "node_modules"), { recursive: true });
  cpSync(PKG, join(DIST, "node_modules", "turnstream"), { recursive: true });
  // The glue loads its wasm from next to the script that imports it: next to each bundle.
  cpSync(join(PKG, "turnstream_bg.wasm"), join(DIST, "turnstream_bg.wasm"));
  // The TypeScript consumer is checked from here, where `turnstream` resolves like the pages'.
  cpSync(join(HERE, "types", "consumer.ts"), join(DIST, "consumer.ts"));
  const pages = [
    { name: "ai", entry: "pages/ai-chat.jsx", alias: {} },
    { name: "react19", entry: "pages/react-hook.jsx", alias: {} },
    { name: "react18", entry: "pages/react-hook.jsx", alias: { react: "react18", "react-dom": "react-dom18" } },
  ];
  for (const p of pages) {
    await build({
      entryPoints: [join(HERE, p.entry)],
      bundle: true,
      format: "esm",
      outfile: join(DIST, `${p.name}.js`),
      jsx: "automatic",
      // Development React: StrictMode mounts twice only there.
      define: { "process.env.NODE_ENV": '"development"' },
      alias: p.alias,
      nodePaths: [join(DIST, "node_modules")],
      absWorkingDir: HERE,
      logLevel: "warning",
    });
    writeFileSync(join(DIST, `${p.name}.html`),
      `<!doctype html><meta charset="utf-8"><title>${p.name}</title><div id="root"></div><script type="module" src="./${p.name}.js"></script>\n`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildPages();
