//! The page reply of STREAM_READ and STREAM_TAIL: records of one partition from a position.
//!
//! ```text
//! {"topic","partition","from","first_seq","next_seq","gap","records":[<record>,…],"next"
//!  [,"group","member"]}
//! <record> = {"seq","timestamp","key"?,"headers":{…},"payload_base64"}
//! ```
//!
//! `from` is the position served (after a `gap` correction), `first_seq`/`next_seq` the
//! partition's bounds at the read (`next_seq` = one past the newest durable record), `gap`
//! says the requested position was below the retention horizon, and `next` is where the
//! following read (or a COMMIT) continues: one past the last record returned, or `from`
//! when there is none. Keys and header values are shown as UTF-8 (invalid bytes replaced);
//! payloads are base64 (standard alphabet, padded) because records may be binary.
//!
//! The reply never exceeds the frame limit: records are added while they fit in
//! [`PAGE_BYTES_BUDGET`], and the rest is left for the next read (`next` says where). A
//! single record that cannot fit in any frame is reported as an ERROR naming its sequence,
//! so the consumer can step over it (`from` = seq + 1) instead of being stuck.

use crate::queue::protocol::frame::{self, status, PAYLOAD_BYTES_MAX};
use base64::Engine as _;
use boltq_io::record::Record;
use std::io::Write;

/// Bytes of records one page may carry; the rest of the frame is the page's own fields
/// (topic, group and member are each bounded well below 2 KiB, 6× that escaped).
pub const PAGE_BYTES_BUDGET: usize = PAYLOAD_BYTES_MAX - 64 * 1024;

/// What the page is about (echoed in the reply).
#[derive(Debug, Clone, Copy)]
pub struct PageHead<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub from: u64,
    pub first_seq: u64,
    pub next_seq: u64,
    pub gap: bool,
    /// TAIL of a named consumer: `(group, member)` as the client gave them.
    pub consumer: Option<(&'a str, &'a str)>,
}

/// Appends the page frame; returns how many of `records` it carries (a prefix), or the
/// ERROR frame for a first record too large for any frame (then 0).
pub fn page(head: &PageHead<'_>, records: &[Record], out: &mut Vec<u8>) -> usize {
    let mut body = Vec::with_capacity(256);
    let mut taken = 0usize;
    body.extend_from_slice(b"{\"topic\":");
    put_str(&mut body, head.topic);
    let _ = write!(
        body,
        ",\"partition\":{},\"from\":{},\"first_seq\":{},\"next_seq\":{},\"gap\":{},\"records\":[",
        head.partition, head.from, head.first_seq, head.next_seq, head.gap
    );
    let mut next = head.from;
    let mut one = Vec::new();
    for r in records {
        one.clear();
        record(r, &mut one);
        if body.len() + one.len() + 1 > PAGE_BYTES_BUDGET {
            if taken == 0 {
                let text = format!(
                    "record {} of {}/{} is too large for one reply frame ({} bytes); read from {} to skip it",
                    r.seq,
                    head.topic,
                    head.partition,
                    one.len(),
                    r.seq + 1
                );
                crate::queue::protocol::reply::error(&text, out);
                return 0;
            }
            break;
        }
        if taken > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&one);
        taken += 1;
        next = r.seq + 1;
    }
    let _ = write!(body, "],\"next\":{next}");
    if let Some((group, member)) = head.consumer {
        body.extend_from_slice(b",\"group\":");
        put_str(&mut body, group);
        body.extend_from_slice(b",\"member\":");
        put_str(&mut body, member);
    }
    body.push(b'}');
    frame::encode(status::OK, &body, out);
    taken
}

fn record(r: &Record, out: &mut Vec<u8>) {
    let _ = write!(out, "{{\"seq\":{},\"timestamp\":{}", r.seq, r.timestamp_ns);
    if !r.key.is_empty() {
        out.extend_from_slice(b",\"key\":");
        put_str(out, &String::from_utf8_lossy(&r.key));
    }
    out.extend_from_slice(b",\"headers\":{");
    for (i, (k, v)) in r.headers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, &String::from_utf8_lossy(k));
        out.push(b':');
        put_str(out, &String::from_utf8_lossy(v));
    }
    out.extend_from_slice(b"},\"payload_base64\":\"");
    let start = out.len();
    out.resize(start + r.payload.len().div_ceil(3) * 4, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(&r.payload, &mut out[start..])
        .expect("the buffer was sized for the encoding");
    out.truncate(start + written);
    out.extend_from_slice(b"\"}");
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing JSON to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;
    use bytes::Bytes;
    use serde_json::Value;

    fn rec(seq: u64, payload: Vec<u8>) -> Record {
        Record {
            seq,
            timestamp_ns: 1_000 + seq as i64,
            flags: 0,
            epoch: 0,
            key: Bytes::from_static(b"alice"),
            headers: vec![(
                Bytes::from_static(b"trace"),
                Bytes::from_static(b"\x00\xff"),
            )],
            payload: Bytes::from(payload),
        }
    }

    fn head() -> PageHead<'static> {
        PageHead {
            topic: "match.alice",
            partition: 1,
            from: 5,
            first_seq: 1,
            next_seq: 9,
            gap: false,
            consumer: None,
        }
    }

    fn decode(out: &[u8]) -> (u8, Value) {
        let (f, used) = frame::decode(out).unwrap().unwrap();
        assert_eq!(used, out.len());
        (f.code, serde_json::from_slice(f.payload).unwrap())
    }

    #[test]
    fn a_page_carries_records_bounds_and_next() {
        let mut out = Vec::new();
        let records = vec![rec(5, b"{\"a\":1}".to_vec()), rec(6, vec![0, 1, 2])];
        let h = PageHead {
            consumer: Some(("billing", "w1")),
            ..head()
        };
        assert_eq!(page(&h, &records, &mut out), 2);
        let (code, v) = decode(&out);
        assert_eq!(code, status::OK);
        assert_eq!(v["next"], 7);
        assert_eq!(
            (v["from"].as_u64(), v["next_seq"].as_u64()),
            (Some(5), Some(9))
        );
        assert_eq!(
            (v["group"].as_str(), v["member"].as_str()),
            (Some("billing"), Some("w1"))
        );
        let r = &v["records"][1];
        assert_eq!(
            (r["seq"].as_u64(), r["key"].as_str()),
            (Some(6), Some("alice"))
        );
        assert_eq!(r["payload_base64"], "AAEC");
        assert_eq!(
            r["headers"]["trace"], "\u{0}\u{fffd}",
            "lossy UTF-8, escaped"
        );
    }

    #[test]
    fn an_empty_page_continues_from_where_it_was_asked() {
        let mut out = Vec::new();
        assert_eq!(page(&head(), &[], &mut out), 0);
        let (_, v) = decode(&out);
        assert_eq!(
            (v["next"].as_u64(), v["records"].as_array().map(Vec::len)),
            (Some(5), Some(0))
        );
        assert!(v.get("group").is_none());
    }

    #[test]
    fn pages_stop_before_the_frame_limit_and_say_where_to_go_on() {
        let big = vec![7u8; 1024 * 1024];
        let records: Vec<Record> = (5..9).map(|s| rec(s, big.clone())).collect();
        let mut out = Vec::new();
        let taken = page(&head(), &records, &mut out);
        assert!((1..4).contains(&taken), "{taken}");
        assert!(out.len() <= PAYLOAD_BYTES_MAX + frame::HEADER_BYTES);
        let (_, v) = decode(&out);
        assert_eq!(v["next"].as_u64(), Some(5 + taken as u64));
    }

    #[test]
    fn a_record_larger_than_any_frame_is_an_error_naming_it() {
        let mut out = Vec::new();
        let records = vec![rec(5, vec![1u8; PAYLOAD_BYTES_MAX])];
        assert_eq!(page(&head(), &records, &mut out), 0);
        let (code, v) = decode(&out);
        assert_eq!(code, status::ERROR);
        assert!(v["error"].as_str().unwrap().contains("read from 6"), "{v}");
    }

    #[test]
    fn random_records_always_give_valid_json_within_the_limit() {
        let mut rng = Rng::new(77);
        for _ in 0..200 {
            let n = rng.below(8) as usize;
            let records: Vec<Record> = (0..n)
                .map(|i| {
                    let len = rng.below(300) as usize;
                    let mut r = rec(
                        5 + i as u64,
                        (0..len).map(|_| rng.next_u64() as u8).collect(),
                    );
                    r.key = Bytes::from(
                        (0..rng.below(20))
                            .map(|_| rng.next_u64() as u8)
                            .collect::<Vec<u8>>(),
                    );
                    r
                })
                .collect();
            let mut out = Vec::new();
            assert_eq!(page(&head(), &records, &mut out), n);
            let (_, v) = decode(&out);
            for (i, r) in v["records"].as_array().unwrap().iter().enumerate() {
                let b = base64::engine::general_purpose::STANDARD
                    .decode(r["payload_base64"].as_str().unwrap())
                    .unwrap();
                assert_eq!(b, records[i].payload);
            }
        }
    }
}
