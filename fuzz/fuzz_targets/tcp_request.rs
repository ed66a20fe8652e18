//! Fuzzes the v1 TCP request path of the queue plane: bytes from a client go through the
//! frame decoder (`boltq::queue::protocol::frame::decode`) and each frame through the
//! request parser (`request::parse`), or for the messaging plane's stream commands through
//! theirs (`boltq::messaging::tcp::protocol::parse`), the way a connection handles a
//! pipelined stream.
//!
//! Input: the first byte picks a mode, the rest is the candidate data.
//! - mode even: the bytes as a client stream — frames are decoded one after another until
//!   the data runs out (incomplete frame) or a frame is refused (oversized length), as a
//!   connection would stop reading or close.
//! - mode odd: the next byte is a command byte and the remaining bytes its payload; the
//!   target builds the header itself, so random payloads reach the parser without the
//!   fuzzer having to guess a consistent length field.
//!
//! Checked on every input, beyond "never panics, never overflows the stack":
//! - decode never claims more bytes than it was given and always makes progress;
//! - a refused request has a non-empty error text, and its ERROR reply is one valid frame
//!   whose payload is a JSON object with exactly the `error` key;
//! - an accepted PUBLISH / PUBLISH_TOPIC / PUBLISH_EXCHANGE has a payload that is valid
//!   JSON, and a message built from it can be delivered: the CONSUME reply, a push, a
//!   batch and a dead-letter page all encode within the frame limit (the parser's size
//!   and name limits exist for exactly this);
//! - every reply frame decodes back to itself, and only the push has a top-level
//!   `subscriber_id`;
//! - an accepted stream command (0x1D–0x20) names a valid topic; a STREAM_PUBLISH's record
//!   fits in one READ/TAIL page whatever its key, headers and payload, and every stream
//!   reply (published, page, committed) is one valid JSON frame.
#![no_main]

use boltq::messaging::tcp::protocol::records::{self, PageHead};
use boltq::messaging::tcp::protocol::{self as stream, commit, publish, StreamRequest};
use boltq::queue::message::{Message, MessageExtras, MessageId};
use boltq::queue::protocol::frame::{self, status, Frame, PAYLOAD_BYTES_MAX};
use boltq::queue::protocol::reply;
use boltq::queue::protocol::request::{self, Request};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        check_stream(rest);
    } else if let Some((&code, payload)) = rest.split_first() {
        let mut framed = Vec::new();
        frame::encode(code, payload, &mut framed);
        check_stream(&framed);
    }
});

fn check_stream(mut data: &[u8]) {
    loop {
        match frame::decode(data) {
            Ok(Some((f, used))) => {
                assert!(used >= frame::HEADER_BYTES && used <= data.len());
                assert_eq!(used, frame::HEADER_BYTES + f.payload.len());
                check_request(f);
                data = &data[used..];
            }
            // Incomplete (the connection reads more) or oversized (it closes).
            Ok(None) | Err(_) => return,
        }
    }
}

fn check_request(f: Frame<'_>) {
    // The connection hands these bytes to the messaging plane's handler before the queue
    // plane's parser sees them.
    if let Some(parsed) = stream::parse(f.code, f.payload) {
        match parsed {
            Err(e) => check_error_reply(&e.text()),
            Ok(s) => check_stream_request(s),
        }
        return;
    }
    match request::parse(f) {
        Err(e) => check_error_reply(&e.text()),
        Ok(Request::Publish(p) | Request::PublishTopic(p)) => {
            check_delivery(p.topic, p.payload, p.headers, p.priority)
        }
        Ok(Request::PublishExchange(p)) => {
            check_delivery(p.routing_key, p.payload, p.headers, p.priority)
        }
        Ok(Request::Auth { api_key: Err(e) }) => check_error_reply(&e.text()),
        Ok(_) => {}
    }
}

fn check_error_reply(text: &str) {
    assert!(!text.is_empty());
    let mut out = Vec::new();
    reply::error(text, &mut out);
    let v = single_frame(&out, status::ERROR).expect("error texts are valid UTF-8 strings");
    let obj = v.as_object().expect("error reply is an object");
    assert_eq!(obj.len(), 1);
    assert_eq!(obj["error"].as_str(), Some(text));
}

fn check_delivery(topic: String, payload: Bytes, headers: BTreeMap<String, String>, priority: i64) {
    serde_json::from_slice::<serde::de::IgnoredAny>(&payload).expect("stored payload is JSON");
    let m = Message {
        id: MessageId([0xAB; 16]),
        topic: topic.into(),
        payload,
        timestamp_ns: i64::MIN,
        retry: u32::MAX,
        max_retry: 5,
        priority,
        delay_ns: 0,
        ttl_ns: 0,
        deliver_at_ns: 0,
        expires_at_ns: 0,
        extras: None,
    }
    .with_extras(MessageExtras {
        headers,
        ..MessageExtras::default()
    });
    let mut out = Vec::new();
    reply::message(&m, &mut out).expect("an accepted message fits a CONSUME reply");
    assert_eq!(out.len() - frame::HEADER_BYTES, reply::message_len(&m));
    if let Some(v) = single_frame(&out, status::OK) {
        assert!(v.get("subscriber_id").is_none());
    }

    let mut out = Vec::new();
    reply::push(&m, &m.topic, &mut out).expect("an accepted message fits a push");
    if let Some(v) = single_frame(&out, status::OK) {
        assert!(v.get("subscriber_id").is_some());
    }

    let mut out = Vec::new();
    assert_eq!(reply::messages(std::slice::from_ref(&m), &mut out), Ok(1));
    single_frame(&out, status::OK);

    let mut out = Vec::new();
    assert_eq!(
        reply::dlq_read(&m.topic, u64::MAX, std::slice::from_ref(&m), &mut out),
        1
    );
    single_frame(&out, status::OK);
}

/// `out` holds exactly one frame with `code`, within the limit, whose payload is JSON.
/// Returns the parsed payload, or `None` for JSON that serde_json's `Value` cannot hold:
/// lone surrogate escapes, which stored payloads keep verbatim as v1 does.
fn single_frame(out: &[u8], code: u8) -> Option<serde_json::Value> {
    let (f, used) = frame::decode(out)
        .expect("within the limit")
        .expect("a whole frame");
    assert_eq!(used, out.len());
    assert_eq!(f.code, code);
    assert!(f.payload.len() <= PAYLOAD_BYTES_MAX);
    serde_json::from_slice::<serde::de::IgnoredAny>(f.payload).expect("reply is JSON");
    serde_json::from_slice(f.payload).ok()
}

fn check_stream_request(s: StreamRequest) {
    let (target, consumer) = match &s {
        StreamRequest::Publish(p) => (&p.target, None),
        StreamRequest::Read(r) => (&r.target, None),
        StreamRequest::Tail(t) => (&t.target, t.consumer.as_ref()),
        StreamRequest::Commit(c) => (&c.target, Some(&c.consumer)),
    };
    boltq::messaging::topic::Namespace::of(&target.topic).expect("accepted topics are valid");
    let head = PageHead {
        topic: &target.topic,
        partition: u32::MAX,
        from: u64::MAX,
        first_seq: u64::MAX,
        next_seq: u64::MAX,
        gap: true,
        consumer: consumer.map(|c| (c.group.as_str(), c.member.as_str())),
    };
    let mut out = Vec::new();
    records::page(&head, &[], &mut out);
    single_frame(&out, status::OK);
    match &s {
        StreamRequest::Publish(p) => {
            let record = boltq_io::record::Record {
                seq: u64::MAX - 1,
                timestamp_ns: i64::MIN,
                flags: 0,
                epoch: 0,
                key: Bytes::from(p.target.key.clone()),
                headers: p
                    .headers
                    .iter()
                    .map(|(k, v)| (Bytes::from(k.clone()), Bytes::from(v.clone())))
                    .collect(),
                payload: Bytes::from(p.payload.clone()),
            };
            let mut out = Vec::new();
            assert_eq!(
                records::page(&head, &[record], &mut out),
                1,
                "a record fits a page"
            );
            single_frame(&out, status::OK);
            let mut out = Vec::new();
            publish::published(&p.target.topic, u32::MAX, u64::MAX, i64::MIN, &mut out);
            single_frame(&out, status::OK);
        }
        StreamRequest::Commit(c) => {
            let mut out = Vec::new();
            commit::committed(c, u32::MAX, &mut out);
            single_frame(&out, status::OK);
        }
        StreamRequest::Read(_) | StreamRequest::Tail(_) => {}
    }
}
