//! STREAM_PUBLISH (0x1D): append one record to a stream topic. Answered once the record is
//! durable (the engine's `append`), like every send.
//!
//! Request: `{"topic", "partition"?, "key"?, "headers"?, "payload"? | "payload_base64"?}`.
//! `payload` is any JSON value, stored as its compact text (as PUBLISH stores it);
//! `payload_base64` carries binary (standard or URL-safe alphabet, padding optional).
//! Neither = an empty payload; both = an error. Reply OK:
//! `{"topic","partition","seq","timestamp"}` (`timestamp` in ns, the server's clock).

use super::{decode_fields, invalid, target, Target};
use crate::queue::protocol::frame::{self, status};
use crate::queue::protocol::request::RequestError;
use base64::Engine as _;
use std::collections::BTreeMap;

/// Largest record payload, in bytes (after base64 decoding). A READ/TAIL reply carries it
/// base64-encoded (4/3) inside one 4 MiB frame, with room for headers and key.
pub const PAYLOAD_BYTES_MAX: usize = 1024 * 1024;
/// Most header pairs on one record, and their total bytes (names plus values), as the
/// gateway allows devices.
pub const HEADERS_PAIRS_MAX: usize = 32;
pub const HEADERS_BYTES_MAX: usize = 8 * 1024;
pub use crate::messaging::fanout::RESERVED_HEADERS;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub target: Target,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
}

pub fn parse(payload: &[u8]) -> Result<Publish, RequestError> {
    let f = decode_fields(payload, "streamPublishRequest")?;
    let target = target(&f)?;
    check_writable(&target.topic)?;
    check_headers(&f.headers)?;
    let body = match (&f.payload_base64, f.payload.is_empty()) {
        (Some(_), false) => {
            return Err(invalid(
                "give payload or payload_base64, not both".to_string(),
            ))
        }
        (Some(text), true) => decode_base64(text)
            .ok_or_else(|| invalid("payload_base64 is not valid base64".to_string()))?,
        (None, _) => f.payload,
    };
    if body.len() > PAYLOAD_BYTES_MAX {
        return Err(invalid(format!(
            "payload is too large: {} bytes, at most {PAYLOAD_BYTES_MAX}",
            body.len()
        )));
    }
    Ok(Publish {
        target,
        headers: f.headers,
        payload: body,
    })
}

/// Chat topics are written only by the gateway's `send` (which checks membership, dedups
/// and fans out to inboxes); typing signals are never stored.
fn check_writable(topic: &str) -> Result<(), RequestError> {
    if topic.starts_with("chat.") || topic.starts_with(crate::messaging::topic::TYPING_PREFIX) {
        return Err(invalid(format!(
            "topic {topic} cannot be published to: chat.* is written by the gateway's send, typing.* is never stored"
        )));
    }
    Ok(())
}

fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), RequestError> {
    if headers.len() > HEADERS_PAIRS_MAX {
        return Err(invalid(format!(
            "headers has {} pairs; the limit is {HEADERS_PAIRS_MAX}",
            headers.len()
        )));
    }
    let total: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > HEADERS_BYTES_MAX {
        return Err(invalid(format!(
            "headers take {total} bytes (names plus values); the limit is {HEADERS_BYTES_MAX}"
        )));
    }
    if let Some(name) = headers
        .keys()
        .find(|k| k.is_empty() || RESERVED_HEADERS.contains(&k.as_str()))
    {
        return Err(invalid(format!(
            "header name {name:?} is reserved (or empty)"
        )));
    }
    Ok(())
}

/// Standard or URL-safe alphabet, with or without padding.
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let padded = text.ends_with('=');
    let url = text.bytes().any(|b| b == b'-' || b == b'_');
    let engine = match (url, padded) {
        (false, true) => &STANDARD,
        (false, false) => &STANDARD_NO_PAD,
        (true, true) => &URL_SAFE,
        (true, false) => &URL_SAFE_NO_PAD,
    };
    engine.decode(text).ok()
}

/// The OK reply: where the record landed.
pub fn published(topic: &str, partition: u32, seq: u64, timestamp_ns: i64, out: &mut Vec<u8>) {
    let body = serde_json::json!({
        "topic": topic,
        "partition": partition,
        "seq": seq,
        "timestamp": timestamp_ns,
    });
    frame::encode(status::OK, body.to_string().as_bytes(), out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    fn err(json: &str) -> String {
        parse(json.as_bytes()).unwrap_err().text()
    }

    #[test]
    fn json_payloads_are_stored_compact_and_base64_as_bytes() {
        let p = parse(br#"{"topic":"match.alice","key":"alice","payload":{ "score" : [1, 2] }}"#)
            .unwrap();
        assert_eq!(p.payload, br#"{"score":[1,2]}"#);
        assert_eq!((p.target.key.as_str(), p.target.partition), ("alice", None));
        let p = parse(br#"{"topic":"match.a","payload_base64":"AP8B"}"#).unwrap();
        assert_eq!(p.payload, [0x00, 0xFF, 0x01]);
        let p = parse(br#"{"topic":"match.a","payload_base64":"AP8"}"#).unwrap();
        assert_eq!(p.payload, [0x00, 0xFF], "padding is optional");
        let p = parse(br#"{"topic":"match.a","payload_base64":"-_8="}"#).unwrap();
        assert_eq!(p.payload, [0xFB, 0xFF], "URL-safe alphabet");
        let p = parse(br#"{"topic":"match.a"}"#).unwrap();
        assert!(p.payload.is_empty(), "no payload = empty");
    }

    #[test]
    fn payload_errors_are_clear() {
        assert_eq!(
            err(r#"{"topic":"m","payload":1,"payload_base64":"AA=="}"#),
            "give payload or payload_base64, not both"
        );
        assert_eq!(
            err(r#"{"topic":"m","payload_base64":"%%%"}"#),
            "payload_base64 is not valid base64"
        );
        assert!(err(r#"{"topic":"m","payload_base64":7}"#).starts_with("invalid json"));
        let big =
            base64::engine::general_purpose::STANDARD.encode(vec![7u8; PAYLOAD_BYTES_MAX + 1]);
        let json = format!(r#"{{"topic":"m","payload_base64":"{big}"}}"#);
        assert!(err(&json).starts_with("payload is too large"));
        let at = base64::engine::general_purpose::STANDARD.encode(vec![7u8; PAYLOAD_BYTES_MAX]);
        let json = format!(r#"{{"topic":"m","payload_base64":"{at}"}}"#);
        assert_eq!(
            parse(json.as_bytes()).unwrap().payload.len(),
            PAYLOAD_BYTES_MAX
        );
    }

    #[test]
    fn chat_and_typing_topics_are_refused() {
        for topic in [
            "chat.direct.alice:bob",
            "chat.group.g1",
            "chat.inbox.alice",
            "chat.inbox.alice.extra",
            "typing.g1",
        ] {
            let e = err(&format!(r#"{{"topic":"{topic}"}}"#));
            assert!(e.contains("cannot be published to"), "{topic}: {e}");
        }
        for topic in ["match.alice", "system.news", "orders.eu.1"] {
            assert!(parse(format!(r#"{{"topic":"{topic}"}}"#).as_bytes()).is_ok());
        }
    }

    #[test]
    fn headers_are_bounded_and_reserved_names_refused() {
        assert!(err(r#"{"topic":"m","headers":{"sender":"alice"}}"#).contains("reserved"));
        assert!(err(r#"{"topic":"m","headers":{"":"x"}}"#).contains("reserved"));
        let many: Vec<String> = (0..=HEADERS_PAIRS_MAX)
            .map(|i| format!(r#""h{i}":"v""#))
            .collect();
        assert!(err(&format!(
            r#"{{"topic":"m","headers":{{{}}}}}"#,
            many.join(",")
        ))
        .contains("pairs"));
        let fat = format!(
            r#"{{"topic":"m","headers":{{"h":"{}"}}}}"#,
            "v".repeat(HEADERS_BYTES_MAX)
        );
        assert!(err(&fat).contains("bytes"));
        let p = parse(br#"{"topic":"m","headers":{"trace":"t1"}}"#).unwrap();
        assert_eq!(p.headers["trace"], "t1");
    }

    #[test]
    fn base64_round_trips_random_bytes_in_every_alphabet() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let mut rng = Rng::new(0x5EED);
        for _ in 0..200 {
            let len = rng.below(64) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            assert_eq!(decode_base64(&STANDARD.encode(&bytes)), Some(bytes.clone()));
            assert_eq!(decode_base64(&URL_SAFE_NO_PAD.encode(&bytes)), Some(bytes));
        }
    }

    #[test]
    fn the_reply_is_one_ok_frame() {
        let mut out = Vec::new();
        published("match.a", 2, 41, -5, &mut out);
        let (f, used) = frame::decode(&out).unwrap().unwrap();
        assert_eq!((f.code, used), (status::OK, out.len()));
        let v: serde_json::Value = serde_json::from_slice(f.payload).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"topic":"match.a","partition":2,"seq":41,"timestamp":-5})
        );
    }
}
