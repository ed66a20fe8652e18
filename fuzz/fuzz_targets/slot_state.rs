//! Fuzzes the decoders of what a slot's Raft group carries for the messaging plane
//! (`boltq::messaging::slot`): a command in a raft entry (`command::decode`) and the
//! messaging part of a slot snapshot (`StreamSlot::decode_snapshot`), both read from disk
//! at a restart and from peers on the links.
//!
//! Beyond "never panics": a refusal has an error text; both decoders are canonical, so an
//! accepted input re-encodes to exactly its bytes (a snapshot of an older version to the
//! same bytes as the current one, with an empty section for each it lacked: version 1 has
//! neither pointer claims nor outbox, version 2 no outbox).
#![no_main]

use boltq::messaging::slot::{command, snapshot, StreamSlot, StreamSlotConfig};
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
            if input[0] == snapshot::VERSION {
                assert_eq!(again, input);
            } else {
                // An older version is read and written as the current one: the same
                // sections, then an empty one for each it lacked.
                let missing = match input[0] {
                    snapshot::VERSION_WITHOUT_OUTBOX => 1,
                    snapshot::VERSION_WITHOUT_POINTER_CLAIMS => 2,
                    other => panic!("version {other} was read"),
                };
                let mut upgraded = input.to_vec();
                upgraded[0] = snapshot::VERSION;
                for _ in 0..missing {
                    upgraded.extend_from_slice(&0u32.to_le_bytes());
                }
                assert_eq!(again, upgraded);
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
