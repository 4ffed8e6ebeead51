// An OpenAI-compatible chat completions endpoint in the test process (the only fake the suites
// use: it stands for an LLM API). It streams a reply chosen by the last user message's text and
// keeps every request body, so a test can read what the server sent upstream.
//   /deltas N   N deltas "x1 " .. "xN ", one every DELTA_MS
//   anything    reasoning, then "You said: <text>" word by word
import { createServer } from "node:http";

/** Pause between two deltas: a reply of /deltas 300 streams for about 6 s. */
export const DELTA_MS = 20;

export const youSaid = (text) => `You said: ${text}`;
const REASONING = ["Reading ", "the ", "message."];

export class FakeUpstream {
  /** Every request body, in arrival order. */
  requests = [];

  async start() {
    this.server = createServer((req, res) => this.#answer(req, res));
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}/v1`;
    return this;
  }

  async stop() {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** The request whose last message's text includes `text`. */
  requestFor(text) {
    return this.requests.find((b) => textOf(b.messages.at(-1)).includes(text));
  }

  async #answer(req, res) {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404).end();
      return;
    }
    const body = JSON.parse(raw);
    this.requests.push(body);
    const text = textOf(body.messages.at(-1));
    const m = /^\/deltas (\d+)$/.exec(text.trim());
    const frames = m
      ? Array.from({ length: Number(m[1]) }, (_, i) => ({ content: `x${i + 1} ` }))
      : [...REASONING.map((r) => ({ reasoning_content: r })), ...youSaid(text).split(/(?<= )/).map((w) => ({ content: w }))];
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    let gone = false;
    res.on("close", () => (gone = true));
    const send = (choice) => res.write(`data: ${JSON.stringify({ id: "fake", object: "chat.completion.chunk", model: body.model, choices: [{ index: 0, ...choice }] })}\n\n`);
    for (const delta of frames) {
      if (gone) return;
      send({ delta, finish_reason: null });
      await new Promise((r) => setTimeout(r, DELTA_MS));
    }
    send({ delta: {}, finish_reason: "stop" });
    res.end("data: [DONE]\n\n");
  }
}

/** A chat message's text: its content, or the text parts of a content array. */
function textOf(message) {
  const c = message?.content;
  if (typeof c === "string") return c;
  return (c ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
}
