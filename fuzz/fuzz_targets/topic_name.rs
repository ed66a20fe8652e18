//! Fuzzes the topic-name helpers (`boltq::messaging::topic`) and the cursor record codec
//! (`boltq::messaging::cursor`), which read client-chosen names and bytes from disk.
//!
//! Input: the first byte picks a mode, the rest is the candidate.
//! - mode even: the rest as a name (lossily made UTF-8 so every input reaches the string
//!   paths; the raw bytes also go to `decode_dir` as a directory name when they are UTF-8).
//! - mode odd: the rest as a cursor record body.
//!
//! Checked on every input: no panic; `decode_dir(encode_dir(t)) == t` and the encoding is
//! one safe path component; `decode_dir` accepts exactly the canonical spellings (what it
//! accepts re-encodes to the same bytes); `validate_topic` and `Namespace::of` agree (a
//! namespace implies a valid topic) and valid topics give log names that the store accepts
//! and that parse back; `decode_record` never panics and what it accepts re-encodes to the
//! same bytes.
#![no_main]

use boltq::messaging::cursor::{self, CursorRecord};
use boltq::messaging::topic::{self, Namespace};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        check_name(&String::from_utf8_lossy(rest));
        if let Ok(dir) = std::str::from_utf8(rest) {
            check_dir(dir);
        }
    } else {
        check_cursor_record(rest);
    }
});

fn check_name(name: &str) {
    let dir = topic::encode_dir(name);
    assert_eq!(dir.len(), topic::encoded_len(name));
    assert!(
        !dir.contains('/') && !dir.contains('\0'),
        "unsafe directory {dir:?}"
    );
    assert!(
        !dir.starts_with('.'),
        "hidden or relative directory {dir:?}"
    );
    assert_eq!(topic::decode_dir(&dir).as_deref(), Some(name), "round trip");

    let valid = topic::validate_topic(name);
    let namespace = Namespace::of(name);
    if namespace.is_ok() {
        assert!(valid.is_ok(), "namespace of an invalid topic {name:?}");
    }
    if let Err(e) = &valid {
        assert!(!e.to_string().is_empty());
        assert_eq!(
            namespace.as_ref().err(),
            Some(e),
            "validation errors come first"
        );
        return;
    }
    if let Ok(ns) = &namespace {
        let count = topic::PartitionCounts::default().count_for(ns);
        assert!(count >= 1);
        let p = topic::resolve_partition(name, None, "fuzz-user", count).expect("in range");
        assert!(p < count);
    }
    let partition = name.len() as u32;
    let log = topic::log_name(name, partition);
    boltq_io::store::validate_log_name(&log).expect("a valid topic's log name is valid");
    assert_eq!(
        topic::parse_log_name(&log),
        Some((name.to_string(), partition))
    );
}

fn check_dir(dir: &str) {
    if let Some(name) = topic::decode_dir(dir) {
        assert_eq!(
            topic::encode_dir(&name),
            dir,
            "non-canonical directory accepted"
        );
    }
    let _ = topic::parse_log_name(dir);
}

fn check_cursor_record(body: &[u8]) {
    let Ok(record) = cursor::decode_record(body) else {
        assert!(cursor::decode_commit(body).is_err());
        return;
    };
    let mut out = Vec::new();
    match &record {
        CursorRecord::Commit { key, seq } => {
            assert!(*seq >= 1);
            assert_eq!(cursor::decode_commit(body), Ok((key.clone(), *seq)));
            cursor::encode_commit(key, *seq, &mut out);
        }
        CursorRecord::Delete { key } => {
            assert!(cursor::decode_commit(body).is_err());
            cursor::encode_delete(key, &mut out);
        }
    }
    assert_eq!(
        out, body,
        "an accepted record does not re-encode to the same bytes"
    );
    let mut map = cursor::CursorMap::new();
    map.apply(&record).expect("one record fits an empty map");
}
