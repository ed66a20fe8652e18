//! The JSON a publish costs: the request body parse, and the command as the queue plane's
//! WAL writes and replays it, as JSON (old logs, rare commands) and as a binary record; ns per operation, 100 B and 1 KiB payloads.
//!
//! `cargo bench --bench publish_json [filter]`
//!
//! - `parse publish body`: `request::parse` of a PUBLISH body
//!   `{"topic","payload":{"data":"…"},"headers":{"content_type":…}}` (the payload a JSON
//!   object of 100 B / 1 KiB), without the 5-byte frame header: the hand-written Go-semantics
//!   decoder, which also validates and compacts the payload.
//! - `wal json encode Publish` / `wal json decode Publish`: `serde_json::to_vec` /
//!   `serde_json::from_slice` of `Command::Publish` with that message, what
//!   `queue::server::wal::append` logged for every publish before binary records (and still
//!   logs for the rare commands), and what `wal::replay` reads from old logs (the payload is
//!   stored as a JSON string, so its quotes are escaped). `B/op` is the record's size.
//! - `wal binary encode Publish` / `wal binary decode Publish`: `wal::record::encode` into a
//!   fresh buffer (as `append` does) / `wal::record::decode` of the same command, the record
//!   the log writes now.
//! - `wal … Consume` and `Ack`: the other two commands a publish+consume+ack cycle logs, for
//!   comparison with `broker_apply`'s cycle.

mod common;

use boltq::queue::broker::{Command, ConsumerRef};
use boltq::queue::message::{IdGenerator, Message, MessageExtras, MessageId};
use boltq::queue::protocol::frame::{op, Frame};
use boltq::queue::protocol::request::{self, Request};
use boltq::queue::server::wal::record;
use bytes::Bytes;
use common::{bench, bench_with};
use std::collections::BTreeMap;
use std::hint::black_box;

/// Operations per repetition.
const OPS: usize = 100_000;
const TOPIC: &str = "orders";
const NOW_NS: i64 = 1_700_000_000_000_000_000;

/// A JSON object of exactly `len` bytes: `{"data":"xx…x"}`.
fn json_payload(len: usize) -> String {
    let wrapper = r#"{"data":""}"#.len();
    assert!(len >= wrapper);
    format!(r#"{{"data":"{}"}}"#, "x".repeat(len - wrapper))
}

/// The message the TCP front end builds from the parsed publish.
fn message(id: MessageId, payload: Bytes, headers: BTreeMap<String, String>) -> Message {
    Message {
        id,
        topic: TOPIC.into(),
        payload,
        timestamp_ns: NOW_NS,
        retry: 0,
        max_retry: 5,
        priority: 0,
        delay_ns: 0,
        ttl_ns: 0,
        deliver_at_ns: 0,
        expires_at_ns: 0,
        extras: None,
    }
    .with_extras(MessageExtras {
        headers,
        ..MessageExtras::default()
    })
}

/// Times `OPS` WAL encodes and `OPS` WAL decodes of `cmd` in both record forms, named
/// `wal json … <label>` and `wal binary … <label>`.
fn bench_wal(label: &str, cmd: &Command) {
    let json = serde_json::to_vec(cmd).expect("encode");
    let decoded: Command = serde_json::from_slice(&json).expect("decode");
    assert_eq!(&decoded, cmd, "the JSON record round-trips {label}");
    bench_codec(
        "json",
        label,
        &json,
        || serde_json::to_vec(black_box(cmd)).expect("encode"),
        |bytes| serde_json::from_slice(bytes).expect("decode"),
    );

    let mut binary = Vec::new();
    record::encode(cmd, &mut binary);
    assert!(binary[0] < b' ', "{label} is logged as a binary record");
    assert_eq!(
        record::decode(&binary).as_ref(),
        Ok(cmd),
        "{label} round-trips"
    );
    bench_codec(
        "binary",
        label,
        &binary,
        || {
            let mut out = Vec::new();
            record::encode(black_box(cmd), &mut out);
            out
        },
        |bytes| record::decode(bytes).expect("decode"),
    );
}

/// `OPS` runs of `encode`, then `OPS` runs of `decode` over `logged`, with its size as
/// `B/op`; named `wal <form> encode <label>` / `wal <form> decode <label>`.
fn bench_codec(
    form: &str,
    label: &str,
    logged: &[u8],
    encode: impl Fn() -> Vec<u8>,
    decode: impl Fn(&[u8]) -> Command,
) {
    let bytes = [("B/op", logged.len() as f64)];
    bench_with(
        &format!("wal {form} encode {label}"),
        OPS as u64,
        &bytes,
        || (),
        |()| {
            for _ in 0..OPS {
                black_box(encode());
            }
        },
    );
    bench_with(
        &format!("wal {form} decode {label}"),
        OPS as u64,
        &bytes,
        || (),
        |()| {
            for _ in 0..OPS {
                black_box(decode(black_box(logged)));
            }
        },
    );
}

fn main() {
    println!(
        "publish JSON: {OPS} operations per repetition, {} repetitions, median",
        common::reps()
    );
    let id = IdGenerator::new([7; 7]).next(3);
    for (label, len) in [("100B", 100usize), ("1KiB", 1024)] {
        let body = format!(
            r#"{{"topic":"{TOPIC}","payload":{},"headers":{{"content_type":"application/json"}}}}"#,
            json_payload(len)
        );
        let frame = Frame {
            code: op::PUBLISH,
            payload: body.as_bytes(),
        };
        let Ok(Request::Publish(publish)) = request::parse(frame) else {
            panic!("the benchmark's publish body parses");
        };
        assert_eq!(publish.payload.len(), len, "the payload is already compact");
        bench(
            &format!("parse publish body {label}"),
            OPS as u64,
            || (),
            |()| {
                for _ in 0..OPS {
                    black_box(request::parse(black_box(frame)).expect("valid"));
                }
            },
        );
        let msg = message(id, publish.payload, publish.headers);
        bench_wal(&format!("Publish {label}"), &Command::Publish { msg });
    }
    bench_wal(
        "Consume",
        &Command::Consume {
            queue: TOPIC.to_string(),
            consumer: ConsumerRef { shard: 1, conn: 42 },
            max: 1,
            now_ns: NOW_NS,
        },
    );
    bench_wal("Ack", &Command::Ack { id, now_ns: NOW_NS });
}
