//! Gateway protocol v1 frames as the generator writes and reads them
//! (docs/gateway-protocol.md §3–§4), and the stamp every measured message carries.
//!
//! **Stamp.** The first [`STAMP_BYTES`] bytes of every payload the generator sends say who
//! sent it, its sequence number on that device, when it was (meant to be) sent, and whether
//! it counts: `"BQ"`, kind, 0, sender (u32 LE), seq (u64 LE), send time (u64 LE, nanoseconds
//! of CLOCK_MONOTONIC; the intended time in open loop). The rest is `x` filler up to
//! `--size`. 24 is a multiple of 3, so the base64 of the payload is the base64 of the stamp
//! (32 characters) followed by the base64 of the filler, which is computed once: a send
//! encodes 24 bytes, and a delivery decodes 32 characters.
//!
//! **Sends** are written from a per-conversation template without a JSON library (the
//! generator must outrun one server core on one core of its own). **Server frames** are
//! decoded with serde into borrowed structs that keep only the fields the generator uses;
//! the rest (headers, timestamps, keys) is skipped without allocating.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;

/// Bytes of the stamp at the start of every payload.
pub const STAMP_BYTES: usize = 24;
/// Characters of the stamp's base64.
pub const STAMP_B64_CHARS: usize = 32;
/// Largest payload the generator sends: the gateway's default `read_limit` is 1 MiB for the
/// whole frame, and base64 makes the payload a third larger.
pub const PAYLOAD_BYTES_MAX: usize = 512 * 1024;
const MAGIC: [u8; 2] = *b"BQ";

/// What a stamped message is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampKind {
    /// Counted and timed.
    Measured = 1,
    /// Sent during setup (creates the topic; in `reconnect`, the position a device commits):
    /// neither counted as a delivery nor timed.
    Prime = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub kind: StampKind,
    /// Global index of the sending device.
    pub sender: u32,
    /// Sequence number of the message on its sender.
    pub seq: u64,
    pub sent_ns: u64,
}

impl Stamp {
    pub fn encode(&self) -> [u8; STAMP_BYTES] {
        let mut b = [0u8; STAMP_BYTES];
        b[..2].copy_from_slice(&MAGIC);
        b[2] = self.kind as u8;
        b[4..8].copy_from_slice(&self.sender.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
        b
    }

    /// The stamp at the start of a base64 payload; `None` for payloads the generator did not
    /// write (or wrote with another layout).
    pub fn from_payload_b64(payload: &str) -> Option<Stamp> {
        let head = payload.as_bytes().get(..STAMP_B64_CHARS)?;
        let mut b = [0u8; STAMP_BYTES + 3];
        let n = STANDARD.decode_slice(head, &mut b).ok()?;
        if n != STAMP_BYTES || b[..2] != MAGIC || b[3] != 0 {
            return None;
        }
        let kind = match b[2] {
            1 => StampKind::Measured,
            2 => StampKind::Prime,
            _ => return None,
        };
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Stamp {
            kind,
            sender: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            seq: u64_at(8),
            sent_ns: u64_at(16),
        })
    }
}

/// Base64 of the filler after the stamp for payloads of up to `size_max` bytes, in whole
/// groups of three filler bytes (`eHh4` each): a payload of any smaller size takes a prefix
/// of it plus the encoding of its last one or two bytes (see [`SendTemplate::write`]).
pub fn filler_b64(size_max: usize) -> String {
    "eHh4".repeat(size_max.saturating_sub(STAMP_BYTES) / 3)
}

/// Base64 of a filler's last `n % 3` bytes (`x` or `xx`), padding included.
fn filler_tail_b64(n: usize) -> &'static [u8] {
    match n % 3 {
        1 => b"eA==",
        2 => b"eHg=",
        _ => b"",
    }
}

/// A JSON string literal (quotes included).
fn js(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

pub fn hello(id: u64, device: &str, resume: Option<&str>) -> String {
    let mut f = json!({"op": "hello", "id": id.to_string(), "version": 1, "device_id": device});
    if let Some(r) = resume {
        f["resume"] = json!(r);
    }
    f.to_string()
}

/// Without `from_seq` the server starts at this device's committed cursor, else at the head.
pub fn subscribe(id: u64, topic: &str, from_seq: Option<u64>) -> String {
    let mut f = json!({"op": "subscribe", "id": id.to_string(), "topic": topic});
    if let Some(seq) = from_seq {
        f["from_seq"] = json!(seq);
    }
    f.to_string()
}

/// `seq` is the next sequence wanted (last processed + 1).
pub fn commit(id: u64, topic: &str, seq: u64) -> String {
    json!({"op": "commit", "id": id.to_string(), "topic": topic, "seq": seq}).to_string()
}

/// `send` to one conversation, with everything but the stamp, the id and the idempotency
/// key written once.
#[derive(Debug, Clone)]
pub struct SendTemplate {
    head: Vec<u8>,
}

impl SendTemplate {
    /// `kind` is `"direct"` or `"group"`.
    pub fn new(kind: &str, conversation: &str) -> SendTemplate {
        SendTemplate {
            head: format!(
                "{{\"op\":\"send\",\"kind\":{},\"conversation\":{},\"payload\":\"",
                js(kind),
                js(conversation)
            )
            .into_bytes(),
        }
    }

    /// Appends the JSON of one send whose payload is `payload_bytes` long (before base64;
    /// at least [`STAMP_BYTES`]; `filler` from [`filler_b64`] for at least this size).
    /// `client_msg_id` is `<device tag>-<seq>`: unique per sender and conversation, so the
    /// server's dedup window never merges two sends.
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        stamp: &Stamp,
        payload_bytes: usize,
        filler: &str,
        device_tag: &str,
        id: u64,
    ) {
        let filler_bytes = payload_bytes - STAMP_BYTES;
        out.extend_from_slice(&self.head);
        let mut b64 = [0u8; STAMP_B64_CHARS];
        let n = STANDARD
            .encode_slice(stamp.encode(), &mut b64)
            .expect("24 bytes encode to 32 characters");
        debug_assert_eq!(n, STAMP_B64_CHARS);
        out.extend_from_slice(&b64);
        out.extend_from_slice(&filler.as_bytes()[..filler_bytes / 3 * 4]);
        out.extend_from_slice(filler_tail_b64(filler_bytes));
        out.extend_from_slice(b"\",\"client_msg_id\":\"");
        out.extend_from_slice(device_tag.as_bytes());
        out.push(b'-');
        push_decimal(out, stamp.seq);
        out.extend_from_slice(b"\",\"id\":\"");
        push_decimal(out, id);
        out.extend_from_slice(b"\"}");
    }
}

fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

// ---- server frames ---------------------------------------------------------------------------

/// The fields of a server frame the generator reads.
#[derive(Debug, Deserialize)]
pub struct Inbound<'a> {
    #[serde(borrow)]
    pub op: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    pub id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    pub topic: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub records: Vec<InRecord<'a>>,
    /// `ack` of a subscribe: where streaming starts.
    #[serde(default)]
    pub from_seq: Option<u64>,
    /// `welcome`: the resume token.
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub resumed: bool,
    #[serde(default)]
    pub sent: Option<Sent>,
    #[serde(default, borrow)]
    pub error: Option<ErrorBody<'a>>,
}

#[derive(Debug, Deserialize)]
pub struct InRecord<'a> {
    pub seq: u64,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    pub payload: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
pub struct Sent {
    pub seq: u64,
    #[serde(default)]
    pub duplicate: bool,
}

#[derive(Debug, Deserialize)]
pub struct ErrorBody<'a> {
    #[serde(default, borrow)]
    pub code: Cow<'a, str>,
    #[serde(default, borrow)]
    pub message: Cow<'a, str>,
    /// The server says the request may be retried (sent only when true).
    #[serde(default)]
    pub retryable: bool,
}

impl ErrorBody<'_> {
    /// An error kind for the report: the code and the message up to its first `:`, so
    /// names inside messages (`access denied: chat.group.x`) do not make every error a kind
    /// of its own.
    pub fn kind(&self) -> String {
        let general = self.message.split(':').next().unwrap_or("").trim();
        format!("server: {} ({general})", self.code)
    }
}

/// An optional string borrowed from the frame when it has no escapes (serde borrows a
/// `Cow<str>` only as a direct field, not inside an `Option`).
fn borrowed<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Borrowed<'a>>::deserialize(d)?.map(|b| b.0))
}

pub fn parse(bytes: &[u8]) -> Result<Inbound<'_>, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("undecodable server frame: {e}"))
}

/// The numeric id the generator gave a request (`None` for frames without one, or ids it
/// did not write).
pub fn numeric_id(id: Option<&str>) -> Option<u64> {
    id.and_then(|s| s.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    #[test]
    fn stamps_round_trip_through_a_payload() {
        let mut rng = Rng::new(3);
        let filler = filler_b64(1000);
        for size in [24usize, 25, 26, 27, 28, 100, 998, 999, 1000] {
            let stamp = Stamp {
                kind: if rng.below(2) == 0 {
                    StampKind::Measured
                } else {
                    StampKind::Prime
                },
                sender: rng.next_u64() as u32,
                seq: rng.next_u64(),
                sent_ns: rng.next_u64(),
            };
            let mut out = Vec::new();
            SendTemplate::new("direct", "a:b").write(&mut out, &stamp, size, &filler, "dev", 9);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            let payload = v["payload"].as_str().unwrap();
            // The payload is valid base64 of exactly `size` bytes: stamp then filler.
            let raw = STANDARD.decode(payload).unwrap();
            assert_eq!(raw.len(), size);
            assert_eq!(&raw[..STAMP_BYTES], &stamp.encode());
            assert!(raw[STAMP_BYTES..].iter().all(|&b| b == b'x'));
            assert_eq!(Stamp::from_payload_b64(payload), Some(stamp));
            assert_eq!(v["op"], "send");
            assert_eq!(v["kind"], "direct");
            assert_eq!(v["conversation"], "a:b");
            assert_eq!(v["id"], "9");
            assert_eq!(v["client_msg_id"], format!("dev-{}", stamp.seq));
        }
    }

    #[test]
    fn foreign_payloads_have_no_stamp() {
        assert_eq!(Stamp::from_payload_b64("eWVzIQ=="), None);
        assert_eq!(Stamp::from_payload_b64(&"A".repeat(40)), None);
        let mut b = Stamp {
            kind: StampKind::Measured,
            sender: 1,
            seq: 2,
            sent_ns: 3,
        }
        .encode();
        b[2] = 9;
        assert_eq!(Stamp::from_payload_b64(&STANDARD.encode(b)), None);
    }

    #[test]
    fn requests_are_the_documented_json() {
        let h: serde_json::Value = serde_json::from_str(&hello(1, "d", Some("t.s"))).unwrap();
        assert_eq!(
            h,
            json!({"op":"hello","id":"1","version":1,"device_id":"d","resume":"t.s"})
        );
        let h: serde_json::Value = serde_json::from_str(&hello(2, "d", None)).unwrap();
        assert!(h.get("resume").is_none());
        let s: serde_json::Value =
            serde_json::from_str(&subscribe(3, "chat.group.g", None)).unwrap();
        assert_eq!(s, json!({"op":"subscribe","id":"3","topic":"chat.group.g"}));
        let s: serde_json::Value = serde_json::from_str(&subscribe(3, "i", Some(1))).unwrap();
        assert_eq!(s["from_seq"], 1);
        let c: serde_json::Value = serde_json::from_str(&commit(4, "t", 7)).unwrap();
        assert_eq!(c, json!({"op":"commit","id":"4","topic":"t","seq":7}));
    }

    #[test]
    fn decimals() {
        for v in [0u64, 7, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }
    }

    /// Frames as the server sends them (docs/gateway-protocol.md §3–§4).
    #[test]
    fn server_frames_decode() {
        let rec = br#"{"op":"record","topic":"chat.direct.alice:bob","partition":6,"records":[{"topic":"chat.direct.alice:bob","partition":6,"seq":1,"timestamp":1796013007365522640,"key":"alice:bob","headers":{"client_msg_id":"a-1001","kind":"direct"},"payload":"eWVzIQ=="},{"topic":"x","partition":0,"seq":2,"timestamp":1}]}"#;
        let f = parse(rec).unwrap();
        assert_eq!((f.op.as_ref(), f.id.as_deref()), ("record", None));
        assert_eq!(f.topic.as_deref(), Some("chat.direct.alice:bob"));
        assert_eq!(f.records.len(), 2);
        assert_eq!(
            (f.records[0].seq, f.records[0].payload.as_deref()),
            (1, Some("eWVzIQ=="))
        );
        assert!(
            matches!(f.records[0].payload, Some(Cow::Borrowed(_))),
            "no copy"
        );
        assert_eq!(
            (f.records[1].seq, f.records[1].payload.as_deref()),
            (2, None)
        );

        let sent = br#"{"op":"sent","id":"r4","sent":{"message_id":"d9","client_msg_id":"a-1001","topic":"t","partition":6,"seq":17,"timestamp":1,"duplicate":true}}"#;
        let f = parse(sent).unwrap();
        let s = f.sent.unwrap();
        assert_eq!(
            (f.id.as_deref(), s.seq, s.duplicate),
            (Some("r4"), 17, true)
        );

        let ack = br#"{"op":"ack","id":"7","topic":"t","partition":6,"from_seq":4,"first_seq":1,"next_seq":4}"#;
        let f = parse(ack).unwrap();
        assert_eq!(
            (numeric_id(f.id.as_deref()), f.from_seq),
            (Some(7), Some(4))
        );

        let w =
            br#"{"op":"welcome","id":"h","version":1,"session":"S","token":"S.x","resumed":true}"#;
        let f = parse(w).unwrap();
        assert_eq!((f.token.as_deref(), f.resumed), (Some("S.x"), true));
        assert_eq!(numeric_id(f.id.as_deref()), None);

        let e = br#"{"op":"error","id":"3","error":{"code":"forbidden","message":"access denied: chat.group.g"}}"#;
        let f = parse(e).unwrap();
        assert_eq!(f.error.unwrap().kind(), "server: forbidden (access denied)");

        assert!(parse(b"{\"op\":").is_err());
        assert!(parse(b"[]").is_err());
    }
}
