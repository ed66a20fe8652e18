// The BoltQ chat demo page: plain JS over boltq-gateway.js, no build step.
//
// Conversations come from the user's inbox pointers (one per message in every conversation
// the user is in) plus the "open" box; opening one loads its latest page of history and
// subscribes from there. Typing and presence are shown when the server answers those ops,
// hidden otherwise. A reload resumes the gateway session with the resume token kept in
// sessionStorage (per tab, so two tabs can be two users).

import { GatewayClient, directId, payloadText } from "/demo/boltq-gateway.js";

/** Same alphabet and length as the server's user ids. */
const USER_ID = /^[A-Za-z0-9_@+-]{1,128}$/;
/** Messages loaded when a conversation opens. */
const HISTORY_PAGE = 100;
/** Inbox pointers read per page, and pages read at start to list conversations. */
const INBOX_PAGE = 200;
const INBOX_PAGES_MAX = 5;
/** Conversations listed; older ones drop off the list. */
const CONVERSATIONS_MAX = 200;
/** Messages kept per conversation on the page. */
const MESSAGES_MAX = 500;
/** Send `typing` at most this often while keys are pressed, and stop after this long idle. */
const TYPING_REPEAT_MS = 2500;
const TYPING_IDLE_MS = 4000;
/** How long a typing signal shows without a new one. */
const TYPING_SHOW_MS = 6000;

const $ = (id) => document.getElementById(id);
const store = {
  get: (k) => sessionStorage.getItem(`boltq-demo.${k}`) || "",
  set: (k, v) => sessionStorage.setItem(`boltq-demo.${k}`, v),
  clear: () => {
    for (const k of ["user", "resume", "device", "active", "active-kind"]) sessionStorage.removeItem(`boltq-demo.${k}`);
  },
};

const state = {
  user: "",
  client: null,
  convs: new Map(), // id -> {id, kind, topic, partition, messages: Map(seq -> record), unread, opened}
  active: "",
  inboxSeq: 0,
  presence: new Map(), // user -> online
  presenceSupported: true,
  typingSupported: true,
  typers: new Map(), // sender -> timer
  typingSentAt: 0,
  typingIdle: null,
  resumed: false,
  watchQueued: false,
  listeningTo: "", // the conversation whose typing signals the server has agreed to send
  sendsPending: 0, // sends not answered yet (a retry after a restart may store a second copy)
};
// For tests and the curious: the page's state, read-only by convention.
window.__demo = state;

// ---- login ----------------------------------------------------------------------------

async function mintToken(user) {
  const r = await fetch("/demo/token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || `token route answered ${r.status}`);
  return body;
}

function gatewayUrl(g) {
  if (!g.port) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    return `${scheme}://${location.host}${g.path}`;
  }
  return `${g.tls ? "wss" : "ws"}://${location.hostname}:${g.port}${g.path}`;
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const user = $("login-user").value.trim();
  $("login-error").textContent = "";
  if (!USER_ID.test(user)) {
    $("login-error").textContent = "user ids are 1-128 of A-Z a-z 0-9 _ @ + -";
    return;
  }
  try {
    await start(user);
  } catch (e) {
    $("login-error").textContent = String(e.message || e);
  }
});

$("logout").addEventListener("click", () => {
  if (state.client) state.client.close();
  store.clear();
  location.reload();
});

async function start(user) {
  const first = await mintToken(user); // validates the id before anything is stored
  store.set("user", user);
  if (!store.get("device")) store.set("device", `web-${Math.random().toString(36).slice(2, 12)}`);
  state.user = user;
  $("me").textContent = user;
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;

  let fresh = first.token;
  const client = new GatewayClient(gatewayUrl(first.gateway), {
    // The first connect uses the token just minted; every reconnect mints a new one.
    getToken: async () => {
      if (fresh) {
        const t = fresh;
        fresh = "";
        return t;
      }
      return (await mintToken(user)).token;
    },
    deviceId: store.get("device"),
    userAgent: "boltq-chat-demo",
    resumeToken: store.get("resume"),
    onResumeToken: (t) => store.set("resume", t),
  });
  state.client = client;
  client.on("state", (s) => {
    $("status").dataset.state = s;
    $("status").textContent = s === "open" ? "connected" : s;
  });
  client.on("welcome", (w) => {
    state.resumed = !!w.resumed;
    $("resumed").hidden = !w.resumed;
  });
  client.on("records", onRecords);
  client.on("signal", onSignal);
  client.on("presence", onPresence);
  client.on("error", (e) => console.warn("gateway:", e.message));
  await client.connect();
  await loadInbox();
  const active = store.get("active");
  if (active) await openConversation(active, store.get("active-kind") || "direct");
}

// ---- conversations --------------------------------------------------------------------

function conv(id, kind) {
  let c = state.convs.get(id);
  if (!c) {
    if (state.convs.size >= CONVERSATIONS_MAX) state.convs.delete(state.convs.keys().next().value);
    c = {
      id,
      kind,
      topic: `chat.${kind}.${id}`,
      partition: undefined,
      messages: new Map(),
      unread: 0,
      opened: false,
    };
    state.convs.set(id, c);
    if (kind === "direct") watchPeers();
  }
  return c;
}

/** The other party of a direct conversation. */
function peerOf(c) {
  if (c.kind !== "direct") return "";
  const [a, b] = c.id.split(":");
  return a === state.user ? b : a;
}

/** Lists conversations from the latest inbox pointers, then follows the inbox live. */
async function loadInbox() {
  const topic = `chat.inbox.${state.user}`;
  const head = await state.client.history(topic, { fromSeq: Number.MAX_SAFE_INTEGER, limit: 1 });
  const next = head.next_seq || 1;
  let from = Math.max(head.first_seq || 1, next - INBOX_PAGES_MAX * INBOX_PAGE);
  while (from < next) {
    const r = await state.client.history(topic, { fromSeq: from, limit: INBOX_PAGE });
    if (r.op === "gap") {
      from = r.first_seq;
      continue;
    }
    const records = r.records || [];
    for (const p of records) notePointer(p, false);
    if (records.length === 0) break;
    from = records[records.length - 1].seq + 1;
  }
  await state.client.subscribe(topic, { fromSeq: next });
  render();
}

/** One inbox pointer: lists its conversation; counts it unread when it is someone else's
 *  message in a conversation that is not open. */
function notePointer(p, live) {
  if (p.seq <= state.inboxSeq) return; // replayed after a resume
  state.inboxSeq = p.seq;
  const h = p.headers || {};
  if (!h.conversation) return;
  const c = conv(h.conversation, h.kind === "group" ? "group" : "direct");
  // Most recent first.
  state.convs.delete(c.id);
  state.convs.set(c.id, c);
  if (live && h.sender !== state.user && c.id !== state.active) c.unread++;
}

async function openConversation(id, kind) {
  const c = conv(id, kind);
  state.active = id;
  store.set("active", id);
  store.set("active-kind", kind);
  c.unread = 0;
  clearTypers();
  render();
  if (!c.opened) {
    c.opened = true;
    try {
      await loadConversation(c);
    } catch (e) {
      c.opened = false;
      $("send-error").textContent = `cannot open ${id}: ${e.message}`;
      return;
    }
  }
  commitShown(c);
  if (state.typingSupported) {
    // Not typing, but listening to the others' typing signals.
    state.client.typing(c.id, false).then(() => (state.listeningTo = c.id), noTyping);
  }
  render();
}

/** The latest page of history, then live records from just after it. */
async function loadConversation(c) {
  const client = state.client;
  const head = await client.history(c.topic, { fromSeq: Number.MAX_SAFE_INTEGER, limit: 1 });
  c.partition = head.partition;
  const from = Math.max(head.first_seq || 1, (head.next_seq || 1) - HISTORY_PAGE);
  let next = head.next_seq || 1;
  if (next > 1) {
    const page = await client.history(c.topic, { partition: c.partition, fromSeq: from, limit: HISTORY_PAGE });
    if (page.op !== "gap") {
      addMessages(c, page.records || []);
      next = page.next_seq;
    }
  }
  await client.subscribe(c.topic, { partition: c.partition, fromSeq: next });
}

function addMessages(c, records) {
  for (const r of records) {
    c.messages.set(r.seq, r);
    const sender = (r.headers || {}).sender;
    if (sender && sender !== state.user) stopTyper(sender);
  }
  while (c.messages.size > MESSAGES_MAX) c.messages.delete(Math.min(...c.messages.keys()));
}

function onRecords(topic, partition, records) {
  if (topic === `chat.inbox.${state.user}`) {
    for (const p of records) notePointer(p, true);
    state.client.commit(topic, partition, records[records.length - 1].seq + 1);
  } else {
    const m = /^chat\.(direct|group)\.(.+)$/.exec(topic);
    if (!m) return;
    const c = conv(m[2], m[1]);
    c.partition = partition;
    addMessages(c, records);
    if (c.id === state.active) commitShown(c);
  }
  render();
}

/** The open conversation is read up to its last message. */
function commitShown(c) {
  if (c.messages.size === 0 || c.partition === undefined) return;
  state.client.commit(c.topic, c.partition, Math.max(...c.messages.keys()) + 1);
}

$("open-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const peer = $("peer").value.trim();
  $("open-error").textContent = "";
  if (!USER_ID.test(peer) || peer === state.user) {
    $("open-error").textContent = "another user's id: 1-128 of A-Z a-z 0-9 _ @ + -";
    return;
  }
  $("peer").value = "";
  openConversation(directId(state.user, peer), "direct");
});

// ---- sending and typing ---------------------------------------------------------------

$("send-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const c = state.convs.get(state.active);
  const text = $("composer").value;
  if (!c || !text.trim()) return;
  $("composer").value = "";
  $("send-error").textContent = "";
  stopTyping();
  state.sendsPending++;
  try {
    await state.client.send(c.id, text, { kind: c.kind, headers: { content_type: "text/plain" } });
  } catch (e) {
    $("send-error").textContent = `not sent: ${e.message}`;
    $("composer").value = text;
  } finally {
    state.sendsPending--;
  }
});

$("composer").addEventListener("input", () => {
  if (!state.typingSupported || !state.active) return;
  const now = Date.now();
  if (now - state.typingSentAt > TYPING_REPEAT_MS) {
    state.typingSentAt = now;
    state.client.typing(state.active, true).catch(noTyping);
  }
  clearTimeout(state.typingIdle);
  state.typingIdle = setTimeout(stopTyping, TYPING_IDLE_MS);
});

function stopTyping() {
  clearTimeout(state.typingIdle);
  if (state.typingSentAt && state.active && state.typingSupported) {
    state.client.typing(state.active, false).catch(noTyping);
  }
  state.typingSentAt = 0;
}

/** A server without typing (or a rate limit) must not break chatting: hide the indicator
 *  when the op is unknown; a rate limit only skips this signal. */
function noTyping(e) {
  if (e.code === "rate_limited" || e.code === "disconnected" || e.code === "timeout") return;
  state.typingSupported = false;
  renderTyping();
}

function onSignal(s) {
  if (!s || s.sender === state.user || s.topic !== `typing.${state.active}`) return;
  if (s.kind === "typing") {
    clearTimeout(state.typers.get(s.sender));
    state.typers.set(s.sender, setTimeout(() => stopTyper(s.sender), TYPING_SHOW_MS));
  } else {
    stopTyper(s.sender);
  }
  renderTyping();
}

function stopTyper(sender) {
  clearTimeout(state.typers.get(sender));
  if (state.typers.delete(sender)) renderTyping();
}

function clearTypers() {
  for (const t of state.typers.values()) clearTimeout(t);
  state.typers.clear();
  renderTyping();
}

// ---- presence -------------------------------------------------------------------------

/** Watches the other party of every direct conversation; coalesced, since listing the
 *  inbox discovers many conversations at once. */
function watchPeers() {
  if (state.watchQueued) return;
  state.watchQueued = true;
  setTimeout(sendWatch, 0);
}

function sendWatch() {
  state.watchQueued = false;
  if (!state.presenceSupported || !state.client) return;
  const peers = [...state.convs.values()].map(peerOf).filter(Boolean);
  state.client.watchPresence([...new Set(peers)]).catch((e) => {
    if (e.code === "disconnected" || e.code === "timeout") return;
    // Unknown op or refused: show no dots rather than wrong ones.
    state.presenceSupported = false;
    render();
  });
}

function onPresence(p) {
  if (!p || !p.user_id) return;
  state.presence.set(p.user_id, !!p.online);
  render();
}

// ---- rendering ------------------------------------------------------------------------

function render() {
  const list = $("convs");
  list.textContent = "";
  const convs = [...state.convs.values()].reverse();
  for (const c of convs) {
    const li = document.createElement("li");
    li.dataset.conv = c.id;
    li.classList.toggle("active", c.id === state.active);
    const dot = document.createElement("span");
    dot.className = "presence";
    const peer = peerOf(c);
    dot.hidden = !state.presenceSupported || !peer;
    dot.dataset.online = String(!!state.presence.get(peer));
    dot.title = state.presence.get(peer) ? "online" : "offline";
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = c.kind === "direct" ? peer : `# ${c.id}`;
    const unread = document.createElement("span");
    unread.className = "unread";
    unread.textContent = c.unread ? String(c.unread) : "";
    li.append(dot, name, unread);
    li.addEventListener("click", () => openConversation(c.id, c.kind));
    list.append(li);
  }
  $("convs-empty").hidden = convs.length > 0;

  const c = state.convs.get(state.active);
  $("send-form").hidden = !c;
  $("conv-title").textContent = c ? (c.kind === "direct" ? `Chat with ${peerOf(c)}` : `# ${c.id}`) : "Pick a conversation";
  const box = $("messages");
  box.textContent = "";
  if (c) {
    const seqs = [...c.messages.keys()].sort((a, b) => a - b);
    for (const seq of seqs) {
      const r = c.messages.get(seq);
      const sender = (r.headers || {}).sender || "?";
      const li = document.createElement("li");
      li.dataset.seq = String(seq);
      li.classList.toggle("mine", sender === state.user);
      const who = document.createElement("span");
      who.className = "sender";
      who.textContent = sender;
      const text = document.createElement("span");
      text.className = "text";
      text.textContent = payloadText(r.payload);
      li.append(who, text);
      box.append(li);
    }
    box.scrollTop = box.scrollHeight;
  }
  renderTyping();
}

function renderTyping() {
  const who = [...state.typers.keys()];
  const el = $("typing");
  el.hidden = !state.typingSupported || who.length === 0;
  el.textContent = who.length ? `${who.join(", ")} ${who.length > 1 ? "are" : "is"} typing…` : "";
}

// ---- start ----------------------------------------------------------------------------

const saved = store.get("user");
if (saved) {
  start(saved).catch((e) => {
    $("login").hidden = false;
    $("app").hidden = true;
    $("login-error").textContent = String(e.message || e);
  });
}
