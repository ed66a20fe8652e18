//! The messaging commands a slot's Raft group carries, as the bytes of a raft entry.
//!
//! They share the entry space with the queue plane's command records
//! (`queue::server::wal::record`), whose first byte is `0x01..=0x06`, `{` or `"`; a
//! messaging command's first byte is in [`TAGS`], which is none of those, so one look at the
//! first byte says which plane applies an entry.
//!
//! | tag | command | fields after the tag |
//! |---|---|---|
//! | `0x40` | `Append` | `now_ns` i64, `partition` u32, `topic` str16, dedup flag u8 (0: none, 1: a send's claim, 2: an inbox pointer's claim; when 1 or 2: `sender`, `conversation`, `client_msg_id`, each str16), then the record frame (`boltq_io::record`, its `seq`, `timestamp_ns`, `flags` and `epoch` all 0: the apply sets them) to the end |
//! | `0x41` | `Commit` | a cursor commit record (`messaging::cursor::encode_commit`) to the end |
//!
//! Integers little-endian; `str16` = `u16` byte length + UTF-8. Decoding is strict and
//! canonical (what decodes re-encodes to the same bytes), checks every field against the
//! same limits the single node's codecs enforce, and allocates no more than the input's
//! size, so a hostile entry costs its own bytes and an error.

use super::{put_str16, Reader};
use crate::messaging::cursor::{self, CursorKey};
use crate::messaging::dedup::{
    DedupKey, CLIENT_MSG_ID_BYTES_MAX, CONVERSATION_BYTES_MAX, SENDER_BYTES_MAX,
};
use crate::messaging::topic::{validate_topic, TOPIC_ENCODED_BYTES_MAX};
use boltq_io::record::{self, Record};
use bytes::Bytes;

pub const APPEND: u8 = 0x40;
pub const COMMIT: u8 = 0x41;
/// First bytes reserved for messaging commands.
pub const TAGS: std::ops::RangeInclusive<u8> = 0x40..=0x4F;

/// Whether a raft entry's bytes hold a messaging command (rather than a queue command).
pub fn is_stream_command(entry: &[u8]) -> bool {
    entry.first().is_some_and(|b| TAGS.contains(b))
}

/// What makes an append idempotent, and which of the slot's tables remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DedupClaim {
    /// A client's send (`client_msg_id`): kept for `messaging.dedup.ttl`.
    Send(DedupKey),
    /// An inbox pointer (the message's id and the member's inbox): kept for the pointer
    /// retry window only (`slot::POINTER_CLAIM_TTL_NS`), in a table of its own, so the
    /// pointers of busy conversations never evict the claims of sends.
    Pointer(DedupKey),
}

impl DedupClaim {
    pub fn key(&self) -> &DedupKey {
        match self {
            DedupClaim::Send(k) | DedupClaim::Pointer(k) => k,
        }
    }

    fn flag(&self) -> u8 {
        match self {
            DedupClaim::Send(_) => 1,
            DedupClaim::Pointer(_) => 2,
        }
    }
}

/// One record to append to a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub topic: String,
    pub partition: u32,
    /// The proposer's clock: the record's timestamp and the dedup window's "now".
    pub now_ns: i64,
    /// Set when the append is idempotent.
    pub dedup: Option<DedupClaim>,
    pub key: Bytes,
    /// Stored sorted by name (the record frame sorts them).
    pub headers: Vec<(Bytes, Bytes)>,
    pub payload: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamCommand {
    Append(Append),
    /// Moves a cursor forward to `seq` (clamped to the partition's next sequence).
    Commit {
        key: CursorKey,
        seq: u64,
    },
}

/// Appends the entry bytes of `cmd` to `out`; on error (a record or name past its limit)
/// `out` is unchanged and the error says which.
pub fn encode(cmd: &StreamCommand, out: &mut Vec<u8>) -> Result<(), String> {
    match cmd {
        StreamCommand::Append(a) => encode_append(a, out),
        StreamCommand::Commit { key, seq } => {
            if *seq == 0 {
                return Err("a cursor commit carries a seq of at least 1".into());
            }
            out.push(COMMIT);
            cursor::encode_commit(key, *seq, out);
            Ok(())
        }
    }
}

fn encode_append(a: &Append, out: &mut Vec<u8>) -> Result<(), String> {
    validate_topic(&a.topic).map_err(|e| format!("topic: {e}"))?;
    if a.topic.len() > TOPIC_ENCODED_BYTES_MAX {
        return Err(format!("topic over {TOPIC_ENCODED_BYTES_MAX} bytes"));
    }
    if a.dedup.as_ref().is_some_and(|c| !c.key().within_limits()) {
        return Err("dedup key past its limits".into());
    }
    let record = Record {
        key: a.key.clone(),
        headers: a.headers.clone(),
        payload: a.payload.clone(),
        ..Record::default()
    };
    let mut frame = Vec::new();
    record::encode(&record, &mut frame).map_err(|e| e.to_string())?;
    out.push(APPEND);
    out.extend_from_slice(&a.now_ns.to_le_bytes());
    out.extend_from_slice(&a.partition.to_le_bytes());
    put_str16(&a.topic, out);
    match &a.dedup {
        None => out.push(0),
        Some(claim) => {
            out.push(claim.flag());
            let k = claim.key();
            put_str16(&k.sender, out);
            put_str16(&k.conversation, out);
            put_str16(&k.client_msg_id, out);
        }
    }
    out.extend_from_slice(&frame);
    Ok(())
}

/// Decodes one entry's bytes: exactly one command, nothing after it.
pub fn decode(bytes: &[u8]) -> Result<StreamCommand, String> {
    let mut r = Reader::new(bytes);
    match r.u8("tag")? {
        APPEND => decode_append(&mut r).map(StreamCommand::Append),
        COMMIT => {
            let (key, seq) = cursor::decode_commit(&bytes[r.at()..])
                .map_err(|e| format!("cursor commit: {e}"))?;
            Ok(StreamCommand::Commit { key, seq })
        }
        tag => Err(format!("unknown messaging command tag {tag:#04x}")),
    }
}

fn decode_append(r: &mut Reader<'_>) -> Result<Append, String> {
    let now_ns = r.i64("now_ns")?;
    let partition = r.u32("partition")?;
    let topic = r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string();
    validate_topic(&topic).map_err(|e| format!("topic: {e}"))?;
    let dedup = match r.u8("dedup flag")? {
        0 => None,
        1 => Some(DedupClaim::Send(decode_dedup_key(r)?)),
        2 => Some(DedupClaim::Pointer(decode_dedup_key(r)?)),
        flag => return Err(format!("dedup flag {flag} is not 0, 1 or 2")),
    };
    let rest = r.take(r.left(), "record")?;
    let (view, frame_len) = record::decode(rest).map_err(|e| format!("record: {e}"))?;
    if frame_len != rest.len() {
        return Err(format!("{} bytes after the record", rest.len() - frame_len));
    }
    if view.seq != 0 || view.timestamp_ns != 0 || view.flags != 0 || view.epoch != 0 {
        return Err("the record's seq, timestamp, flags and epoch must be 0".into());
    }
    let record = view.to_record();
    Ok(Append {
        topic,
        partition,
        now_ns,
        dedup,
        key: record.key,
        headers: record.headers,
        payload: record.payload,
    })
}

fn decode_dedup_key(r: &mut Reader<'_>) -> Result<DedupKey, String> {
    let sender = r.str16("sender", SENDER_BYTES_MAX)?;
    let conversation = r.str16("conversation", CONVERSATION_BYTES_MAX)?;
    let id = r.str16("client_msg_id", CLIENT_MSG_ID_BYTES_MAX)?;
    DedupKey::new(sender, conversation, id).map_err(|e| format!("dedup key: {e}"))
}
