//! Record codec throughput: encode and decode of frames with 100 B and 1 KiB payloads.
//!
//! `cargo bench -p boltq-io --bench record_codec [filter]`
//!
//! - `encode`: `record::encode` into a reused buffer (the append path's shape: one encode
//!   per append into the store's scratch vector).
//! - `decode view`: `record::decode` over a buffer of back-to-back frames, borrowing only
//!   (what recovery and segment scans do; includes the CRC-32C check).
//! - `decode+to_record`: the same plus `to_record()`, i.e. the allocation a read pays per
//!   returned record.

mod common;

use boltq_io::record::{self, Record};
use bytes::Bytes;
use common::{print_header, report, selected, time_sync};
use std::hint::black_box;

const RECORDS: usize = 100_000;

fn sample_record(payload_len: usize) -> Record {
    Record {
        seq: 123_456,
        timestamp_ns: 1_700_000_000_000_000_000,
        flags: 0,
        epoch: 0,
        key: Bytes::from_static(b"user:4711"),
        headers: vec![(Bytes::from_static(b"ct"), Bytes::from_static(b"json"))],
        payload: Bytes::from(vec![0x5Au8; payload_len]),
    }
}

fn main() {
    let reps = common::env_u64("BOLTQ_BENCH_REPS", 7) as usize;
    println!("record codec: {RECORDS} records per repetition, {reps} repetitions; ops = records, MB = payload bytes");
    print_header(&[]);
    for (label, payload_len) in [("100B", 100usize), ("1KiB", 1024)] {
        let rec = sample_record(payload_len);
        let payload_bytes = (RECORDS * payload_len) as u64;

        let name = format!("encode {label}");
        if selected(&name) {
            let mut out = Vec::with_capacity(64 * 1024);
            let mut rec = rec.clone();
            let s = time_sync(2, reps, RECORDS as u64, payload_bytes, || {
                for i in 0..RECORDS {
                    rec.seq = i as u64;
                    out.clear();
                    record::encode(black_box(&rec), &mut out).expect("encode");
                    black_box(&out);
                }
            });
            report(&name, &s);
        }

        let mut frames = Vec::new();
        let mut r = rec.clone();
        for i in 0..RECORDS {
            r.seq = i as u64;
            record::encode(&r, &mut frames).expect("encode");
        }

        let name = format!("decode view {label}");
        if selected(&name) {
            let s = time_sync(2, reps, RECORDS as u64, payload_bytes, || {
                let mut at = 0;
                let mut n = 0;
                while at < frames.len() {
                    let (view, used) = record::decode(black_box(&frames[at..])).expect("decode");
                    black_box(view.payload);
                    at += used;
                    n += 1;
                }
                assert_eq!(n, RECORDS);
            });
            report(&name, &s);
        }

        let name = format!("decode+to_record {label}");
        if selected(&name) {
            let s = time_sync(2, reps, RECORDS as u64, payload_bytes, || {
                let mut at = 0;
                while at < frames.len() {
                    let (view, used) = record::decode(black_box(&frames[at..])).expect("decode");
                    black_box(view.to_record());
                    at += used;
                }
            });
            report(&name, &s);
        }
    }
}
