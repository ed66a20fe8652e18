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
//! A record holds exactly one command: trailing bytes are an error. Decoding is canonical —
//! a binary record that decodes re-encodes to exactly its bytes — and bounds every length
//! by the limits below before it allocates, so hostile bytes cost at most their own size.
//!
//! Trade-off: a command past any limit is written as JSON instead of being refused, so
//! `encode` never fails and a command some path let through is never lost from the log; the
//! request parsers already keep real messages far inside these limits.

use crate::queue::broker::exchange;
use crate::queue::broker::{Command, ConsumerRef};
use crate::queue::message::{Message, MessageId};
use crate::queue::protocol::{frame, request};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;

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
const MESSAGE_FIXED_BYTES: usize = 16 + 8 + 4 + 4 + 5 * 8 + 5 * 4;

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
fn message_fits(msg: &Message) -> bool {
    msg.topic.len() <= NAME_BYTES_MAX
        && msg.exchange.len() <= NAME_BYTES_MAX
        && msg.routing_key.len() <= ROUTING_KEY_BYTES_MAX
        && msg.payload.len() <= PAYLOAD_BYTES_MAX
        && msg.headers.len() <= HEADERS_MAX
        && headers_bytes(&msg.headers) <= HEADERS_BYTES_MAX
}

fn headers_bytes(headers: &BTreeMap<String, String>) -> usize {
    headers.iter().map(|(k, v)| k.len() + v.len()).sum()
}

fn put_message(tag: u8, msg: &Message, out: &mut Vec<u8>) {
    let strings = msg.topic.len() + msg.exchange.len() + msg.routing_key.len();
    let headers = headers_bytes(&msg.headers) + 8 * msg.headers.len();
    out.reserve(1 + MESSAGE_FIXED_BYTES + strings + headers + msg.payload.len());
    out.push(tag);
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
    put_bytes(msg.exchange.as_bytes(), out);
    put_bytes(msg.routing_key.as_bytes(), out);
    put_len(msg.headers.len(), out);
    for (key, value) in &msg.headers {
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
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
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

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, RecordError> {
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

    fn message(&mut self) -> Result<Message, RecordError> {
        let id = MessageId(self.array("message id")?);
        let timestamp_ns = self.i64("timestamp_ns")?;
        let retry = self.u32("retry")?;
        let max_retry = self.u32("max_retry")?;
        let priority = self.i64("priority")?;
        let delay_ns = self.i64("delay_ns")?;
        let ttl_ns = self.i64("ttl_ns")?;
        let deliver_at_ns = self.i64("deliver_at_ns")?;
        let expires_at_ns = self.i64("expires_at_ns")?;
        let topic = self.string("topic", NAME_BYTES_MAX)?;
        let exchange = self.string("exchange", NAME_BYTES_MAX)?;
        let routing_key = self.string("routing key", ROUTING_KEY_BYTES_MAX)?;
        let headers = self.headers()?;
        let payload = Bytes::copy_from_slice(self.bytes("payload", PAYLOAD_BYTES_MAX)?);
        Ok(Message {
            id,
            topic,
            payload,
            headers,
            timestamp_ns,
            retry,
            max_retry,
            priority,
            delay_ns,
            ttl_ns,
            deliver_at_ns,
            expires_at_ns,
            exchange,
            routing_key,
        })
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
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    const ID_HEX: &str = "03070707070707070000000000000001";

    fn id() -> MessageId {
        MessageId::parse(ID_HEX).unwrap()
    }

    fn message(topic: &str) -> Message {
        Message {
            id: id(),
            topic: topic.into(),
            payload: Bytes::from_static(br#"{"n":1}"#),
            headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
            timestamp_ns: 5,
            retry: 1,
            max_retry: 5,
            priority: 12,
            delay_ns: 0,
            ttl_ns: 7,
            deliver_at_ns: 0,
            expires_at_ns: 12,
            exchange: String::new(),
            routing_key: String::new(),
        }
    }

    fn encoded(cmd: &Command) -> Vec<u8> {
        let mut out = Vec::new();
        encode(cmd, &mut out);
        out
    }

    fn binary_tag(cmd: &Command) -> Option<u8> {
        match cmd {
            Command::Publish { .. } => Some(tag::PUBLISH),
            Command::PublishTopic { .. } => Some(tag::PUBLISH_TOPIC),
            Command::Consume { .. } => Some(tag::CONSUME),
            Command::Ack { .. } => Some(tag::ACK),
            Command::Nack { .. } => Some(tag::NACK),
            Command::Tick { .. } => Some(tag::TICK),
            _ => None,
        }
    }

    // ---- random commands ----

    fn edge_i64(rng: &mut Rng) -> i64 {
        match rng.below(6) {
            0 => 0,
            1 => i64::MIN,
            2 => i64::MAX,
            3 => -1,
            4 => rng.below(1_000) as i64,
            _ => rng.next_u64() as i64,
        }
    }

    fn edge_u32(rng: &mut Rng) -> u32 {
        match rng.below(4) {
            0 => 0,
            1 => u32::MAX,
            2 => rng.below(10) as u32,
            _ => rng.next_u64() as u32,
        }
    }

    /// A string of at most `max_bytes`: empty, short, exactly at the limit, or anything up
    /// to it, from characters of 1 to 4 UTF-8 bytes (quotes and escapes included).
    fn string(rng: &mut Rng, max_bytes: usize) -> String {
        const CHARS: [char; 9] = ['a', 'Z', '0', '"', '\\', '\0', 'é', '€', '🦀'];
        let target = match rng.below(4) {
            0 => 0,
            1 => rng.below(12) as usize,
            2 => max_bytes,
            _ => rng.below(max_bytes as u64 + 1) as usize,
        }
        .min(max_bytes);
        let mut s = String::with_capacity(target);
        while s.len() < target {
            let c = CHARS[rng.below(CHARS.len() as u64) as usize];
            if s.len() + c.len_utf8() > target {
                s.push('a');
            } else {
                s.push(c);
            }
        }
        s
    }

    fn payload(rng: &mut Rng) -> Bytes {
        let len = match rng.below(4) {
            0 => 0,
            1 => rng.below(200),
            _ => rng.below(5_000),
        };
        // Any bytes, not only JSON text: the record must not care.
        Bytes::from((0..len).map(|_| rng.next_u64() as u8).collect::<Vec<u8>>())
    }

    fn headers(rng: &mut Rng) -> BTreeMap<String, String> {
        let count = match rng.below(4) {
            0 => 0,
            1 => 1,
            2 => rng.below(8),
            _ => rng.below(400),
        };
        (0..count)
            .map(|_| (string(rng, 24), string(rng, 64)))
            .collect()
    }

    fn random_message(rng: &mut Rng) -> Message {
        let mut id = [0u8; 16];
        id.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        Message {
            id: MessageId(id),
            topic: string(rng, NAME_BYTES_MAX),
            payload: payload(rng),
            headers: headers(rng),
            timestamp_ns: edge_i64(rng),
            retry: edge_u32(rng),
            max_retry: edge_u32(rng),
            priority: edge_i64(rng),
            delay_ns: edge_i64(rng),
            ttl_ns: edge_i64(rng),
            deliver_at_ns: edge_i64(rng),
            expires_at_ns: edge_i64(rng),
            exchange: string(rng, NAME_BYTES_MAX),
            routing_key: if rng.below(8) == 0 {
                string(rng, ROUTING_KEY_BYTES_MAX)
            } else {
                string(rng, 200)
            },
        }
    }

    /// A random command of one of the binary-tagged kinds, within every limit.
    fn random_hot_command(rng: &mut Rng) -> Command {
        let mut id = [0u8; 16];
        id.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        match rng.below(6) {
            0 => Command::Publish {
                msg: random_message(rng),
            },
            1 => Command::PublishTopic {
                msg: random_message(rng),
            },
            2 => Command::Consume {
                queue: string(rng, NAME_BYTES_MAX),
                consumer: ConsumerRef {
                    shard: rng.next_u64() as u16,
                    conn: rng.next_u64(),
                },
                max: edge_u32(rng),
                now_ns: edge_i64(rng),
            },
            3 => Command::Ack {
                id: MessageId(id),
                now_ns: edge_i64(rng),
            },
            4 => Command::Nack {
                id: MessageId(id),
                now_ns: edge_i64(rng),
            },
            _ => Command::Tick {
                now_ns: edge_i64(rng),
            },
        }
    }

    /// What the binary layout says the record's size is.
    fn layout_len(cmd: &Command) -> usize {
        match cmd {
            Command::Publish { msg } | Command::PublishTopic { msg } => {
                1 + MESSAGE_FIXED_BYTES
                    + msg.topic.len()
                    + msg.exchange.len()
                    + msg.routing_key.len()
                    + headers_bytes(&msg.headers)
                    + 8 * msg.headers.len()
                    + msg.payload.len()
            }
            Command::Consume { queue, .. } => 1 + 8 + 2 + 8 + 4 + 4 + queue.len(),
            Command::Ack { .. } | Command::Nack { .. } => 1 + 16 + 8,
            Command::Tick { .. } => 1 + 8,
            other => panic!("not a binary command: {other:?}"),
        }
    }

    #[test]
    fn hot_commands_round_trip_through_binary_records() {
        let mut rng = Rng::new(0x5EED_0001);
        for case in 0..3_000 {
            let cmd = random_hot_command(&mut rng);
            let bytes = encoded(&cmd);
            assert_eq!(Some(bytes[0]), binary_tag(&cmd), "case {case}");
            assert_eq!(bytes.len(), layout_len(&cmd), "case {case}");
            assert_eq!(decode(&bytes), Ok(cmd.clone()), "case {case}");
            assert_eq!(encoded(&decode(&bytes).unwrap()), bytes, "case {case}");
        }
    }

    /// The layout pinned byte for byte: tag, little-endian integers, field order.
    #[test]
    fn binary_layout_is_explicit_little_endian() {
        let ack = Command::Ack {
            id: MessageId([0xA0; 16]),
            now_ns: 0x0102_0304_0506_0708,
        };
        let mut want = vec![0x04];
        want.extend_from_slice(&[0xA0; 16]);
        want.extend_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(encoded(&ack), want);

        let consume = Command::Consume {
            queue: "q1".into(),
            consumer: ConsumerRef {
                shard: 0x0201,
                conn: 9,
            },
            max: 0x0A0B_0C0D,
            now_ns: -2,
        };
        let mut want = vec![0x03];
        want.extend_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        want.extend_from_slice(&[0x01, 0x02]);
        want.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0x0D, 0x0C, 0x0B, 0x0A]);
        want.extend_from_slice(&[2, 0, 0, 0, b'q', b'1']);
        assert_eq!(encoded(&consume), want);

        let tick = Command::Tick { now_ns: 1 };
        assert_eq!(encoded(&tick), [6, 1, 0, 0, 0, 0, 0, 0, 0]);

        let mut msg = message("q");
        msg.payload = Bytes::from_static(b"7");
        msg.routing_key = "rk".into();
        let mut want = vec![0x01];
        want.extend_from_slice(&id().0);
        want.extend_from_slice(&5i64.to_le_bytes());
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&5u32.to_le_bytes());
        for v in [12i64, 0, 7, 0, 12] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&[1, 0, 0, 0, b'q']); // topic
        want.extend_from_slice(&[0, 0, 0, 0]); // exchange
        want.extend_from_slice(&[2, 0, 0, 0, b'r', b'k']); // routing key
        want.extend_from_slice(&[1, 0, 0, 0]); // one header
        want.extend_from_slice(&[1, 0, 0, 0, b'k', 1, 0, 0, 0, b'v']);
        want.extend_from_slice(&[1, 0, 0, 0, b'7']); // payload
        assert_eq!(encoded(&Command::Publish { msg }), want);
    }

    /// Builds a command with one length set to the argument.
    type MakeCommand = Box<dyn Fn(usize) -> Command>;

    /// Each limit is reachable in binary; one byte (or header) past it, the command is
    /// logged as JSON and still comes back intact.
    #[test]
    fn commands_past_a_limit_fall_back_to_json_and_round_trip() {
        let cases: Vec<(&str, MakeCommand, usize)> = vec![
            (
                "topic",
                Box::new(|n| Command::Publish {
                    msg: message(&"t".repeat(n)),
                }),
                NAME_BYTES_MAX,
            ),
            (
                "exchange",
                Box::new(|n| {
                    let mut msg = message("q");
                    msg.exchange = "x".repeat(n);
                    Command::PublishTopic { msg }
                }),
                NAME_BYTES_MAX,
            ),
            (
                "routing key",
                Box::new(|n| {
                    let mut msg = message("q");
                    msg.routing_key = "r".repeat(n);
                    Command::Publish { msg }
                }),
                ROUTING_KEY_BYTES_MAX,
            ),
            (
                "payload",
                Box::new(|n| {
                    let mut msg = message("q");
                    msg.payload = Bytes::from(vec![b'7'; n]);
                    Command::Publish { msg }
                }),
                PAYLOAD_BYTES_MAX,
            ),
            (
                "header bytes",
                Box::new(|n| {
                    let mut msg = message("q");
                    msg.headers = BTreeMap::from([("k".to_string(), "v".repeat(n - 1))]);
                    Command::Publish { msg }
                }),
                HEADERS_BYTES_MAX,
            ),
            (
                "header count",
                Box::new(|n| {
                    let mut msg = message("q");
                    msg.headers = (0..n).map(|i| (format!("{i:06}"), String::new())).collect();
                    Command::Publish { msg }
                }),
                HEADERS_MAX,
            ),
            (
                "queue",
                Box::new(|n| Command::Consume {
                    queue: "q".repeat(n),
                    consumer: ConsumerRef { shard: 0, conn: 1 },
                    max: 1,
                    now_ns: 1,
                }),
                NAME_BYTES_MAX,
            ),
        ];
        for (name, make, limit) in cases {
            let at = make(limit);
            let bytes = encoded(&at);
            assert_eq!(Some(bytes[0]), binary_tag(&at), "{name} at its limit");
            assert_eq!(decode(&bytes).as_ref(), Ok(&at), "{name} at its limit");

            let past = make(limit + 1);
            let bytes = encoded(&past);
            assert_eq!(bytes[0], JSON_OBJECT_BYTE, "{name} past its limit");
            assert_eq!(bytes, serde_json::to_vec(&past).unwrap(), "{name}");
            assert_eq!(decode(&bytes).as_ref(), Ok(&past), "{name} past its limit");
        }
    }

    // ---- the old JSON records ----

    /// Records as the log held them before binary records: `serde_json::to_vec(cmd)`,
    /// frozen as text so that a change to the commands' serde form is noticed here.
    const OLD_RECORDS: [&str; 7] = [
        r#"{"Publish":{"msg":{"id":"03070707070707070000000000000001","topic":"jobs","payload":"{\"n\":1}","headers":{"k":"v"},"timestamp_ns":5,"retry":1,"max_retry":5,"priority":12,"delay_ns":0,"ttl_ns":7,"deliver_at_ns":0,"expires_at_ns":12,"exchange":"","routing_key":""}}}"#,
        r#"{"Consume":{"queue":"jobs","consumer":{"shard":1,"conn":42},"max":3,"now_ns":-9}}"#,
        r#"{"Ack":{"id":"03070707070707070000000000000001","now_ns":5}}"#,
        r#"{"Nack":{"id":"03070707070707070000000000000001","now_ns":6}}"#,
        r#"{"Tick":{"now_ns":1700000000000000000}}"#,
        r#"{"Subscribe":{"topic":"t","sub_id":"s","durable":true,"consumer":{"shard":0,"conn":7},"now_ns":3}}"#,
        r#""DisconnectAll""#,
    ];

    fn old_commands() -> [Command; 7] {
        [
            Command::Publish {
                msg: message("jobs"),
            },
            Command::Consume {
                queue: "jobs".into(),
                consumer: ConsumerRef { shard: 1, conn: 42 },
                max: 3,
                now_ns: -9,
            },
            Command::Ack {
                id: id(),
                now_ns: 5,
            },
            Command::Nack {
                id: id(),
                now_ns: 6,
            },
            Command::Tick {
                now_ns: 1_700_000_000_000_000_000,
            },
            Command::Subscribe {
                topic: "t".into(),
                sub_id: "s".into(),
                durable: true,
                consumer: ConsumerRef { shard: 0, conn: 7 },
                now_ns: 3,
            },
            Command::DisconnectAll,
        ]
    }

    #[test]
    fn json_records_of_the_old_log_still_decode() {
        for (text, cmd) in OLD_RECORDS.iter().zip(old_commands()) {
            assert_eq!(serde_json::to_vec(&cmd).unwrap(), text.as_bytes(), "{text}");
            assert_eq!(decode(text.as_bytes()), Ok(cmd), "{text}");
        }
        // A payload that is not UTF-8 went into JSON as an array of numbers.
        let mut msg = message("jobs");
        msg.payload = Bytes::from_static(&[0xFF, 0x00, 0x41]);
        let cmd = Command::PublishTopic { msg };
        assert_eq!(decode(&serde_json::to_vec(&cmd).unwrap()), Ok(cmd));
    }

    #[test]
    fn rare_commands_are_written_as_the_same_json_as_before() {
        let rare = [
            Command::Subscribe {
                topic: "t".into(),
                sub_id: "s".into(),
                durable: false,
                consumer: ConsumerRef { shard: 2, conn: 3 },
                now_ns: 4,
            },
            Command::Disconnect {
                consumer: ConsumerRef { shard: 2, conn: 3 },
            },
            Command::DisconnectAll,
            Command::DeadLetterRequeue {
                queue: "q".into(),
                limit: 10,
                now_ns: 4,
            },
            Command::Purge { queue: "q".into() },
            Command::DeadLetterPurge { queue: "q".into() },
        ];
        for cmd in rare {
            let bytes = encoded(&cmd);
            assert_eq!(bytes, serde_json::to_vec(&cmd).unwrap(), "{cmd:?}");
            assert_eq!(decode(&bytes), Ok(cmd));
        }
    }

    // ---- refusals ----

    /// A PUBLISH record written field by field, independently of `encode`, with lengths
    /// as given (possibly lying).
    struct Raw(Vec<u8>);

    impl Raw {
        fn publish_head() -> Raw {
            let mut r = Raw(vec![tag::PUBLISH]);
            r.0.extend_from_slice(&[0x11; 16]);
            r.0.extend_from_slice(&[0; 8 + 4 + 4 + 5 * 8]);
            r
        }
        fn len(mut self, n: u32) -> Raw {
            self.0.extend_from_slice(&n.to_le_bytes());
            self
        }
        fn str(self, s: &[u8]) -> Raw {
            let mut r = self.len(s.len() as u32);
            r.0.extend_from_slice(s);
            r
        }
        /// Topic, exchange and routing key.
        fn names(self, topic: &[u8]) -> Raw {
            self.str(topic).str(b"").str(b"")
        }
    }

    #[test]
    fn the_decoder_refuses_bad_records_with_a_clear_error() {
        let ok = Raw::publish_head().names(b"q").len(0).str(b"p").0;
        assert!(decode(&ok).is_ok());
        let names_end = 1 + 16 + 8 + 4 + 4 + 40 + 5 + 4 + 4;

        let cases: Vec<(Vec<u8>, RecordError, &str)> = vec![
            (vec![], RecordError::Empty, "empty record"),
            (
                vec![0x00, 1, 2],
                RecordError::UnknownTag(0),
                "unknown record tag 0x00 at byte 0",
            ),
            (
                vec![0x07],
                RecordError::UnknownTag(7),
                "unknown record tag 0x07 at byte 0",
            ),
            (
                Raw::publish_head().names(b"q").0,
                RecordError::Truncated {
                    field: "headers",
                    at_byte: names_end,
                },
                "truncated headers at byte 86",
            ),
            (
                {
                    let mut r = Raw::publish_head().len(NAME_BYTES_MAX as u32 + 1).0;
                    r.extend(vec![b'a'; NAME_BYTES_MAX + 1]);
                    r
                },
                RecordError::TooLong {
                    field: "topic",
                    len_bytes: NAME_BYTES_MAX as u64 + 1,
                    max_bytes: NAME_BYTES_MAX,
                    at_byte: 73,
                },
                "topic too long at byte 73: 1025 bytes, at most 1024",
            ),
            (
                Raw::publish_head().names(b"q").len(0).len(u32::MAX).0,
                RecordError::TooLong {
                    field: "payload",
                    len_bytes: u32::MAX as u64,
                    max_bytes: PAYLOAD_BYTES_MAX,
                    at_byte: names_end + 4,
                },
                "payload too long at byte 90: 4294967295 bytes, at most 4194304",
            ),
            (
                Raw::publish_head().names(b"q").len(u32::MAX).0,
                RecordError::TooManyHeaders {
                    count: u32::MAX as u64,
                    at_byte: names_end,
                },
                "too many headers at byte 86: 4294967295, at most 65536",
            ),
            (
                Raw::publish_head().names(b"q").len(1).str(b"k").len(10).0,
                RecordError::Truncated {
                    field: "header value",
                    at_byte: names_end + 4 + 5,
                },
                "truncated header value at byte 95",
            ),
            (
                Raw::publish_head()
                    .names(b"q")
                    .len(2)
                    .str(b"b")
                    .str(b"")
                    .str(b"a")
                    .str(b"")
                    .str(b"")
                    .0,
                RecordError::HeadersNotSorted {
                    at_byte: names_end + 4 + 5 + 4,
                },
                "header key at byte 99 is not after the previous one (unsorted or repeated)",
            ),
            (
                Raw::publish_head()
                    .names(b"q")
                    .len(2)
                    .str(b"a")
                    .str(b"")
                    .str(b"a")
                    .str(b"")
                    .str(b"")
                    .0,
                RecordError::HeadersNotSorted {
                    at_byte: names_end + 4 + 5 + 4,
                },
                "header key at byte 99 is not after the previous one (unsorted or repeated)",
            ),
            (
                Raw::publish_head().names(b"a\xC3(").len(0).str(b"").0,
                RecordError::NotUtf8 {
                    field: "topic",
                    at_byte: 78,
                },
                "topic is not UTF-8 at byte 78",
            ),
            (
                {
                    let mut r = ok.clone();
                    r.push(0);
                    r
                },
                RecordError::TrailingBytes {
                    count: 1,
                    at_byte: ok.len(),
                },
                "1 trailing bytes at byte 95",
            ),
            (
                vec![tag::ACK, 1, 2, 3],
                RecordError::Truncated {
                    field: "message id",
                    at_byte: 1,
                },
                "truncated message id at byte 1",
            ),
        ];
        for (bytes, want, text) in cases {
            let got = decode(&bytes).expect_err(text);
            assert_eq!(got, want);
            assert_eq!(got.to_string(), text);
        }
    }

    #[test]
    fn header_bytes_are_bounded_in_total() {
        let third = (HEADERS_BYTES_MAX / 3) as u32;
        let mut r = Raw::publish_head().names(b"q").len(4);
        for key in [b"a", b"b", b"c", b"d"] {
            r = r.str(key).len(third);
            r.0.extend(vec![b'v'; third as usize]);
        }
        let err = decode(&r.0).expect_err("over the headers budget");
        let RecordError::TooLong {
            field: "headers",
            len_bytes,
            max_bytes: HEADERS_BYTES_MAX,
            ..
        } = err
        else {
            panic!("{err:?}");
        };
        assert!(len_bytes > HEADERS_BYTES_MAX as u64, "{len_bytes}");
    }

    #[test]
    fn a_broken_json_record_names_the_json_error() {
        let err = decode(br#"{"Ack":{"id":"zz","now_ns":1}}"#).unwrap_err();
        assert!(matches!(err, RecordError::Json(_)), "{err:?}");
        assert!(err
            .to_string()
            .starts_with("JSON command does not decode: "));
        assert!(err.to_string().contains("invalid message id"), "{err}");
    }

    // ---- mutations ----

    fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
        for _ in 0..1 + rng.below(3) {
            let len = bytes.len() as u64;
            match rng.below(6) {
                0 => bytes.truncate(rng.below(len + 1) as usize),
                1 if len > 0 => {
                    let i = rng.below(len) as usize;
                    bytes[i] ^= 1 << rng.below(8);
                }
                2 if len > 0 => {
                    let i = rng.below(len) as usize;
                    bytes[i] = [0x00, 0xFF, 0x7F, 0x80, b'{', b'"', 0x01][rng.below(7) as usize];
                }
                3 => {
                    let i = rng.below(len + 1) as usize;
                    bytes.insert(i, rng.next_u64() as u8);
                }
                4 if len > 0 => {
                    bytes.remove(rng.below(len) as usize);
                }
                // A length-like value over four bytes, to reach the limit checks.
                _ if len >= 4 => {
                    let i = rng.below(len - 3) as usize;
                    let v: u32 = [0, 1, 1025, 65_537, 1 << 22, u32::MAX][rng.below(6) as usize];
                    bytes[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
                _ => bytes.push(rng.next_u64() as u8),
            }
        }
    }

    /// Cuts `s` to at most 64 bytes, on a character boundary.
    fn cut(s: &mut String) {
        while s.len() > 64 {
            s.pop();
        }
    }

    /// Truncated, flipped, shifted and patched records: decode never panics, and whatever
    /// it accepts re-encodes to a record that decodes to the same command — byte for byte
    /// the input when that was binary (the binary form is canonical).
    #[test]
    fn mutated_records_never_panic_and_accepted_ones_re_encode() {
        let mut rng = Rng::new(0x5EED_0002);
        let mut valid: Vec<Vec<u8>> = OLD_RECORDS.iter().map(|t| t.as_bytes().to_vec()).collect();
        while valid.len() < 64 {
            let mut cmd = random_hot_command(&mut rng);
            // Keep inputs small so that many mutations fit the test's time.
            if let Command::Publish { msg } | Command::PublishTopic { msg } = &mut cmd {
                cut(&mut msg.routing_key);
                cut(&mut msg.topic);
                cut(&mut msg.exchange);
                msg.payload.truncate(64);
                while msg.headers.len() > 3 {
                    msg.headers.pop_last();
                }
            }
            if let Command::Consume { queue, .. } = &mut cmd {
                cut(queue);
            }
            valid.push(encoded(&cmd));
        }
        let (mut accepted, mut refused) = (0u32, 0u32);
        for case in 0..120_000u32 {
            let mut bytes = valid[rng.below(valid.len() as u64) as usize].clone();
            mutate(&mut rng, &mut bytes);
            let Ok(cmd) = decode(&bytes) else {
                refused += 1;
                continue;
            };
            accepted += 1;
            let again = encoded(&cmd);
            assert_eq!(decode(&again).as_ref(), Ok(&cmd), "case {case}: {bytes:?}");
            if bytes[0] != JSON_OBJECT_BYTE && bytes[0] != JSON_STRING_BYTE {
                assert_eq!(again, bytes, "case {case}: binary is canonical");
            }
        }
        // Both outcomes are common, so both paths above were exercised.
        assert!(
            accepted > 10_000 && refused > 10_000,
            "{accepted} / {refused}"
        );
    }
}
