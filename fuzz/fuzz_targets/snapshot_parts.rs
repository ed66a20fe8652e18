//! Fuzzes the joining of snapshot part frames (`boltq::cluster::transport::SnapshotJoiner`):
//! the frames a peer sends for a snapshot too large for one batch, which a broken or
//! hostile peer may send in any order and any shape.
//!
//! The input is a sequence of frames, each `kind:u8 | len:u16 | body` (a short last frame
//! takes what is left). Checked beyond "never panics": a refusal has a non-empty error
//! text and ends the sequence (the connection would close); a joined message is a
//! snapshot from the sending node whose data is every part's bytes in order.
#![no_main]

use boltq::cluster::transport::{Incoming, SnapshotJoiner};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use raft::prelude::MessageType;

const FROM: u64 = 2;

fuzz_target!(|input: &[u8]| {
    let mut joiner = SnapshotJoiner::default();
    let mut rest = input;
    let mut parts: Vec<u8> = Vec::new();
    while let Some((&kind, after)) = rest.split_first() {
        let Some((len, after)) = after.split_first_chunk::<2>() else {
            return;
        };
        let len = (u16::from_le_bytes(*len) as usize).min(after.len());
        let (body, after) = after.split_at(len);
        rest = after;
        if kind == 6 && body.len() > 16 {
            parts.extend_from_slice(&body[16..]);
        }
        match joiner.frame(FROM, kind, Bytes::copy_from_slice(body)) {
            Ok(None) => {}
            Ok(Some(Incoming::Raft(batch))) => {
                assert_eq!(batch.len(), 1);
                let m = &batch[0].msg;
                assert_eq!(m.from, FROM);
                assert_eq!(m.get_msg_type(), MessageType::MsgSnapshot);
                assert!(!m.get_snapshot().data.is_empty());
                assert!(parts.ends_with(&m.get_snapshot().data));
                parts.clear();
            }
            Ok(Some(other)) => panic!("a snapshot end gave {other:?}"),
            Err(e) => {
                assert!(!e.is_empty());
                return;
            }
        }
    }
});
