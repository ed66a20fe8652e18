//! Fuzzes the queue plane's snapshot body decoder (`boltq::queue::server::snapshot::decode`)
//! and the restore behind it: the bytes a slot's snapshot chunks hold at startup, which a bad
//! disk or an old data dir may have left in any state.
//!
//! Input: the first byte is a mode, the rest one body (MessagePack behind `PACKED_MAGIC`,
//! `POSITIONAL_MAGIC` or `NAMED_MAGIC`, or the JSON of older versions): mode % 4 = 0, the
//! rest as given; 1, the target prepends the positional magic; 2, the named one; 3, the
//! packed one, so the fuzzer reaches the MessagePack decoder (and the packed ready
//! messages' decoder) without having to find a magic first.
//!
//! Checked on every input, beyond "never panics": a refusal has a non-empty error text; the
//! body read from 7-byte chunks (as a start reads a snapshot's chunks) decodes to the same
//! snapshot or is refused too; an accepted snapshot that restores re-encodes, in either
//! layout, to a body that decodes to the same snapshot.
#![no_main]

use boltq::queue::broker::{Broker, BrokerConfig};
use boltq::queue::server::snapshot::{
    decode, decode_from, encode, encode_named, Chunks, NAMED_MAGIC, PACKED_MAGIC, POSITIONAL_MAGIC,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((mode, rest)) = input.split_first() else {
        return;
    };
    let body: Vec<u8> = match mode % 4 {
        1 => POSITIONAL_MAGIC.iter().chain(rest).copied().collect(),
        2 => NAMED_MAGIC.iter().chain(rest).copied().collect(),
        3 => PACKED_MAGIC.iter().chain(rest).copied().collect(),
        _ => rest.to_vec(),
    };
    let chunks = Chunks::new(body.chunks(7).map(bytes::Bytes::copy_from_slice));
    assert_eq!(decode_from(chunks).ok(), decode(&body).ok());
    let snapshot = match decode(&body) {
        Ok(snapshot) => snapshot,
        Err(e) => {
            assert!(!e.is_empty());
            return;
        }
    };
    let Ok(broker) = Broker::try_restore(snapshot, BrokerConfig::default()) else {
        return;
    };
    let again = broker.snapshot();
    let body = encode(again.clone()).expect("a restored snapshot encodes");
    assert_eq!(decode(&body).expect("its own body decodes"), again);
    let named = encode_named(&again).expect("a restored snapshot encodes by name");
    assert_eq!(decode(&named).expect("its own named body decodes"), again);
});
