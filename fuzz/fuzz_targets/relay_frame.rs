//! Fuzzes the decoder of the presence and typing frames nodes relay to each other
//! (`boltq::messaging::gateway::relay::decode`), read from peers on the cluster links.
//!
//! Beyond "never panics": a refusal has an error text; the codec is canonical, so an
//! accepted input re-encodes to exactly its bytes.
#![no_main]

use boltq::messaging::gateway::relay;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    match relay::decode(input) {
        Ok(frame) => {
            let again = relay::encode(&frame).expect("a decoded frame encodes");
            assert_eq!(again, input);
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
