//! Tests of the frame codec: the §2.13 worked exchange both ways, the decoder's limits and
//! checks, the encoders' presence rules, and randomized round trips.

mod decode;
mod encode;
mod exchange;
mod json;
mod props;

use super::encode::sent_len_estimate;
use super::json::{write_i64, write_json_string, write_u64};
use super::*;
use crate::messaging::presence::PresenceState;
use base64::Engine;
use boltq_io::record::Record;
use boltq_io::testutil::Rng;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

// ---- helpers -------------------------------------------------------------------------

fn decode(s: &str) -> Request {
    decode_request(s.as_bytes()).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn decode_err(s: &str) -> DecodeError {
    match decode_request(s.as_bytes()) {
        Ok(r) => panic!("{s} decoded to {r:?}"),
        Err(e) => {
            assert!(!e.message.is_empty());
            e
        }
    }
}

fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    f(&mut out);
    let s = String::from_utf8(out).expect("frames are UTF-8");
    let v: Value = serde_json::from_str(&s).expect("frames are JSON");
    assert!(v.is_object());
    s
}

fn parsed(f: impl FnOnce(&mut Vec<u8>)) -> Value {
    serde_json::from_str(&text(f)).unwrap()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const SESSION: &str = "BwgJCgsMDQ4PEBESExQVFg";
const TOKEN: &str = "BwgJCgsMDQ4PEBESExQVFg.ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4CBgoM";

const CHAR_POOL: &[char] = &[
    'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\r', '\t', '\u{0}', '\u{1}', '\u{8}', '\u{c}',
    '\u{1f}', '\u{7f}', 'é', '€', '…', '\u{2028}', '\u{fffd}', '😀', '{', '}', ':', ',',
];

fn random_string(rng: &mut Rng, max_bytes: usize) -> String {
    let target = match rng.below(8) {
        0 => max_bytes,
        1 => 0,
        _ => rng.below(max_bytes.min(40) as u64 + 1) as usize,
    };
    let mut s = String::new();
    loop {
        let c = CHAR_POOL[rng.below(CHAR_POOL.len() as u64) as usize];
        if s.len() + c.len_utf8() > target {
            return s;
        }
        s.push(c);
    }
}
