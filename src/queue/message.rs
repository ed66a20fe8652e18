//! The queue plane's message record (v1 spec §3.1) and its id.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;

/// A message id: 16 bytes, shown as 32 lowercase hex digits as in v1.
///
/// The first byte is the slot of the queue (or topic) the message lives in, so an ACK or NACK
/// that names only the id can be routed to the shard that owns it, from any connection, on
/// any shard. The other 15 bytes are unique per process (a random prefix chosen at start,
/// then a counter), so ids never repeat across restarts either. v1 clients treat ids as
/// opaque strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub [u8; 16]);

impl MessageId {
    pub fn slot(&self) -> u16 {
        self.0[0] as u16
    }

    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(32);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
    }

    /// Parses 32 hex digits (either case). Anything else is not an id this server issued.
    pub fn parse(s: &str) -> Option<MessageId> {
        let b = s.as_bytes();
        if b.len() != 32 {
            return None;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        let mut out = [0u8; 16];
        for i in 0..16 {
            out[i] = (nibble(b[2 * i])? << 4) | nibble(b[2 * i + 1])?;
        }
        Some(MessageId(out))
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({})", self.to_hex())
    }
}

/// Issues ids on one shard: `[slot, prefix(7 bytes), counter(8 bytes)]`. The prefix is
/// random per shard start, so two processes (or two shards) never collide.
pub struct IdGenerator {
    prefix: [u8; 7],
    counter: u64,
}

impl IdGenerator {
    pub fn new(prefix: [u8; 7]) -> IdGenerator {
        IdGenerator { prefix, counter: 0 }
    }

    pub fn next(&mut self, slot: u16) -> MessageId {
        assert!(slot < 256, "slot {slot} does not fit the id's slot byte");
        self.counter += 1;
        let mut id = [0u8; 16];
        id[0] = slot as u8;
        id[1..8].copy_from_slice(&self.prefix);
        id[8..].copy_from_slice(&self.counter.to_be_bytes());
        MessageId(id)
    }
}

/// A message as the broker keeps it (v1 spec §3.1). Times are Unix nanoseconds; durations
/// nanoseconds (v1 wire units).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: MessageId,
    /// Queue name (work queue), topic name (pub/sub), or target queue (exchange copy).
    pub topic: String,
    /// The raw JSON text of the payload, validated when the request was parsed, echoed
    /// back verbatim as a JSON value (a string stays a string).
    pub payload: Bytes,
    /// Sorted by key, as v1 (Go maps marshal in key order).
    pub headers: BTreeMap<String, String>,
    pub timestamp_ns: i64,
    pub retry: u32,
    pub max_retry: u32,
    /// As sent (v1 keeps the stored value); clamped to 0..=9 only when queued.
    pub priority: i64,
    pub delay_ns: i64,
    pub ttl_ns: i64,
    /// 0 = not delayed.
    pub deliver_at_ns: i64,
    /// 0 = never expires.
    pub expires_at_ns: i64,
    pub exchange: String,
    pub routing_key: String,
}

impl Message {
    /// Priority level 0..=9 the message is queued at.
    pub fn level(&self) -> usize {
        self.priority.clamp(0, 9) as usize
    }

    pub fn is_expired(&self, now_ns: i64) -> bool {
        self.expires_at_ns != 0 && self.expires_at_ns <= now_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_slot_and_round_trip_as_hex() {
        let mut g = IdGenerator::new([7; 7]);
        let a = g.next(200);
        let b = g.next(200);
        assert_ne!(a, b);
        assert_eq!(a.slot(), 200);
        let hex = a.to_hex();
        assert_eq!(hex.len(), 32);
        assert!(hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_eq!(MessageId::parse(&hex), Some(a));
        assert_eq!(MessageId::parse(&hex.to_uppercase()), Some(a));
        assert_eq!(MessageId::parse("xyz"), None);
        assert_eq!(MessageId::parse(&"g".repeat(32)), None);
    }
}
