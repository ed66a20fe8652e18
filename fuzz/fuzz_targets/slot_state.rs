//! Fuzzes the decoders of what a slot's Raft group carries for the messaging plane
//! (`boltq::messaging::slot`): a command in a raft entry (`command::decode`) and the
//! messaging part of a slot snapshot (`StreamSlot::decode_snapshot`), both read from disk
//! at a restart and from peers on the links.
//!
//! Beyond "never panics": a refusal has an error text; both decoders are canonical, so an
//! accepted input re-encodes to exactly its bytes.
#![no_main]

use boltq::messaging::slot::{command, StreamSlot, StreamSlotConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    match command::decode(input) {
        Ok(cmd) => {
            let mut again = Vec::new();
            command::encode(&cmd, &mut again).expect("a decoded command encodes");
            assert_eq!(again, input);
        }
        Err(e) => assert!(!e.is_empty()),
    }
    match StreamSlot::decode_snapshot(input, StreamSlotConfig::default()) {
        Ok(slot) => {
            let mut again = Vec::new();
            slot.encode_snapshot(&mut again);
            assert_eq!(again, input);
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
