#!/usr/bin/env bash
# Runs the SDK's browser tests (client-wasm/tests/browser.rs, wasm-bindgen-test in headless
# Chromium) against a real turnstream server: builds the server, starts it on a free port with a
# temporary database, passes its URL to the tests at compile time, stops it afterwards.
#
# Needs: the wasm32-unknown-unknown target, wasm-bindgen-cli (its wasm-bindgen-test-runner),
# chromium and chromedriver, node (to read the server's address). `./run setup` installs them.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'test-browser: %s\n' "$*" >&2; exit 1; }
command -v wasm-bindgen-test-runner >/dev/null || die "wasm-bindgen-test-runner not found (./run setup)"
command -v chromedriver >/dev/null || die "chromedriver not found (./run setup)"
command -v node >/dev/null || die "node not found"

cargo build -p turnstream-server
bin=target/debug/turnstream
[ -x "$bin" ] || die "$bin was not built"

tmp=$(mktemp -d)
server_pid=""
proxy_pid=""
cleanup() {
  for pid in "$proxy_pid" "$server_pid"; do
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# Prints the URL a process announces with `listening on http://ADDR` on its stdout file.
wait_for_listening() {
  node -e '
const fs = require("fs");
const [file, pid] = process.argv.slice(1);
const deadline = Date.now() + 30000;
(function poll() {
  const m = fs.existsSync(file) && /listening on (http:\/\/\S+)/.exec(fs.readFileSync(file, "utf8"));
  if (m) { console.log(m[1]); process.exit(0); }
  try { process.kill(Number(pid), 0); } catch { console.error("it exited"); process.exit(1); }
  if (Date.now() > deadline) { console.error("it did not say where it listens"); process.exit(1); }
  setTimeout(poll, 50);
})();' "$1" "$2"
}

# Port 0: the server binds a free port and prints `turnstream listening on http://ADDR` first.
"$bin" serve --listen 127.0.0.1:0 --db "$tmp/ts.db" --cors-origin '*' --demo-delay-ms 5 \
  >"$tmp/server.out" 2>"$tmp/server.log" &
server_pid=$!

url=$(wait_for_listening "$tmp/server.out" "$server_pid") || { cat "$tmp/server.log" >&2; die "the server did not start"; }
echo "test-browser: server at $url" >&2

# A proxy the tests can take down and bring back (offline outbox, dropped streams).
node client-wasm/tests/flaky-proxy.mjs "$url" >"$tmp/proxy.out" 2>&1 &
proxy_pid=$!
proxy_url=$(wait_for_listening "$tmp/proxy.out" "$proxy_pid") || { cat "$tmp/proxy.out" >&2; die "the proxy did not start"; }

export TURNSTREAM_TEST_URL="$url"
export TURNSTREAM_TEST_PROXY_URL="$proxy_url"
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
export CHROMEDRIVER="${CHROMEDRIVER:-$(command -v chromedriver)}"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-120}"
status=0
cargo test --target wasm32-unknown-unknown -p turnstream-client "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "--- server log (last 50 lines) ---" >&2
  tail -n 50 "$tmp/server.log" >&2
fi
exit "$status"
