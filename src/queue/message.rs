//! The queue plane's message record (v1 spec §3.1) and its id.

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A message id: 16 bytes, shown as 32 lowercase hex digits as in v1.
///
/// The first byte is the slot of the queue (or topic) the message lives in, so an ACK or NACK
/// that names only the id can be routed to the shard that owns it, from any connection, on
/// any shard. The other 15 bytes are unique per process (a random prefix chosen at start,
/// then a counter), so ids never repeat across restarts either. v1 clients treat ids as
/// opaque strings.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MessageId(pub [u8; 16]);

/// Two words, not a 16-byte slice: [`IdHasher`] then mixes each word once, where a slice
/// would also hash its length.
impl std::hash::Hash for MessageId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (high, low) = self.words();
        state.write_u64(high);
        state.write_u64(low);
    }
}

/// Hashes [`MessageId`]s for the id tables every publish, delivery and ACK touches.
///
/// The trade-off: std's SipHash resists keys chosen to collide, and cost ~6 % of a
/// publish + consume + ACK's CPU (docs/benchmarks.md, "Where the queue path's CPU goes").
/// That protection buys nothing here: ids are issued by this server (a slot byte, a random
/// prefix per shard start, a counter), never chosen by a client, so no one can aim keys at
/// one bucket. A client's ACK only looks an id up, and a lookup of any key costs one probe
/// sequence among keys the server chose. One multiply per word spreads consecutive
/// counters over the low bits (the table index) and mixes every bit into the high ones
/// (the tag hashbrown keeps per entry).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

/// The odd 64-bit constant of Fibonacci hashing (2^64 / φ): multiplying by it is a
/// bijection that carries each input bit into the high bits.
const ID_HASH_FACTOR: u64 = 0x9e37_79b9_7f4a_7c15;

impl std::hash::Hasher for IdHasher {
    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(29) ^ word).wrapping_mul(ID_HASH_FACTOR);
    }

    /// Other key types hashed with this hasher fold in a byte at a time: correct, not fast.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The `BuildHasher` of the id tables.
pub type IdHashing = std::hash::BuildHasherDefault<IdHasher>;

impl MessageId {
    pub fn slot(&self) -> u16 {
        self.0[0] as u16
    }

    /// The slot byte and prefix, and the counter: big-endian, so consecutive ids differ in
    /// the low bits of the second word.
    fn words(&self) -> (u64, u64) {
        let (high, low) = self.0.split_at(8);
        (
            u64::from_be_bytes(high.try_into().expect("8 bytes")),
            u64::from_be_bytes(low.try_into().expect("8 bytes")),
        )
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

/// Ids serialise as their 32 hex digits: readable in JSON snapshots and WAL dumps, and the
/// same text clients see.
impl Serialize for MessageId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for MessageId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        MessageId::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid message id {text:?}")))
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
///
/// Its size is what every held message costs, so it is kept small (128 B; it was 200 B):
/// the name is shared with the queue that holds it (`Broker` points a held message's
/// `topic` at its queue's name, so a million messages of one queue hold one copy), and the
/// fields most messages leave empty — headers, exchange and routing key — live in one
/// optional box. Serialised with the same fields in the same order as before, so
/// snapshots written by either layout read back in the other.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "MessageFields")]
pub struct Message {
    pub id: MessageId,
    /// Queue name (work queue), topic name (pub/sub), or target queue (exchange copy).
    pub topic: Arc<str>,
    /// The raw JSON text of the payload, validated when the request was parsed, echoed
    /// back verbatim as a JSON value (a string stays a string).
    pub payload: Bytes,
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
    /// `None` when all of them are empty (never `Some` of empty ones: equal messages
    /// compare equal). Set through [`Message::set_extras`].
    pub extras: Option<Box<MessageExtras>>,
}

/// The fields of a message most leave empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MessageExtras {
    /// Sorted by key, as v1 (Go maps marshal in key order).
    pub headers: BTreeMap<String, String>,
    pub exchange: String,
    pub routing_key: String,
}

impl MessageExtras {
    fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.exchange.is_empty() && self.routing_key.is_empty()
    }
}

/// What an absent header map reads as.
static NO_HEADERS: BTreeMap<String, String> = BTreeMap::new();

/// The serialised form: every field, in the order the layout before [`MessageExtras`]
/// had them.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct MessageFields {
    id: MessageId,
    topic: String,
    #[serde(with = "payload_serde")]
    payload: Bytes,
    headers: BTreeMap<String, String>,
    timestamp_ns: i64,
    retry: u32,
    max_retry: u32,
    priority: i64,
    delay_ns: i64,
    ttl_ns: i64,
    deliver_at_ns: i64,
    expires_at_ns: i64,
    exchange: String,
    routing_key: String,
}

impl From<MessageFields> for Message {
    fn from(f: MessageFields) -> Message {
        let mut m = Message {
            id: f.id,
            topic: f.topic.into(),
            payload: f.payload,
            timestamp_ns: f.timestamp_ns,
            retry: f.retry,
            max_retry: f.max_retry,
            priority: f.priority,
            delay_ns: f.delay_ns,
            ttl_ns: f.ttl_ns,
            deliver_at_ns: f.deliver_at_ns,
            expires_at_ns: f.expires_at_ns,
            extras: None,
        };
        m.set_extras(MessageExtras {
            headers: f.headers,
            exchange: f.exchange,
            routing_key: f.routing_key,
        });
        m
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct Payload<'a>(&'a Bytes);
        impl Serialize for Payload<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                payload_serde::serialize(self.0, serializer)
            }
        }
        let mut st = serializer.serialize_struct("Message", 14)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("topic", &*self.topic)?;
        st.serialize_field("payload", &Payload(&self.payload))?;
        st.serialize_field("headers", self.headers())?;
        st.serialize_field("timestamp_ns", &self.timestamp_ns)?;
        st.serialize_field("retry", &self.retry)?;
        st.serialize_field("max_retry", &self.max_retry)?;
        st.serialize_field("priority", &self.priority)?;
        st.serialize_field("delay_ns", &self.delay_ns)?;
        st.serialize_field("ttl_ns", &self.ttl_ns)?;
        st.serialize_field("deliver_at_ns", &self.deliver_at_ns)?;
        st.serialize_field("expires_at_ns", &self.expires_at_ns)?;
        st.serialize_field("exchange", self.exchange())?;
        st.serialize_field("routing_key", self.routing_key())?;
        st.end()
    }
}

impl Message {
    /// Sorted by key, as v1 (Go maps marshal in key order).
    pub fn headers(&self) -> &BTreeMap<String, String> {
        self.extras.as_ref().map_or(&NO_HEADERS, |e| &e.headers)
    }

    /// The exchange an exchange copy came through ("" otherwise).
    pub fn exchange(&self) -> &str {
        self.extras.as_ref().map_or("", |e| &e.exchange)
    }

    pub fn routing_key(&self) -> &str {
        self.extras.as_ref().map_or("", |e| &e.routing_key)
    }

    /// Sets the headers, exchange and routing key (boxed only when any is set).
    pub fn set_extras(&mut self, extras: MessageExtras) {
        self.extras = (!extras.is_empty()).then(|| Box::new(extras));
    }

    /// Changes the headers, exchange or routing key in place.
    pub fn edit_extras(&mut self, edit: impl FnOnce(&mut MessageExtras)) {
        let mut extras = self.extras.take().map(|b| *b).unwrap_or_default();
        edit(&mut extras);
        self.set_extras(extras);
    }

    pub fn with_extras(mut self, extras: MessageExtras) -> Message {
        self.set_extras(extras);
        self
    }

    /// Priority level 0..=9 the message is queued at.
    pub fn level(&self) -> usize {
        self.priority.clamp(0, 9) as usize
    }

    /// An upper bound of the bytes this message takes in a JSON reply: the payload verbatim,
    /// strings at worst 6 bytes per byte when escaped (`\u00XX`), and room for the fixed
    /// keys and numbers.
    pub fn reply_bytes_max(&self) -> u64 {
        let strings: usize = self.topic.len()
            + self
                .headers()
                .iter()
                .map(|(k, v)| k.len() + v.len() + 6)
                .sum::<usize>();
        (self.payload.len() + 6 * strings + 256) as u64
    }

    pub fn is_expired(&self, now_ns: i64) -> bool {
        self.expires_at_ns != 0 && self.expires_at_ns <= now_ns
    }
}

/// Serde for the payload bytes. In human-readable formats (JSON snapshots) a UTF-8 payload —
/// always the case for validated JSON text — is written as a string rather than as an array
/// of numbers (4× smaller); anything else is written as bytes. Reading accepts a string,
/// bytes or a sequence of numbers, so either form round-trips.
pub(crate) mod payload_serde {
    use bytes::Bytes;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(payload: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        if !serializer.is_human_readable() {
            return serializer.serialize_bytes(payload);
        }
        match std::str::from_utf8(payload) {
            Ok(text) => serializer.serialize_str(text),
            Err(_) => serializer.serialize_bytes(payload),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        deserializer.deserialize_any(PayloadVisitor)
    }

    struct PayloadVisitor;

    impl<'de> Visitor<'de> for PayloadVisitor {
        type Value = Bytes;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a payload as a string, bytes or a sequence of bytes")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v.as_bytes()))
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }

        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(Bytes::from(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_carry_their_slot_and_round_trip_as_hex() {
        let mut g = IdGenerator::new([7; 7]);
        let a = g.next(200);
        let b = g.next(200);
        assert_ne!(a, b);
        assert_eq!(a.slot(), 200);
        let hex = a.to_hex();
        assert_eq!(hex.len(), 32);
        assert!(hex
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_eq!(MessageId::parse(&hex), Some(a));
        assert_eq!(MessageId::parse(&hex.to_uppercase()), Some(a));
        assert_eq!(MessageId::parse("xyz"), None);
        assert_eq!(MessageId::parse(&"g".repeat(32)), None);
    }

    /// The id tables' hash spreads what the server issues: consecutive ids of one shard
    /// land in distinct buckets of a table of their count (the low bits), and the 7-bit
    /// tags hashbrown compares first (the high bits) take every value.
    #[test]
    fn consecutive_ids_spread_over_buckets_and_tags() {
        use std::hash::BuildHasher;
        let hashing = IdHashing::default();
        for (prefix, slot) in [([0u8; 7], 0), ([9, 1, 200, 3, 77, 5, 6], 255)] {
            let mut ids = IdGenerator::new(prefix);
            let hashes: Vec<u64> = (0..1u64 << 16)
                .map(|_| hashing.hash_one(ids.next(slot)))
                .collect();
            let buckets: HashSet<u64> = hashes.iter().map(|h| h & 0xffff).collect();
            assert_eq!(buckets.len(), 1 << 16, "bucket collisions");
            let tags: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            assert_eq!(tags.len(), 128);
        }
        let (a, b) = (MessageId([1; 16]), MessageId([1; 16]));
        assert_eq!(
            hashing.hash_one(a),
            hashing.hash_one(b),
            "equal ids hash alike"
        );
    }

    #[test]
    fn message_round_trips_through_json_with_hex_id_and_text_payload() {
        let mut g = IdGenerator::new([1; 7]);
        let mut m = Message {
            id: g.next(3),
            topic: "jobs".into(),
            payload: Bytes::from_static(br#"{"n":1}"#),
            timestamp_ns: 5,
            retry: 1,
            max_retry: 5,
            priority: 12,
            delay_ns: 0,
            ttl_ns: 7,
            deliver_at_ns: 0,
            expires_at_ns: 12,
            extras: None,
        }
        .with_extras(MessageExtras {
            headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
            ..MessageExtras::default()
        });
        let json = serde_json::to_string(&m).unwrap();
        assert!(
            json.contains(&format!("\"id\":\"{}\"", m.id.to_hex())),
            "{json}"
        );
        assert!(json.contains(r#""payload":"{\"n\":1}""#), "{json}");
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
        // Bytes that are not UTF-8 go out as numbers and come back intact.
        m.payload = Bytes::from_static(&[0xff, 0x00, 0x41]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
    }

    /// What every held message costs before its payload and queue entry.
    #[test]
    fn a_message_is_128_bytes() {
        assert_eq!(std::mem::size_of::<Message>(), 128);
    }

    /// Snapshots written before the fields moved into `MessageExtras` read back, and new
    /// ones are byte for byte what the old layout wrote (JSON and MessagePack).
    #[test]
    fn the_serialised_form_is_the_layout_before_the_extras_box() {
        let mut g = IdGenerator::new([3; 7]);
        let plain = Message {
            id: g.next(1),
            topic: "jobs".into(),
            payload: Bytes::from_static(b"[1]"),
            timestamp_ns: 1,
            retry: 2,
            max_retry: 3,
            priority: 4,
            delay_ns: 5,
            ttl_ns: 6,
            deliver_at_ns: 7,
            expires_at_ns: 8,
            extras: None,
        };
        let routed = plain.clone().with_extras(MessageExtras {
            headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
            exchange: "x".into(),
            routing_key: "r.k".into(),
        });
        for m in [plain, routed] {
            let e = m.extras.as_deref().cloned().unwrap_or_default();
            let old = MessageFields {
                id: m.id,
                topic: m.topic.to_string(),
                payload: m.payload.clone(),
                headers: e.headers,
                timestamp_ns: m.timestamp_ns,
                retry: m.retry,
                max_retry: m.max_retry,
                priority: m.priority,
                delay_ns: m.delay_ns,
                ttl_ns: m.ttl_ns,
                deliver_at_ns: m.deliver_at_ns,
                expires_at_ns: m.expires_at_ns,
                exchange: e.exchange,
                routing_key: e.routing_key,
            };
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, serde_json::to_string(&old).unwrap());
            assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
            let packed = rmp_serde::to_vec(&m).unwrap();
            assert_eq!(packed, rmp_serde::to_vec(&old).unwrap());
            assert_eq!(rmp_serde::from_slice::<Message>(&packed).unwrap(), m);
            let named = rmp_serde::to_vec_named(&m).unwrap();
            assert_eq!(named, rmp_serde::to_vec_named(&old).unwrap());
        }
        // Empty extras read back as none: equal messages compare equal.
        let json = r#"{"id":"01030303030303030000000000000001","topic":"q","payload":"1","headers":{},"timestamp_ns":0,"retry":0,"max_retry":0,"priority":0,"delay_ns":0,"ttl_ns":0,"deliver_at_ns":0,"expires_at_ns":0,"exchange":"","routing_key":""}"#;
        assert!(serde_json::from_str::<Message>(json)
            .unwrap()
            .extras
            .is_none());
    }
}
