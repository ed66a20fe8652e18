// The client against the real server, driven by `cargo test` (tests/e2e/node_client.rs),
// which starts it with `security.api_key = BOLTQ_TEST_API_KEY`, `queue.max_retry = 1` and
// no retry backoff, and passes its TCP port in BOLTQ_TEST_TCP_PORT. These are the
// behaviours v1's Node SDK integration and stress tests exercise, through this client.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BoltQClient, BoltQError } from '../src/index.js';

const port = Number(process.env.BOLTQ_TEST_TCP_PORT);
const apiKey = process.env.BOLTQ_TEST_API_KEY ?? '';
const skip = !port && 'needs a server: run through `cargo test --test e2e node_client`';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let unique = 0;
const name = (what) => `node-${what}-${process.pid}-${unique++}`;

async function client(options = {}) {
  const c = new BoltQClient('127.0.0.1', port, { apiKey, timeout: 10_000, reconnectInterval: 100, ...options });
  await c.connect();
  return c;
}

/** Waits until `done()` holds, for at most `ms`. */
async function until(done, ms, what) {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

test('publish, consume and ack carry the payload as a JSON value, headers and priority order', { skip }, async () => {
  const c = await client();
  const q = name('basic');
  await c.publish(q, { n: 1 }, { trace: 'a' });
  await c.publish(q, 'text', {}, { priority: 9 });
  const first = await c.consume(q);
  assert.equal(first.payload, 'text', 'the higher priority first');
  const second = await c.consume(q);
  assert.deepEqual(second.payload, { n: 1 });
  assert.deepEqual(second.headers, { trace: 'a' });
  assert.equal(second.retry, 0);
  await c.ack(first.id);
  await c.ack(second.id);
  assert.equal(await c.consume(q), null);
  await assert.rejects(c.ack(second.id), (e) => e instanceof BoltQError && e.code === 'SERVER_ERROR');
  await c.close();
});

test('delay and ttl are milliseconds: a delayed message waits, an expired one is gone', { skip }, async () => {
  const c = await client();
  const q = name('delay');
  const sent = Date.now();
  await c.publish(q, 'later', {}, { delay: 400 });
  assert.equal(await c.consume(q), null, 'not before its delay');
  const [m] = await c.consumeWait(q, { waitMs: 5_000, max: 1 });
  assert.equal(m.payload, 'later');
  assert.ok(Date.now() - sent >= 350, `delivered after ${Date.now() - sent} ms`);
  await c.ack(m.id);
  await c.publish(q, 'short-lived', {}, { ttl: 100 });
  await sleep(300);
  assert.equal(await c.consume(q), null, 'expired');
  assert.throws(() => c.publish(q, 1, {}, { delay: -1 }), RangeError);
  await c.close();
});

test('the prefetch limit refuses a third unacked message until one is acked', { skip }, async () => {
  const c = await client();
  const q = name('prefetch');
  for (let i = 0; i < 3; i++) await c.publish(q, i);
  await c.setPrefetch(2);
  const a = await c.consume(q);
  await c.consume(q);
  await assert.rejects(c.consume(q), (e) => e.code === 'SERVER_ERROR' && /prefetch limit reached/.test(e.message));
  await c.ack(a.id);
  assert.notEqual(await c.consume(q), null);
  await c.close();
});

test('a durable subscriber gets live pushes in order', { skip }, async () => {
  const topic = name('live');
  const sub = await client();
  const got = [];
  await sub.subscribe(topic, 'reader', { durable: true }, (m) => got.push(m.payload));
  const pub = await client();
  for (let i = 0; i < 5; i++) await pub.publishTopic(topic, { i });
  await until(() => got.length === 5, 5_000, 'five pushes');
  assert.deepEqual(got, [0, 1, 2, 3, 4].map((i) => ({ i })));
  await sub.close();
  await pub.close();
});

test('a durable catch-up after offline publishes reaches the handler, which is in place before the reply', { skip }, async () => {
  const topic = name('catchup');
  const first = await client();
  await first.subscribe(topic, 'offline', { durable: true });
  await first.close();
  const pub = await client();
  for (let i = 0; i < 10; i++) await pub.publishTopic(topic, i);
  const again = await client();
  const got = [];
  await again.subscribe(topic, 'offline', { durable: true }, (m) => got.push(m.payload));
  await until(() => got.length === 10, 5_000, 'the catch-up');
  assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  await again.close();
  await pub.close();
});

test('with ack: true, pushes the handler got but did not acknowledge come again', { skip }, async () => {
  const topic = name('acked');
  const first = await client();
  const got = [];
  await first.subscribe(topic, 'worker', { durable: true, ack: true }, (m) => got.push(m));
  const pub = await client();
  for (let i = 0; i < 4; i++) await pub.publishTopic(topic, i);
  await until(() => got.length === 4, 5_000, 'four pushes');
  await first.ack(got[0].id);
  await first.ack(got[1].id);
  await sleep(200);
  await first.close();
  const again = await client();
  const redelivered = [];
  await again.subscribe(topic, 'worker', { durable: true, ack: true }, (m) => redelivered.push(m));
  await until(() => redelivered.length === 2, 5_000, 'the two unacknowledged pushes');
  assert.deepEqual(redelivered.map((m) => m.payload), [2, 3]);
  for (const m of redelivered) await again.ack(m.id);
  await again.close();
  await pub.close();
});

test('ackMany settles a batch in one request and names the ids it could not', { skip }, async () => {
  const c = await client();
  const q = name('ackmany');
  for (let i = 0; i < 20; i++) await c.publish(q, i);
  const batch = await c.consumeWait(q, { max: 20 });
  assert.equal(batch.length, 20);
  const reply = await c.ackMany([...batch.map((m) => m.id), '0123456789abcdef0123456789abcdef']);
  assert.equal(reply.count, 20);
  assert.deepEqual(reply.failed.map((f) => f.id), ['0123456789abcdef0123456789abcdef']);
  assert.equal(await c.consume(q), null);
  await c.close();
});

test('five concurrent polling consumers take 100 messages exactly once', { skip }, async () => {
  const q = name('workers');
  const pub = await client();
  await Promise.all(Array.from({ length: 100 }, (_, i) => pub.publish(q, i)));
  const seen = [];
  const worker = async () => {
    const c = await client();
    for (;;) {
      const m = await c.consume(q);
      if (m === null) break;
      seen.push(m.payload);
      await c.ack(m.id);
    }
    await c.close();
  };
  await Promise.all(Array.from({ length: 5 }, worker));
  assert.equal(seen.length, 100, 'no duplicates, none missing');
  assert.deepEqual([...new Set(seen)].sort((a, b) => a - b), Array.from({ length: 100 }, (_, i) => i));
  await pub.close();
});

test('1,000 pipelined publishes, then batch consume and ack of all of them', { skip }, async () => {
  const q = name('pipeline');
  const c = await client();
  const replies = await Promise.all(Array.from({ length: 1000 }, (_, i) => c.publish(q, i)));
  assert.equal(new Set(replies.map((r) => r.id)).size, 1000);
  const got = [];
  while (got.length < 1000) {
    const batch = await c.consumeWait(q, { waitMs: 1_000, max: 100 });
    assert.ok(batch.length > 0, `stalled at ${got.length}`);
    got.push(...batch.map((m) => m.payload));
    await Promise.all(batch.map((m) => c.ack(m.id)));
  }
  assert.deepEqual(got, Array.from({ length: 1000 }, (_, i) => i), 'FIFO within one priority');
  await c.close();
});

test('dead letters are listed, read, requeued and purged', { skip }, async () => {
  const q = name('dlq');
  const c = await client();
  await c.publish(q, 'doomed');
  for (let attempt = 0; attempt < 2; attempt++) {
    const m = await c.consume(q);
    await c.nack(m.id); // max_retry = 1: the second NACK dead-letters
  }
  assert.deepEqual(await c.dlqList(q), [{ queue: q, dead_letter: `${q}_dead_letter`, count: 1 }]);
  const read = await c.dlqRead(q);
  assert.equal(read.messages[0].payload, 'doomed');
  assert.equal(await c.dlqRequeue(q), 1);
  const back = await c.consume(q);
  assert.equal(back.payload, 'doomed');
  await c.nack(back.id);
  const again = await c.consume(q);
  await c.nack(again.id);
  assert.equal(await c.dlqPurge(q), 1);
  await c.close();
});

test('after the connection drops, the client reconnects and resubscribes', { skip }, async () => {
  const topic = name('reconnect');
  const sub = await client();
  const got = [];
  await sub.subscribe(topic, 'phoenix', { durable: false }, (m) => got.push(m.payload));
  const back = new Promise((resolve) => sub.once('reconnect', resolve));
  sub.socket.destroy();
  await back;
  const pub = await client();
  await pub.publishTopic(topic, 'after');
  await until(() => got.length === 1, 5_000, 'a push on the new connection');
  assert.deepEqual(got, ['after']);
  await sub.close();
  await pub.close();
});

test('a wrong API key fails the connect with AUTH_ERROR', { skip: skip || (!apiKey && 'the server has no key') }, async () => {
  const c = new BoltQClient('127.0.0.1', port, { apiKey: 'wrong', autoReconnect: false });
  await assert.rejects(c.connect(), (e) => e instanceof BoltQError && e.code === 'AUTH_ERROR');
  assert.equal(c.connected, false);
});

test('requests while disconnected fail at once', { skip }, async () => {
  const c = new BoltQClient('127.0.0.1', port, { apiKey });
  await assert.rejects(c.ping(), (e) => e.code === 'NOT_CONNECTED');
});

const tlsPort = Number(process.env.BOLTQ_TEST_TLS_PORT);
const caFile = process.env.BOLTQ_TEST_CA_FILE;
const skipTls = skip || (!(tlsPort && caFile) && 'needs the TLS server of the cargo test');

test('over TLS, trusting the server\'s CA: AUTH, publish and consume', { skip: skipTls }, async () => {
  const options = { apiKey, autoReconnect: false, tls: { ca: readFileSync(caFile) } };
  for (const host of ['127.0.0.1', 'localhost']) {
    const c = new BoltQClient(host, tlsPort, options);
    await c.connect();
    const q = name('tls');
    await c.publish(q, { over: 'tls' });
    const m = await c.consume(q);
    assert.deepEqual(m.payload, { over: 'tls' });
    await c.ack(m.id);
    await c.close();
  }
});

test('over TLS, a certificate not signed by a trusted CA is refused', { skip: skipTls }, async () => {
  const c = new BoltQClient('127.0.0.1', tlsPort, { apiKey, autoReconnect: false, tls: true });
  await assert.rejects(c.connect(), (e) => e instanceof BoltQError && e.code === 'CONNECTION_CLOSED');
});
