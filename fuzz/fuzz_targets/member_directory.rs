//! Fuzzes the member directory decoder (`boltq::cluster::directory::Directory::decode`):
//! what a peer gossips on the links and what a shard reads back from its file, either of
//! which may be damaged or hostile.
//!
//! Beyond "never panics": a refusal has an error text; an accepted directory re-encodes to
//! bytes that decode to the same directory.
#![no_main]

use boltq::cluster::directory::Directory;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    match Directory::decode(Bytes::copy_from_slice(input)) {
        Ok(d) => {
            let again = Directory::decode(Bytes::from(d.encode())).expect("its own encoding");
            assert_eq!(again, d);
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
