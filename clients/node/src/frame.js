// The queue plane's wire frame (docs/queue-plane.md §1): one command or status byte, the
// payload length as a little-endian u32, then the payload. Kept apart from the client so the
// codec is tested on its own, byte for byte.

/** Largest payload either side accepts; a longer frame is a protocol error. */
export const PAYLOAD_BYTES_MAX = 4 * 1024 * 1024;
/** Command or status byte plus the length. */
export const HEADER_BYTES = 5;

/** Command bytes. 0x19 and up are BoltQ's additive commands (v1 never sends them). */
export const Op = Object.freeze({
  PUBLISH: 0x01,
  PUBLISH_TOPIC: 0x02,
  CONSUME: 0x03,
  ACK: 0x04,
  NACK: 0x05,
  PING: 0x06,
  STATS: 0x07,
  AUTH: 0x08,
  PREFETCH: 0x09,
  CONFIRM_SELECT: 0x13,
  EXCHANGE_DECLARE: 0x14,
  EXCHANGE_DELETE: 0x15,
  BIND_QUEUE: 0x16,
  UNBIND_QUEUE: 0x17,
  PUBLISH_EXCHANGE: 0x18,
  DLQ_LIST: 0x19,
  DLQ_READ: 0x1a,
  DLQ_REQUEUE: 0x1b,
  DLQ_PURGE: 0x1c,
});

/** Status bytes of replies and pushes. */
export const Status = Object.freeze({ OK: 0x00, ERROR: 0x01, EMPTY: 0x02, NOT_LEADER: 0x03 });

/** A frame that cannot be sent or was received malformed. */
export class FrameError extends Error {
  constructor(message) {
    super(message);
    this.name = 'FrameError';
  }
}

/** The bytes of one frame: `code`, then `payload` (a string is sent as UTF-8). */
export function encodeFrame(code, payload = '') {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : Buffer.from(payload);
  if (!Number.isInteger(code) || code < 0 || code > 0xff) {
    throw new FrameError(`command byte out of range: ${code}`);
  }
  if (body.length > PAYLOAD_BYTES_MAX) {
    throw new FrameError(`payload of ${body.length} bytes is over the ${PAYLOAD_BYTES_MAX}-byte frame limit`);
  }
  const frame = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  frame.writeUInt8(code, 0);
  frame.writeUInt32LE(body.length, 1);
  body.copy(frame, HEADER_BYTES);
  return frame;
}

/**
 * Splits a byte stream into frames. Feed it chunks as they arrive; it returns the frames
 * completed so far and keeps a partial one for the next chunk. A declared length over
 * `PAYLOAD_BYTES_MAX` throws: the stream is out of step and the connection must close.
 */
export class FrameDecoder {
  constructor() {
    this.buffered = Buffer.alloc(0);
  }

  push(chunk) {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    const frames = [];
    let at = 0;
    while (this.buffered.length - at >= HEADER_BYTES) {
      const length = this.buffered.readUInt32LE(at + 1);
      if (length > PAYLOAD_BYTES_MAX) {
        throw new FrameError(`frame of ${length} bytes is over the ${PAYLOAD_BYTES_MAX}-byte limit`);
      }
      if (this.buffered.length - at < HEADER_BYTES + length) break;
      const code = this.buffered[at];
      const payload = this.buffered.subarray(at + HEADER_BYTES, at + HEADER_BYTES + length);
      frames.push({ code, payload: Buffer.from(payload) });
      at += HEADER_BYTES + length;
    }
    this.buffered = this.buffered.subarray(at);
    return frames;
  }
}
