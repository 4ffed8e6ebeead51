// Driving the useChat page (pages/ai-chat.jsx, built as ai5.html, ai6.html and ai7.html) and
// reading what it shows.
import { assert, until } from "../support.mjs";

/**
 * Opens `ai<major>.html` for `session`; `options` become its query (resume, initial, watch: 1
 * when true; wait: a number). Resolves once useChat rendered.
 */
export async function openChat(context, server, session, { major = 5, ...options } = {}) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`  [page error] ${e.message}`));
  await page.goto(chatUrl(server, session, major, options));
  await until("useChat to render", () => page.evaluate(() => !!window.view));
  return page;
}

export function chatUrl(server, session, major, options = {}) {
  const q = new URLSearchParams({ session });
  for (const [k, v] of Object.entries(options)) if (v !== false && v != null) q.set(k, v === true ? "1" : String(v));
  return `${server.url}/ai${major}.html?${q}`;
}

export const chatView = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.view)));
export const requests = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.requests)));
export const turnOf = (message) => message.id.replace(/^turn:/, "");
/** A UI message part, with the fields the suites check (useChat adds bookkeeping of its own). */
export const part = (p) => p.type === "text" || p.type === "reasoning"
  ? { type: p.type, text: p.text, state: p.state }
  : p.type === "file"
    ? { type: p.type, mediaType: p.mediaType, filename: p.filename, url: p.url }
    : { type: p.type, toolCallId: p.toolCallId, state: p.state, input: p.input, output: p.output, errorText: p.errorText, providerExecuted: p.providerExecuted };
export const parts = (m) => m.parts.map(part);
export const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
export const chunkTypes = (chunks) => chunks.map((c) => c.type).filter((t, i, a) => !(t.endsWith("-delta") && a[i - 1] === t));

/** The messages as [role, text] pairs. */
export const texts = (messages) => messages.map((m) => [m.role, textOf(m)]);

/**
 * Every messages array the page rendered showed each message once: no id twice, no two
 * messages with the same role and (non-empty) text, and never more replies than messages (a
 * reply shown twice under two ids). With `grows`, also that a message's text only ever grew
 * (what a page that resumed nothing and stopped nothing shows: no account of a reply replaced
 * by one that is behind it).
 */
export async function assertNothingTwice(page, what, { grows = false } = {}) {
  const seen = await page.evaluate(() => window.seen);
  assert(seen.length > 0, `${what}: the page rendered`);
  const last = new Map();
  for (const [i, snapshot] of seen.entries()) {
    for (const m of grows ? snapshot : []) {
      const before = last.get(m.id) ?? "";
      assert(m.text.startsWith(before), `${what}: render ${i}: ${m.id} went from "…${before.slice(-40)}" to "…${m.text.slice(-40)}"`);
      last.set(m.id, m.text);
    }
    const ids = new Set();
    const bodies = new Set();
    for (const m of snapshot) {
      assert(!ids.has(m.id), `${what}: render ${i} shows ${m.id} twice: ${JSON.stringify(snapshot)}`);
      ids.add(m.id);
      const body = `${m.role}:${m.text}`;
      assert(!m.text || !bodies.has(body), `${what}: render ${i} shows "${m.text.slice(0, 60)}" twice: ${JSON.stringify(snapshot).slice(0, 600)}`);
      bodies.add(body);
    }
    const count = (role) => snapshot.filter((m) => m.role === role).length;
    assert(count("assistant") <= count("user"), `${what}: render ${i} shows more replies than messages: ${JSON.stringify(snapshot).slice(0, 600)}`);
  }
  return seen.length;
}
