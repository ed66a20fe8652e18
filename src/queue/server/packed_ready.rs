//! A queue's ready messages in a snapshot, packed (`QueueSnapshot::ready_packed`): a
//! MessagePack array of `bin` blobs, each a run of whole entries in the command log's
//! binary message layout (`wal::record`). serde's MessagePack reads a message field by
//! field through the chunk reader, two calls per field; a blob is copied out once and its
//! entries are cut from it in place. Measured in docs/benchmarks.md ("Ready messages
//! packed").
//!
//! entry = `rank` u8, `seq` u64, expiry (`0`, or `1` then `due_ns` i64 and `seq` u64), then
//! the message, whose `topic` is empty when it is the queue's name (as it always is in a
//! broker's own snapshot) and is given that name back when decoded.
//!
//! A blob holds entries up to [`BLOB_BYTES_TARGET`]; an entry larger than that has a blob of
//! its own. A message past the binary layout's limits is not packed: it stays in `ready`.

use super::wal::record::{self, Reader, RecordError};
use crate::queue::broker::{PackedReady, QueueSnapshot, ReadyKey, ReadySnapshot, TimerKey};
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// Bytes of entries a blob gathers before the next starts: the reader copies one blob at
/// a time, so this bounds the copy, not the snapshot.
pub const BLOB_BYTES_TARGET: usize = 256 * 1024;

/// Bytes of an entry around its message's variable fields.
const ENTRY_FIXED_BYTES: usize = 1 + 8 + 1 + 16;

/// Moves the entries of `q.ready` the binary layout can hold into `q.ready_packed`, each
/// message's topic left empty where it is the queue's name.
pub fn pack(q: &mut QueueSnapshot) {
    if q.ready.iter().all(|r| record::message_fits(&r.msg)) {
        q.ready_packed.0.append(&mut q.ready);
    } else {
        let (fit, rest) = std::mem::take(&mut q.ready)
            .into_iter()
            .partition(|r| record::message_fits(&r.msg));
        q.ready = rest;
        q.ready_packed.0.extend(fit);
    }
    let empty: Arc<str> = Arc::from("");
    for r in &mut q.ready_packed.0 {
        if *r.msg.topic == *q.name {
            r.msg.topic = Arc::clone(&empty);
        }
    }
}

/// Moves `q.ready_packed` back into `q.ready`, in delivery order, each message's topic
/// the queue's name where it was left empty.
pub fn unpack(q: &mut QueueSnapshot) {
    let mut packed = std::mem::take(&mut q.ready_packed.0);
    if packed.is_empty() {
        return;
    }
    let name: Arc<str> = Arc::from(q.name.as_str());
    for r in &mut packed {
        if r.msg.topic.is_empty() {
            r.msg.topic = Arc::clone(&name);
        }
    }
    if q.ready.is_empty() {
        q.ready = packed;
    } else {
        q.ready.append(&mut packed);
        q.ready.sort_by_key(|r| r.key);
    }
}

/// The bytes an entry takes, to cut blobs (the headers' 8 bytes of lengths each).
fn entry_bytes(r: &ReadySnapshot) -> usize {
    let m = &r.msg;
    ENTRY_FIXED_BYTES
        + record::MESSAGE_FIXED_BYTES
        + m.topic.len()
        + m.exchange().len()
        + m.routing_key().len()
        + m.headers()
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum::<usize>()
        + m.payload.len()
}

/// The entries of each blob.
fn blobs(entries: &[ReadySnapshot]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, r) in entries.iter().enumerate() {
        let entry = entry_bytes(r);
        if bytes > 0 && bytes + entry > BLOB_BYTES_TARGET {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += entry;
    }
    if start < entries.len() {
        out.push(start..entries.len());
    }
    out
}

fn put_entry(r: &ReadySnapshot, out: &mut Vec<u8>) {
    out.push(r.key.rank);
    out.extend_from_slice(&r.key.seq.to_le_bytes());
    match r.expiry {
        None => out.push(0),
        Some(t) => {
            out.push(1);
            out.extend_from_slice(&t.due_ns.to_le_bytes());
            out.extend_from_slice(&t.seq.to_le_bytes());
        }
    }
    record::put_message_fields(&r.msg, out);
}

fn read_entry(r: &mut Reader<'_>) -> Result<ReadySnapshot, RecordError> {
    let [rank] = r.array("rank")?;
    let seq = r.u64("ready seq")?;
    let at_byte = r.at();
    let expiry = match r.array("expiry")? {
        [0] => None,
        [1] => Some(TimerKey {
            due_ns: r.i64("expiry due_ns")?,
            seq: r.u64("expiry seq")?,
        }),
        [value] => {
            return Err(RecordError::InvalidByte {
                field: "expiry",
                value,
                at_byte,
            })
        }
    };
    Ok(ReadySnapshot {
        key: ReadyKey { rank, seq },
        expiry,
        msg: r.message()?,
    })
}

impl Serialize for PackedReady {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return self.0.serialize(serializer);
        }
        let blobs = blobs(&self.0);
        let mut seq = serializer.serialize_seq(Some(blobs.len()))?;
        let mut blob = Vec::new();
        for range in blobs {
            blob.clear();
            for r in &self.0[range] {
                put_entry(r, &mut blob);
            }
            seq.serialize_element(&Bin(&blob))?;
        }
        seq.end()
    }
}

/// A blob, written as MessagePack `bin` (a `Vec<u8>` would be an array of numbers).
struct Bin<'a>(&'a [u8]);

impl Serialize for Bin<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

impl<'de> Deserialize<'de> for PackedReady {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            return Vec::deserialize(deserializer).map(PackedReady);
        }
        deserializer.deserialize_seq(Blobs)
    }
}

struct Blobs;

impl<'de> Visitor<'de> for Blobs {
    type Value = PackedReady;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of packed ready entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PackedReady, A::Error> {
        let mut entries = Vec::new();
        while seq.next_element_seed(Blob(&mut entries))?.is_some() {}
        Ok(PackedReady(entries))
    }
}

/// Decodes one blob onto the entries gathered so far.
struct Blob<'a>(&'a mut Vec<ReadySnapshot>);

impl<'de> DeserializeSeed<'de> for Blob<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_bytes(self)
    }
}

impl<'de> Visitor<'de> for Blob<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a blob of packed ready entries")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<(), E> {
        let mut r = Reader::new(bytes);
        while !r.is_done() {
            let entry =
                read_entry(&mut r).map_err(|e| E::custom(format!("packed ready entry: {e}")))?;
            self.0.push(entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::broker::{Broker, BrokerConfig};
    use crate::queue::message::{Message, MessageExtras, MessageId};
    use crate::queue::server::snapshot::{decode, decode_from, encode, Chunks, CHUNK_BYTES};
    use bytes::Bytes;
    use std::collections::BTreeMap;

    fn ready(n: u64, topic: &str, payload_bytes: usize) -> ReadySnapshot {
        let mut id = [0u8; 16];
        id[8..].copy_from_slice(&n.to_be_bytes());
        let msg = Message {
            extras: None,
            id: MessageId(id),
            topic: topic.into(),
            payload: Bytes::from(vec![b'7'; payload_bytes]),
            timestamp_ns: n as i64,
            retry: (n % 3) as u32,
            max_retry: 5,
            priority: (n % 10) as i64,
            delay_ns: 0,
            ttl_ns: (n % 2) as i64 * 1_000,
            deliver_at_ns: 0,
            expires_at_ns: (n % 2) as i64 * 2_000,
        };
        let msg = match n % 4 {
            0 => msg.with_extras(MessageExtras {
                headers: BTreeMap::from([("k".to_string(), format!("v{n}"))]),
                exchange: "ex".into(),
                routing_key: format!("rk{n}"),
            }),
            _ => msg,
        };
        ReadySnapshot {
            key: ReadyKey {
                rank: 9 - (n % 10) as u8,
                seq: n,
            },
            expiry: (n % 2 == 1).then_some(TimerKey {
                due_ns: 2_000 + n as i64,
                seq: n,
            }),
            msg,
        }
    }

    /// A snapshot of one queue "q" holding `entries` in delivery order.
    fn snapshot_of(mut entries: Vec<ReadySnapshot>) -> crate::queue::broker::BrokerSnapshot {
        entries.sort_by_key(|r| r.key);
        let mut s = Broker::new(BrokerConfig::default()).snapshot();
        s.queues.push(QueueSnapshot {
            name: "q".into(),
            next_seq: entries.iter().map(|r| r.key.seq + 1).max().unwrap_or(0),
            ready: entries,
            idle_timer: None,
            last_used_ns: 0,
            ready_packed: PackedReady::default(),
        });
        s
    }

    /// Packed entries come back exactly, in delivery order, from one slice and from
    /// chunks: those with the queue's name as topic (written empty) and those with another
    /// (written whole), with and without expiry and extras, across many blobs, one entry
    /// larger than a blob, and one past the binary layout's limits (kept unpacked).
    #[test]
    fn ready_messages_packed_in_blobs_decode_to_the_same_snapshot() {
        let mut entries: Vec<ReadySnapshot> = (0..2_000)
            .map(|n| ready(n, if n % 5 == 0 { "other" } else { "q" }, 300))
            .collect();
        entries.push(ready(2_000, "q", BLOB_BYTES_TARGET * 2));
        entries.push(ready(2_001, "q", record::PAYLOAD_BYTES_MAX + 1));
        let snapshot = snapshot_of(entries);
        let body = encode(snapshot.clone()).unwrap();
        let mut packed = snapshot.queues[0].clone();
        pack(&mut packed);
        assert_eq!(
            packed.ready.len(),
            1,
            "only the oversized message stays unpacked"
        );
        assert!(
            blobs(&packed.ready_packed.0).len() >= 3,
            "entries span several blobs"
        );
        assert_eq!(decode(&body).unwrap(), snapshot);
        let chunks = Chunks::new(body.chunks(CHUNK_BYTES / 7).map(Bytes::copy_from_slice));
        assert_eq!(decode_from(chunks).unwrap(), snapshot);
    }

    /// An entry cut short, an unknown expiry tag or trailing bytes in a blob are refused
    /// with the entry named, never read as something else.
    #[test]
    fn damaged_blobs_are_refused() {
        let mut blob = Vec::new();
        put_entry(&ready(1, "", 10), &mut blob);
        let decode_blob = |bytes: &[u8]| -> Result<Vec<ReadySnapshot>, String> {
            let mut out = Vec::new();
            let d = serde::de::value::BytesDeserializer::<serde::de::value::Error>::new(bytes);
            Blob(&mut out).deserialize(d).map_err(|e| e.to_string())?;
            Ok(out)
        };
        assert_eq!(decode_blob(&blob).unwrap().len(), 1);
        for cut in 1..blob.len() {
            let e = decode_blob(&blob[..cut]).unwrap_err();
            assert!(e.contains("packed ready entry"), "{e}");
        }
        let mut bad_expiry = blob.clone();
        bad_expiry[9] = 2;
        let e = decode_blob(&bad_expiry).unwrap_err();
        assert!(e.contains("expiry is 0x02 at byte 9"), "{e}");
    }
}
