//! Fuzzes the queue plane's command log record decoder
//! (`boltq::queue::server::wal::record::decode`): the bytes a slot's log hands to replay at
//! startup, which a torn write, a bad disk or an old data dir may have left in any state.
//!
//! Input: the whole input is one record (no mode byte: lengths live inside the record, and
//! the first byte already picks the form — `{` or `"` JSON, 0x01–0x06 binary).
//!
//! Checked on every input, beyond "never panics":
//! - a refusal has a non-empty error text;
//! - an accepted record re-encodes (`encode`) to a record that decodes to the same command;
//! - an accepted binary record re-encodes to exactly its own bytes (the binary form is
//!   canonical: fixed-width integers, exact lengths, strictly ascending header keys, no
//!   trailing bytes), and every length in it is within the record module's limits.
#![no_main]

use boltq::queue::broker::Command;
use boltq::queue::server::wal::record::{
    self, HEADERS_BYTES_MAX, HEADERS_MAX, JSON_OBJECT_BYTE, JSON_STRING_BYTE, NAME_BYTES_MAX,
    PAYLOAD_BYTES_MAX, ROUTING_KEY_BYTES_MAX,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let cmd = match record::decode(input) {
        Ok(cmd) => cmd,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let mut again = Vec::new();
    record::encode(&cmd, &mut again);
    assert_eq!(record::decode(&again).as_ref(), Ok(&cmd));
    let binary = input[0] != JSON_OBJECT_BYTE && input[0] != JSON_STRING_BYTE;
    if binary {
        assert_eq!(again, input, "binary records are canonical");
        check_limits(&cmd);
    }
});

fn check_limits(cmd: &Command) {
    match cmd {
        Command::Publish { msg } | Command::PublishTopic { msg } => {
            assert!(msg.topic.len() <= NAME_BYTES_MAX);
            assert!(msg.exchange().len() <= NAME_BYTES_MAX);
            assert!(msg.payload.len() <= PAYLOAD_BYTES_MAX);
            assert!(msg.routing_key().len() <= ROUTING_KEY_BYTES_MAX);
            assert!(msg.headers().len() <= HEADERS_MAX);
            let header_bytes: usize = msg.headers().iter().map(|(k, v)| k.len() + v.len()).sum();
            assert!(header_bytes <= HEADERS_BYTES_MAX);
        }
        Command::Consume { queue, .. } => assert!(queue.len() <= NAME_BYTES_MAX),
        Command::Ack { .. } | Command::Nack { .. } | Command::Tick { .. } => {}
        other => panic!("a binary record decoded to a JSON-only command: {other:?}"),
    }
}
