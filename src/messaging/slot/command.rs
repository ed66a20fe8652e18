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
//! | `0x42` | `Append` with fan-out | as `0x40`, with before the record frame: member count u16 (1..=`FANOUT_MEMBERS_MAX`), then each member str16 (a valid id, in strictly increasing order) |
//! | `0x43` | `FannedOut` | count u16 (1..=`FANNED_OUT_PER_COMMAND_MAX`), then each: topic str16, partition u32, seq u64 |
//!
//! Integers little-endian; `str16` = `u16` byte length + UTF-8. Decoding is strict and
//! canonical (what decodes re-encodes to the same bytes), checks every field against the
//! same limits the single node's codecs enforce, and allocates no more than the input's
//! size, so a hostile entry costs its own bytes and an error.

use super::{put_str16, OutboxKey, Reader, FANOUT_MEMBERS_MAX};
use crate::messaging::cursor::{self, CursorKey};
use crate::messaging::dedup::{
    DedupKey, CLIENT_MSG_ID_BYTES_MAX, CONVERSATION_BYTES_MAX, SENDER_BYTES_MAX,
};
use crate::messaging::topic::{valid_id, validate_topic, ID_BYTES_MAX, TOPIC_ENCODED_BYTES_MAX};
use boltq_io::record::{self, Record};
use bytes::Bytes;

pub const APPEND: u8 = 0x40;
pub const COMMIT: u8 = 0x41;
pub const APPEND_FANNING_OUT: u8 = 0x42;
pub const FANNED_OUT: u8 = 0x43;
/// Most sends one `FannedOut` clears: a leader with more to report proposes several.
pub const FANNED_OUT_PER_COMMAND_MAX: usize = 1024;
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
    /// The members whose inboxes get a pointer to this send (fan-out on write): the slot
    /// keeps them in its outbox until a `FannedOut` says the pointers are written, so
    /// whichever node leads the slot writes them, even when the node that proposed the send
    /// dies. Sorted, distinct, valid ids; empty for plain appends and pointers themselves.
    pub fanout: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamCommand {
    Append(Append),
    /// Moves a cursor forward to `seq` (clamped to the partition's next sequence).
    Commit {
        key: CursorKey,
        seq: u64,
    },
    /// The pointers of these sends are written (or given up): they leave the outbox.
    FannedOut {
        sends: Vec<OutboxKey>,
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
        StreamCommand::FannedOut { sends } => encode_fanned_out(sends, out),
    }
}

fn encode_fanned_out(sends: &[OutboxKey], out: &mut Vec<u8>) -> Result<(), String> {
    if sends.is_empty() || sends.len() > FANNED_OUT_PER_COMMAND_MAX {
        return Err(format!(
            "a fan-out report names 1..={FANNED_OUT_PER_COMMAND_MAX} sends, not {}",
            sends.len()
        ));
    }
    for (topic, _, _) in sends {
        validate_topic(topic).map_err(|e| format!("topic: {e}"))?;
        if topic.len() > TOPIC_ENCODED_BYTES_MAX {
            return Err(format!("topic over {TOPIC_ENCODED_BYTES_MAX} bytes"));
        }
    }
    out.push(FANNED_OUT);
    out.extend_from_slice(&(sends.len() as u16).to_le_bytes());
    for (topic, partition, seq) in sends {
        put_str16(topic, out);
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
    }
    Ok(())
}

fn encode_append(a: &Append, out: &mut Vec<u8>) -> Result<(), String> {
    validate_topic(&a.topic).map_err(|e| format!("topic: {e}"))?;
    if a.topic.len() > TOPIC_ENCODED_BYTES_MAX {
        return Err(format!("topic over {TOPIC_ENCODED_BYTES_MAX} bytes"));
    }
    if a.dedup.as_ref().is_some_and(|c| !c.key().within_limits()) {
        return Err("dedup key past its limits".into());
    }
    check_fanout(&a.fanout)?;
    let record = Record {
        key: a.key.clone(),
        headers: a.headers.clone(),
        payload: a.payload.clone(),
        ..Record::default()
    };
    let mut frame = Vec::new();
    record::encode(&record, &mut frame).map_err(|e| e.to_string())?;
    out.push(match a.fanout.is_empty() {
        true => APPEND,
        false => APPEND_FANNING_OUT,
    });
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
    if !a.fanout.is_empty() {
        out.extend_from_slice(&(a.fanout.len() as u16).to_le_bytes());
        for member in &a.fanout {
            put_str16(member, out);
        }
    }
    out.extend_from_slice(&frame);
    Ok(())
}

/// A fan-out list as the command carries it: at most [`FANOUT_MEMBERS_MAX`] valid ids in
/// strictly increasing order.
fn check_fanout(members: &[String]) -> Result<(), String> {
    if members.len() > FANOUT_MEMBERS_MAX {
        return Err(format!(
            "a send fans out to {} members, over {FANOUT_MEMBERS_MAX}",
            members.len()
        ));
    }
    if let Some(bad) = members.iter().find(|m| !valid_id(m)) {
        return Err(format!("fan-out member {bad:?} is not a valid id"));
    }
    if members.windows(2).any(|w| w[0] >= w[1]) {
        return Err("fan-out members out of order or repeated".into());
    }
    Ok(())
}

/// Decodes one entry's bytes: exactly one command, nothing after it.
pub fn decode(bytes: &[u8]) -> Result<StreamCommand, String> {
    let mut r = Reader::new(bytes);
    match r.u8("tag")? {
        APPEND => decode_append(&mut r, false).map(StreamCommand::Append),
        APPEND_FANNING_OUT => decode_append(&mut r, true).map(StreamCommand::Append),
        FANNED_OUT => decode_fanned_out(&mut r),
        COMMIT => {
            let (key, seq) = cursor::decode_commit(&bytes[r.at()..])
                .map_err(|e| format!("cursor commit: {e}"))?;
            Ok(StreamCommand::Commit { key, seq })
        }
        tag => Err(format!("unknown messaging command tag {tag:#04x}")),
    }
}

fn decode_fanned_out(r: &mut Reader<'_>) -> Result<StreamCommand, String> {
    let n = usize::from(r.u16("fan-out report count")?);
    if n == 0 || n > FANNED_OUT_PER_COMMAND_MAX {
        return Err(format!(
            "a fan-out report names 1..={FANNED_OUT_PER_COMMAND_MAX} sends, not {n}"
        ));
    }
    // Each takes at least 2 + 4 + 8 bytes: a hostile count is refused before allocating.
    if n * 14 > r.left() {
        return Err(format!(
            "{n} fanned-out sends cannot fit in {} bytes",
            r.left()
        ));
    }
    let mut sends = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string();
        validate_topic(&topic).map_err(|e| format!("topic: {e}"))?;
        sends.push((topic, r.u32("partition")?, r.u64("seq")?));
    }
    r.finish("fan-out report")?;
    Ok(StreamCommand::FannedOut { sends })
}

fn decode_append(r: &mut Reader<'_>, fans_out: bool) -> Result<Append, String> {
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
    let fanout = match fans_out {
        true => decode_fanout(r)?,
        false => Vec::new(),
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
        fanout,
    })
}

fn decode_fanout(r: &mut Reader<'_>) -> Result<Vec<String>, String> {
    let n = usize::from(r.u16("fan-out member count")?);
    if n == 0 {
        return Err("a fanning-out append names no member (tag 0x40 is that append)".into());
    }
    if n > FANOUT_MEMBERS_MAX || n * 3 > r.left() {
        return Err(format!(
            "{n} fan-out members, over the limit or the bytes left"
        ));
    }
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        members.push(r.str16("fan-out member", ID_BYTES_MAX)?.to_string());
    }
    check_fanout(&members)?;
    Ok(members)
}

fn decode_dedup_key(r: &mut Reader<'_>) -> Result<DedupKey, String> {
    let sender = r.str16("sender", SENDER_BYTES_MAX)?;
    let conversation = r.str16("conversation", CONVERSATION_BYTES_MAX)?;
    let id = r.str16("client_msg_id", CLIENT_MSG_ID_BYTES_MAX)?;
    DedupKey::new(sender, conversation, id).map_err(|e| format!("dedup key: {e}"))
}
