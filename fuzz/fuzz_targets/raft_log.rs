//! Fuzzes the replay of a group's raft log (`boltq::cluster::image_log::replay`): records
//! read back from disk, which damage the journal's checksums missed may have changed.
//!
//! The input is split into records at each 0xFF 0xFE pair (so one input holds several);
//! beyond "never panics", a refusal has a non-empty error text.
#![no_main]

use boltq::cluster::image_log::replay;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let mut records = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let cut = rest.windows(2).position(|w| w == [0xFF, 0xFE]);
        let (record, tail) = match cut {
            Some(at) => (&rest[..at], &rest[at + 2..]),
            None => (rest, &[][..]),
        };
        records.push((records.len() as u64 + 1, Bytes::copy_from_slice(record)));
        rest = tail;
    }
    let next_seq = records.len() as u64 + 1;
    if let Err(e) = replay(records, next_seq, &[1, 2, 3]) {
        assert!(!e.is_empty());
    }
});
