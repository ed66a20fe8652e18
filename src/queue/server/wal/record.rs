//! One command log record: a compact binary layout for the commands every message costs
//! (publish, consume, ack, nack, and the ticks that fired timers), JSON for the rest.
//!
//! Why two forms: JSON cost more than the broker work itself on the publish path (a 100 B
//! publish became a 404-byte record, and replay decoded it slower than the broker applied
//! it), while the rare commands (subscriptions, purges, dead-letter moves) are not worth a
//! layout of their own, and every log written before this format existed is JSON.
//!
//! The first byte tells them apart. serde_json writes a `Command` as `{"Variant":…}`, or as
//! `"DisconnectAll"` for the one variant without fields, so every old record starts with `{`
//! or `"` and decodes exactly as it always did. The binary tags are small numbers that are
//! neither.
//!
//! Binary layout: no version byte (a changed layout gets a new tag), integers little-endian,
//! `str` = `u32` byte length + UTF-8 bytes (checked), `bytes` = `u32` length + bytes.
//!
//! | tag | command | fields after the tag |
//! |---|---|---|
//! | `0x01` | `Publish` | message |
//! | `0x02` | `PublishTopic` | message |
//! | `0x03` | `Consume` | `now_ns` i64, consumer `shard` u16, consumer `conn` u64, `max` u32, `queue` str |
//! | `0x04` | `Ack` | `id` 16 bytes, `now_ns` i64 |
//! | `0x05` | `Nack` | `id` 16 bytes, `now_ns` i64 |
//! | `0x06` | `Tick` | `now_ns` i64 |
//!
//! message = `id` 16 bytes, `timestamp_ns` i64, `retry` u32, `max_retry` u32, `priority`
//! i64, `delay_ns` i64, `ttl_ns` i64, `deliver_at_ns` i64, `expires_at_ns` i64, `topic` str,
//! `exchange` str, `routing_key` str, headers (`u32` count, then `key` str + `value` str per
//! header, keys strictly ascending as the message's map keeps them), `payload` bytes.
//!
//! The `message` layout is also how snapshots pack queues' ready messages
//! (`server::packed_ready`), so a change to it changes both formats.
//!
//! A record holds exactly one command: trailing bytes are an error. Decoding is canonical —
//! a binary record that decodes re-encodes to exactly its bytes — and bounds every length
//! by the limits below before it allocates, so hostile bytes cost at most their own size.
//!
//! Trade-off: a command past any limit is written as JSON instead of being refused, so
//! `encode` never fails and a command some path let through is never lost from the log; the
//! request parsers already keep real messages far inside these limits.

use crate::queue::broker::exchange;
use crate::queue::broker::{Command, ConsumerRef};
use crate::queue::message::{Message, MessageExtras, MessageId};
use crate::queue::protocol::{frame, request};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The first byte of a binary record.
pub mod tag {
    pub const PUBLISH: u8 = 0x01;
    pub const PUBLISH_TOPIC: u8 = 0x02;
    pub const CONSUME: u8 = 0x03;
    pub const ACK: u8 = 0x04;
    pub const NACK: u8 = 0x05;
    pub const TICK: u8 = 0x06;
}

/// The first byte of every JSON record but one: serde_json's `{"Variant":…}`.
pub const JSON_OBJECT_BYTE: u8 = b'{';
/// The first byte of the JSON record of a variant without fields (`"DisconnectAll"`).
pub const JSON_STRING_BYTE: u8 = b'"';

/// Largest message payload: the v1 frame payload cap (4 MiB); a request frame cannot carry
/// more.
pub const PAYLOAD_BYTES_MAX: usize = frame::PAYLOAD_BYTES_MAX;
/// Longest queue, topic or exchange name: the request parser's name cap (1 KiB).
pub const NAME_BYTES_MAX: usize = request::NAME_BYTES_MAX;
/// Longest routing key: what an exchange routes (64 KiB).
pub const ROUTING_KEY_BYTES_MAX: usize = exchange::ROUTING_KEY_BYTES_MAX;
/// Most headers on one message.
pub const HEADERS_MAX: usize = 65_536;
/// Most header key and value bytes on one message, all added up (4 MiB, as the payload).
pub const HEADERS_BYTES_MAX: usize = frame::PAYLOAD_BYTES_MAX;

/// Bytes of a message's fixed-size fields: id, seven i64/u32 fields, four counts/lengths
/// (topic, exchange, routing key, headers) and the payload length.
/// Bytes of a binary `message` around its strings, headers and payload.
pub(crate) const MESSAGE_FIXED_BYTES: usize = 16 + 8 + 4 + 4 + 5 * 8 + 5 * 4;

/// Why a record does not decode. `at_byte` is the offset in the record where the field
/// that failed starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    Empty,
    UnknownTag(u8),
    Truncated {
        field: &'static str,
        at_byte: usize,
    },
    TooLong {
        field: &'static str,
        len_bytes: u64,
        max_bytes: usize,
        at_byte: usize,
    },
    TooManyHeaders {
        count: u64,
        at_byte: usize,
    },
    NotUtf8 {
        field: &'static str,
        at_byte: usize,
    },
    /// A one-byte field holding a value it cannot have.
    InvalidByte {
        field: &'static str,
        value: u8,
        at_byte: usize,
    },
    /// A header key not greater than the one before it (out of order or repeated).
    HeadersNotSorted {
        at_byte: usize,
    },
    TrailingBytes {
        count: usize,
        at_byte: usize,
    },
    /// A JSON record serde_json refused, with its text.
    Json(String),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Empty => f.write_str("empty record"),
            RecordError::UnknownTag(t) => write!(f, "unknown record tag 0x{t:02x} at byte 0"),
            RecordError::Truncated { field, at_byte } => {
                write!(f, "truncated {field} at byte {at_byte}")
            }
            RecordError::TooLong {
                field,
                len_bytes,
                max_bytes,
                at_byte,
            } => write!(
                f,
                "{field} too long at byte {at_byte}: {len_bytes} bytes, at most {max_bytes}"
            ),
            RecordError::TooManyHeaders { count, at_byte } => write!(
                f,
                "too many headers at byte {at_byte}: {count}, at most {HEADERS_MAX}"
            ),
            RecordError::NotUtf8 { field, at_byte } => {
                write!(f, "{field} is not UTF-8 at byte {at_byte}")
            }
            RecordError::InvalidByte {
                field,
                value,
                at_byte,
            } => write!(
                f,
                "{field} is 0x{value:02x} at byte {at_byte}, not a valid value"
            ),
            RecordError::HeadersNotSorted { at_byte } => write!(
                f,
                "header key at byte {at_byte} is not after the previous one (unsorted or repeated)"
            ),
            RecordError::TrailingBytes { count, at_byte } => {
                write!(f, "{count} trailing bytes at byte {at_byte}")
            }
            RecordError::Json(e) => write!(f, "JSON command does not decode: {e}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// Appends the record of `cmd` to `out`: binary for the hot commands within the limits,
/// JSON (exactly what the log held before binary records existed) for everything else.
pub fn encode(cmd: &Command, out: &mut Vec<u8>) {
    match cmd {
        Command::Publish { msg } if message_fits(msg) => put_message(tag::PUBLISH, msg, out),
        Command::PublishTopic { msg } if message_fits(msg) => {
            put_message(tag::PUBLISH_TOPIC, msg, out)
        }
        Command::Consume {
            queue,
            consumer,
            max,
            now_ns,
        } if queue.len() <= NAME_BYTES_MAX => {
            out.reserve(1 + 8 + 2 + 8 + 4 + 4 + queue.len());
            out.push(tag::CONSUME);
            out.extend_from_slice(&now_ns.to_le_bytes());
            out.extend_from_slice(&consumer.shard.to_le_bytes());
            out.extend_from_slice(&consumer.conn.to_le_bytes());
            out.extend_from_slice(&max.to_le_bytes());
            put_bytes(queue.as_bytes(), out);
        }
        Command::Ack { id, now_ns } => put_id_at(tag::ACK, id, *now_ns, out),
        Command::Nack { id, now_ns } => put_id_at(tag::NACK, id, *now_ns, out),
        Command::Tick { now_ns } => {
            out.push(tag::TICK);
            out.extend_from_slice(&now_ns.to_le_bytes());
        }
        _ => encode_json(cmd, out),
    }
}

/// Decodes one record, binary or JSON.
pub fn decode(bytes: &[u8]) -> Result<Command, RecordError> {
    let Some(&first) = bytes.first() else {
        return Err(RecordError::Empty);
    };
    if first == JSON_OBJECT_BYTE || first == JSON_STRING_BYTE {
        return serde_json::from_slice(bytes).map_err(|e| RecordError::Json(e.to_string()));
    }
    let mut r = Reader { bytes, at: 1 };
    let cmd = match first {
        tag::PUBLISH => Command::Publish { msg: r.message()? },
        tag::PUBLISH_TOPIC => Command::PublishTopic { msg: r.message()? },
        tag::CONSUME => {
            let now_ns = r.i64("now_ns")?;
            let shard = u16::from_le_bytes(r.array("consumer shard")?);
            let conn = r.u64("consumer conn")?;
            let max = r.u32("max")?;
            let queue = r.string("queue", NAME_BYTES_MAX)?;
            Command::Consume {
                queue,
                consumer: ConsumerRef { shard, conn },
                max,
                now_ns,
            }
        }
        tag::ACK => Command::Ack {
            id: MessageId(r.array("message id")?),
            now_ns: r.i64("now_ns")?,
        },
        tag::NACK => Command::Nack {
            id: MessageId(r.array("message id")?),
            now_ns: r.i64("now_ns")?,
        },
        tag::TICK => Command::Tick {
            now_ns: r.i64("now_ns")?,
        },
        other => return Err(RecordError::UnknownTag(other)),
    };
    r.finish()?;
    Ok(cmd)
}

/// The JSON form, byte for byte what `serde_json::to_vec(cmd)` wrote into old logs.
fn encode_json(cmd: &Command, out: &mut Vec<u8>) {
    // Cannot fail: writing to a Vec does not fail, and every map in a Command has string
    // keys (the only way serde_json refuses a value of these types).
    serde_json::to_writer(&mut *out, cmd).expect("a Command always serialises to JSON");
}

/// Whether every length of `msg` is within the binary limits (else it goes as JSON).
pub(crate) fn message_fits(msg: &Message) -> bool {
    msg.topic.len() <= NAME_BYTES_MAX
        && msg.exchange().len() <= NAME_BYTES_MAX
        && msg.routing_key().len() <= ROUTING_KEY_BYTES_MAX
        && msg.payload.len() <= PAYLOAD_BYTES_MAX
        && msg.headers().len() <= HEADERS_MAX
        && headers_bytes(msg.headers()) <= HEADERS_BYTES_MAX
}

fn headers_bytes(headers: &BTreeMap<String, String>) -> usize {
    headers.iter().map(|(k, v)| k.len() + v.len()).sum()
}

fn put_message(tag: u8, msg: &Message, out: &mut Vec<u8>) {
    out.push(tag);
    put_message_fields(msg, out);
}

/// Appends `msg` in the binary `message` layout; it must be within the limits
/// ([`message_fits`]).
pub(crate) fn put_message_fields(msg: &Message, out: &mut Vec<u8>) {
    let strings = msg.topic.len() + msg.exchange().len() + msg.routing_key().len();
    let headers = headers_bytes(msg.headers()) + 8 * msg.headers().len();
    out.reserve(MESSAGE_FIXED_BYTES + strings + headers + msg.payload.len());
    out.extend_from_slice(&msg.id.0);
    out.extend_from_slice(&msg.timestamp_ns.to_le_bytes());
    out.extend_from_slice(&msg.retry.to_le_bytes());
    out.extend_from_slice(&msg.max_retry.to_le_bytes());
    for v in [
        msg.priority,
        msg.delay_ns,
        msg.ttl_ns,
        msg.deliver_at_ns,
        msg.expires_at_ns,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    put_bytes(msg.topic.as_bytes(), out);
    put_bytes(msg.exchange().as_bytes(), out);
    put_bytes(msg.routing_key().as_bytes(), out);
    put_len(msg.headers().len(), out);
    for (key, value) in msg.headers() {
        put_bytes(key.as_bytes(), out);
        put_bytes(value.as_bytes(), out);
    }
    put_bytes(&msg.payload, out);
}

fn put_id_at(tag: u8, id: &MessageId, now_ns: i64, out: &mut Vec<u8>) {
    out.reserve(1 + 16 + 8);
    out.push(tag);
    out.extend_from_slice(&id.0);
    out.extend_from_slice(&now_ns.to_le_bytes());
}

fn put_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    put_len(bytes.len(), out);
    out.extend_from_slice(bytes);
}

fn put_len(len: usize, out: &mut Vec<u8>) {
    // Every length was checked against a limit of at most 4 MiB before a binary record
    // was chosen.
    let len = u32::try_from(len).expect("binary record lengths are within their limits");
    out.extend_from_slice(&len.to_le_bytes());
}

/// A cursor over one binary record; every read names its field for the error.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Where the next read starts.
    pub(crate) fn at(&self) -> usize {
        self.at
    }

    /// Whether every byte was read.
    pub(crate) fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RecordError> {
        let rest = &self.bytes[self.at..];
        if rest.len() < n {
            return Err(RecordError::Truncated {
                field,
                at_byte: self.at,
            });
        }
        self.at += n;
        Ok(&rest[..n])
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64, RecordError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    /// A length-prefixed byte string of at most `max_bytes`.
    fn bytes(&mut self, field: &'static str, max_bytes: usize) -> Result<&'a [u8], RecordError> {
        let at_byte = self.at;
        let len = self.u32(field)? as usize;
        if len > max_bytes {
            return Err(RecordError::TooLong {
                field,
                len_bytes: len as u64,
                max_bytes,
                at_byte,
            });
        }
        // A short string is reported where it starts, at its length.
        self.take(len, field)
            .map_err(|_| RecordError::Truncated { field, at_byte })
    }

    fn string(&mut self, field: &'static str, max_bytes: usize) -> Result<String, RecordError> {
        let bytes = self.bytes(field, max_bytes)?;
        let start = self.at - bytes.len();
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(RecordError::NotUtf8 {
                field,
                at_byte: start + e.valid_up_to(),
            }),
        }
    }

    pub(crate) fn message(&mut self) -> Result<Message, RecordError> {
        let id = MessageId(self.array("message id")?);
        let timestamp_ns = self.i64("timestamp_ns")?;
        let retry = self.u32("retry")?;
        let max_retry = self.u32("max_retry")?;
        let priority = self.i64("priority")?;
        let delay_ns = self.i64("delay_ns")?;
        let ttl_ns = self.i64("ttl_ns")?;
        let deliver_at_ns = self.i64("deliver_at_ns")?;
        let expires_at_ns = self.i64("expires_at_ns")?;
        let topic = self.topic()?;
        let exchange = self.string("exchange", NAME_BYTES_MAX)?;
        let routing_key = self.string("routing key", ROUTING_KEY_BYTES_MAX)?;
        let headers = self.headers()?;
        let payload = Bytes::copy_from_slice(self.bytes("payload", PAYLOAD_BYTES_MAX)?);
        let extras = MessageExtras {
            headers,
            exchange,
            routing_key,
        };
        Ok(Message {
            id,
            topic,
            payload,
            timestamp_ns,
            retry,
            max_retry,
            priority,
            delay_ns,
            ttl_ns,
            deliver_at_ns,
            expires_at_ns,
            extras: None,
        }
        .with_extras(extras))
    }

    /// An empty topic costs no allocation: every message of a snapshot's queue has one
    /// until it is given the queue's name.
    fn topic(&mut self) -> Result<Arc<str>, RecordError> {
        static EMPTY: OnceLock<Arc<str>> = OnceLock::new();
        let at_byte = self.at;
        if self.bytes.get(at_byte..at_byte + 4) == Some(&[0; 4]) {
            self.at += 4;
            return Ok(Arc::clone(EMPTY.get_or_init(|| Arc::from(""))));
        }
        Ok(self.string("topic", NAME_BYTES_MAX)?.into())
    }

    /// Count-prefixed key/value pairs, keys strictly ascending (as the map iterates), all
    /// within `HEADERS_MAX` and `HEADERS_BYTES_MAX`.
    fn headers(&mut self) -> Result<BTreeMap<String, String>, RecordError> {
        let at_byte = self.at;
        let count = self.u32("headers")?;
        if count as usize > HEADERS_MAX {
            return Err(RecordError::TooManyHeaders {
                count: count.into(),
                at_byte,
            });
        }
        let mut headers = BTreeMap::new();
        let mut budget_bytes = HEADERS_BYTES_MAX;
        for _ in 0..count {
            let key_at = self.at;
            let key = self.header_string("header key", &mut budget_bytes)?;
            if headers
                .last_key_value()
                .is_some_and(|(last, _): (&String, _)| *last >= key)
            {
                return Err(RecordError::HeadersNotSorted { at_byte: key_at });
            }
            let value = self.header_string("header value", &mut budget_bytes)?;
            headers.insert(key, value);
        }
        Ok(headers)
    }

    /// A header key or value, taken out of what is left of `HEADERS_BYTES_MAX`.
    fn header_string(
        &mut self,
        field: &'static str,
        budget_bytes: &mut usize,
    ) -> Result<String, RecordError> {
        let at_byte = self.at;
        let s = self.string(field, *budget_bytes).map_err(|e| match e {
            RecordError::TooLong { len_bytes, .. } => RecordError::TooLong {
                field: "headers",
                len_bytes: (HEADERS_BYTES_MAX - *budget_bytes) as u64 + len_bytes,
                max_bytes: HEADERS_BYTES_MAX,
                at_byte,
            },
            other => other,
        })?;
        *budget_bytes -= s.len();
        Ok(s)
    }

    fn finish(&self) -> Result<(), RecordError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            count => Err(RecordError::TrailingBytes {
                count,
                at_byte: self.at,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
