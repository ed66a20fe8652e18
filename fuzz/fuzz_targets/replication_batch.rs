//! Fuzzes the replication wire format's decoder (`boltq::cluster::wire::decode`): the bytes a
//! peer node sends, which a broken or hostile peer may send in any state.
//!
//! Checked on every input, beyond "never panics": a refusal has a non-empty error text; an
//! accepted batch re-encodes to bytes that decode to the same batch.
#![no_main]

use boltq::cluster::wire::{decode, encode};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    match decode(Bytes::copy_from_slice(input)) {
        Ok(batch) => {
            let mut again = Vec::new();
            encode(&batch, &mut again);
            assert_eq!(
                decode(again.into()).expect("its own encoding decodes"),
                batch
            );
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
