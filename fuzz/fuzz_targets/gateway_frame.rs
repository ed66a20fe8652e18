//! Fuzzes the WebSocket gateway's frame codec (`boltq::messaging::gateway::frame`): every
//! inbound message goes through `decode_request`, and whatever it accepts is fed back
//! through the encoders the connection would answer or deliver with.
//!
//! Input: the first byte picks a mode, the rest is the candidate data.
//! - mode even: the bytes are one WebSocket message (text and binary are both JSON bytes).
//! - mode odd: the message is `{"op":"<op>",` followed by the bytes, with `<op>` chosen by
//!   the mode byte from the ops the codec knows, so random field sets reach every op's
//!   field readers without the fuzzer having to guess an op name first.
//!
//! Checked on every input, beyond "never panics, never overflows the stack":
//! - a refused frame has a non-empty message and an echoed id within `ID_BYTES_MAX`, and
//!   its `bad_request` reply is one JSON object carrying exactly that id and message;
//! - an accepted frame respects every limit the codec promises (ids, topics, header pairs
//!   and bytes, non-empty header keys, users, partition ≤ i32::MAX, required fields);
//! - an accepted frame re-encoded as plain JSON decodes to the same request (payloads
//!   re-encoded in the standard padded base64 the server emits);
//! - a `send` / `publish` turned into a `record` frame parses back to the same key,
//!   headers and payload; the replies to every other op are valid JSON that echo the id.
#![no_main]

use boltq::messaging::gateway::frame::{
    self, decode_request, DecodeError, HeadersOut, RecordOut, Request, HEADERS_BYTES_MAX,
    HEADERS_PAIRS_MAX, ID_BYTES_MAX, TOPIC_BYTES_MAX, USERS_MAX,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

const OPS: &[&str] = &[
    "hello",
    "subscribe",
    "unsubscribe",
    "history",
    "send",
    "commit",
    "typing",
    "presence",
    "watch_presence",
    "ping",
    "publish",
];

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        check(rest);
    } else {
        let op = OPS[usize::from(mode >> 1) % OPS.len()];
        let mut message = format!(r#"{{"op":"{op}","#).into_bytes();
        message.extend_from_slice(rest);
        check(&message);
    }
});

fn check(message: &[u8]) {
    match decode_request(message) {
        Err(e) => check_refusal(&e),
        Ok(request) => {
            check_limits(&request);
            check_round_trip(&request);
            check_replies(&request);
        }
    }
}

fn check_refusal(e: &DecodeError) {
    assert!(!e.message.is_empty());
    assert!(e.id.len() <= ID_BYTES_MAX);
    let v = parse(|out| frame::decode_error(out, e));
    assert_eq!(v["op"], "error");
    assert_eq!(v.get("id").and_then(Value::as_str).unwrap_or(""), e.id);
    assert_eq!(v["error"]["code"], "bad_request");
    assert_eq!(v["error"]["message"].as_str(), Some(e.message.as_str()));
    assert!(v["error"].get("retryable").is_none());
}

fn check_limits(request: &Request) {
    assert!(request.id().len() <= ID_BYTES_MAX);
    match request {
        Request::Subscribe {
            topic, partition, ..
        }
        | Request::History {
            topic, partition, ..
        } => {
            assert!(!topic.is_empty() && topic.len() <= TOPIC_BYTES_MAX);
            assert!(partition.is_none_or(|p| p <= i32::MAX as u32));
        }
        Request::Commit {
            topic,
            partition,
            seq,
            ..
        } => {
            assert!(!topic.is_empty() && topic.len() <= TOPIC_BYTES_MAX && *seq > 0);
            assert!(partition.is_none_or(|p| p <= i32::MAX as u32));
        }
        Request::Unsubscribe { partition, .. } => {
            assert!(partition.is_none_or(|p| p <= i32::MAX as u32));
        }
        Request::Send {
            conversation,
            headers,
            ..
        } => {
            assert!(!conversation.is_empty());
            check_headers(headers);
        }
        Request::Publish { topic, headers, .. } => {
            assert!(!topic.is_empty() && topic.len() <= TOPIC_BYTES_MAX);
            check_headers(headers);
        }
        Request::Typing { conversation, .. } => assert!(!conversation.is_empty()),
        Request::WatchPresence { users, .. } => assert!(users.len() <= USERS_MAX),
        Request::Hello { .. } | Request::Presence { .. } | Request::Ping { .. } => {}
    }
}

fn check_headers(headers: &BTreeMap<String, String>) {
    assert!(headers.len() <= HEADERS_PAIRS_MAX);
    assert!(headers.keys().all(|k| !k.is_empty()));
    let total: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(total <= HEADERS_BYTES_MAX);
}

/// The request as a well-behaved client would send it; must decode to itself.
fn check_round_trip(request: &Request) {
    let bytes = serde_json::to_vec(&to_json(request)).expect("serialisable");
    let again = decode_request(&bytes).expect("a re-encoded request decodes");
    assert_eq!(&again, request);
}

fn to_json(request: &Request) -> Value {
    let mut m = Map::new();
    m.insert("op".into(), json!(request.op()));
    m.insert("id".into(), json!(request.id()));
    let mut put = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    match request {
        Request::Hello {
            version,
            device_id,
            user_agent,
            resume,
            ..
        } => {
            put("version", json!(version));
            put("device_id", json!(device_id));
            put("user_agent", json!(user_agent));
            put("resume", json!(resume));
        }
        Request::Subscribe {
            topic,
            partition,
            from_seq,
            ..
        } => {
            put("topic", json!(topic));
            put("partition", json!(partition));
            put("from_seq", json!(from_seq));
        }
        Request::Unsubscribe {
            topic, partition, ..
        } => {
            put("topic", json!(topic));
            put("partition", json!(partition));
        }
        Request::History {
            topic,
            partition,
            from_seq,
            limit,
            ..
        } => {
            put("topic", json!(topic));
            put("partition", json!(partition));
            put("from_seq", json!(from_seq));
            put("limit", json!(limit));
        }
        Request::Send {
            conversation,
            kind,
            client_msg_id,
            payload,
            headers,
            ..
        } => {
            put("conversation", json!(conversation));
            put("kind", json!(kind.as_str()));
            put("client_msg_id", json!(client_msg_id));
            put("payload", json!(base64_of(payload)));
            put("headers", json!(headers));
        }
        Request::Commit {
            topic,
            partition,
            seq,
            ..
        } => {
            put("topic", json!(topic));
            put("partition", json!(partition));
            put("seq", json!(seq));
        }
        Request::Typing {
            conversation,
            typing,
            ..
        } => {
            put("conversation", json!(conversation));
            put("typing", json!(typing));
        }
        Request::Presence { state, .. } => put("state", json!(state.as_str())),
        Request::WatchPresence { users, .. } => put("users", json!(users)),
        Request::Ping { .. } => {}
        Request::Publish {
            topic,
            key,
            headers,
            payload,
            ..
        } => {
            put("topic", json!(topic));
            put("key", json!(key));
            put("headers", json!(headers));
            put("payload", json!(base64_of(payload)));
        }
    }
    Value::Object(m)
}

/// The payload as the server emits it (standard, padded), taken from a `record` frame: the
/// fuzz crate has no base64 dependency of its own.
fn base64_of(payload: &[u8]) -> String {
    let r = RecordOut {
        seq: 1,
        timestamp_ns: 0,
        key: b"",
        headers: HeadersOut::NONE,
        payload,
    };
    let v = parse(|out| frame::records(out, "", "t", 0, &[r], None));
    v["records"][0]
        .get("payload")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn check_replies(request: &Request) {
    let id = request.id();
    let echoed = |v: &Value| {
        v.get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match request {
        Request::Send {
            conversation: key,
            headers,
            payload,
            ..
        }
        | Request::Publish {
            key,
            headers,
            payload,
            ..
        } => check_delivery(id, key, headers, payload),
        Request::Hello {
            device_id, resume, ..
        } => {
            let v = parse(|out| frame::welcome(out, id, device_id, resume, true));
            assert_eq!(echoed(&v), id);
            assert_eq!(v["resumed"], true);
        }
        Request::Subscribe {
            topic,
            partition,
            from_seq,
            ..
        }
        | Request::History {
            topic,
            partition,
            from_seq,
            ..
        } => {
            let p = partition.unwrap_or(0);
            let v = parse(|out| frame::subscribe_ack(out, id, topic, p, *from_seq, 1, *from_seq));
            assert_eq!(echoed(&v), id);
            assert_eq!(v["topic"].as_str(), Some(topic.as_str()));
            assert_eq!(v["partition"], p);
            let v = parse(|out| frame::gap(out, id, topic, p, 1, *from_seq, topic));
            assert_eq!(v["error"]["message"].as_str(), Some(topic.as_str()));
        }
        _ => {
            let v = parse(|out| frame::ack(out, id));
            assert_eq!(echoed(&v), id);
            let v = parse(|out| frame::pong(out, id));
            assert_eq!(echoed(&v), id);
        }
    }
}

/// A message carrying this key, headers and payload, delivered in a `record` frame, parses
/// back to them; the payload's base64 decodes (through the codec itself) to the bytes.
fn check_delivery(id: &str, key: &str, headers: &BTreeMap<String, String>, payload: &[u8]) {
    let pairs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let r = RecordOut {
        seq: u64::MAX,
        timestamp_ns: i64::MIN,
        key: key.as_bytes(),
        headers: HeadersOut::Text(&pairs),
        payload,
    };
    let v = parse(|out| frame::records(out, id, "chat.direct.a:b", 0, &[r], Some((1, 2))));
    let rec = &v["records"][0];
    assert_eq!(rec["seq"], u64::MAX);
    assert_eq!(rec["timestamp"], i64::MIN);
    assert_eq!(rec.get("key").and_then(Value::as_str).unwrap_or(""), key);
    let got: BTreeMap<String, String> =
        serde_json::from_value(rec.get("headers").cloned().unwrap_or(json!({})))
            .expect("headers are an object of strings");
    assert_eq!(&got, headers);
    let b64 = rec.get("payload").and_then(Value::as_str).unwrap_or("");
    let send = json!({"op":"send","conversation":"c","payload":b64}).to_string();
    match decode_request(send.as_bytes()) {
        Ok(Request::Send { payload: back, .. }) => assert_eq!(back, payload),
        other => panic!("emitted payload does not decode: {other:?}"),
    }
}

/// `f` appends exactly one frame: a UTF-8 JSON object.
fn parse(f: impl FnOnce(&mut Vec<u8>)) -> Value {
    let mut out = Vec::new();
    f(&mut out);
    let text = std::str::from_utf8(&out).expect("frames are UTF-8");
    let v: Value = serde_json::from_str(text).expect("frames are JSON");
    assert!(v.is_object());
    v
}
