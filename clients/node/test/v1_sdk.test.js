// What BoltQ v1's own Node SDK does on the wire and in what order, kept here as a minimal
// stand-in (not its code): request bodies as its object literals serialise them (a payload
// JSON-stringified into a string, `delay` passed through as the server's nanoseconds), and
// a subscription's handler attached only after the `subscribed` reply has been read. The
// server must serve such a client: its durable catch-up reached no handler when it came
// with the reply (issue 16, v1's nodejs_stress_test step).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { EventEmitter } from 'node:events';
import { encodeFrame, FrameDecoder, Op, Status } from '../src/frame.js';
import { BoltQClient } from '../src/index.js';

const port = Number(process.env.BOLTQ_TEST_TCP_PORT);
const apiKey = process.env.BOLTQ_TEST_API_KEY ?? '';
const skip = !port && 'needs a server: run through `cargo test --test e2e node_client`';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The v1 Node SDK's behaviour, reduced to what these tests need. */
class V1StyleClient extends EventEmitter {
  async connect() {
    this.socket = net.connect({ host: '127.0.0.1', port });
    await new Promise((resolve, reject) => {
      this.socket.once('connect', resolve);
      this.socket.once('error', reject);
    });
    this.pending = [];
    const decoder = new FrameDecoder();
    // v1: every frame of a chunk is handled in one go; a reply resolves its promise (whose
    // continuation runs only after this handler returns), a push is emitted at once.
    this.socket.on('data', (chunk) => {
      for (const { code, payload } of decoder.push(chunk)) {
        const text = payload.toString('utf8');
        const value = code === Status.OK && text ? JSON.parse(text) : null;
        if (value && typeof value === 'object' && 'subscriber_id' in value) {
          this.emit('message', value);
          continue;
        }
        const p = this.pending.shift();
        if (code === Status.ERROR) p.reject(new Error(text));
        else p.resolve(value);
      }
    });
    if (apiKey) await this.send(Op.AUTH, { api_key: apiKey });
  }

  send(code, body) {
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.socket.write(encodeFrame(code, JSON.stringify(body)));
    });
  }

  publish(topic, payload, headers, { delay = 0, ttl = 0, priority = 0 } = {}) {
    const p = typeof payload === 'string' ? payload : JSON.stringify(payload);
    return this.send(Op.PUBLISH, { topic, payload: p, headers: headers || {}, delay, ttl, priority });
  }

  consume(topic) {
    return this.send(Op.CONSUME, { topic });
  }

  async subscribe(topic, id, { durable = false } = {}, onMessage) {
    await this.send(Op.CONSUME, { topic, id, durable });
    this.on('message', (m) => {
      if (m.topic === topic && m.subscriber_id === id) onMessage(m);
    });
  }

  close() {
    this.socket.destroy();
  }
}

test('v1 frames: a payload sent as a JSON string comes back as that string; delay is in ns', { skip }, async () => {
  const c = new V1StyleClient();
  await c.connect();
  const q = `v1-delay-${process.pid}`;
  // 1 s in nanoseconds (Go's time.Duration). The early consume proves nothing when a
  // loaded machine took the whole second to get there, so it is judged only if it did not.
  const sent = Date.now();
  await c.publish(q, { n: 1 }, {}, { delay: 1_000_000_000 });
  const early = await c.consume(q);
  if (Date.now() - sent < 900) assert.equal(early, null, 'not before 1 s');
  if (early === null) await sleep(1_200);
  const m = early ?? (await c.consume(q));
  assert.equal(m.payload, '{"n":1}', 'the v1 SDK stringified it');
  await c.send(Op.ACK, { id: m.id });
  c.close();
});

test('v1 durable catch-up: the handler attached after the reply gets every offline publish', { skip }, async () => {
  const publisher = new BoltQClient('127.0.0.1', port, { apiKey, autoReconnect: false });
  await publisher.connect();
  // Several rounds: each must get all ten, whatever the timing of the reads.
  for (let round = 0; round < 10; round++) {
    const topic = `v1-catchup-${process.pid}-${round}`;
    const first = new V1StyleClient();
    await first.connect();
    await first.subscribe(topic, 'stress', { durable: true }, () => {});
    first.close();
    await sleep(20);
    for (let i = 0; i < 10; i++) await publisher.publishTopic(topic, `offline-${i}`);
    const again = new V1StyleClient();
    await again.connect();
    const got = [];
    await again.subscribe(topic, 'stress', { durable: true }, (m) => got.push(m.payload));
    const deadline = Date.now() + 5_000;
    while (got.length < 10 && Date.now() < deadline) await sleep(10);
    assert.deepEqual(
      got,
      Array.from({ length: 10 }, (_, i) => `offline-${i}`),
      `round ${round}: the catch-up reached the handler`,
    );
    again.close();
  }
  await publisher.close();
});
