//! Cursors: the read position ("next sequence I want") of each reader of a partition
//! (spec/messaging-engine.md §7, messaging-edge.md §8).
//!
//! [`CursorMap`] is the sans-IO state: commits, deletes, watermarks and the snapshot a
//! compaction writes. The store around it persists each change as one record in a storage
//! log ([`encode_commit`], [`encode_delete`]) and rebuilds the map on start by replaying
//! them ([`decode_record`], [`CursorMap::apply`]); the log's frame already carries a CRC, so
//! the body here has none.
//!
//! Changes from v1: components are bounded and NUL-free, and encoded with length prefixes
//! instead of separators (D20), so no client-chosen id can produce a record that stops
//! recovery; commits are clamped to the partition's `next_seq` (D21); the number of keys
//! and of members per group are capped (edge G13); deletion has its own record, so it does
//! not force a compaction.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

/// Longest topic in a cursor key. Stream topics are shorter (200 bytes encoded); this
/// leaves room for queue-plane names.
pub const CURSOR_TOPIC_BYTES_MAX: usize = 512;
/// Longest group or member (D20).
pub const CURSOR_COMPONENT_BYTES_MAX: usize = 256;
/// Most keys one map holds; commits creating more are refused (~80 B + components each).
pub const CURSOR_KEYS_MAX: usize = 1_000_000;
/// Most members of one group on one partition: the devices of one user, say.
pub const CURSOR_MEMBERS_PER_GROUP_MAX: usize = 64;
/// Version byte of the record bodies written by this build.
pub const CURSOR_RECORD_VERSION: u8 = 1;
/// Fixed part of a record body: version, kind, partition.
const RECORD_HEADER_BYTES: usize = 1 + 1 + 4;
/// Largest record body [`encode_commit`] produces; [`decode_record`] refuses larger input.
pub const CURSOR_RECORD_BYTES_MAX: usize =
    RECORD_HEADER_BYTES + 8 + 3 * 2 + CURSOR_TOPIC_BYTES_MAX + 2 * CURSOR_COMPONENT_BYTES_MAX;
/// Compaction is due when the log holds more than this many records per live key…
pub const COMPACTION_RECORDS_PER_KEY: u64 = 4;
/// …plus this many, so a small map is not rewritten after every few commits.
pub const COMPACTION_SLACK_RECORDS: u64 = 1024;
/// Prefix of the gateway's per-user group: `user:<user id>`.
pub const USER_GROUP_PREFIX: &str = "user:";
/// Group of the push dispatcher (member `""`).
pub const PUSH_DISPATCHER_GROUP: &str = "push-dispatcher";

const KIND_COMMIT: u8 = 1;
const KIND_DELETE: u8 = 2;

// Every component length fits the u16 prefix.
const _: () = assert!(CURSOR_TOPIC_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(CURSOR_COMPONENT_BYTES_MAX <= u16::MAX as usize);

/// Why a cursor key, commit or record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorError {
    Empty {
        component: &'static str,
    },
    TooLong {
        component: &'static str,
        bytes: usize,
        bytes_max: usize,
    },
    Nul {
        component: &'static str,
    },
    /// Sequences start at 1, so a cursor of 0 means nothing.
    ZeroSeq,
    KeysFull {
        keys_max: usize,
    },
    GroupFull {
        members_max: usize,
    },
    /// A record body ends early (or a length prefix points past its end).
    Truncated,
    TooLarge {
        bytes: usize,
    },
    UnknownVersion(u8),
    UnknownKind(u8),
    NotUtf8 {
        component: &'static str,
    },
    TrailingBytes {
        bytes: usize,
    },
    /// [`decode_commit`] of a delete record.
    NotACommit,
}

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorError::Empty { component } => write!(f, "cursor {component} is empty"),
            CursorError::TooLong {
                component,
                bytes,
                bytes_max,
            } => write!(
                f,
                "cursor {component} is {bytes} bytes, over the limit of {bytes_max}"
            ),
            CursorError::Nul { component } => write!(f, "cursor {component} contains NUL"),
            CursorError::ZeroSeq => write!(f, "cursor seq must be at least 1"),
            CursorError::KeysFull { keys_max } => {
                write!(f, "too many cursors: the limit is {keys_max}")
            }
            CursorError::GroupFull { members_max } => write!(
                f,
                "too many members in this cursor group: the limit is {members_max}"
            ),
            CursorError::Truncated => write!(f, "cursor record is truncated"),
            CursorError::TooLarge { bytes } => write!(
                f,
                "cursor record is {bytes} bytes, over the limit of {CURSOR_RECORD_BYTES_MAX}"
            ),
            CursorError::UnknownVersion(v) => write!(f, "cursor record version {v} is unknown"),
            CursorError::UnknownKind(k) => write!(f, "cursor record kind {k} is unknown"),
            CursorError::NotUtf8 { component } => {
                write!(f, "cursor record {component} is not UTF-8")
            }
            CursorError::TrailingBytes { bytes } => {
                write!(f, "cursor record has {bytes} trailing bytes")
            }
            CursorError::NotACommit => write!(f, "cursor record is not a commit"),
        }
    }
}

impl std::error::Error for CursorError {}

/// Whose position in which partition. Built only through [`CursorKey::new`], so every key
/// held or encoded is bounded and NUL-free. Ordered by (topic, partition, group, member):
/// the members of one group are contiguous, which [`CursorMap`] relies on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CursorKey {
    topic: String,
    partition: u32,
    group: String,
    member: String,
}

impl CursorKey {
    /// Topic and group are required; the member may be empty (one reader per group, like
    /// the push dispatcher).
    pub fn new(
        topic: &str,
        partition: u32,
        group: &str,
        member: &str,
    ) -> Result<CursorKey, CursorError> {
        check_component("topic", topic, CURSOR_TOPIC_BYTES_MAX, true)?;
        check_component("group", group, CURSOR_COMPONENT_BYTES_MAX, true)?;
        check_component("member", member, CURSOR_COMPONENT_BYTES_MAX, false)?;
        Ok(CursorKey {
            topic: topic.to_string(),
            partition,
            group: group.to_string(),
            member: member.to_string(),
        })
    }

    /// The gateway's key: group `user:<user id>`, member = the device id.
    pub fn for_device(
        topic: &str,
        partition: u32,
        user_id: &str,
        device_id: &str,
    ) -> Result<CursorKey, CursorError> {
        check_component("device", device_id, CURSOR_COMPONENT_BYTES_MAX, true)?;
        CursorKey::new(topic, partition, &user_group(user_id), device_id)
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partition(&self) -> u32 {
        self.partition
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn member(&self) -> &str {
        &self.member
    }

    /// Whether this key belongs to the given group of the given partition.
    fn in_group(&self, topic: &str, partition: u32, group: &str) -> bool {
        self.topic == topic && self.partition == partition && self.group == group
    }
}

/// The gateway's cursor group of a user: `user:<user id>`.
pub fn user_group(user_id: &str) -> String {
    format!("{USER_GROUP_PREFIX}{user_id}")
}

fn check_component(
    component: &'static str,
    value: &str,
    bytes_max: usize,
    required: bool,
) -> Result<(), CursorError> {
    if required && value.is_empty() {
        return Err(CursorError::Empty { component });
    }
    if value.len() > bytes_max {
        return Err(CursorError::TooLong {
            component,
            bytes: value.len(),
            bytes_max,
        });
    }
    if value.as_bytes().contains(&0) {
        return Err(CursorError::Nul { component });
    }
    Ok(())
}

/// What [`CursorMap::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Commit {
    /// The cursor moved to `seq` (the commit, or `next_seq` if the commit was beyond it):
    /// the store must persist this value.
    Stored { seq: u64, clamped: bool },
    /// The commit was ≤ the stored value: nothing to persist; still a success for the
    /// client (an equal re-commit is a no-op, not a write).
    Unchanged { stored: u64 },
}

/// One decoded record of the cursor log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorRecord {
    Commit { key: CursorKey, seq: u64 },
    Delete { key: CursorKey },
}

/// Every cursor of one store, in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorMap {
    cursors: BTreeMap<CursorKey, u64>,
    keys_max: usize,
    members_per_group_max: usize,
}

impl Default for CursorMap {
    fn default() -> Self {
        CursorMap::new()
    }
}

impl CursorMap {
    /// A map with the default caps ([`CURSOR_KEYS_MAX`], [`CURSOR_MEMBERS_PER_GROUP_MAX`]).
    pub fn new() -> CursorMap {
        CursorMap::with_limits(CURSOR_KEYS_MAX, CURSOR_MEMBERS_PER_GROUP_MAX)
    }

    /// A map with other caps; 0 means the default.
    pub fn with_limits(keys_max: usize, members_per_group_max: usize) -> CursorMap {
        let or_default = |n: usize, default: usize| if n == 0 { default } else { n };
        CursorMap {
            cursors: BTreeMap::new(),
            keys_max: or_default(keys_max, CURSOR_KEYS_MAX),
            members_per_group_max: or_default(members_per_group_max, CURSOR_MEMBERS_PER_GROUP_MAX),
        }
    }

    /// Moves `key` forward to `seq`, clamped to `next_seq` (the partition's next sequence:
    /// a reader cannot want more than the next record, D21). Monotonic: a value ≤ the stored
    /// one is [`Commit::Unchanged`]. Refuses seq 0 and new keys beyond the caps.
    pub fn commit(
        &mut self,
        key: &CursorKey,
        seq: u64,
        next_seq: u64,
    ) -> Result<Commit, CursorError> {
        let clamped = seq > next_seq;
        let seq = seq.min(next_seq);
        if seq == 0 {
            return Err(CursorError::ZeroSeq);
        }
        if let Some(stored) = self.cursors.get_mut(key) {
            if seq <= *stored {
                return Ok(Commit::Unchanged { stored: *stored });
            }
            *stored = seq;
            return Ok(Commit::Stored { seq, clamped });
        }
        self.insert_new(key, seq)?;
        Ok(Commit::Stored { seq, clamped })
    }

    /// Replays one record of the log: later records win (a commit sets the value, whatever
    /// it was), a delete removes the key. New keys obey the caps, so a log written under
    /// larger caps loads what fits and reports the rest.
    pub fn apply(&mut self, record: &CursorRecord) -> Result<(), CursorError> {
        match record {
            CursorRecord::Commit { key, seq } => {
                if *seq == 0 {
                    return Err(CursorError::ZeroSeq);
                }
                match self.cursors.get_mut(key) {
                    Some(stored) => *stored = *seq,
                    None => self.insert_new(key, *seq)?,
                }
            }
            CursorRecord::Delete { key } => {
                self.cursors.remove(key);
            }
        }
        Ok(())
    }

    fn insert_new(&mut self, key: &CursorKey, seq: u64) -> Result<(), CursorError> {
        if self.cursors.len() >= self.keys_max {
            return Err(CursorError::KeysFull {
                keys_max: self.keys_max,
            });
        }
        let members = self
            .group_range(&key.topic, key.partition, &key.group)
            .count();
        if members >= self.members_per_group_max {
            return Err(CursorError::GroupFull {
                members_max: self.members_per_group_max,
            });
        }
        self.cursors.insert(key.clone(), seq);
        debug_assert!(self.cursors.len() <= self.keys_max);
        Ok(())
    }

    pub fn get(&self, key: &CursorKey) -> Option<u64> {
        self.cursors.get(key).copied()
    }

    /// Removes a cursor (device unlink); returns whether it existed. Deleting an unknown key
    /// is a no-op.
    pub fn delete(&mut self, key: &CursorKey) -> bool {
        self.cursors.remove(key).is_some()
    }

    /// The slowest member of a group on a partition (the admin "watermark"), if any.
    pub fn watermark(&self, topic: &str, partition: u32, group: &str) -> Option<u64> {
        self.group_range(topic, partition, group)
            .map(|(_, seq)| *seq)
            .min()
    }

    /// The members of a group on a partition and their cursors, by member name.
    pub fn members<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        group: &'a str,
    ) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        self.group_range(topic, partition, group)
            .map(|(key, seq)| (key.member.as_str(), *seq))
    }

    pub fn len(&self) -> usize {
        self.cursors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cursors.is_empty()
    }

    /// Every cursor, sorted by key: what a compaction writes, one commit record each.
    pub fn snapshot(&self) -> impl Iterator<Item = (&CursorKey, u64)> + '_ {
        self.cursors.iter().map(|(key, seq)| (key, *seq))
    }

    /// The keys of one group: they start at member "" (the smallest) and are contiguous.
    fn group_range<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        group: &'a str,
    ) -> impl Iterator<Item = (&'a CursorKey, &'a u64)> + 'a {
        let start = CursorKey {
            topic: topic.to_string(),
            partition,
            group: group.to_string(),
            member: String::new(),
        };
        self.cursors
            .range((Bound::Included(start), Bound::Unbounded))
            .take_while(move |(key, _)| key.in_group(topic, partition, group))
    }
}

/// Whether the cursor log should be rewritten from a snapshot: when it holds more than
/// [`COMPACTION_RECORDS_PER_KEY`] records per live key plus [`COMPACTION_SLACK_RECORDS`].
/// Bounds the log to a constant factor of the live state, whatever the commit rate.
pub fn should_compact(records_since_compaction: u64, live_keys: usize) -> bool {
    let live = u64::try_from(live_keys).unwrap_or(u64::MAX);
    let threshold = live
        .saturating_mul(COMPACTION_RECORDS_PER_KEY)
        .saturating_add(COMPACTION_SLACK_RECORDS);
    records_since_compaction > threshold
}

// ---------------------------------------------------------------------------------------
// Record codec
//
// version:u8 | kind:u8 | partition:u32 LE | [seq:u64 LE, commit only] |
// topic_len:u16 LE | topic | group_len:u16 LE | group | member_len:u16 LE | member

/// Appends the body of a commit record to `out`.
pub fn encode_commit(key: &CursorKey, seq: u64, out: &mut Vec<u8>) {
    debug_assert!(seq > 0, "a commit record carries a seq ≥ 1");
    encode_header(KIND_COMMIT, key.partition, out);
    out.extend_from_slice(&seq.to_le_bytes());
    encode_components(key, out);
}

/// Appends the body of a delete record to `out`.
pub fn encode_delete(key: &CursorKey, out: &mut Vec<u8>) {
    encode_header(KIND_DELETE, key.partition, out);
    encode_components(key, out);
}

fn encode_header(kind: u8, partition: u32, out: &mut Vec<u8>) {
    out.push(CURSOR_RECORD_VERSION);
    out.push(kind);
    out.extend_from_slice(&partition.to_le_bytes());
}

fn encode_components(key: &CursorKey, out: &mut Vec<u8>) {
    for part in [&key.topic, &key.group, &key.member] {
        let len = u16::try_from(part.len()).expect("CursorKey::new bounds every component");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(part.as_bytes());
    }
}

/// Decodes a commit record body; a delete record is [`CursorError::NotACommit`].
pub fn decode_commit(body: &[u8]) -> Result<(CursorKey, u64), CursorError> {
    match decode_record(body)? {
        CursorRecord::Commit { key, seq } => Ok((key, seq)),
        CursorRecord::Delete { .. } => Err(CursorError::NotACommit),
    }
}

/// Decodes one record body. Strict: the body must be exactly one well-formed record whose
/// key passes [`CursorKey::new`], so what decodes re-encodes to the same bytes.
pub fn decode_record(body: &[u8]) -> Result<CursorRecord, CursorError> {
    if body.len() > CURSOR_RECORD_BYTES_MAX {
        return Err(CursorError::TooLarge { bytes: body.len() });
    }
    let mut r = Reader(body);
    let version = r.u8()?;
    if version != CURSOR_RECORD_VERSION {
        return Err(CursorError::UnknownVersion(version));
    }
    let kind = r.u8()?;
    if kind != KIND_COMMIT && kind != KIND_DELETE {
        return Err(CursorError::UnknownKind(kind));
    }
    let partition = u32::from_le_bytes(r.array()?);
    let seq = match kind {
        KIND_COMMIT => Some(u64::from_le_bytes(r.array()?)),
        _ => None,
    };
    let topic = r.component("topic")?;
    let group = r.component("group")?;
    let member = r.component("member")?;
    if !r.0.is_empty() {
        return Err(CursorError::TrailingBytes { bytes: r.0.len() });
    }
    let key = CursorKey::new(topic, partition, group, member)?;
    match seq {
        Some(0) => Err(CursorError::ZeroSeq),
        Some(seq) => Ok(CursorRecord::Commit { key, seq }),
        None => Ok(CursorRecord::Delete { key }),
    }
}

/// A cursor over a record body; every read checks the remaining length.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CursorError> {
        if self.0.len() < n {
            return Err(CursorError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, CursorError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CursorError> {
        let bytes = self.take(N)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn component(&mut self, component: &'static str) -> Result<&'a str, CursorError> {
        let len = usize::from(u16::from_le_bytes(self.array()?));
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| CursorError::NotUtf8 { component })
    }
}

#[cfg(test)]
mod tests;
