//! The replication wire format: a batch of Raft messages from one node's shard to another's,
//! each tagged with its slot (its group). Our own layout, not raft-rs's protobuf: the
//! protobuf 2.x parser raft-rs depends on has an unfixed recursion advisory
//! (RUSTSEC-2024-0437), and a layout of our own bounds every count and length before it
//! allocates, so hostile bytes cost at most their own size (platform.md §8).
//!
//! ```text
//! batch    = version:u8 (1) | count:u16 | message*count
//! message  = slot:u16 | type:u8 | to:u64 | from:u64 | term:u64 | log_term:u64 | index:u64
//!            | commit:u64 | commit_term:u64 | request_snapshot:u64 | reject:bool
//!            | reject_hint:u64 | priority:i64 | context:bytes
//!            | entry_count:u32 | entry*entry_count | has_snapshot:bool | snapshot?
//! entry    = type:u8 | term:u64 | index:u64 | data:bytes | context:bytes
//! snapshot = index:u64 | term:u64 | conf_state | data:bytes
//! conf_state = voters:ids | learners:ids | voters_outgoing:ids | learners_next:ids
//!            | auto_leave:bool
//! ids      = count:u16 | u64*count
//! bytes    = len:u32 | len bytes          bool = u8 0 or 1; integers little-endian
//! ```
//!
//! Decoding is strict: unknown versions and types, message types raft-rs only makes
//! locally (hup, beat, propose, unreachable, snapshot status, check quorum), node id 0, a
//! bool other than 0/1 and trailing bytes are refused with an error naming them. Payloads
//! (`data`, `context`) are slices of the input, not copies.

use bytes::{BufMut, Bytes};
use raft::prelude::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use std::fmt;

pub const VERSION: u8 = 1;
/// Largest batch frame either side accepts. Snapshots larger than
/// `transport::SNAPSHOT_PART_BYTES` travel in parts of their own, outside batches.
pub const BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;
pub const BATCH_MESSAGES_MAX: usize = 4096;
pub const ENTRIES_PER_MESSAGE_MAX: usize = 8192;
/// Most members one membership list names.
pub const MEMBERS_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The input ended inside a field.
    Truncated {
        field: &'static str,
    },
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    Version(u8),
    MessageType(u8),
    /// A message type raft-rs only makes for itself; never valid from a peer.
    LocalMessageType(u8),
    EntryType(u8),
    Bool {
        field: &'static str,
        value: u8,
    },
    ZeroNodeId {
        field: &'static str,
    },
    TrailingBytes(usize),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { field } => write!(f, "input ends inside {field}"),
            WireError::TooLarge { what, len, max } => write!(f, "{what} of {len} exceeds {max}"),
            WireError::Version(v) => write!(f, "replication batch version {v} (want {VERSION})"),
            WireError::MessageType(t) => write!(f, "unknown raft message type {t}"),
            WireError::LocalMessageType(t) => {
                write!(
                    f,
                    "raft message type {t} is local and never sent between nodes"
                )
            }
            WireError::EntryType(t) => write!(f, "unknown raft entry type {t}"),
            WireError::Bool { field, value } => write!(f, "{field} is {value}, not 0 or 1"),
            WireError::ZeroNodeId { field } => write!(f, "{field} is node id 0"),
            WireError::TrailingBytes(n) => write!(f, "{n} bytes after the last message"),
        }
    }
}

impl std::error::Error for WireError {}

/// One message of a batch: the slot whose group it belongs to, and the message.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotMessage {
    pub slot: u16,
    pub msg: Message,
}

/// Encodes a batch. Panics on a batch past the limits: the sender builds batches, and
/// splitting them is its job (`BATCH_MESSAGES_MAX`, `ENTRIES_PER_MESSAGE_MAX`).
pub fn encode(batch: &[SlotMessage], out: &mut Vec<u8>) {
    assert!(batch.len() <= BATCH_MESSAGES_MAX, "batch too long");
    out.put_u8(VERSION);
    out.put_u16_le(batch.len() as u16);
    for m in batch {
        encode_message(m, out);
    }
}

fn encode_message(m: &SlotMessage, out: &mut Vec<u8>) {
    let msg = &m.msg;
    out.put_u16_le(m.slot);
    out.put_u8(msg.get_msg_type() as u8);
    for v in [
        msg.to,
        msg.from,
        msg.term,
        msg.log_term,
        msg.index,
        msg.commit,
        msg.commit_term,
        msg.request_snapshot,
    ] {
        out.put_u64_le(v);
    }
    out.put_u8(msg.reject as u8);
    out.put_u64_le(msg.reject_hint);
    out.put_i64_le(msg.priority);
    put_bytes(&msg.context, out);
    let entries = msg.get_entries();
    assert!(entries.len() <= ENTRIES_PER_MESSAGE_MAX, "too many entries");
    out.put_u32_le(entries.len() as u32);
    for e in entries {
        put_entry(e, out);
    }
    out.put_u8(msg.has_snapshot() as u8);
    if msg.has_snapshot() {
        let s = msg.get_snapshot();
        let meta = s.get_metadata();
        out.put_u64_le(meta.index);
        out.put_u64_le(meta.term);
        put_conf_state(meta.get_conf_state(), out);
        put_bytes(&s.data, out);
    }
}

/// One entry as `entry` in the layout above (also the raft log's record format, `image_log.rs`).
pub(super) fn put_entry(e: &Entry, out: &mut Vec<u8>) {
    out.put_u8(e.get_entry_type() as u8);
    out.put_u64_le(e.term);
    out.put_u64_le(e.index);
    put_bytes(&e.data, out);
    put_bytes(&e.context, out);
}

pub(super) fn put_conf_state(cs: &ConfState, out: &mut Vec<u8>) {
    for ids in [
        &cs.voters,
        &cs.learners,
        &cs.voters_outgoing,
        &cs.learners_next,
    ] {
        assert!(ids.len() <= MEMBERS_MAX, "too many members");
        out.put_u16_le(ids.len() as u16);
        for id in ids {
            out.put_u64_le(*id);
        }
    }
    out.put_u8(cs.auto_leave as u8);
}

pub(super) fn put_bytes(b: &[u8], out: &mut Vec<u8>) {
    assert!(b.len() <= BATCH_BYTES_MAX, "field larger than a batch");
    out.put_u32_le(b.len() as u32);
    out.extend_from_slice(b);
}

/// Decodes a whole batch frame.
pub fn decode(input: Bytes) -> Result<Vec<SlotMessage>, WireError> {
    if input.len() > BATCH_BYTES_MAX {
        return Err(WireError::TooLarge {
            what: "batch",
            len: input.len(),
            max: BATCH_BYTES_MAX,
        });
    }
    let mut r = Reader::new(input);
    let version = r.u8("version")?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let count = r.u16("message count")? as usize;
    if count > BATCH_MESSAGES_MAX {
        return Err(WireError::TooLarge {
            what: "message count",
            len: count,
            max: BATCH_MESSAGES_MAX,
        });
    }
    let mut out = Vec::with_capacity(count.min(r.remaining() / MESSAGE_BYTES_MIN + 1));
    for _ in 0..count {
        out.push(r.message()?);
    }
    if r.remaining() > 0 {
        return Err(WireError::TrailingBytes(r.remaining()));
    }
    Ok(out)
}

/// The fixed part of a message: slot, type, eight u64s, reject, reject_hint, priority, the
/// context length, the entry count and the snapshot flag.
const MESSAGE_BYTES_MIN: usize = 2 + 1 + 8 * 8 + 1 + 8 + 8 + 4 + 4 + 1;
/// The fixed part of an entry.
const ENTRY_BYTES_MIN: usize = 1 + 8 + 8 + 4 + 4;

/// Reads the layout's fields with every length checked against what is left.
pub(super) struct Reader {
    input: Bytes,
    pos: usize,
}

impl Reader {
    pub(super) fn new(input: Bytes) -> Reader {
        Reader { input, pos: 0 }
    }

    pub(super) fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    pub(super) fn take(&mut self, n: usize, field: &'static str) -> Result<Bytes, WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated { field });
        }
        let out = self.input.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let b = self.take(N, field)?;
        Ok(b[..].try_into().expect("took N bytes"))
    }

    pub(super) fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(super) fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    pub(super) fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(super) fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    pub(super) fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    pub(super) fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(WireError::Bool { field, value }),
        }
    }

    pub(super) fn node(&mut self, field: &'static str) -> Result<u64, WireError> {
        match self.u64(field)? {
            0 => Err(WireError::ZeroNodeId { field }),
            id => Ok(id),
        }
    }

    pub(super) fn bytes(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        let len = self.u32(field)? as usize;
        self.take(len, field)
    }

    fn message(&mut self) -> Result<SlotMessage, WireError> {
        let slot = self.u16("slot")?;
        let kind = self.u8("message type")?;
        let mut msg = Message::default();
        msg.set_msg_type(message_type(kind)?);
        msg.to = self.node("to")?;
        msg.from = self.node("from")?;
        msg.term = self.u64("term")?;
        msg.log_term = self.u64("log_term")?;
        msg.index = self.u64("index")?;
        msg.commit = self.u64("commit")?;
        msg.commit_term = self.u64("commit_term")?;
        msg.request_snapshot = self.u64("request_snapshot")?;
        msg.reject = self.bool("reject")?;
        msg.reject_hint = self.u64("reject_hint")?;
        msg.priority = self.u64("priority")? as i64;
        msg.context = self.bytes("context")?;
        let count = self.u32("entry count")? as usize;
        if count > ENTRIES_PER_MESSAGE_MAX || count > self.remaining() / ENTRY_BYTES_MIN {
            return Err(WireError::TooLarge {
                what: "entry count",
                len: count,
                max: ENTRIES_PER_MESSAGE_MAX.min(self.remaining() / ENTRY_BYTES_MIN),
            });
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(self.entry()?);
        }
        msg.set_entries(entries.into());
        if self.bool("has_snapshot")? {
            msg.set_snapshot(self.snapshot()?);
        }
        Ok(SlotMessage { slot, msg })
    }

    pub(super) fn entry(&mut self) -> Result<Entry, WireError> {
        let kind = self.u8("entry type")?;
        let entry_type = match kind {
            0 => EntryType::EntryNormal,
            1 => EntryType::EntryConfChange,
            2 => EntryType::EntryConfChangeV2,
            other => return Err(WireError::EntryType(other)),
        };
        let mut e = Entry::default();
        e.set_entry_type(entry_type);
        e.term = self.u64("entry term")?;
        e.index = self.u64("entry index")?;
        e.data = self.bytes("entry data")?;
        e.context = self.bytes("entry context")?;
        Ok(e)
    }

    fn snapshot(&mut self) -> Result<Snapshot, WireError> {
        let mut s = Snapshot::default();
        let index = self.u64("snapshot index")?;
        let term = self.u64("snapshot term")?;
        let conf_state = self.conf_state()?;
        let meta = s.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf_state);
        s.data = self.bytes("snapshot data")?;
        Ok(s)
    }

    pub(super) fn conf_state(&mut self) -> Result<ConfState, WireError> {
        Ok(ConfState {
            voters: self.ids("voters")?,
            learners: self.ids("learners")?,
            voters_outgoing: self.ids("voters_outgoing")?,
            learners_next: self.ids("learners_next")?,
            auto_leave: self.bool("auto_leave")?,
            ..ConfState::default()
        })
    }

    fn ids(&mut self, field: &'static str) -> Result<Vec<u64>, WireError> {
        let count = self.u16(field)? as usize;
        if count > MEMBERS_MAX {
            return Err(WireError::TooLarge {
                what: field,
                len: count,
                max: MEMBERS_MAX,
            });
        }
        (0..count).map(|_| self.node(field)).collect()
    }
}

fn message_type(kind: u8) -> Result<MessageType, WireError> {
    use MessageType::*;
    let t = match kind {
        0 => MsgHup,
        1 => MsgBeat,
        2 => MsgPropose,
        3 => MsgAppend,
        4 => MsgAppendResponse,
        5 => MsgRequestVote,
        6 => MsgRequestVoteResponse,
        7 => MsgSnapshot,
        8 => MsgHeartbeat,
        9 => MsgHeartbeatResponse,
        10 => MsgUnreachable,
        11 => MsgSnapStatus,
        12 => MsgCheckQuorum,
        13 => MsgTransferLeader,
        14 => MsgTimeoutNow,
        15 => MsgReadIndex,
        16 => MsgReadIndexResp,
        17 => MsgRequestPreVote,
        18 => MsgRequestPreVoteResponse,
        other => return Err(WireError::MessageType(other)),
    };
    // Proposals are made on the leader only (a follower refuses them), so a forwarded
    // MsgPropose is as foreign as the purely local types.
    if matches!(
        t,
        MsgHup | MsgBeat | MsgPropose | MsgUnreachable | MsgSnapStatus | MsgCheckQuorum
    ) {
        return Err(WireError::LocalMessageType(kind));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    const SENDABLE: [MessageType; 13] = [
        MessageType::MsgAppend,
        MessageType::MsgAppendResponse,
        MessageType::MsgRequestVote,
        MessageType::MsgRequestVoteResponse,
        MessageType::MsgSnapshot,
        MessageType::MsgHeartbeat,
        MessageType::MsgHeartbeatResponse,
        MessageType::MsgTransferLeader,
        MessageType::MsgTimeoutNow,
        MessageType::MsgReadIndex,
        MessageType::MsgReadIndexResp,
        MessageType::MsgRequestPreVote,
        MessageType::MsgRequestPreVoteResponse,
    ];

    fn bytes(rng: &mut Rng, max: u64) -> Bytes {
        let n = rng.below(max + 1) as usize;
        (0..n)
            .map(|_| rng.next_u64() as u8)
            .collect::<Vec<u8>>()
            .into()
    }

    fn random_message(rng: &mut Rng) -> SlotMessage {
        let mut msg = Message::default();
        msg.set_msg_type(SENDABLE[rng.below(SENDABLE.len() as u64) as usize]);
        msg.to = 1 + rng.below(5);
        msg.from = 1 + rng.below(5);
        msg.term = rng.next_u64();
        msg.log_term = rng.next_u64();
        msg.index = rng.next_u64();
        msg.commit = rng.next_u64();
        msg.commit_term = rng.next_u64();
        msg.request_snapshot = rng.next_u64();
        msg.reject = rng.below(2) == 1;
        msg.reject_hint = rng.next_u64();
        msg.priority = rng.next_u64() as i64;
        msg.context = bytes(rng, 8);
        let entries: Vec<Entry> = (0..rng.below(4))
            .map(|_| {
                let mut e = Entry::default();
                e.set_entry_type(match rng.below(3) {
                    0 => EntryType::EntryNormal,
                    1 => EntryType::EntryConfChange,
                    _ => EntryType::EntryConfChangeV2,
                });
                e.term = rng.next_u64();
                e.index = rng.next_u64();
                e.data = bytes(rng, 40);
                e.context = bytes(rng, 4);
                e
            })
            .collect();
        msg.set_entries(entries.into());
        if rng.below(3) == 0 {
            let mut s = Snapshot {
                data: bytes(rng, 64),
                ..Snapshot::default()
            };
            let meta = s.mut_metadata();
            meta.index = rng.next_u64();
            meta.term = rng.next_u64();
            meta.set_conf_state(ConfState {
                voters: (1..=rng.below(4)).collect(),
                learners: (10..10 + rng.below(3)).collect(),
                auto_leave: rng.below(2) == 1,
                ..ConfState::default()
            });
            msg.set_snapshot(s);
        }
        SlotMessage {
            slot: rng.below(256) as u16,
            msg,
        }
    }

    fn random_batch(rng: &mut Rng) -> (Vec<SlotMessage>, Vec<u8>) {
        let batch: Vec<SlotMessage> = (0..rng.below(5)).map(|_| random_message(rng)).collect();
        let mut out = Vec::new();
        encode(&batch, &mut out);
        (batch, out)
    }

    #[test]
    fn batches_round_trip() {
        let mut rng = Rng::new(11);
        for _ in 0..2_000 {
            let (batch, bytes) = random_batch(&mut rng);
            assert_eq!(decode(bytes.into()).unwrap(), batch);
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let mut rng = Rng::new(12);
        for _ in 0..200 {
            let (_, bytes) = random_batch(&mut rng);
            for cut in 0..bytes.len() {
                let err = decode(Bytes::copy_from_slice(&bytes[..cut])).unwrap_err();
                assert!(!err.to_string().is_empty());
            }
        }
    }

    #[test]
    fn damaged_batches_are_refused_or_decode_without_panicking() {
        let mut rng = Rng::new(13);
        for _ in 0..20_000 {
            let (_, mut bytes) = random_batch(&mut rng);
            for _ in 0..1 + rng.below(4) {
                if bytes.is_empty() {
                    break;
                }
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] = rng.next_u64() as u8;
            }
            if let Ok(batch) = decode(bytes.into()) {
                // Whatever decodes re-encodes to a batch that decodes the same.
                let mut again = Vec::new();
                encode(&batch, &mut again);
                assert_eq!(decode(again.into()).unwrap(), batch);
            }
        }
    }

    #[test]
    fn hostile_counts_are_refused_before_allocating() {
        // One message claiming 8,192 entries in a 100-byte batch.
        let mut rng = Rng::new(14);
        let mut msg = random_message(&mut rng);
        msg.msg.set_entries(Vec::new().into());
        msg.msg.clear_snapshot();
        let mut bytes = Vec::new();
        encode(&[msg], &mut bytes);
        let count_at = bytes.len() - 1 - 4;
        bytes[count_at..count_at + 4].copy_from_slice(&8192u32.to_le_bytes());
        assert!(matches!(
            decode(bytes.into()),
            Err(WireError::TooLarge {
                what: "entry count",
                ..
            })
        ));
        let mut many = vec![VERSION];
        many.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            decode(many.into()),
            Err(WireError::TooLarge {
                what: "message count",
                ..
            })
        ));
    }

    #[test]
    fn local_message_types_and_unknown_versions_are_refused() {
        let mut rng = Rng::new(15);
        let mut m = random_message(&mut rng);
        for local in [
            MessageType::MsgHup,
            MessageType::MsgBeat,
            MessageType::MsgPropose,
            MessageType::MsgUnreachable,
            MessageType::MsgSnapStatus,
            MessageType::MsgCheckQuorum,
        ] {
            m.msg.set_msg_type(local);
            let mut bytes = Vec::new();
            encode(std::slice::from_ref(&m), &mut bytes);
            assert_eq!(
                decode(bytes.into()),
                Err(WireError::LocalMessageType(local as u8))
            );
        }
        assert_eq!(
            decode(Bytes::from_static(&[9, 0, 0])),
            Err(WireError::Version(9))
        );
        assert_eq!(
            decode(Bytes::from_static(&[VERSION, 0, 0, 7])),
            Err(WireError::TrailingBytes(1))
        );
    }
}
