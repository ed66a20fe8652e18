// boltq-gateway.js — a small, dependency-free client for BoltQ's WebSocket gateway
// (protocol version 1, docs/gateway-protocol.md). One ES module, no build step: copy it into
// your app, or import it from a BoltQ server running the demo (/demo/boltq-gateway.js).
//
// What it does for you:
// - connects with a token from your `getToken()` (called again for every reconnect, so an
//   expired token is never reused), says `hello`, and resumes the session with the newest
//   resume token (`hello.resume`; §8 of the protocol);
// - correlates requests and replies by `id` (`request()` returns a promise);
// - keeps subscriptions with callbacks, drops records it has already delivered (duplicates are
//   expected after a resume), and re-subscribes from the last seen sequence when the server
//   could not resume the session;
// - `send()` always carries a `client_msg_id` and retries retryable failures with the same
//   one, so a retry never stores a message twice;
// - batches `commit`s (only the highest sequence per partition is sent, once per interval);
// - reconnects with exponential backoff and full jitter after any unexpected close.
//
// Everything it keeps is bounded: pending requests, queued commits, subscriptions.

/** The only protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;
/** Requests waiting for a reply at once; past it `request()` rejects (the server answers in
 *  order, so a longer queue only means a stalled connection). */
export const PENDING_REQUESTS_MAX = 1000;
/** Subscriptions remembered for re-subscribing (the server's default cap is 200). */
export const SUBSCRIPTIONS_MAX = 1000;
/** Attempts of one `send()` on retryable errors and lost connections. */
export const SEND_ATTEMPTS_MAX = 6;

const DEFAULTS = {
  deviceId: "",
  userAgent: "boltq-gateway.js",
  resumeToken: "",
  onResumeToken: () => {},
  requestTimeoutMs: 15000,
  commitIntervalMs: 500,
  backoffBaseMs: 250,
  backoffMaxMs: 15000,
  WebSocket: globalThis.WebSocket,
};

/** A gateway `error` frame (or a lost connection) as an exception. */
export class GatewayError extends Error {
  constructor(code, message, retryable) {
    super(`${code}: ${message}`);
    this.code = code;
    this.retryable = !!retryable;
  }
}

/** base64 of a string's UTF-8 bytes, or of a Uint8Array. */
export function encodePayload(data) {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

/** The bytes of a base64 payload (the server sends the standard alphabet, padded). */
export function decodePayload(b64) {
  const bin = atob(b64 || "");
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** A payload as text (UTF-8, invalid bytes replaced). */
export function payloadText(b64) {
  return new TextDecoder().decode(decodePayload(b64));
}

/** The canonical id of the direct conversation of two users: the smaller id first. */
export function directId(a, b) {
  return a < b ? `${a}:${b}` : `${b}:${a}`;
}

/** A random id for `client_msg_id` and device ids. */
export function randomId(prefix = "") {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return prefix + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Delay before reconnect attempt `n` (0-based): exponential, capped, full jitter, so a
 *  server restart is not met by every client at the same instant. */
export function backoffMs(n, baseMs, maxMs, random = Math.random) {
  const cap = Math.min(maxMs, baseMs * 2 ** Math.min(n, 30));
  return Math.floor(cap / 2 + random() * (cap / 2));
}

export class GatewayClient {
  /**
   * @param {string} url `ws://host:port/ws` (the token is appended as `?token=`).
   * @param {object} opts `getToken: async () => string` (required), `deviceId`, `userAgent`,
   *   `resumeToken`, `onResumeToken(token)` (store it; sessionStorage is a good place),
   *   `requestTimeoutMs`, `commitIntervalMs`, `backoffBaseMs`, `backoffMaxMs`.
   */
  constructor(url, opts) {
    if (!opts || typeof opts.getToken !== "function") throw new Error("getToken is required");
    this.url = url;
    this.opts = { ...DEFAULTS, ...opts };
    this.resumeToken = this.opts.resumeToken;
    this.state = "idle"; // idle | connecting | open | closed
    this.ws = null;
    this.nextId = 1;
    this.pending = new Map(); // id -> {op, resolve, reject, timer}
    this.subs = new Map(); // topic -> {partition, fromSeq, onRecords, onGap}
    this.lastSeq = new Map(); // "topic#partition" -> highest delivered seq
    this.commits = new Map(); // "topic#partition" -> {topic, partition, seq}
    this.committed = new Map();
    this.commitTimer = null;
    this.listeners = new Map();
    this.attempt = 0;
    this.stopped = false;
    this.welcome = null;
    this.readyWaiters = [];
    this.watched = []; // users of watch_presence, re-sent on every connection
    this.listening = new Set(); // conversations whose typing signals this client wants
  }

  // ---- events -------------------------------------------------------------------------

  /** Events: `state` (name), `welcome` (frame), `records` (topic, partition, records) for
   *  every live record, `gap` (frame), `signal` (signal), `presence` (presence),
   *  `error` (GatewayError without a request), `close` ({code, reason}). */
  on(event, fn) {
    if (!this.listeners.has(event)) this.listeners.set(event, []);
    this.listeners.get(event).push(fn);
    return this;
  }

  emit(event, ...args) {
    for (const fn of this.listeners.get(event) || []) {
      try {
        fn(...args);
      } catch (e) {
        console.error(`boltq-gateway: ${event} listener threw`, e);
      }
    }
  }

  setState(s) {
    if (this.state === s) return;
    this.state = s;
    this.emit("state", s);
  }

  // ---- connection ---------------------------------------------------------------------

  /** Connects (and keeps reconnecting until `close()`); resolves with the first `welcome`. */
  connect() {
    this.stopped = false;
    const ready = this.ready();
    if (this.state === "idle" || this.state === "closed") this.open();
    return ready;
  }

  /** Resolves when the connection is ready (after `welcome`). */
  ready() {
    if (this.state === "open") return Promise.resolve(this.welcome);
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /** Closes for good: no reconnect. The session stays resumable for the server's window. */
  close() {
    this.stopped = true;
    this.flushCommits();
    if (this.ws) this.ws.close(1000, "bye");
    this.setState("closed");
    for (const w of this.readyWaiters.splice(0)) w.reject(new GatewayError("closed", "client closed", false));
  }

  async open() {
    this.setState("connecting");
    let token;
    try {
      token = await this.opts.getToken();
    } catch (e) {
      this.emit("error", new GatewayError("token", String(e), true));
      return this.retryLater();
    }
    if (this.stopped) return;
    const sep = this.url.includes("?") ? "&" : "?";
    const ws = new this.opts.WebSocket(`${this.url}${sep}token=${encodeURIComponent(token)}`);
    this.ws = ws;
    ws.onopen = () => this.hello(ws);
    ws.onmessage = (ev) => this.onFrame(ev.data);
    ws.onclose = (ev) => this.onClose(ws, ev);
    ws.onerror = () => {}; // a close always follows
  }

  async hello(ws) {
    const frame = { op: "hello", version: PROTOCOL_VERSION, user_agent: this.opts.userAgent };
    if (this.opts.deviceId) frame.device_id = this.opts.deviceId;
    if (this.resumeToken) frame.resume = this.resumeToken;
    let welcome;
    try {
      welcome = await this.rawRequest(frame);
    } catch (e) {
      this.emit("error", e);
      return; // the server closes after a refused hello
    }
    if (ws !== this.ws) return;
    this.welcome = welcome;
    this.attempt = 0;
    this.resumeToken = welcome.token;
    this.opts.onResumeToken(welcome.token);
    this.setState("open");
    if (!welcome.resumed) this.resubscribeAll();
    this.restoreEphemeral();
    this.emit("welcome", welcome);
    for (const w of this.readyWaiters.splice(0)) w.resolve(welcome);
  }

  /** A fresh session knows no subscriptions: ask again from just after the last record
   *  delivered (or where the caller first asked). */
  resubscribeAll() {
    for (const [topic, s] of this.subs) {
      const last = this.lastSeq.get(`${topic}#${s.partition}`);
      const from = last ? last + 1 : s.fromSeq;
      this.subscribeFrame(topic, s.partition, from).catch((e) => this.emit("error", e));
    }
  }

  /** Typing listeners and presence watches belong to a connection, not to the session:
   *  ask again on every new socket. Failures are reported, not fatal (a server without
   *  presence still chats). */
  restoreEphemeral() {
    const report = (e) => this.emit("error", e);
    for (const c of this.listening) this.rawRequest({ op: "typing", conversation: c, typing: false }).catch(report);
    if (this.watched.length) this.rawRequest({ op: "watch_presence", users: this.watched }).catch(report);
  }

  onClose(ws, ev) {
    if (ws !== this.ws) return;
    this.ws = null;
    for (const [, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new GatewayError("disconnected", "connection closed", true));
    }
    this.pending.clear();
    this.emit("close", { code: ev.code, reason: ev.reason });
    if (this.stopped) return this.setState("closed");
    if (ev.code === 4003) {
      // Unsupported version: retrying with the same version cannot help.
      this.stopped = true;
      return this.setState("closed");
    }
    this.retryLater();
  }

  retryLater() {
    if (this.stopped) return;
    this.setState("connecting");
    const delay = backoffMs(this.attempt++, this.opts.backoffBaseMs, this.opts.backoffMaxMs);
    setTimeout(() => {
      if (!this.stopped) this.open();
    }, delay);
  }

  // ---- frames -------------------------------------------------------------------------

  onFrame(data) {
    let f;
    try {
      f = JSON.parse(data);
    } catch {
      return;
    }
    const p = f.id !== undefined ? this.pending.get(f.id) : undefined;
    if (p) {
      if (f.op === "gap" && p.op === "subscribe") {
        // A subscribe's gap comes before its ack, with the same id.
        this.emit("gap", f);
        const s = this.subs.get(f.topic);
        if (s && s.onGap) s.onGap(f);
        return;
      }
      this.pending.delete(f.id);
      clearTimeout(p.timer);
      if (f.op === "error") p.reject(new GatewayError(f.error.code, f.error.message, f.error.retryable));
      else p.resolve(f);
      return;
    }
    switch (f.op) {
      case "record":
        return this.deliver(f.topic, f.partition, f.records || []);
      case "gap": {
        this.emit("gap", f);
        const s = this.subs.get(f.topic);
        if (s && s.onGap) s.onGap(f);
        return;
      }
      case "signal":
        return this.emit("signal", f.signal);
      case "presence_event":
        return this.emit("presence", f.presence);
      case "error":
        return this.emit("error", new GatewayError(f.error.code, f.error.message, f.error.retryable));
      default:
        return;
    }
  }

  /** Live records, each delivered once per partition in sequence order. */
  deliver(topic, partition, records) {
    const key = `${topic}#${partition}`;
    const last = this.lastSeq.get(key) || 0;
    const fresh = records.filter((r) => r.seq > last);
    if (fresh.length === 0) return;
    this.lastSeq.set(key, fresh[fresh.length - 1].seq);
    const s = this.subs.get(topic);
    if (s && s.onRecords) s.onRecords(fresh, partition);
    this.emit("records", topic, partition, fresh);
  }

  // ---- requests -----------------------------------------------------------------------

  /** Sends `frame` (an `id` is added) once the connection is ready; resolves with the reply,
   *  rejects with a GatewayError on an `error` reply, a timeout, or a lost connection. */
  async request(frame) {
    if (this.state !== "open") await this.ready();
    return this.rawRequest(frame);
  }

  rawRequest(frame) {
    return new Promise((resolve, reject) => {
      const ws = this.ws;
      if (!ws || ws.readyState !== 1) {
        return reject(new GatewayError("disconnected", "not connected", true));
      }
      if (this.pending.size >= PENDING_REQUESTS_MAX) {
        return reject(new GatewayError("overloaded", "too many requests in flight", true));
      }
      const id = `r${this.nextId++}`;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new GatewayError("timeout", `no reply to ${frame.op}`, true));
      }, this.opts.requestTimeoutMs);
      this.pending.set(id, { op: frame.op, resolve, reject, timer });
      ws.send(JSON.stringify({ ...frame, id }));
    });
  }

  /** Subscribes to `topic` and calls `onRecords(records, partition)` for every new record.
   *  `fromSeq` 0 = this device's committed cursor, else only new records. Resolves with the
   *  `ack` (`from_seq`, `first_seq`, `next_seq`). */
  subscribe(topic, { partition, fromSeq = 0, onRecords, onGap } = {}) {
    if (!this.subs.has(topic) && this.subs.size >= SUBSCRIPTIONS_MAX) {
      return Promise.reject(new GatewayError("rate_limited", "subscription limit reached", false));
    }
    this.subs.set(topic, { partition, fromSeq, onRecords, onGap });
    return this.subscribeFrame(topic, partition, fromSeq);
  }

  async subscribeFrame(topic, partition, fromSeq) {
    const frame = { op: "subscribe", topic };
    if (partition !== undefined) frame.partition = partition;
    if (fromSeq) frame.from_seq = fromSeq;
    const ack = await this.request(frame);
    const s = this.subs.get(topic);
    if (s) s.partition = ack.partition;
    return ack;
  }

  unsubscribe(topic) {
    const s = this.subs.get(topic);
    this.subs.delete(topic);
    const frame = { op: "unsubscribe", topic };
    if (s && s.partition !== undefined) frame.partition = s.partition;
    return this.request(frame);
  }

  /** One page of stored records: `{records, first_seq, next_seq}` (or a `gap` frame). */
  history(topic, { partition, fromSeq, limit } = {}) {
    const frame = { op: "history", topic };
    if (partition !== undefined) frame.partition = partition;
    if (fromSeq) frame.from_seq = fromSeq;
    if (limit) frame.limit = limit;
    return this.request(frame);
  }

  /** Sends a message; `payload` is a string (sent as UTF-8) or bytes. Resolves with `sent`
   *  once the message is durable. Retryable failures are retried with the same
   *  `client_msg_id`, which the server deduplicates. */
  async send(conversation, payload, { kind = "direct", headers, clientMsgId } = {}) {
    const frame = {
      op: "send",
      conversation,
      kind,
      client_msg_id: clientMsgId || randomId("m-"),
      payload: encodePayload(payload),
    };
    if (headers) frame.headers = headers;
    for (let attempt = 0; ; attempt++) {
      try {
        return (await this.request(frame)).sent;
      } catch (e) {
        if (!(e instanceof GatewayError) || !e.retryable || attempt + 1 >= SEND_ATTEMPTS_MAX) throw e;
        await new Promise((r) => setTimeout(r, backoffMs(attempt, 100, 3000)));
      }
    }
  }

  /** Records that this device has read `topic`/`partition` up to `seq` − 1. Batched: only
   *  the highest value per partition leaves, at most once per `commitIntervalMs`. */
  commit(topic, partition, seq) {
    const key = `${topic}#${partition}`;
    const queued = this.commits.get(key);
    if ((queued && queued.seq >= seq) || (this.committed.get(key) || 0) >= seq) return;
    this.commits.set(key, { topic, partition, seq });
    if (!this.commitTimer) {
      this.commitTimer = setTimeout(() => this.flushCommits(), this.opts.commitIntervalMs);
    }
  }

  flushCommits() {
    clearTimeout(this.commitTimer);
    this.commitTimer = null;
    if (this.state !== "open") {
      if (this.commits.size && !this.stopped) {
        this.commitTimer = setTimeout(() => this.flushCommits(), this.opts.commitIntervalMs);
      }
      return;
    }
    for (const [key, c] of this.commits) {
      this.commits.delete(key);
      this.rawRequest({ op: "commit", topic: c.topic, partition: c.partition, seq: c.seq }).then(
        () => this.committed.set(key, Math.max(this.committed.get(key) || 0, c.seq)),
        (e) => {
          if (e.retryable) this.commit(c.topic, c.partition, c.seq);
        },
      );
    }
  }

  /** Typing (or not) in `conversation`; also makes this connection receive the others'
   *  typing signals. */
  typing(conversation, isTyping = true) {
    if (this.listening.size < SUBSCRIPTIONS_MAX) this.listening.add(conversation);
    return this.request({ op: "typing", conversation, typing: isTyping });
  }

  /** This device's presence: `online`, `away` or `offline`. */
  setPresence(state) {
    return this.request({ op: "presence", state });
  }

  /** Replaces the set of watched users; `presence` events follow (a snapshot first). */
  watchPresence(users) {
    this.watched = users.slice(0, 1000);
    return this.request({ op: "watch_presence", users });
  }

  ping() {
    return this.request({ op: "ping" });
  }
}
