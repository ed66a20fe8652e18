// The frame codec on its own: exact bytes, split and joined chunks, hostile lengths.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeFrame, FrameDecoder, FrameError, PAYLOAD_BYTES_MAX } from '../src/frame.js';

test('a frame is the code, the little-endian length, then the payload', () => {
  assert.deepEqual(
    [...encodeFrame(0x03, '{"topic":"q"}')],
    [0x03, 13, 0, 0, 0, ...Buffer.from('{"topic":"q"}')],
  );
  assert.deepEqual([...encodeFrame(0x06)], [0x06, 0, 0, 0, 0]);
});

test('frames split across chunks and joined in one come out whole and in order', () => {
  const bytes = Buffer.concat([encodeFrame(0x00, '{"a":1}'), encodeFrame(0x02), encodeFrame(0x01, 'x')]);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const d = new FrameDecoder();
    const frames = [...d.push(bytes.subarray(0, cut)), ...d.push(bytes.subarray(cut))];
    assert.deepEqual(
      frames.map((f) => [f.code, f.payload.toString()]),
      [
        [0x00, '{"a":1}'],
        [0x02, ''],
        [0x01, 'x'],
      ],
      `cut at ${cut}`,
    );
  }
});

test('a declared length over the limit is refused, in either direction', () => {
  const head = Buffer.alloc(5);
  head.writeUInt8(0x00, 0);
  head.writeUInt32LE(PAYLOAD_BYTES_MAX + 1, 1);
  assert.throws(() => new FrameDecoder().push(head), FrameError);
  assert.throws(() => encodeFrame(0x01, Buffer.alloc(PAYLOAD_BYTES_MAX + 1)), FrameError);
  assert.throws(() => encodeFrame(256, ''), FrameError);
  // Exactly the limit is allowed.
  const max = Buffer.alloc(5);
  max.writeUInt32LE(PAYLOAD_BYTES_MAX, 1);
  assert.deepEqual(new FrameDecoder().push(max), []);
});
