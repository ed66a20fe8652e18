//! The messaging plane's part of a slot's replicated state (issue 15, design §9): what a
//! slot's Raft group must agree on for the stream partitions that hash to the slot
//! (`partition_slot`), so that every replica assigns the same sequence numbers, keeps the
//! same cursors and answers a retried send the same way.
//!
//! Sans-IO and deterministic: [`StreamSlot::apply`] reads nothing but the command (the time
//! comes in the command, proposed by the leader) and its own state, so replicas that apply
//! the same commands in the same order hold the same state byte for byte
//! ([`StreamSlot::encode_snapshot`]).
//!
//! What it holds per partition is the position (`next_seq`) and a running checksum of every
//! record appended (`digest`), not the records: those are an effect ([`Appended`]) that each
//! node writes into its own stream log, so a slot snapshot stays small whatever the
//! partition's retention. Two replicas with the same `digest` at the same `next_seq` wrote
//! the same records.
//!
//! Cursors ([`CursorMap`]) and dedup claims ([`DedupTable`]) are the single node's sans-IO
//! types, applied here at the command's time: a dedup claim is taken and completed in one
//! apply, so the replicated table never holds an in-flight claim, and a send retried after
//! a failover finds the first copy's coordinates on whichever node leads next.
//!
//! Inbox pointers are made idempotent the same way, in a third table ([`pointer_claims`]):
//! a pointer whose append met a leader change (outcome unknown) is appended again under the
//! same claim, and the copy that was committed after all answers as a duplicate. Its
//! entries live only as long as such a retry can come ([`POINTER_CLAIM_TTL_NS`]), so the
//! pointers of busy conversations do not shorten the window of sends.
//!
//! A send that fans out on write names its members in the command; the slot keeps them in
//! its outbox ([`StreamSlot::outbox`]) until a [`StreamCommand::FannedOut`] reports the
//! pointers written. The outbox is the fan-out's durable promise: whichever node leads the
//! slot writes the pointers of every send in it, so a send acknowledged (or committed and
//! retried) is not left without its pointers when the node that proposed it, or the leader
//! that was writing them, dies. A second writing is answered as a duplicate through the
//! pointer claims.
//!
//! Limits: the entries of the tables are capped by their own caps (`CURSOR_KEYS_MAX`,
//! the dedup `entries_max`, [`POINTER_CLAIMS_PER_SLOT_MAX`]); partitions per slot by
//! [`PARTITIONS_PER_SLOT_MAX`]; the outbox by [`OUTBOX_SENDS_PER_SLOT_MAX`] and
//! [`OUTBOX_MEMBERS_PER_SLOT_MAX`] (a send past them is refused as busy, to retry).
//!
//! [`pointer_claims`]: StreamSlot::pointer_claims The
//! configuration ([`StreamSlotConfig`]) must be the same on every node, as the queue
//! plane's `BrokerConfig` must.

pub mod command;
pub mod snapshot;

#[cfg(test)]
mod tests;

use crate::messaging::cursor::{Commit, CursorError, CursorKey, CursorMap, PUSH_DISPATCHER_GROUP};
use crate::messaging::dedup::{Claim, Coordinates, DedupTable};
use crate::messaging::fanout;
use boltq_io::record::{self, Record};
use bytes::Bytes;
pub use command::{Append, DedupClaim, StreamCommand};
use std::collections::BTreeMap;

/// Most partitions one slot's state tracks (about 50 B each): a topic flood is refused
/// past it instead of growing every replica's state and snapshot.
pub const PARTITIONS_PER_SLOT_MAX: usize = 1_000_000;

/// Longest message id an answer (and a dedup entry) carries: a longer `message_id` header
/// is cut to it on a character boundary (the gateway's ids are far shorter).
pub const MESSAGE_ID_BYTES_MAX: usize = 256;

/// How long a slot remembers an inbox pointer's claim: longer than the engine retries a
/// pointer whose outcome is unknown (`engine::pointers::POINTER_RETRY_WINDOW_MS`), with
/// room for clock differences between the leaders that proposed the two attempts.
pub const POINTER_CLAIM_TTL_NS: i64 = 60 * 1_000_000_000;

/// Most pointer claims a slot keeps (about 300 B each; 256 slots: ~80 MB at most per
/// node). At the cap the oldest is forgotten: a retry that comes after this many newer
/// pointers of the slot may then store its pointer twice (a repeated entry in an inbox,
/// with the same `message_id`), never lose it.
pub const POINTER_CLAIMS_PER_SLOT_MAX: usize = 1024;

/// Most members one send fans out to on write (`messaging.chat.fanout_on_write_limit` is
/// capped at it): the command carries them.
pub const FANOUT_MEMBERS_MAX: usize = 4096;
const _: () = assert!(crate::config::FANOUT_ON_WRITE_LIMIT_MAX as usize == FANOUT_MEMBERS_MAX);

/// Most sends of a slot whose pointers are not yet reported written, and most members they
/// name together (~40 B each: with 256 slots at most ~700 MB per node, reached only when
/// inbox slots stay without a leader while sends go on). Sends past either are refused as
/// busy (retryable): the outbox is what keeps a send's pointers from being lost, so it is
/// never cut.
pub const OUTBOX_SENDS_PER_SLOT_MAX: usize = 4096;
pub const OUTBOX_MEMBERS_PER_SLOT_MAX: usize = 65_536;

/// Longest value of a header a pointer repeats: a send whose record holds a longer one is
/// refused (the gateway's values are far shorter).
pub const POINTER_HEADER_VALUE_BYTES_MAX: usize = 1024;

/// The first sequence number of a partition (as a stream log numbers its records).
pub const FIRST_SEQ: u64 = 1;

/// Settings every replica must share (zeros: the defaults).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamSlotConfig {
    /// The dedup window (`messaging.dedup.ttl`); ≤ 0: the default.
    pub dedup_ttl_ns: i64,
    /// Dedup entries per slot; 0: the default.
    pub dedup_entries_max: usize,
    /// `messaging.push.enabled`: an inbox partition's first pointer with no
    /// `push-dispatcher` cursor anchors that cursor at itself, in the same apply, so the
    /// push of a never-seen inbox's first pointer is owed from the moment it is committed
    /// (the next leader's dispatcher starts there), not from a commit its dispatcher makes
    /// later.
    pub anchor_push_cursors: bool,
}

/// A partition's replicated position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The sequence number the next record gets.
    pub next_seq: u64,
    /// CRC-32C chained over the encoded frames of every record appended so far.
    pub digest: u32,
}

impl Default for Position {
    fn default() -> Self {
        Position {
            next_seq: FIRST_SEQ,
            digest: 0,
        }
    }
}

/// What applying a command gave: the answer for whoever proposed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamOutcome {
    /// Stored at `coords`; or, with `duplicate`, stored earlier by a send with the same
    /// dedup key (nothing was appended this time).
    Appended {
        coords: Coordinates,
        duplicate: bool,
    },
    Committed(Commit),
    /// Refused alike by every replica; nothing changed.
    Refused(String),
    /// Refused alike by every replica for a while (a limit that frees itself, such as the
    /// outbox's): nothing changed; the same command may succeed shortly.
    Busy(String),
    /// A fan-out report applied: this many sends left the outbox (the rest had already).
    FannedOut {
        cleared: u32,
    },
}

/// A send in the outbox: its conversation partition and sequence number.
pub type OutboxKey = (String, u32, u64);

/// The pointers a send still owes its members' inboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanOut {
    /// Sorted, distinct, valid ids.
    pub members: Vec<String>,
    /// The send's headers every pointer repeats (`fanout::copied_headers`), sorted.
    pub headers: Vec<(Bytes, Bytes)>,
}

/// A record the slot appended: each node writes it into its own log of the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub topic: String,
    pub partition: u32,
    pub record: Record,
}

#[derive(Debug)]
pub struct StreamSlot {
    partitions: BTreeMap<(String, u32), Position>,
    cursors: CursorMap,
    dedup: DedupTable,
    pointer_claims: DedupTable,
    outbox: BTreeMap<OutboxKey, FanOut>,
    /// The members of every outbox entry together.
    outbox_members: usize,
    anchor_push_cursors: bool,
}

impl StreamSlot {
    pub fn new(cfg: StreamSlotConfig) -> StreamSlot {
        StreamSlot {
            dedup: DedupTable::new(cfg.dedup_ttl_ns, cfg.dedup_entries_max),
            pointer_claims: DedupTable::new(POINTER_CLAIM_TTL_NS, POINTER_CLAIMS_PER_SLOT_MAX),
            partitions: BTreeMap::new(),
            cursors: CursorMap::new(),
            outbox: BTreeMap::new(),
            outbox_members: 0,
            anchor_push_cursors: cfg.anchor_push_cursors,
        }
    }

    /// The position of a partition (the first one for a partition never appended to).
    pub fn position(&self, topic: &str, partition: u32) -> Position {
        self.partitions
            .get(&(topic.to_string(), partition))
            .copied()
            .unwrap_or_default()
    }

    pub fn partitions(&self) -> impl Iterator<Item = (&(String, u32), &Position)> + '_ {
        self.partitions.iter()
    }

    pub fn cursors(&self) -> &CursorMap {
        &self.cursors
    }

    pub fn dedup(&self) -> &DedupTable {
        &self.dedup
    }

    /// The claims of inbox pointers appended within the retry window.
    pub fn pointer_claims(&self) -> &DedupTable {
        &self.pointer_claims
    }

    /// The sends whose pointers are not yet reported written, by conversation position.
    pub fn outbox(&self) -> &BTreeMap<OutboxKey, FanOut> {
        &self.outbox
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
            && self.cursors.is_empty()
            && self.dedup.is_empty()
            && self.pointer_claims.is_empty()
            && self.outbox.is_empty()
    }

    /// Applies one committed command.
    pub fn apply(&mut self, cmd: &StreamCommand) -> (StreamOutcome, Option<Appended>) {
        let applied = match cmd {
            StreamCommand::Append(append) => self.append(append),
            StreamCommand::Commit { key, seq } => {
                let next_seq = self.position(key.topic(), key.partition()).next_seq;
                let outcome = match self.cursors.commit(key, *seq, next_seq) {
                    Ok(commit) => {
                        debug_assert!(self.cursors.get(key).is_some_and(|c| c <= next_seq));
                        StreamOutcome::Committed(commit)
                    }
                    Err(e) => StreamOutcome::Refused(cursor_refusal(&e)),
                };
                (outcome, None)
            }
            StreamCommand::FannedOut { sends } => (self.clear_fanned_out(sends), None),
        };
        self.check_invariants();
        applied
    }

    fn clear_fanned_out(&mut self, sends: &[OutboxKey]) -> StreamOutcome {
        let mut cleared = 0u32;
        for key in sends {
            if let Some(fan_out) = self.outbox.remove(key) {
                self.outbox_members -= fan_out.members.len();
                cleared += 1;
            }
        }
        StreamOutcome::FannedOut { cleared }
    }

    fn append(&mut self, append: &Append) -> (StreamOutcome, Option<Appended>) {
        let now_ns = append.now_ns;
        self.dedup.sweep(now_ns);
        self.pointer_claims.sweep(now_ns);
        if let Some(claim) = &append.dedup {
            match self.table_of(claim).claim(claim.key(), now_ns) {
                Claim::Fresh => {}
                Claim::Duplicate(coords) => {
                    let outcome = StreamOutcome::Appended {
                        coords,
                        duplicate: true,
                    };
                    return (outcome, None);
                }
                // Claims are completed or released within this apply, so neither can
                // happen; refused alike everywhere if the table says so anyway.
                Claim::InFlight | Claim::Full => {
                    return (refused("the dedup table refused the claim"), None)
                }
            }
        }
        let stored = self.store(append);
        if let Some(claim) = &append.dedup {
            let (key, table) = (claim.key(), self.table_of(claim));
            match &stored {
                Ok((coords, _)) => {
                    let completed = table.complete(key, coords.clone(), now_ns);
                    assert!(completed, "the claim taken above is completed in place");
                }
                Err(_) => {
                    table.release(key);
                }
            }
        }
        match stored {
            Ok((coords, appended)) => (
                StreamOutcome::Appended {
                    coords,
                    duplicate: false,
                },
                Some(appended),
            ),
            Err(refusal) => (refusal, None),
        }
    }

    fn table_of(&mut self, claim: &DedupClaim) -> &mut DedupTable {
        match claim {
            DedupClaim::Send(_) => &mut self.dedup,
            DedupClaim::Pointer(_) => &mut self.pointer_claims,
        }
    }

    /// Numbers the record, moves the partition's position past it and puts its fan-out in
    /// the outbox; the error is the answer when nothing was stored.
    fn store(&mut self, append: &Append) -> Result<(Coordinates, Appended), StreamOutcome> {
        let at = (append.topic.clone(), append.partition);
        if !self.partitions.contains_key(&at) && self.partitions.len() >= PARTITIONS_PER_SLOT_MAX {
            return Err(refused(&format!(
                "this slot holds {PARTITIONS_PER_SLOT_MAX} partitions already"
            )));
        }
        let fan_out = self.fan_out_of(append)?;
        let position = self.partitions.get(&at).copied().unwrap_or_default();
        let record = Record {
            seq: position.next_seq,
            timestamp_ns: append.now_ns,
            flags: 0,
            epoch: 0,
            key: append.key.clone(),
            headers: append.headers.clone(),
            payload: append.payload.clone(),
        };
        let mut frame = Vec::new();
        record::encode(&record, &mut frame).map_err(|e| refused(&e.to_string()))?;
        debug_assert!(position.next_seq >= FIRST_SEQ);
        if let Some(fan_out) = fan_out {
            self.outbox_members += fan_out.members.len();
            let key = (append.topic.clone(), append.partition, record.seq);
            let before = self.outbox.insert(key, fan_out);
            assert!(before.is_none(), "a sequence number is given once");
        }
        let next = Position {
            next_seq: position.next_seq + 1,
            digest: crc32c::crc32c_append(position.digest, &frame),
        };
        self.partitions.insert(at, next);
        self.anchor_push_cursor(&append.topic, append.partition, position.next_seq);
        let message_id = record
            .headers
            .iter()
            .find(|(k, _)| k.as_ref() == b"message_id")
            .map(|(_, v)| truncated(&String::from_utf8_lossy(v), MESSAGE_ID_BYTES_MAX).to_string())
            .unwrap_or_default();
        let coords = Coordinates {
            message_id,
            topic: append.topic.clone(),
            partition: append.partition,
            seq: record.seq,
            timestamp_ns: record.timestamp_ns,
        };
        let appended = Appended {
            topic: append.topic.clone(),
            partition: append.partition,
            record,
        };
        Ok((coords, appended))
    }

    /// Anchors the push cursor of an inbox partition at `seq`, its record just stored, if
    /// it has none (see `StreamSlotConfig::anchor_push_cursors`). A cursor the caps refuse
    /// is not anchored here (alike on every replica); the dispatcher anchors it then.
    fn anchor_push_cursor(&mut self, topic: &str, partition: u32, seq: u64) {
        if !self.anchor_push_cursors || !topic.starts_with(crate::messaging::topic::INBOX_PREFIX) {
            return;
        }
        let Ok(key) = CursorKey::new(topic, partition, PUSH_DISPATCHER_GROUP, "") else {
            return;
        };
        if self.cursors.get(&key).is_none() {
            let next_seq = self.position(topic, partition).next_seq;
            let _ = self.cursors.commit(&key, seq, next_seq);
        }
    }

    /// The outbox entry a fanning-out append adds, or why it cannot be taken now.
    fn fan_out_of(&self, append: &Append) -> Result<Option<FanOut>, StreamOutcome> {
        if append.fanout.is_empty() {
            return Ok(None);
        }
        if self.outbox.len() >= OUTBOX_SENDS_PER_SLOT_MAX
            || self.outbox_members + append.fanout.len() > OUTBOX_MEMBERS_PER_SLOT_MAX
        {
            return Err(StreamOutcome::Busy(format!(
                "{} sends of this slot wait for their inbox pointers (limits \
                 {OUTBOX_SENDS_PER_SLOT_MAX} sends, {OUTBOX_MEMBERS_PER_SLOT_MAX} members); \
                 retry shortly",
                self.outbox.len()
            )));
        }
        let headers = fanout::copied_headers(&append.headers);
        if headers
            .iter()
            .any(|(_, v)| v.len() > POINTER_HEADER_VALUE_BYTES_MAX)
        {
            return Err(refused(&format!(
                "a header the pointers repeat is over {POINTER_HEADER_VALUE_BYTES_MAX} bytes"
            )));
        }
        Ok(Some(FanOut {
            members: append.fanout.clone(),
            headers,
        }))
    }

    fn check_invariants(&self) {
        debug_assert!(self.partitions.len() <= PARTITIONS_PER_SLOT_MAX);
        debug_assert!(self.outbox.len() <= OUTBOX_SENDS_PER_SLOT_MAX);
        debug_assert!(self.outbox_members <= OUTBOX_MEMBERS_PER_SLOT_MAX);
        debug_assert_eq!(
            self.outbox_members,
            self.outbox.values().map(|f| f.members.len()).sum::<usize>()
        );
    }
}

/// The longest prefix of `s` within `bytes_max` bytes, cut on a character boundary.
fn truncated(s: &str, bytes_max: usize) -> &str {
    if s.len() <= bytes_max {
        return s;
    }
    let mut end = bytes_max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn refused(why: &str) -> StreamOutcome {
    StreamOutcome::Refused(why.to_string())
}

fn cursor_refusal(e: &CursorError) -> String {
    format!("cursor commit refused: {e}")
}

/// A bounded reader over untrusted bytes, shared by the command and snapshot decoders:
/// every length is checked against what is left before anything is allocated.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    pub(crate) fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub(crate) fn at(&self) -> usize {
        self.at
    }

    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.left() {
            return Err(format!(
                "{what} at byte {} needs {n} bytes, {} left",
                self.at,
                self.left()
            ));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let bytes = self.take(N, what)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    /// A `u16`-length-prefixed UTF-8 string of at most `bytes_max` bytes.
    pub(crate) fn str16(&mut self, what: &str, bytes_max: usize) -> Result<&'a str, String> {
        let len = usize::from(self.u16(what)?);
        if len > bytes_max {
            return Err(format!("{what} is {len} bytes, over {bytes_max}"));
        }
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))
    }

    /// A `u16`-length-prefixed byte string of at most `bytes_max` bytes.
    pub(crate) fn take_bytes16(
        &mut self,
        what: &str,
        bytes_max: usize,
    ) -> Result<&'a [u8], String> {
        let len = usize::from(self.u16(what)?);
        if len > bytes_max {
            return Err(format!("{what} is {len} bytes, over {bytes_max}"));
        }
        self.take(len, what)
    }

    /// A count of items that take at least `item_bytes_min` bytes each: refused when what
    /// is left cannot hold that many, so a hostile count allocates nothing.
    pub(crate) fn count(&mut self, what: &str, item_bytes_min: usize) -> Result<usize, String> {
        let n = usize::try_from(self.u32(what)?).map_err(|_| format!("{what} overflows"))?;
        if n.saturating_mul(item_bytes_min) > self.left() {
            return Err(format!(
                "{what} says {n} items; {} bytes cannot hold them",
                self.left()
            ));
        }
        Ok(n)
    }

    pub(crate) fn finish(&self, what: &str) -> Result<(), String> {
        match self.left() {
            0 => Ok(()),
            n => Err(format!("{n} bytes after the end of the {what}")),
        }
    }
}

pub(crate) fn put_str16(s: &str, out: &mut Vec<u8>) {
    let len = u16::try_from(s.len()).expect("callers bound every string below 64 KiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}
