// Harness for Vercel's `resumable-stream`, started by turnstream-bench (figures 2-4 and 6).
//
// One Node process on Redis (REDIS_URL), shaped like a chat backend: a producer stream per
// stream id whose chunks the bench pushes over HTTP, and readers that attach through
// `resumeExistingStream` with a character offset, exactly as the package's README does.
//
//   POST /streams/:id/start    creates the resumable stream (its producer side)
//   POST /streams/:id/append   body = one chunk (an SSE frame the bench formatted); replies the
//                              stream's length in characters after it
//   POST /streams/:id/end      ends the stream
//   GET  /streams/:id/length   characters produced so far
//   GET  /streams/:id?resumeAt=N   a reader: every chunk from character N on, then live
import http from "node:http";
import { createResumableStreamContext } from "resumable-stream";

const ctx = createResumableStreamContext({ waitUntil: null });
// Producer state per stream: the controller the bench's appends feed, and the length so far.
const producers = new Map();

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    req.on("data", (c) => parts.push(c));
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    req.on("error", reject);
  });
}

async function start(id) {
  if (producers.has(id)) return;
  const p = { controller: null, length: 0 };
  producers.set(id, p);
  const stream = await ctx.createNewResumableStream(id, () =>
    new ReadableStream({ start(c) { p.controller = c; } }),
  );
  // The producer's own copy is what the first request would have received; drain it so the
  // stream keeps flowing with no reader attached to it.
  if (stream) {
    const reader = stream.getReader();
    (async () => { while (!(await reader.read()).done) {} })().catch(() => {});
  }
}

async function streamTo(res, id, resumeAt) {
  const stream = await ctx.resumeExistingStream(id, resumeAt);
  if (!stream) {
    res.writeHead(stream === null ? 422 : 404).end();
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.flushHeaders();
  const reader = stream.getReader();
  res.on("close", () => reader.cancel().catch(() => {}));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (value.length > 0) res.write(value);
    }
  } catch {}
  res.end();
}

const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, "http://x");
    const m = url.pathname.match(/^\/streams\/([^/]+)(?:\/(start|append|end|length))?$/);
    if (!m) return res.writeHead(404).end();
    const [, id, action] = m;
    if (req.method === "POST" && action === "start") {
      await start(id);
      return res.writeHead(204).end();
    }
    if (req.method === "POST" && action === "append") {
      const body = await readBody(req);
      const p = producers.get(id);
      if (!p || !p.controller) return res.writeHead(404).end();
      p.length += body.length;
      p.controller.enqueue(body);
      return res.writeHead(200).end(String(p.length));
    }
    if (req.method === "POST" && action === "end") {
      const p = producers.get(id);
      if (p && p.controller) p.controller.close();
      return res.writeHead(204).end();
    }
    if (req.method === "GET" && action === "length") {
      const p = producers.get(id);
      return res.writeHead(200).end(String(p ? p.length : 0));
    }
    if (req.method === "GET" && !action) {
      return await streamTo(res, id, Number(url.searchParams.get("resumeAt") || 0));
    }
    res.writeHead(405).end();
  } catch (e) {
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  console.log(`resumable-stream harness listening on http://127.0.0.1:${server.address().port}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
