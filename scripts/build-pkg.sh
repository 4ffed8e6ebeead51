#!/usr/bin/env bash
# Builds the npm package `turnstream` into pkg/ (not committed): the release wasm of
# client-wasm, its JS glue and TypeScript types from wasm-bindgen (--target web), a shrink by
# wasm-opt when a working one is installed, the plain-JS subpath exports from client-js/
# (turnstream/ai-sdk, turnstream/react) and pkg/package.json. Prints the gzipped sizes.
#
# Needs: the wasm32-unknown-unknown target, wasm-bindgen-cli at exactly the version of the
# `wasm-bindgen` crate in Cargo.lock, node (to trim the glue, shorten the names of the wasm's
# imports in it and in the wasm (scripts/short-imports.mjs), and write package.json).
# `./run setup` installs them.
# Optional: wasm-opt from the npm package binaryen (>= 116; Debian's binaryen 108 produces
# modules Chromium refuses). Looked for in $WASM_OPT, target/binaryen (where
# `npm i --prefix target/binaryen binaryen@132` puts it), ./node_modules/.bin, then npm's global
# prefix; set TURNSTREAM_NO_WASM_OPT=1 to skip it. It saves about 4% gzipped.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=pkg
NAME=turnstream
CRATE=turnstream-client
ARTIFACT=target/wasm32-unknown-unknown/release/turnstream_client.wasm

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'build-pkg: %s\n' "$*" >&2; exit 1; }

command -v wasm-bindgen >/dev/null || die "wasm-bindgen not found (./run setup installs it)"
command -v node >/dev/null || die "node not found (needed to write package.json)"
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version | awk '{print $2}')
[ -n "$want" ] || die "wasm-bindgen is not in Cargo.lock"
[ "$want" = "$have" ] || die "wasm-bindgen CLI is $have but Cargo.lock has $want (cargo install wasm-bindgen-cli --version $want)"

log "cargo build --release --target wasm32-unknown-unknown -p $CRATE"
# Size over speed for the browser bundle; these apply to this build only, not the server's.
CARGO_PROFILE_RELEASE_OPT_LEVEL=z \
CARGO_PROFILE_RELEASE_LTO=true \
CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
CARGO_PROFILE_RELEASE_DEBUG=false \
  cargo build --release --target wasm32-unknown-unknown -p "$CRATE"

find_wasm_opt() {
  local c
  for c in "${WASM_OPT:-}" target/binaryen/node_modules/.bin/wasm-opt ./node_modules/.bin/wasm-opt \
    "$(npm prefix -g 2>/dev/null)/bin/wasm-opt"; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    local v
    v=$("$c" --version 2>/dev/null | sed -n 's/.*version \([0-9]*\).*/\1/p')
    if [ -n "$v" ] && [ "$v" -ge 116 ]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

opt=
if [ "${TURNSTREAM_NO_WASM_OPT:-}" != 1 ]; then
  opt=$(find_wasm_opt) || opt=
fi

log "wasm-bindgen --target web"
rm -rf "$OUT"
# Function names only help reading a panic's stack trace; TURNSTREAM_KEEP_NAMES=1 keeps them.
# With wasm-opt they stay until it has ordered the functions by them (below), then go.
strip=(--remove-name-section --remove-producers-section)
[ "${TURNSTREAM_KEEP_NAMES:-}" = 1 ] || [ -n "$opt" ] && strip=()
wasm-bindgen --target web --out-dir "$OUT" --out-name "$NAME" "${strip[@]}" "$ARTIFACT"
# The glue repeats each method's doc comment, which turnstream.d.ts already carries (editors and
# TypeScript read that file); drop the copies from the JS that is downloaded.
node -e 'const fs=require("fs"),f=process.argv[1];fs.writeFileSync(f,fs.readFileSync(f,"utf8").replace(/^[ \t]*\/\*\*[^]*?\*\/\n/gm,""))' "$OUT/$NAME.js"


wasm="$OUT/${NAME}_bg.wasm"
if [ "${TURNSTREAM_NO_WASM_OPT:-}" = 1 ]; then
  log "wasm-opt skipped (TURNSTREAM_NO_WASM_OPT=1)"
elif [ -n "$opt" ]; then
  # What users download is gzipped, and LLVM's code can compress better than wasm-opt's even
  # when it is larger: of the original and each pass list, keep the smallest on the wire.
  # -ocimfs 20: inline a function into its only caller only when it is small. LLVM has already
  # inlined what pays; merging large bodies into the async state machines makes each one
  # unique, which costs gzip more than the calls it saves (about 4% of the wasm here).
  # --reorder-functions-by-name last, after scripts/order-names.mjs named the functions for it:
  # functions of one signature, and of one module or one generic, sit together, where gzip's
  # window finds what they share (about 1.4 KB of the gzipped wasm); the names go after that
  # (--strip-debug), unless TURNSTREAM_KEEP_NAMES=1.
  features=(--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
    --enable-mutable-globals --enable-reference-types --enable-multivalue)
  inline=(--one-caller-inline-max-function-size 20)
  strip=(--strip-debug --strip-producers)
  [ "${TURNSTREAM_KEEP_NAMES:-}" = 1 ] && strip=(--debuginfo --strip-producers)
  mv "$wasm" "$wasm.orig"
  # --low-memory-unused (0.17 KB): wasm-opt may then fold `p + c` into a load's or store's
  # offset, which differs only where the sum wraps to an address below 1 KB. Rust's pointer
  # arithmetic never wraps, and wasm-ld's layout for this target puts the stack below 1 MB
  # (growing down) and the data and heap above it; checked here: no data segment below 1 MB.
  low=$("$opt" "${features[@]}" --print "$wasm.orig" |
    awk '/^ \(data / && match($0, /i32\.const [0-9]+/) { v = substr($0, RSTART + 10, RLENGTH - 10) + 0; if (min == "" || v < min) min = v } END { print min }')
  [ -n "$low" ] && [ "$low" -ge 1048576 ] && inline+=(--low-memory-unused)
  "$opt" "${strip[@]}" "${features[@]}" "$wasm.orig" -o "$wasm"
  node scripts/order-names.mjs "$wasm.orig"
  best=$(gzip -9 -c "$wasm" | wc -c)
  log "wasm-opt ($("$opt" --version)); without it: $best bytes gzipped"
  for level in -Oz -Os; do
    "$opt" "$level" --converge "${inline[@]}" --reorder-functions-by-name "${strip[@]}" "${features[@]}" "$wasm.orig" -o "$wasm.opt"
    size=$(gzip -9 -c "$wasm.opt" | wc -c)
    log "wasm-opt $level --converge: $size bytes gzipped"
    if [ "$size" -lt "$best" ]; then
      best=$size
      mv "$wasm.opt" "$wasm"
    fi
  done
  rm -f "$wasm.opt" "$wasm.orig"
else
  log "wasm-opt skipped: no binaryen >= 116 found (npm i binaryen@132 installs one)"
fi

log "short import names"
node scripts/short-imports.mjs "$wasm" "$OUT/$NAME.js" "$OUT/${NAME}_bg.wasm.d.ts"

log "subpath exports (client-js/: ai-sdk, react)"
for sub in ai-sdk react; do
  cp "client-js/$sub.js" "client-js/$sub.d.ts" "$OUT/"
done

log "pkg/package.json"
version=$(cargo metadata --no-deps --format-version 1 |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s).packages.find(p=>p.name===process.argv[1]);process.stdout.write(p.version)})' "$CRATE")
node - "$OUT/package.json" "$version" <<'JS'
const fs = require("fs");
const [file, version] = process.argv.slice(2);
const pkg = {
  name: "turnstream",
  version,
  description: "Durable, resumable realtime chat view for turnstream servers (Rust/WASM).",
  license: "MIT OR Apache-2.0",
  repository: { type: "git", url: "https://github.com/turnstream/turnstream" },
  type: "module",
  main: "./turnstream.js",
  module: "./turnstream.js",
  types: "./turnstream.d.ts",
  exports: {
    ".": { types: "./turnstream.d.ts", import: "./turnstream.js", default: "./turnstream.js" },
    "./ai-sdk": { types: "./ai-sdk.d.ts", import: "./ai-sdk.js", default: "./ai-sdk.js" },
    "./react": { types: "./react.d.ts", import: "./react.js", default: "./react.js" },
    "./turnstream_bg.wasm": "./turnstream_bg.wasm",
    "./package.json": "./package.json",
  },
  files: ["turnstream.js", "turnstream.d.ts", "turnstream_bg.wasm", "turnstream_bg.wasm.d.ts",
    "ai-sdk.js", "ai-sdk.d.ts", "react.js", "react.d.ts"],
  // turnstream/react imports react; turnstream/ai-sdk imports nothing of `ai` at runtime (its
  // types do). Neither is needed by the main entry.
  peerDependencies: { react: ">=18", ai: ">=5" },
  peerDependenciesMeta: { react: { optional: true }, ai: { optional: true } },
  sideEffects: false,
  keywords: ["chat", "sse", "eventsource", "streaming", "llm", "wasm"],
};
fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
JS
rm -f "$OUT/.gitignore"

gz() { gzip -9 -c "$1" | wc -c | tr -d ' '; }
wasm_gz=$(gz "$wasm")
js_gz=$(gz "$OUT/$NAME.js")
printf 'pkg/%s_bg.wasm: %s bytes (%s gzipped)\n' "$NAME" "$(wc -c <"$wasm" | tr -d ' ')" "$wasm_gz"
printf 'pkg/%s.js:      %s bytes (%s gzipped)\n' "$NAME" "$(wc -c <"$OUT/$NAME.js" | tr -d ' ')" "$js_gz"
printf 'total gzipped:  %s bytes\n' "$((wasm_gz + js_gz))"
for sub in ai-sdk react; do
  # Plain JS over the above: an app that imports turnstream/<sub> downloads it on top.
  printf '%-24s%s bytes (%s gzipped): turnstream/%s\n' "pkg/$sub.js:" \
    "$(wc -c <"$OUT/$sub.js" | tr -d ' ')" "$(gz "$OUT/$sub.js")" "$sub"
done
