//! Fuzzes the parser of a log's restart marker (`boltq_io::log::restart::parse_marker`), the
//! file a log restarted at a later sequence keeps and every open of the log reads.
//!
//! Checked: no panic; a marker accepted is a sequence ≥ 1 that the writer's own form
//! (decimal, one newline) gives back unchanged, and the input was that form or the same
//! without the newline.
#![no_main]

use boltq_io::log::restart::parse_marker;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Ok(seq) = parse_marker(input) {
        assert!(seq >= 1);
        let written = format!("{seq}\n");
        assert_eq!(parse_marker(written.as_bytes()), Ok(seq));
        assert!(input == written.as_bytes() || input == &written.as_bytes()[..written.len() - 1]);
    }
});
