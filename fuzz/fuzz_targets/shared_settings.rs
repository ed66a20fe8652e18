//! Fuzzes the decoder of the shared settings a peer's link hello carries
//! (`boltq::cluster::shared_settings::SharedSettings::decode`): bytes from any host that can
//! reach the raft port, before anything else of the link is trusted.
//!
//! Beyond "never panics": a refusal has an error text; accepted settings encode back to
//! exactly the input (one encoding per settings), and comparing them with themselves finds
//! no difference.
#![no_main]

use boltq::cluster::shared_settings::SharedSettings;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    match SharedSettings::decode(input) {
        Ok(s) => {
            assert_eq!(s.encode(), input);
            assert!(s.differences(&s).is_empty());
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
