// The demo page: renders what the turnstream SDK knows, nothing more. All durability (history,
// resume, snapshot, outbox, recovery, tabs) lives in the SDK.
import init, { ChatClient } from "turnstream";

const params = new URLSearchParams(location.search);
let sessionId = params.get("session");
if (!sessionId) {
  sessionId = "s-" + crypto.randomUUID().slice(0, 8);
  params.set("session", sessionId);
  history.replaceState(null, "", "?" + params.toString());
}
document.getElementById("session").textContent = sessionId;
document.getElementById("newSession").href = "?session=s-" + crypto.randomUUID().slice(0, 8);

const log = document.getElementById("log");
const input = document.getElementById("input");
const els = new Map(); // entry key -> element

const STATUS_LABEL = {
  sending: "sending…", sent: "", rejected: "not sent",
  queued: "queued", streaming: "", waiting: "waiting for you", complete: "",
  cancelled: "cancelled", failed: "failed", interrupted: "interrupted",
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Sets an element's text; a streamed reply usually only grows, so append just the new part. */
const shownText = new WeakMap(); // element -> the text it shows (cheaper than reading it back)
function setText(node, text) {
  const prev = shownText.get(node) ?? node.textContent;
  if (prev === text) return;
  const last = node.lastChild;
  if (last && last.nodeType === Node.TEXT_NODE && node.childNodes.length === 1 && text.startsWith(prev)) {
    last.appendData(text.slice(prev.length));
  } else {
    node.textContent = text;
  }
  shownText.set(node, text);
}

function bubble(entry) {
  const b = el("article", "msg");
  b.dataset.testid = "message";
  b.dataset.key = entry.key;
  if (entry.role === "assistant") {
    const thinking = el("details", "thinking");
    thinking.dataset.testid = "thinking";
    const summary = el("summary", "", "thinking");
    // Once the user opens or closes it, the page stops folding it by itself.
    summary.addEventListener("click", () => { thinking.dataset.userToggled = "1"; });
    thinking.append(summary, el("div", "thinking-text"));
    const tools = el("ul", "tools");
    const actions = el("div", "actions");
    const cancel = el("button", "cancel", "Cancel");
    cancel.type = "button";
    cancel.dataset.testid = "cancel";
    cancel.addEventListener("click", () => {
      cancel.disabled = true;
      chat.cancel(b.dataset.turnId).catch((e) => console.warn("cancel failed", e));
    });
    actions.append(cancel);
    const requests = el("div", "requests");
    b.append(thinking, tools);
    b.append(el("div", "text"), requests, metaLine(true), actions);
  } else {
    b.append(el("div", "text"), metaLine(false));
  }
  b.append(versionBar(b));
  return b;
}

/** A bubble's status line; a reply's also has room for the quiet "recovered" mark. */
function metaLine(reply) {
  const meta = el("div", "meta");
  meta.append(el("span", "meta-status"));
  if (reply) {
    const mark = el("span", "recovered", "recovered");
    mark.dataset.testid = "recovered";
    mark.title = "Finished while no page was open: shown from the server, without its new-reply cue";
    mark.hidden = true;
    meta.append(mark);
  }
  return meta;
}

// ----- versions: edit a message, regenerate a reply, switch between them -----

function button(cls, text, testid, onClick) {
  const e = el("button", cls, text);
  e.type = "button";
  e.dataset.testid = testid;
  e.addEventListener("click", onClick);
  return e;
}

/** `‹ i/n ›` when an entry has other versions, and Edit (user) or Regenerate (reply). */
function versionBar(b) {
  const bar = el("div", "versions");
  const key = () => b.dataset.key;
  const index = () => Number(b.dataset.branchIndex || 0);
  const prev = button("branch-prev", "‹", "branch-prev", () => switchTo(key(), index() - 1));
  const next = button("branch-next", "›", "branch-next", () => switchTo(key(), index() + 1));
  const where = el("span", "branch", "");
  where.dataset.testid = "branch";
  const edit = button("edit", "Edit", "edit", () => startEdit(b));
  const again = button("regenerate", "Regenerate", "regenerate", () => {
    try {
      chat.regenerate(key()); // queued in this tab, posted once (throws for an unknown key)
    } catch (e) {
      console.warn("regenerate failed", e);
    }
  });
  bar.append(prev, where, next, edit, again);
  return bar;
}

function switchTo(key, index) {
  try {
    chat.switchBranch(key, index);
  } catch (e) {
    console.warn("switch failed", e);
  }
}

function startEdit(b) {
  const text = b.querySelector(".text");
  const form = el("form", "edit-form");
  const box = el("textarea");
  box.value = text.textContent;
  box.dataset.testid = "edit-input";
  form.append(box, el("button", "", "Save"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = box.value.trim();
    form.remove();
    if (value) chat.edit(b.dataset.key, value).catch((e) => console.warn("edit failed", e));
  });
  box.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") form.remove();
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); form.requestSubmit(); }
  });
  b.querySelector(".versions").before(form);
  box.focus();
}

function updateVersions(b, entry) {
  const bar = b.querySelector(".versions");
  const { index, count } = entry.branch || { index: 0, count: 1 };
  b.dataset.branchIndex = String(index);
  const several = count > 1;
  bar.querySelector(".branch").textContent = several ? `${index + 1}/${count}` : "";
  bar.querySelector(".branch-prev").hidden = !several;
  bar.querySelector(".branch-next").hidden = !several;
  bar.querySelector(".branch-prev").disabled = index === 0;
  bar.querySelector(".branch-next").disabled = index === count - 1;
  const ended = ["complete", "cancelled", "failed", "interrupted"].includes(entry.status);
  bar.querySelector(".edit").hidden = !(entry.role === "user" && entry.messageId);
  bar.querySelector(".regenerate").hidden = !(entry.role === "assistant" && ended);
}

function update(b, entry) {
  updateVersions(b, entry);
  b.dataset.role = entry.role;
  b.dataset.status = entry.status;
  b.dataset.turnId = entry.turnId || "";
  b.dataset.recovered = entry.recovered ? "true" : "false";
  setText(b.querySelector(".text"), entry.content);
  const live = entry.role === "assistant" &&
    (entry.status === "queued" || entry.status === "streaming" || entry.status === "waiting");
  let meta = STATUS_LABEL[entry.status] ?? entry.status;
  // Waiting only on calls of other agents: on them, not on you.
  const open = (entry.requests || []).filter((r) => !r.answer);
  if (entry.status === "waiting" && open.length && open.every((r) => r.call)) meta = "waiting for " + open.map((r) => r.call.agent).join(", ");
  if (entry.error && entry.error.message) meta += (meta ? ": " : "") + entry.error.message;
  b.querySelector(".meta-status").textContent = meta;
  b.querySelector(".meta").hidden = !meta && !entry.recovered;
  if (entry.role !== "assistant") return;
  b.querySelector(".recovered").hidden = !entry.recovered;
  b.classList.toggle("live", live);
  const thinking = b.querySelector(".thinking");
  thinking.hidden = !entry.thinking;
  setText(thinking.querySelector(".thinking-text"), entry.thinking || "");
  // Thinking is open while the turn streams and folds away when it ends, unless the user chose.
  if (!thinking.dataset.userToggled) thinking.open = live && !entry.content;
  const tools = b.querySelector(".tools");
  tools.replaceChildren(...(entry.tools || []).map((t) => {
    const li = el("li", "tool");
    li.dataset.testid = "tool";
    li.dataset.status = t.status;
    li.append(el("span", "tool-name", t.name), el("span", "tool-status", t.status));
    if (t.outputPreview) li.append(el("code", "tool-out", t.outputPreview.slice(0, 200)));
    return li;
  }));
  renderRequests(b.querySelector(".requests"), entry.requests || []);
  b.querySelector(".actions").hidden = !live;
  if (live) b.querySelector(".cancel").disabled = false;
}

// ----- the new-reply cue, for live replies only -----

/** The cue: counted on <html data-reply-cues>, and while the tab is hidden a count in its title. */
const TITLE = document.title;
let unseen = 0;
function onNewReply() {
  const root = document.documentElement;
  root.dataset.replyCues = String(Number(root.dataset.replyCues) + 1);
  if (document.visibilityState === "hidden") document.title = `(${++unseen}) ${TITLE}`;
}
document.documentElement.dataset.replyCues = "0";
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState !== "visible" || !unseen) return;
  unseen = 0;
  document.title = TITLE;
});

// ----- what the agent asks (approvals, questions, tools the page runs) -----

/** The tools this page runs when an agent asks (`/clienttool NAME` in the demo agent). */
const CLIENT_TOOLS = {
  page_info: () => ({ title: document.title, width: innerWidth, height: innerHeight }),
  get_time: () => ({ iso: new Date().toISOString(), zone: Intl.DateTimeFormat().resolvedOptions().timeZone }),
  get_location: () => new Promise((resolve, reject) => {
    if (!navigator.geolocation) return reject(new Error("this browser has no geolocation"));
    navigator.geolocation.getCurrentPosition(
      (p) => resolve({ lat: p.coords.latitude, lon: p.coords.longitude }),
      (e) => reject(new Error(e.message || "location refused")),
      { timeout: 10000 });
  }),
};

/** Requests this tab already acted on (a client tool runs once per tab, not once per render). */
const handled = new Set();

function describeAnswer(r) {
  const a = r.answer;
  if (!a) return "";
  const by = r.answeredBy ? ` (${r.answeredBy})` : "";
  if (a.timed_out) return "timed out";
  if (r.kind === "approval") return (a.approved ? "approved" : "denied") + (a.reason ? `: ${a.reason}` : "") + by;
  if (r.kind === "question") return `answered: ${a.text}${by}`;
  return ("error" in a ? `failed: ${a.error}` : `returned ${JSON.stringify(a.output)}`) + by;
}

function answer(requestId, value, card) {
  for (const button of card.querySelectorAll("button, input")) button.disabled = true;
  chat.respond(requestId, value).catch((e) => {
    // Another tab or device answered first: the card shows that answer.
    if (e.code !== "input_already_given") console.warn("answer failed", e);
  });
}

async function runTool(r, card) {
  const tool = CLIENT_TOOLS[r.tool.name];
  try {
    if (!tool) throw new Error(`this page has no tool "${r.tool.name}"`);
    answer(r.requestId, { output: await tool(r.tool.input) }, card);
  } catch (e) {
    answer(r.requestId, { error: String(e.message || e) }, card);
  }
}

/** A call of another agent (contract v1.3): who, where (a link to the child session), and how
 *  it ended once it did. The server answers it; nothing to click but the link. */
function callCard(r) {
  const card = el("div", "request call");
  card.dataset.testid = "call";
  card.dataset.requestId = r.requestId;
  card.dataset.state = r.call.state;
  const link = el("a", "call-link", r.call.sessionId);
  link.href = "?session=" + encodeURIComponent(r.call.sessionId);
  link.target = "_blank";
  link.dataset.testid = "call-link";
  const title = el("div", "request-title", `Calls ${r.call.agent} in `);
  title.append(link);
  const state = el("span", "call-state", r.call.state === "running" ? "running…" : r.call.state);
  state.dataset.testid = "call-state";
  card.append(title, state);
  if (r.call.text) card.append(el("div", "request-answer", r.call.text));
  return card;
}

function requestCard(r) {
  if (r.call) return callCard(r);
  const card = el("div", "request");
  card.dataset.testid = "request";
  card.dataset.kind = r.kind;
  card.dataset.requestId = r.requestId;
  card.dataset.state = r.answer ? "answered" : "open";
  if (r.kind === "approval") {
    card.append(el("div", "request-title", `Allow ${r.tool.name}?`), el("code", "request-input", JSON.stringify(r.tool.input)));
  } else if (r.kind === "question") {
    card.append(el("div", "request-title", r.prompt || "The agent asks"));
  } else {
    card.append(el("div", "request-title", `Runs ${r.tool.name} in this page`));
  }
  if (r.answer) {
    card.append(el("div", "request-answer", describeAnswer(r)));
    return card;
  }
  const row = el("div", "request-actions");
  if (r.kind === "approval") {
    const yes = el("button", "approve", "Approve");
    const no = el("button", "deny", "Deny");
    yes.type = no.type = "button";
    yes.dataset.testid = "approve";
    no.dataset.testid = "deny";
    yes.addEventListener("click", () => answer(r.requestId, { approved: true }, card));
    no.addEventListener("click", () => answer(r.requestId, { approved: false }, card));
    row.append(yes, no);
  } else if (r.kind === "question") {
    for (const option of r.options || []) {
      const b = el("button", "option", option);
      b.type = "button";
      b.dataset.testid = "option";
      b.addEventListener("click", () => answer(r.requestId, option, card));
      row.append(b);
    }
    const form = el("form", "request-form");
    const text = el("input");
    text.placeholder = "Your answer";
    text.dataset.testid = "answer-input";
    const send = el("button", "", "Answer");
    send.dataset.testid = "answer";
    form.append(text, send);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (text.value.trim()) answer(r.requestId, text.value.trim(), card);
    });
    row.append(form);
  } else if (!handled.has(r.requestId)) {
    // A tool the browser runs: the first tab to see it runs it (another tab may answer first).
    handled.add(r.requestId);
    runTool(r, card);
    row.append(el("span", "muted", "running…"));
  }
  card.append(row);
  return card;
}

function renderRequests(node, requests) {
  // Redrawn only when a request or an answer changed, so a typed answer is not lost.
  const key = JSON.stringify(requests);
  if (node.dataset.key === key) return;
  node.dataset.key = key;
  node.replaceChildren(...requests.map(requestCard));
}

function render(state) {
  // Marked so a profiler (or the refresh benchmark) can see what each render costs.
  performance.mark("turnstream:render");
  try {
    renderState(state);
  } finally {
    performance.measure("turnstream:render", "turnstream:render");
  }
}

/** "N here", a dot per member (the user, or a short label of its browser), and who types. */
function renderPresence(state) {
  const members = state.presence || [];
  const box = document.getElementById("presence");
  box.hidden = members.length === 0;
  box.dataset.count = String(state.presenceCount ?? members.length);
  box.querySelector(".here").textContent = `${state.presenceCount ?? members.length} here`;
  box.querySelector(".dots").replaceChildren(...members.map((m) => {
    const label = m.user || m.memberId.slice(-4);
    const dot = el("span", "member" + (m.self ? " self" : ""), label.slice(0, 2));
    dot.dataset.testid = "member";
    dot.dataset.memberId = m.memberId;
    dot.dataset.self = String(m.self);
    dot.dataset.typing = String(m.state.typing === true);
    dot.title = (m.user || m.memberId) + (m.self ? " (you)" : "");
    return dot;
  }));
  const typing = members.filter((m) => !m.self && m.state.typing === true);
  const line = document.getElementById("typing");
  line.hidden = typing.length === 0;
  line.textContent = typing.length > 1 ? `${typing.length} people are typing…` : "someone is typing…";
}

function renderState(state) {
  renderPresence(state);
  const conn = document.getElementById("connection");
  conn.textContent = state.connection;
  conn.dataset.state = state.connection;
  document.getElementById("busy").hidden = !state.busy;
  document.getElementById("gap").hidden = !state.gap;
  document.getElementById("empty").hidden = state.messages.length > 0;
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  const seen = new Set();
  let prev = null;
  for (const entry of state.messages) {
    seen.add(entry.key);
    let b = els.get(entry.key);
    if (!b) {
      b = bubble(entry);
      els.set(entry.key, b);
    }
    update(b, entry);
    const want = prev ? prev.nextSibling : log.firstChild;
    if (want !== b) log.insertBefore(b, want);
    prev = b;
  }
  for (const [key, b] of els) {
    if (!seen.has(key)) { b.remove(); els.delete(key); }
  }
  if (atBottom) log.scrollTop = log.scrollHeight;
}

await init();
// `?storage=memory` keeps nothing in IndexedDB (the tab-sharing tests use both).
const storage = params.get("storage") === "memory" ? "memory" : "indexeddb";
// With auth on the server, an app passes `getToken`; the demo uses `window.turnstreamToken` when
// the page embedding it defines one (the end-to-end suite does).
const getToken = typeof window.turnstreamToken === "function" ? () => window.turnstreamToken() : undefined;
const chat = await ChatClient.connect({ baseUrl: location.origin, sessionId, storage, getToken });
window.chat = chat; // for the end-to-end suite and for poking at it in the console
// The new-reply cue, as docs/sdk.md shows it (tests/recovered.mjs checks this block is the docs').
// Not in the render below: a hidden tab gets no animation frames, and it is where a cue matters.
// snippet: recovered-sdk
// A reply's side effects (a sound, a notification, analytics) run when it completes while this
// page watches it: not for replies read from history, not for a reply `recovered` after a reload.
const inFlight = new Set(); // the replies this page saw queued, streaming or waiting
function cueNewReplies(state) {
  for (const m of state.messages) {
    if (m.role !== "assistant") continue;
    if (["queued", "streaming", "waiting"].includes(m.status)) inFlight.add(m.key);
    else if (inFlight.delete(m.key) && m.status === "complete" && !m.recovered) onNewReply(m);
  }
}
chat.subscribe(cueNewReplies);
cueNewReplies(chat.state()); // the first state: replies the cache shows in flight
// end snippet
// Render at most once per frame: a backlog of events (a refresh mid-turn, a reconnect) then
// costs one layout, not one per event.
let frame = 0;
chat.subscribe(() => {
  if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(chat.state()); });
});
render(chat.state());

document.getElementById("composer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  input.style.height = "";
  try {
    await chat.send(text);
  } catch (e) {
    console.warn("send failed", e);
  }
});
input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    document.getElementById("composer").requestSubmit();
  }
});
input.addEventListener("input", () => {
  if (input.value) chat.setTyping(); // typing: true at most every 2 s; false 3 s after the last key
  input.style.height = "";
  input.style.height = Math.min(input.scrollHeight, 160) + "px";
});
