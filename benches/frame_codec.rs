//! The wire codecs: ns per frame parsed or encoded, 100 B and 1 KiB payloads.
//!
//! `cargo bench --bench frame_codec [filter]`
//!
//! v1 TCP protocol (`queue::protocol`), what a connection does per request:
//!
//! - `tcp parse PUBLISH`: `frame::decode` + `request::parse` of a PUBLISH frame
//!   `{"topic","payload":{"data":"…"},"headers":{"content_type":…}}`, the payload a JSON
//!   object of 100 B / 1 KiB (parsing validates and compacts it).
//! - `tcp encode PUBLISH reply`: `reply::publish_ok` (`{"id","topic"}`).
//! - `tcp encode CONSUME reply`: `reply::message`, one message with that payload and header.
//! - `tcp parse ACK` / `tcp encode ACK reply`: `{"id":"<32 hex>"}` in, `{"status":"acked"}`
//!   out.
//!
//! Messaging gateway WebSocket messages (`messaging::gateway::frame`; the WebSocket framing
//! itself is async-tungstenite's and not timed):
//!
//! - `ws decode send`: `decode_request` of a chat `send` with a base64 payload of 100 B /
//!   1 KiB and one header.
//! - `ws encode sent`: the `sent` reply to it.
//! - `ws encode record`: the `record` frame that delivers that message to a recipient.
//!
//! Each encode appends to a reused buffer, cleared per frame (the connection's write buffer).

mod common;

use base64::Engine;
use boltq::messaging::gateway::frame as ws;
use boltq::queue::message::{IdGenerator, Message, MessageExtras, MessageId};
use boltq::queue::protocol::frame::{self, op};
use boltq::queue::protocol::{reply, request};
use bytes::Bytes;
use common::bench;
use std::collections::BTreeMap;
use std::hint::black_box;

/// Frames parsed or encoded per repetition.
const OPS: usize = 100_000;
const TOPIC: &str = "orders";
const NOW_NS: i64 = 1_700_000_000_000_000_000;

/// A JSON object of exactly `len` bytes: `{"data":"xx…x"}`.
fn json_payload(len: usize) -> String {
    let wrapper = r#"{"data":""}"#.len();
    assert!(len >= wrapper);
    format!(r#"{{"data":"{}"}}"#, "x".repeat(len - wrapper))
}

fn tcp_frame(code: u8, body: &str) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(code, body.as_bytes(), &mut out);
    out
}

fn message(id: MessageId, payload_len: usize) -> Message {
    Message {
        extras: None,
        id,
        topic: TOPIC.into(),
        payload: Bytes::from(json_payload(payload_len)),
        timestamp_ns: NOW_NS,
        retry: 0,
        max_retry: 5,
        priority: 0,
        delay_ns: 0,
        ttl_ns: 0,
        deliver_at_ns: 0,
        expires_at_ns: 0,
    }
    .with_extras(MessageExtras {
        headers: BTreeMap::from([("content_type".to_string(), "application/json".to_string())]),
        exchange: String::new(),
        routing_key: String::new(),
    })
}

/// Times `OPS` calls of `encode`, each into a cleared reused buffer.
fn bench_encode(name: &str, mut encode: impl FnMut(&mut Vec<u8>)) {
    bench(
        name,
        OPS as u64,
        || Vec::with_capacity(4096),
        |out| {
            for _ in 0..OPS {
                out.clear();
                encode(out);
                black_box(&out);
            }
        },
    );
}

/// Times `OPS` decodes + parses of the TCP frame `wire`.
fn bench_tcp_parse(name: &str, wire: &[u8]) {
    bench(
        name,
        OPS as u64,
        || (),
        |()| {
            for _ in 0..OPS {
                let (f, _) = frame::decode(black_box(wire)).unwrap().unwrap();
                black_box(request::parse(f).expect("valid request"));
            }
        },
    );
}

fn tcp(id: MessageId) {
    for (label, len) in [("100B", 100usize), ("1KiB", 1024)] {
        let body = format!(
            r#"{{"topic":"{TOPIC}","payload":{},"headers":{{"content_type":"application/json"}}}}"#,
            json_payload(len)
        );
        bench_tcp_parse(
            &format!("tcp parse PUBLISH {label}"),
            &tcp_frame(op::PUBLISH, &body),
        );
        let m = message(id, len);
        bench_encode(&format!("tcp encode CONSUME reply {label}"), |out| {
            reply::message(&m, out).expect("fits")
        });
    }
    bench_encode("tcp encode PUBLISH reply", |out| {
        reply::publish_ok(&id, TOPIC, None, out)
    });
    let ack = tcp_frame(op::ACK, &format!(r#"{{"id":"{id}"}}"#));
    bench_tcp_parse("tcp parse ACK", &ack);
    bench_encode("tcp encode ACK reply", reply::acked);
}

fn gateway(id: MessageId) {
    let message_id = id.to_hex();
    let headers = [("content_type".to_string(), "text/plain".to_string())];
    for (label, len) in [("100B", 100usize), ("1KiB", 1024)] {
        let text = vec![b'x'; len];
        let send = format!(
            r#"{{"op":"send","id":"r5","kind":"direct","conversation":"alice:bob","client_msg_id":"a-1001","payload":"{}","headers":{{"content_type":"text/plain"}}}}"#,
            base64::engine::general_purpose::STANDARD.encode(&text)
        );
        bench(
            &format!("ws decode send {label}"),
            OPS as u64,
            || (),
            |()| {
                for _ in 0..OPS {
                    let r = ws::decode_request(black_box(send.as_bytes())).expect("valid send");
                    black_box(r);
                }
            },
        );
        let record = ws::RecordOut {
            seq: 4711,
            timestamp_ns: NOW_NS,
            key: b"",
            headers: ws::HeadersOut::Text(&headers),
            payload: &text,
        };
        bench_encode(&format!("ws encode record {label}"), |out| {
            ws::records(out, "", "chat.direct.alice:bob", 0, &[record], None)
        });
    }
    let sent = ws::SentOut {
        message_id: &message_id,
        client_msg_id: "a-1001",
        topic: "chat.direct.alice:bob",
        partition: 0,
        seq: 4711,
        timestamp_ns: NOW_NS,
        duplicate: false,
    };
    bench_encode("ws encode sent", |out| ws::sent(out, "r5", &sent));
}

fn main() {
    println!(
        "frame codec: {OPS} frames per repetition, {} repetitions, median",
        common::reps()
    );
    let id = IdGenerator::new([7; 7]).next(3);
    tcp(id);
    gateway(id);
}
