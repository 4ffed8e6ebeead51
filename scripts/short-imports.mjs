// Drops the hash wasm-bindgen appends to each imported JS function's name
// (`__wbg_fetch_0123456789abcdef` -> `fetch`), in the wasm's import section and in the glue
// that provides them, and names the exported closure shims `invoke_1`, `invoke_2`, ... instead
// of `wasm_bindgen__convert__closures_____invoke__h<hash>` (in the wasm, the glue and the
// wasm's .d.ts). The hashes keep names of different crates apart while wasm-bindgen links them;
// in the finished package the names only have to be unique, and 90 random hex suffixes are
// about 2.5 KB of the gzipped download.
//
// Usage: node scripts/short-imports.mjs pkg/turnstream_bg.wasm pkg/turnstream.js [pkg/turnstream_bg.wasm.d.ts]
import { readFileSync, writeFileSync } from "node:fs";
import { leb, readName, skipImportDesc, str, uleb } from "./wasm-binary.mjs";

const [wasmFile, jsFile, dtsFile] = process.argv.slice(2);
const wasm = readFileSync(wasmFile);
let js = readFileSync(jsFile, "utf8");
let dts = dtsFile ? readFileSync(dtsFile, "utf8") : "";


const parts = [wasm.subarray(0, 8)];
const renamed = new Map();
const exported = new Map();
const taken = new Set();
let at = 8;
while (at < wasm.length) {
  const id = wasm[at];
  let [size, start] = leb(wasm, at + 1);
  const end = start + size;
  if (id === 7) {
    // The export section: (name, kind, index) for each export.
    let [count, p] = leb(wasm, start);
    const entries = [];
    for (let i = 0; i < count; i++) {
      let name;
      [name, p] = readName(wasm, p);
      const descStart = p;
      [, p] = leb(wasm, p + 1);
      if (/^wasm_bindgen__convert__closures_____invoke__h[0-9a-f]{16}(_\d+)?$/.test(name)) {
        const short = `invoke_${exported.size + 1}`;
        exported.set(name, short);
        name = short;
      }
      entries.push(str(name), wasm.subarray(descStart, p));
    }
    const body = Buffer.concat([uleb(count), ...entries]);
    parts.push(Buffer.from([7]), uleb(body.length), body);
    at = end;
    continue;
  }
  if (id !== 2) {
    parts.push(wasm.subarray(at, end));
    at = end;
    continue;
  }
  // The import section: (module, name, description) for each import.
  let [count, p] = leb(wasm, start);
  const entries = [];
  for (let i = 0; i < count; i++) {
    let module, name;
    [module, p] = readName(wasm, p);
    [name, p] = readName(wasm, p);
    const descStart = p;
    [, p] = skipImportDesc(wasm, p);
    entries.push({ module, name, desc: wasm.subarray(descStart, p) });
  }
  for (const e of entries) taken.add(e.name);
  for (const e of entries) {
    const m = /^__wbg_(.+)_[0-9a-f]{16}$/.exec(e.name);
    if (!m) continue;
    let short = m[1];
    for (let n = 1; taken.has(short) || short === "__proto__"; n++) short = `${m[1]}_${n}`;
    taken.add(short);
    renamed.set(e.name, short);
    e.name = short;
  }
  const body = Buffer.concat([
    uleb(count),
    ...entries.flatMap((e) => [str(e.module), str(e.name), e.desc]),
  ]);
  parts.push(Buffer.from([2]), uleb(body.length), body);
  at = end;
}

for (const [long, short] of renamed) {
  const uses = js.split(long).length - 1;
  if (uses !== 1) throw new Error(`short-imports: ${long} is in the glue ${uses} times, not once`);
  js = js.replace(long, short);
}
if (/\binvoke_\d/.test(js)) throw new Error("short-imports: the glue has an invoke_<n> of its own");
for (const [long, short] of exported) {
  // Whole words: one shim's name can begin another's (`..._h<hash>` and `..._h<hash>_16`).
  const word = new RegExp(`\\b${long}\\b`, "g");
  if (!word.test(js)) throw new Error(`short-imports: ${long} is not in the glue`);
  js = js.replace(word, short);
  dts = dts.replace(word, short);
}
writeFileSync(wasmFile, Buffer.concat(parts));
writeFileSync(jsFile, js);
if (dtsFile) writeFileSync(dtsFile, dts);
console.error(`short-imports: ${renamed.size} imports and ${exported.size} exports renamed`);
