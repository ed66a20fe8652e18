// A Node.js client for BoltQ's queue plane (docs/clients.md). The method names are the v1
// Node SDK's, so moving over is a change of import; where v1 misbehaved this client does
// not (each difference is listed in docs/clients.md):
//
// - `delay` and `ttl` are milliseconds here and are sent as the nanoseconds the server
//   reads (v1 sent the number as is, so `delay: 1000` meant 1 µs);
// - payloads are sent as JSON values (an object stays an object), not as a JSON string;
// - a subscription's handler is registered before the SUBSCRIBE is sent, so a durable
//   subscriber's catch-up, which follows the `subscribed` reply at once, is never missed;
// - a request that times out closes the connection instead of leaving its late reply to
//   be taken for the next request's (the protocol has no correlation id);
// - after a reconnect every subscription is sent again with its `durable` flag, and AUTH
//   first when a key is set; TLS, long-poll and batch CONSUME, and the DLQ commands are
//   supported.

import net from 'node:net';
import tls from 'node:tls';
import { EventEmitter } from 'node:events';
import { encodeFrame, FrameDecoder, Op, Status } from './frame.js';

export { encodeFrame, FrameDecoder, FrameError, Op, Status, PAYLOAD_BYTES_MAX } from './frame.js';

/** Longest `reconnectInterval` the doubling after failed reconnects reaches. */
export const RECONNECT_INTERVAL_MAX_MS = 30_000;
/** Largest `delay`/`ttl` in ms whose nanoseconds a JSON number still carries exactly. */
export const DURATION_MS_MAX = Math.floor(Number.MAX_SAFE_INTEGER / 1e6);

/**
 * Every failure this client reports. `code` is one of: `AUTH_ERROR`, `SERVER_ERROR` (the
 * server answered ERROR; `message` is its text), `NOT_LEADER` (with `leader` and
 * `leaderId`), `SUBSCRIBE_ERROR`, `TIMEOUT`, `CONNECTION_CLOSED`, `NOT_CONNECTED`,
 * `PROTOCOL_ERROR`.
 */
export class BoltQError extends Error {
  constructor(code, message, extra = {}) {
    super(message);
    this.name = 'BoltQError';
    this.code = code;
    Object.assign(this, extra);
  }
}

const subscriptionKey = (topic, id) => `${topic}\u0000${id}`;

/** The SUBSCRIBE body; `ack` only when asked for, so v1 servers see v1's fields. */
const subscribeBody = (topic, id, durable, ack) => (ack ? { topic, id, durable, ack } : { topic, id, durable });

function nanos(name, ms) {
  if (ms === undefined || ms === null || ms === 0) return 0;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > DURATION_MS_MAX) {
    throw new RangeError(`${name} must be a number of milliseconds in 0..=${DURATION_MS_MAX}, not ${ms}`);
  }
  return Math.round(ms * 1e6);
}

function parseJson(payload) {
  try {
    return JSON.parse(payload.toString('utf8'));
  } catch (e) {
    throw new BoltQError('PROTOCOL_ERROR', `reply is not JSON: ${e.message}`);
  }
}

export class BoltQClient extends EventEmitter {
  /**
   * @param {string} host
   * @param {number} port the TCP port (9091 by default on the server)
   * @param {object} [options] `apiKey`, `timeout` (ms per request, default 30000),
   *   `autoReconnect` (default true), `reconnectInterval` (ms, default 2000, doubling up to
   *   30 s while reconnects fail), `tls` (true, or `node:tls` connect options such as `ca`,
   *   `cert`, `key`, `servername`)
   */
  constructor(host = '127.0.0.1', port = 9091, options = {}) {
    super();
    this.host = host;
    this.port = port;
    this.apiKey = options.apiKey ?? '';
    this.timeout = options.timeout ?? 30_000;
    this.autoReconnect = options.autoReconnect ?? true;
    this.reconnectInterval = options.reconnectInterval ?? 2_000;
    this.tls = options.tls ?? false;
    this.socket = null;
    this.pending = [];
    this.subscriptions = new Map();
    this.closing = false;
    this.reconnectTimer = null;
    this.nextReconnectMs = this.reconnectInterval;
  }

  /** Connects (and authenticates when an API key is set). */
  async connect() {
    this.closing = false;
    await this.open();
  }

  /** Closes the connection and stops reconnecting; outstanding requests fail. */
  async close() {
    this.closing = true;
    clearTimeout(this.reconnectTimer);
    const socket = this.socket;
    if (!socket) return;
    await new Promise((resolve) => {
      socket.once('close', resolve);
      socket.end();
      setTimeout(() => socket.destroy(), 1_000).unref();
    });
  }

  /** True while a connection is up. */
  get connected() {
    return this.socket !== null;
  }

  // ---- work queues -------------------------------------------------------------------

  /** PUBLISH to a work queue. `delay` and `ttl` are in milliseconds. Resolves `{id, topic}`. */
  publish(topic, payload, headers = {}, { delay = 0, ttl = 0, priority = 0 } = {}) {
    return this.request(Op.PUBLISH, {
      topic,
      payload: payload ?? null,
      headers: headers ?? {},
      delay: nanos('delay', delay),
      ttl: nanos('ttl', ttl),
      priority,
    });
  }

  /** PUBLISH_TOPIC to the pub/sub topic `topic`. Resolves `{id, topic}`. */
  publishTopic(topic, payload, headers = {}, { priority = 0 } = {}) {
    return this.request(Op.PUBLISH_TOPIC, { topic, payload: payload ?? null, headers: headers ?? {}, priority });
  }

  /** One message, or null when the queue is empty (never waits). */
  async consume(topic) {
    return this.request(Op.CONSUME, { topic });
  }

  /**
   * Long-poll and batch CONSUME: waits up to `waitMs` (≤ 30000) for messages and returns
   * up to `max` (1..=1000) of them, `[]` when none came. The request's timeout is extended
   * by `waitMs`.
   */
  async consumeWait(topic, { waitMs = 0, max = 1 } = {}) {
    const reply = await this.request(Op.CONSUME, { topic, wait_ms: waitMs, max }, waitMs);
    return reply === null ? [] : reply.messages;
  }

  ack(id) {
    return this.request(Op.ACK, { id });
  }

  nack(id) {
    return this.request(Op.NACK, { id });
  }

  /**
   * ACK of several messages in one request (`ids`, 1..=1000; a BoltQ server addition, not
   * in v1). Resolves `{status, count, failed?}`: `failed` lists `{id, error}` for the ids
   * that were not acknowledged.
   */
  ackMany(ids) {
    return this.request(Op.ACK, { ids });
  }

  /** NACK of several messages in one request (see `ackMany`). */
  nackMany(ids) {
    return this.request(Op.NACK, { ids });
  }

  /** PREFETCH: at most `count` unacked messages for this connection (0 = no limit). */
  setPrefetch(count) {
    return this.request(Op.PREFETCH, { count });
  }

  /** Confirm mode: every publish reply then carries `seq_no` and `ack`. */
  enableConfirm() {
    return this.request(Op.CONFIRM_SELECT, {});
  }

  ping() {
    return this.request(Op.PING, {});
  }

  /** True when the server answers PING. */
  async health() {
    try {
      await this.ping();
      return true;
    } catch {
      return false;
    }
  }

  stats() {
    return this.request(Op.STATS, {});
  }

  // ---- pub/sub -----------------------------------------------------------------------

  /**
   * Subscribes `id` to `topic`; `onMessage(message)` gets every push, and the client emits
   * `message`, `message:<topic>` and `message:<topic>:<id>`. The handler is in place
   * before the request leaves, so a durable subscriber's catch-up reaches it. The
   * subscription is sent again after every reconnect.
   *
   * `ack: true` (durable only; a BoltQ server addition, not in v1) makes a push count as
   * received only once `ack(message.id)` names it: pushes the handler got but never
   * acknowledged, because the process died or the connection dropped, come again on the
   * next subscribe. Acknowledge every push; the server closes a connection holding more
   * than 65,536 unacknowledged ones.
   */
  async subscribe(topic, id, { durable = false, ack = false } = {}, onMessage = () => {}) {
    const key = subscriptionKey(topic, id);
    const previous = this.subscriptions.get(key);
    this.subscriptions.set(key, { topic, id, durable, ack, onMessage });
    try {
      return await this.request(Op.CONSUME, subscribeBody(topic, id, durable, ack));
    } catch (e) {
      if (previous) this.subscriptions.set(key, previous);
      else this.subscriptions.delete(key);
      if (e instanceof BoltQError && e.code === 'SERVER_ERROR') {
        throw new BoltQError('SUBSCRIBE_ERROR', e.message);
      }
      throw e;
    }
  }

  // ---- exchanges ---------------------------------------------------------------------

  exchangeDeclare(name, type = 'direct', durable = false) {
    return this.request(Op.EXCHANGE_DECLARE, { name, type, durable });
  }

  exchangeDelete(name) {
    return this.request(Op.EXCHANGE_DELETE, { name });
  }

  bindQueue(exchange, queue, bindingKey = '', { headers = null, matchAll = false } = {}) {
    return this.request(Op.BIND_QUEUE, {
      exchange,
      queue,
      binding_key: bindingKey,
      headers,
      match_all: matchAll,
    });
  }

  unbindQueue(exchange, queue, bindingKey = '') {
    return this.request(Op.UNBIND_QUEUE, { exchange, queue, binding_key: bindingKey });
  }

  publishToExchange(exchange, routingKey, payload, headers = {}, { priority = 0 } = {}) {
    return this.request(Op.PUBLISH_EXCHANGE, {
      exchange,
      routing_key: routingKey,
      payload: payload ?? null,
      headers: headers ?? {},
      priority,
    });
  }

  // ---- dead letters (BoltQ's additive commands) ----------------------------------------

  /** `[{queue, dead_letter, count}]` of queues with dead letters (or just `queue`). */
  async dlqList(queue) {
    const reply = await this.request(Op.DLQ_LIST, queue === undefined ? {} : { queue });
    return reply.dead_letters;
  }

  /** Reads dead letters oldest first without removing them: `{messages, next_offset}`. */
  dlqRead(queue, { offset = 0, limit = 100 } = {}) {
    return this.request(Op.DLQ_READ, { queue, offset, limit });
  }

  /** Moves dead letters back to `queue` (all, or the oldest `limit`); resolves the count. */
  async dlqRequeue(queue, { limit } = {}) {
    const reply = await this.request(Op.DLQ_REQUEUE, limit === undefined ? { queue } : { queue, limit });
    return reply.requeued;
  }

  /** Deletes `queue`'s dead letters; resolves the count. */
  async dlqPurge(queue) {
    const reply = await this.request(Op.DLQ_PURGE, { queue });
    return reply.purged;
  }

  // ---- the connection ----------------------------------------------------------------

  /**
   * Sends one request and resolves its reply: parsed JSON for OK, null for EMPTY or an
   * empty OK. Replies come back in request order, so requests may be pipelined freely.
   */
  request(code, body, extraWaitMs = 0) {
    if (!this.socket) {
      return Promise.reject(new BoltQError('NOT_CONNECTED', 'not connected'));
    }
    let frame;
    try {
      frame = encodeFrame(code, JSON.stringify(body));
    } catch (e) {
      return Promise.reject(e);
    }
    return this.send(this.socket, frame, this.timeout + extraWaitMs);
  }

  send(socket, frame, timeoutMs) {
    return new Promise((resolve, reject) => {
      const entry = { resolve, reject, timer: null };
      entry.timer = setTimeout(() => {
        // The reply may still come and would be taken for the next request's: the
        // connection is out of step, so it goes (and comes back if reconnecting).
        reject(new BoltQError('TIMEOUT', `no reply within ${timeoutMs} ms`));
        entry.settled = true;
        socket.destroy();
      }, timeoutMs);
      this.pending.push(entry);
      socket.write(frame);
    });
  }

  async open() {
    const socket = await this.dial();
    const decoder = new FrameDecoder();
    socket.on('data', (chunk) => {
      let frames;
      try {
        frames = decoder.push(chunk);
      } catch (e) {
        this.emit('error', new BoltQError('PROTOCOL_ERROR', e.message));
        socket.destroy();
        return;
      }
      for (const f of frames) this.onFrame(f);
    });
    socket.on('error', () => {}); // 'close' follows and carries the consequences
    socket.on('close', () => this.onClose(socket));
    this.socket = socket;
    if (this.apiKey) {
      try {
        await this.request(Op.AUTH, { api_key: this.apiKey });
      } catch (e) {
        this.closing = true;
        this.socket = null;
        socket.destroy();
        throw new BoltQError('AUTH_ERROR', e.message);
      }
    }
  }

  dial() {
    return new Promise((resolve, reject) => {
      const options = typeof this.tls === 'object' ? this.tls : {};
      const ready = this.tls ? 'secureConnect' : 'connect';
      // SNI carries host names only; an IP address is checked against the certificate's
      // IP entries instead.
      const servername = net.isIP(this.host) === 0 ? this.host : undefined;
      const socket = this.tls
        ? tls.connect({ host: this.host, port: this.port, servername, ...options })
        : net.connect({ host: this.host, port: this.port });
      socket.setNoDelay(true);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new BoltQError('TIMEOUT', `connecting to ${this.host}:${this.port} took over ${this.timeout} ms`));
      }, this.timeout);
      socket.once(ready, () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        resolve(socket);
      });
      socket.once('error', (e) => {
        clearTimeout(timer);
        reject(new BoltQError('CONNECTION_CLOSED', `cannot connect to ${this.host}:${this.port}: ${e.message}`));
      });
    });
  }

  onFrame({ code, payload }) {
    if (code === Status.OK && payload.length > 0) {
      let value;
      try {
        value = parseJson(payload);
      } catch (e) {
        this.failNext(e);
        return;
      }
      if (value !== null && typeof value === 'object' && !Array.isArray(value) && 'subscriber_id' in value) {
        this.onPush(value);
        return;
      }
      this.settleNext((e) => e.resolve(value));
      return;
    }
    switch (code) {
      case Status.OK:
      case Status.EMPTY:
        this.settleNext((e) => e.resolve(null));
        return;
      case Status.NOT_LEADER: {
        let r = {};
        try {
          r = payload.length > 0 ? JSON.parse(payload.toString('utf8')) : {};
        } catch {
          // no leader details: the code alone says what happened
        }
        this.failNext(new BoltQError('NOT_LEADER', r.error ?? 'not leader', { leader: r.leader, leaderId: r.leader_id }));
        return;
      }
      case Status.ERROR: {
        let text = payload.toString('utf8');
        try {
          text = JSON.parse(text).error ?? text;
        } catch {
          // a non-JSON error text is reported as it came
        }
        this.failNext(new BoltQError('SERVER_ERROR', text));
        return;
      }
      default:
        this.emit('error', new BoltQError('PROTOCOL_ERROR', `unknown status byte 0x${code.toString(16)}`));
        this.socket?.destroy();
    }
  }

  onPush(message) {
    const sub = this.subscriptions.get(subscriptionKey(message.topic, message.subscriber_id));
    this.emit('message', message);
    this.emit(`message:${message.topic}`, message);
    this.emit(`message:${message.topic}:${message.subscriber_id}`, message);
    if (sub) sub.onMessage(message);
  }

  settleNext(settle) {
    const entry = this.pending.shift();
    if (!entry) {
      this.emit('error', new BoltQError('PROTOCOL_ERROR', 'a reply came with no request outstanding'));
      this.socket?.destroy();
      return;
    }
    clearTimeout(entry.timer);
    if (!entry.settled) settle(entry);
  }

  failNext(error) {
    this.settleNext((e) => e.reject(error));
  }

  onClose(socket) {
    if (this.socket !== socket) return;
    this.socket = null;
    for (const entry of this.pending.splice(0)) {
      clearTimeout(entry.timer);
      if (!entry.settled) entry.reject(new BoltQError('CONNECTION_CLOSED', 'connection closed'));
    }
    this.emit('disconnect');
    if (this.autoReconnect && !this.closing) this.scheduleReconnect();
  }

  scheduleReconnect() {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.reconnect(), this.nextReconnectMs);
  }

  async reconnect() {
    if (this.closing) return;
    try {
      await this.open();
      for (const s of this.subscriptions.values()) {
        await this.request(Op.CONSUME, subscribeBody(s.topic, s.id, s.durable, s.ack));
      }
      this.nextReconnectMs = this.reconnectInterval;
      this.emit('reconnect');
    } catch (e) {
      this.emit('reconnectError', e);
      this.nextReconnectMs = Math.min(this.nextReconnectMs * 2, RECONNECT_INTERVAL_MAX_MS);
      if (this.socket) this.socket.destroy();
      else if (!this.closing) this.scheduleReconnect();
    }
  }
}

export default BoltQClient;
