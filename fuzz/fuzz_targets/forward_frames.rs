//! Fuzzes the decoders of forwarded commands and their replies
//! (`boltq::cluster::forward::{decode_request, decode_reply}`): what a peer node sends on
//! the links, which a broken or hostile peer may send in any state.
//!
//! Beyond "never panics": a refusal has an error text; an accepted reply re-encodes to
//! bytes that decode to the same reply.
#![no_main]

use boltq::cluster::forward::{decode_reply, decode_request, encode_reply};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Err(e) = decode_request(Bytes::copy_from_slice(input)) {
        assert!(!e.to_string().is_empty());
    }
    match decode_reply(Bytes::copy_from_slice(input)) {
        Ok(reply) => {
            let mut again = Vec::new();
            encode_reply(&reply, &mut again);
            assert_eq!(
                decode_reply(again.into()).expect("its own encoding decodes"),
                reply
            );
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
