//! A [`StreamSlot`]'s state as bytes: the messaging part of a slot's Raft snapshot.
//!
//! ```text
//! version u8 (3)
//! partitions: count u32, then each: topic str16, partition u32, next_seq u64, digest u32
//! cursors:    count u32, then each: body_len u16, a cursor commit record body
//! dedup:      count u32, then each, oldest first: sender, conversation, client_msg_id,
//!             message_id, topic (str16 each), partition u32, seq u64, timestamp_ns i64,
//!             expires_ns i64
//! pointer claims: as dedup
//! outbox:     count u32, then each, by key: topic str16, partition u32, seq u64,
//!             member count u16, each member str16, header count u8, each header:
//!             name str16, value str16
//! ```
//!
//! Version 1 (before pointer claims) has neither of the last two sections, version 2 no
//! outbox; both are still read, without them.
//!
//! Everything in a deterministic order (partitions and cursors by key, dedup entries by
//! age), so equal states encode to equal bytes: the simulator compares replicas this way.
//! Decoding bounds every count by the bytes left and checks every field as the command
//! decoder does; a state that does not fit the configured caps is refused, not cut.

use super::{
    put_str16, FanOut, Position, Reader, StreamSlot, StreamSlotConfig, FANOUT_MEMBERS_MAX,
    FIRST_SEQ, MESSAGE_ID_BYTES_MAX, OUTBOX_MEMBERS_PER_SLOT_MAX, OUTBOX_SENDS_PER_SLOT_MAX,
    POINTER_HEADER_VALUE_BYTES_MAX,
};
use crate::messaging::cursor::{self, CURSOR_RECORD_BYTES_MAX};
use crate::messaging::dedup::{
    Coordinates, DedupKey, DedupTable, CLIENT_MSG_ID_BYTES_MAX, CONVERSATION_BYTES_MAX,
    SENDER_BYTES_MAX,
};
use crate::messaging::fanout::POINTER_COPIED_HEADERS;
use crate::messaging::topic::{valid_id, validate_topic, ID_BYTES_MAX, TOPIC_ENCODED_BYTES_MAX};
use bytes::Bytes;

pub const VERSION: u8 = 3;
/// The version without an outbox, still read.
pub const VERSION_WITHOUT_OUTBOX: u8 = 2;
/// The version without pointer claims and outbox, still read.
pub const VERSION_WITHOUT_POINTER_CLAIMS: u8 = 1;

/// Smallest encoded partition, cursor and dedup entry: what bounds each count.
const PARTITION_BYTES_MIN: usize = 2 + 1 + 4 + 8 + 4;
const CURSOR_BYTES_MIN: usize = 2 + 1;
const DEDUP_BYTES_MIN: usize = 5 * 2 + 4 + 8 + 8 + 8;
const OUTBOX_BYTES_MIN: usize = 2 + 4 + 8 + 2 + 3 + 1;

impl StreamSlot {
    pub fn encode_snapshot(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        put_count(self.partitions.len(), out);
        for ((topic, partition), position) in &self.partitions {
            put_str16(topic, out);
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&position.next_seq.to_le_bytes());
            out.extend_from_slice(&position.digest.to_le_bytes());
        }
        put_count(self.cursors.len(), out);
        let mut body = Vec::new();
        for (key, seq) in self.cursors.snapshot() {
            body.clear();
            cursor::encode_commit(key, seq, &mut body);
            let len = u16::try_from(body.len()).expect("a cursor record is under 64 KiB");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&body);
        }
        encode_dedup(&self.dedup, out);
        encode_dedup(&self.pointer_claims, out);
        encode_outbox(self, out);
    }

    pub fn decode_snapshot(bytes: &[u8], cfg: StreamSlotConfig) -> Result<StreamSlot, String> {
        let mut r = Reader::new(bytes);
        let version = r.u8("version")?;
        if !(VERSION_WITHOUT_POINTER_CLAIMS..=VERSION).contains(&version) {
            return Err(format!("messaging slot snapshot version {version} unknown"));
        }
        let mut slot = StreamSlot::new(cfg);
        decode_partitions(&mut r, &mut slot)?;
        decode_cursors(&mut r, &mut slot)?;
        decode_dedup(&mut r, "dedup", &mut slot.dedup)?;
        if version >= VERSION_WITHOUT_OUTBOX {
            decode_dedup(&mut r, "pointer claim", &mut slot.pointer_claims)?;
        }
        if version >= VERSION {
            decode_outbox(&mut r, &mut slot)?;
        }
        r.finish("messaging slot snapshot")?;
        Ok(slot)
    }
}

fn decode_partitions(r: &mut Reader<'_>, slot: &mut StreamSlot) -> Result<(), String> {
    let n = r.count("partition count", PARTITION_BYTES_MIN)?;
    if n > super::PARTITIONS_PER_SLOT_MAX {
        return Err(format!(
            "{n} partitions, over {}",
            super::PARTITIONS_PER_SLOT_MAX
        ));
    }
    for _ in 0..n {
        let topic = r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string();
        validate_topic(&topic).map_err(|e| format!("topic: {e}"))?;
        let partition = r.u32("partition")?;
        let next_seq = r.u64("next_seq")?;
        let digest = r.u32("digest")?;
        if next_seq <= FIRST_SEQ {
            return Err(format!(
                "{topic}/{partition}: next_seq {next_seq} with no record"
            ));
        }
        let key = (topic, partition);
        if let Some((last, _)) = slot.partitions.last_key_value() {
            if *last >= key {
                return Err("partitions out of order or repeated".into());
            }
        }
        slot.partitions.insert(key, Position { next_seq, digest });
    }
    Ok(())
}

fn decode_cursors(r: &mut Reader<'_>, slot: &mut StreamSlot) -> Result<(), String> {
    let n = r.count("cursor count", CURSOR_BYTES_MIN)?;
    let mut last = None;
    for _ in 0..n {
        let len = usize::from(r.u16("cursor record length")?);
        if len > CURSOR_RECORD_BYTES_MAX {
            return Err(format!("cursor record of {len} bytes"));
        }
        let (key, seq) = cursor::decode_commit(r.take(len, "cursor record")?)
            .map_err(|e| format!("cursor: {e}"))?;
        if last.as_ref().is_some_and(|l| *l >= key) {
            return Err("cursors out of order or repeated".into());
        }
        let next_seq = slot.position(key.topic(), key.partition()).next_seq;
        if seq > next_seq {
            return Err(format!("a cursor at {seq} past its partition's {next_seq}"));
        }
        match slot.cursors.commit(&key, seq, next_seq) {
            Ok(cursor::Commit::Stored { .. }) => {}
            Ok(cursor::Commit::Unchanged { .. }) => unreachable!("keys are new and ordered"),
            Err(e) => return Err(format!("cursor: {e}")),
        }
        last = Some(key);
    }
    Ok(())
}

fn encode_dedup(table: &DedupTable, out: &mut Vec<u8>) {
    put_count(table.len(), out);
    for (key, c, expires_ns) in table.completed_by_age() {
        put_str16(&key.sender, out);
        put_str16(&key.conversation, out);
        put_str16(&key.client_msg_id, out);
        put_str16(&c.message_id, out);
        put_str16(&c.topic, out);
        out.extend_from_slice(&c.partition.to_le_bytes());
        out.extend_from_slice(&c.seq.to_le_bytes());
        out.extend_from_slice(&c.timestamp_ns.to_le_bytes());
        out.extend_from_slice(&expires_ns.to_le_bytes());
    }
}

fn decode_dedup(r: &mut Reader<'_>, what: &str, table: &mut DedupTable) -> Result<(), String> {
    let n = r.count(&format!("{what} count"), DEDUP_BYTES_MIN)?;
    if n > table.entries_max() {
        return Err(format!(
            "{n} {what} entries, over this node's cap of {}",
            table.entries_max()
        ));
    }
    let mut last_expiry = i64::MIN;
    for _ in 0..n {
        let sender = r.str16("sender", SENDER_BYTES_MAX)?;
        let conversation = r.str16("conversation", CONVERSATION_BYTES_MAX)?;
        let id = r.str16("client_msg_id", CLIENT_MSG_ID_BYTES_MAX)?;
        let key = DedupKey::new(sender, conversation, id).map_err(|e| format!("dedup: {e}"))?;
        let message_id = r.str16("message_id", MESSAGE_ID_BYTES_MAX)?.to_string();
        let topic = r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string();
        let coords = Coordinates {
            message_id,
            topic,
            partition: r.u32("partition")?,
            seq: r.u64("seq")?,
            timestamp_ns: r.i64("timestamp_ns")?,
        };
        let expires_ns = r.i64("expires_ns")?;
        if expires_ns < last_expiry {
            return Err(format!("{what} entries out of age order"));
        }
        last_expiry = expires_ns;
        if !table.restore_completed(key, coords, expires_ns) {
            return Err(format!("a {what} key is repeated"));
        }
    }
    Ok(())
}

fn encode_outbox(slot: &StreamSlot, out: &mut Vec<u8>) {
    put_count(slot.outbox.len(), out);
    for ((topic, partition, seq), fan_out) in &slot.outbox {
        put_str16(topic, out);
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        let members = u16::try_from(fan_out.members.len()).expect("members are capped");
        out.extend_from_slice(&members.to_le_bytes());
        for member in &fan_out.members {
            put_str16(member, out);
        }
        let headers = u8::try_from(fan_out.headers.len()).expect("five copied headers at most");
        out.push(headers);
        for (name, value) in &fan_out.headers {
            put_bytes16(name, out);
            put_bytes16(value, out);
        }
    }
}

fn decode_outbox(r: &mut Reader<'_>, slot: &mut StreamSlot) -> Result<(), String> {
    let n = r.count("outbox count", OUTBOX_BYTES_MIN)?;
    if n > OUTBOX_SENDS_PER_SLOT_MAX {
        return Err(format!(
            "{n} outbox entries, over {OUTBOX_SENDS_PER_SLOT_MAX}"
        ));
    }
    for _ in 0..n {
        let topic = r
            .str16("outbox topic", TOPIC_ENCODED_BYTES_MAX)?
            .to_string();
        validate_topic(&topic).map_err(|e| format!("outbox topic: {e}"))?;
        let partition = r.u32("outbox partition")?;
        let seq = r.u64("outbox seq")?;
        if seq < FIRST_SEQ || seq >= slot.position(&topic, partition).next_seq {
            return Err(format!(
                "an outbox entry at {topic}/{partition} seq {seq}, which was never appended"
            ));
        }
        let members = decode_members(r)?;
        let headers = decode_copied_headers(r)?;
        slot.outbox_members += members.len();
        if slot.outbox_members > OUTBOX_MEMBERS_PER_SLOT_MAX {
            return Err(format!("outbox members over {OUTBOX_MEMBERS_PER_SLOT_MAX}"));
        }
        let key = (topic, partition, seq);
        if slot
            .outbox
            .last_key_value()
            .is_some_and(|(last, _)| *last >= key)
        {
            return Err("outbox entries out of order or repeated".into());
        }
        slot.outbox.insert(key, FanOut { members, headers });
    }
    Ok(())
}

fn decode_members(r: &mut Reader<'_>) -> Result<Vec<String>, String> {
    let n = usize::from(r.u16("outbox member count")?);
    if n == 0 || n > FANOUT_MEMBERS_MAX || n * 3 > r.left() {
        return Err(format!(
            "{n} outbox members: none, over the limit or the bytes left"
        ));
    }
    let mut members: Vec<String> = Vec::with_capacity(n);
    for _ in 0..n {
        let member = r.str16("outbox member", ID_BYTES_MAX)?;
        if !valid_id(member) {
            return Err(format!("outbox member {member:?} is not a valid id"));
        }
        if members.last().is_some_and(|last| last.as_str() >= member) {
            return Err("outbox members out of order or repeated".into());
        }
        members.push(member.to_string());
    }
    Ok(members)
}

fn decode_copied_headers(r: &mut Reader<'_>) -> Result<Vec<(Bytes, Bytes)>, String> {
    let n = usize::from(r.u8("outbox header count")?);
    if n > POINTER_COPIED_HEADERS.len() {
        return Err(format!("{n} outbox headers"));
    }
    let mut headers: Vec<(Bytes, Bytes)> = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str16("outbox header name", 32)?;
        if !POINTER_COPIED_HEADERS.contains(&name) {
            return Err(format!("outbox header {name:?} is not one pointers repeat"));
        }
        if headers
            .last()
            .is_some_and(|(last, _)| last.as_ref() >= name.as_bytes())
        {
            return Err("outbox headers out of order or repeated".into());
        }
        let value = r.take_bytes16("outbox header value", POINTER_HEADER_VALUE_BYTES_MAX)?;
        headers.push((
            Bytes::copy_from_slice(name.as_bytes()),
            Bytes::copy_from_slice(value),
        ));
    }
    Ok(headers)
}

fn put_bytes16(bytes: &[u8], out: &mut Vec<u8>) {
    let len = u16::try_from(bytes.len()).expect("header values are capped below 64 KiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_count(n: usize, out: &mut Vec<u8>) {
    let n = u32::try_from(n).expect("every table is capped far below 2^32 entries");
    out.extend_from_slice(&n.to_le_bytes());
}
