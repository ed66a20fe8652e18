//! A group's raft log on disk: every change to its image (`storage::ImageWrite`) as records
//! of one log in the shard's store, and the replay that rebuilds the image at a restart.
//!
//! The store only appends, so a new leader's entries that replace an uncommitted suffix are
//! recorded after it, and the replay applies records in order, each `Entries` record
//! cutting the log at its first index as the image did. Compaction drops records from the
//! front: once a snapshot's record is durable, nothing before its `replay_from` is needed —
//! the record that last wrote the entry after the snapshot's base (or the snapshot's own
//! first record when the log keeps no entry past the base). Why that is enough: an entry
//! that survives was written after every earlier index's last write (writing index i cuts
//! everything from i on), so no record from `replay_from` on holds an entry at or below the
//! base; and the image writes the HardState after each snapshot, so one follows too.
//!
//! ```text
//! record     = version:u8 (1) | kind:u8 | body
//! entries    (kind 1) = count:u32 | entry*count          (entry as in wire.rs)
//! hard state (kind 2) = term:u64 | vote:u64 | commit:u64
//! snapshot   (kind 3) = index:u64 | term:u64 | part:u32 | parts:u32
//!                       | part 0 only: conf_state | base_index:u64 | base_term:u64
//!                                      | clears_log:bool | replay_from:u64
//!                       | data:bytes                       (the part's share of the data)
//! ```
//!
//! A snapshot's parts are consecutive records; one cut short by a crash is ignored by the
//! replay (what followed it in that process never became durable either). Any record that
//! does not decode is corruption the journal's checksums did not catch: the replay refuses
//! the log with the record's sequence number rather than guess.

use super::storage::{GroupStorage, ImageWrite};
use super::wire::{self, Reader};
use bytes::{BufMut, Bytes};
use raft::prelude::{Entry, HardState, Snapshot};
use std::collections::{BTreeMap, VecDeque};

pub const VERSION: u8 = 1;
/// Entries go into records of at most about this size (an entry larger than it goes alone).
pub const RECORD_BYTES_MAX: usize = 1024 * 1024;
/// A snapshot's data is split into parts of this size.
pub const SNAPSHOT_PART_BYTES: usize = 1024 * 1024;
/// Most parts one snapshot may have (64 GiB): more is a damaged count.
pub const SNAPSHOT_PARTS_MAX: u32 = 65_536;

const KIND_ENTRIES: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;

/// One record to append, with the sequence number the log gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// What one `write` produced.
#[derive(Debug, Default)]
pub struct Written {
    pub records: Vec<LogRecord>,
    /// Records before this sequence number may be dropped once these records are durable.
    pub truncate_before: Option<u64>,
}

/// The writer of a group's raft log: numbers records as the store will, and remembers
/// which record holds which entries, to know where a snapshot lets the log be cut.
#[derive(Debug)]
pub struct ImageLog {
    next_seq: u64,
    /// Records holding the image's entries now: (first index, last index, seq), in seq
    /// order, their ranges contiguous.
    entry_records: VecDeque<(u64, u64, u64)>,
}

/// A group's image and the writer that continues its log, as a restart finds them.
pub struct Recovered {
    pub storage: GroupStorage,
    pub log: ImageLog,
}

impl Recovered {
    /// A new group of `voters` with an empty log whose first record will be `next_seq`.
    pub fn new_group(voters: &[u64], next_seq: u64) -> Recovered {
        Recovered {
            storage: GroupStorage::new(voters),
            log: ImageLog {
                next_seq,
                entry_records: VecDeque::new(),
            },
        }
    }
}

impl ImageLog {
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Turns image changes into records, in order.
    pub fn write(&mut self, writes: Vec<ImageWrite>) -> Written {
        let mut out = Written::default();
        for write in writes {
            match write {
                ImageWrite::Entries(entries) => self.write_entries(&entries, &mut out),
                ImageWrite::HardState(hs) => {
                    let mut payload = header(KIND_HARD_STATE);
                    for v in [hs.term, hs.vote, hs.commit] {
                        payload.put_u64_le(v);
                    }
                    self.push(payload, &mut out);
                }
                ImageWrite::Snapshot {
                    snapshot,
                    base_index,
                    base_term,
                    clears_log,
                } => {
                    let base = Base {
                        index: base_index,
                        term: base_term,
                        clears_log,
                    };
                    let replay_from = self.cut_at_base(base);
                    self.write_snapshot(&snapshot, base, replay_from, &mut out);
                    out.truncate_before = Some(replay_from);
                }
            }
        }
        out
    }

    fn push(&mut self, payload: Vec<u8>, out: &mut Written) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        out.records.push(LogRecord { seq, payload });
        seq
    }

    fn write_entries(&mut self, entries: &[Entry], out: &mut Written) {
        let mut rest = entries;
        while !rest.is_empty() {
            let mut bytes = 0;
            let mut take = 0;
            for e in rest {
                let size = e.data.len() + e.context.len() + 32;
                if take > 0 && bytes + size > RECORD_BYTES_MAX {
                    break;
                }
                bytes += size;
                take += 1;
            }
            let (chunk, tail) = rest.split_at(take);
            rest = tail;
            let mut payload = header(KIND_ENTRIES);
            payload.put_u32_le(chunk.len() as u32);
            for e in chunk {
                wire::put_entry(e, &mut payload);
            }
            let seq = self.push(payload, out);
            let first = chunk[0].index;
            let last = chunk[chunk.len() - 1].index;
            note_entries(&mut self.entry_records, first, last, seq);
        }
    }

    /// Forgets the records whose entries a snapshot at `base` dropped, and returns where a
    /// replay must start from now: the record holding entry base + 1, or (none kept) the
    /// next record, the snapshot's own.
    fn cut_at_base(&mut self, base: Base) -> u64 {
        note_base(&mut self.entry_records, base);
        match self.entry_records.front() {
            Some(&(first, _, seq)) => {
                assert_eq!(first, base.index + 1, "the log continues after its base");
                seq
            }
            None => self.next_seq,
        }
    }

    fn write_snapshot(&mut self, s: &Snapshot, base: Base, replay_from: u64, out: &mut Written) {
        let meta = s.get_metadata();
        let parts = s.data.len().div_ceil(SNAPSHOT_PART_BYTES).max(1);
        assert!(parts <= SNAPSHOT_PARTS_MAX as usize, "snapshot too large");
        for part in 0..parts {
            let mut payload = header(KIND_SNAPSHOT);
            payload.put_u64_le(meta.index);
            payload.put_u64_le(meta.term);
            payload.put_u32_le(part as u32);
            payload.put_u32_le(parts as u32);
            if part == 0 {
                wire::put_conf_state(meta.get_conf_state(), &mut payload);
                payload.put_u64_le(base.index);
                payload.put_u64_le(base.term);
                payload.put_u8(base.clears_log as u8);
                payload.put_u64_le(replay_from);
            }
            let from = (part * SNAPSHOT_PART_BYTES).min(s.data.len());
            let to = ((part + 1) * SNAPSHOT_PART_BYTES).min(s.data.len());
            wire::put_bytes(&s.data[from..to], &mut payload);
            self.push(payload, out);
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Base {
    index: u64,
    term: u64,
    clears_log: bool,
}

fn header(kind: u8) -> Vec<u8> {
    vec![VERSION, kind]
}

/// A record now holds `first..=last`: it replaces what other records held from `first` on.
fn note_entries(records: &mut VecDeque<(u64, u64, u64)>, first: u64, last: u64, seq: u64) {
    while records.back().is_some_and(|&(f, _, _)| f >= first) {
        records.pop_back();
    }
    if let Some(back) = records.back_mut() {
        back.1 = back.1.min(first - 1);
    }
    records.push_back((first, last, seq));
}

/// Entries up to the base (all of them, for a received snapshot) left the image.
fn note_base(records: &mut VecDeque<(u64, u64, u64)>, base: Base) {
    if base.clears_log {
        records.clear();
        return;
    }
    while records.front().is_some_and(|&(_, l, _)| l <= base.index) {
        records.pop_front();
    }
    if let Some(front) = records.front_mut() {
        front.0 = front.0.max(base.index + 1);
    }
}

/// A decoded record.
enum Decoded {
    Entries(Vec<Entry>),
    HardState(HardState),
    SnapshotPart(Part),
}

#[derive(Clone)]
struct Part {
    index: u64,
    term: u64,
    part: u32,
    parts: u32,
    /// Part 0 only.
    head: Option<(raft::prelude::ConfState, Base, u64)>,
    data: Bytes,
}

fn decode(payload: Bytes) -> Result<Decoded, String> {
    let mut r = Reader::new(payload);
    let err = |e: wire::WireError| e.to_string();
    let version = r.u8("version").map_err(err)?;
    if version != VERSION {
        return Err(format!("record version {version} (want {VERSION})"));
    }
    let decoded = match r.u8("kind").map_err(err)? {
        KIND_ENTRIES => {
            let count = r.u32("entry count").map_err(err)? as usize;
            // Each entry takes at least 25 bytes: a count past what is left is damage.
            if count == 0 || count > r.remaining() / 25 {
                return Err(format!("entry count {count} in {} bytes", r.remaining()));
            }
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                entries.push(r.entry().map_err(err)?);
            }
            let contiguous = entries.windows(2).all(|w| w[0].index + 1 == w[1].index);
            if !contiguous || entries[0].index == 0 {
                return Err("entries of a record are not contiguous from index 1 on".into());
            }
            Decoded::Entries(entries)
        }
        KIND_HARD_STATE => Decoded::HardState(HardState {
            term: r.u64("term").map_err(err)?,
            vote: r.u64("vote").map_err(err)?,
            commit: r.u64("commit").map_err(err)?,
            ..HardState::default()
        }),
        KIND_SNAPSHOT => {
            let index = r.u64("snapshot index").map_err(err)?;
            let term = r.u64("snapshot term").map_err(err)?;
            let part = r.u32("part").map_err(err)?;
            let parts = r.u32("parts").map_err(err)?;
            if parts == 0 || parts > SNAPSHOT_PARTS_MAX || part >= parts {
                return Err(format!("snapshot part {part} of {parts}"));
            }
            let head = if part == 0 {
                let conf_state = r.conf_state().map_err(err)?;
                let base = Base {
                    index: r.u64("base index").map_err(err)?,
                    term: r.u64("base term").map_err(err)?,
                    clears_log: r.bool("clears_log").map_err(err)?,
                };
                let replay_from = r.u64("replay_from").map_err(err)?;
                Some((conf_state, base, replay_from))
            } else {
                None
            };
            let data = r.bytes("snapshot data").map_err(err)?;
            Decoded::SnapshotPart(Part {
                index,
                term,
                part,
                parts,
                head,
                data,
            })
        }
        kind => return Err(format!("unknown record kind {kind}")),
    };
    if r.remaining() > 0 {
        return Err(format!("{} bytes after the record", r.remaining()));
    }
    Ok(decoded)
}

/// A snapshot whose parts were all found, with the record of its first part.
struct Whole {
    first_seq: u64,
    snapshot: Snapshot,
    base: Base,
    replay_from: u64,
}

/// Gathers a snapshot's consecutive parts; anything else in between abandons it.
#[derive(Default)]
struct Assembly {
    open: Option<(u64, Part, Vec<Bytes>)>,
}

impl Assembly {
    fn add(&mut self, seq: u64, part: Part) -> Option<Whole> {
        let continues = self.open.as_ref().is_some_and(|(_, head, datas)| {
            head.index == part.index
                && head.term == part.term
                && head.parts == part.parts
                && datas.len() as u32 == part.part
        });
        if part.part == 0 {
            let data = part.data.clone();
            self.open = Some((seq, part, vec![data]));
        } else if continues {
            self.open.as_mut().expect("checked").2.push(part.data);
        } else {
            self.open = None;
            return None;
        }
        let (_, head, datas) = self.open.as_ref().expect("set above");
        if datas.len() as u32 != head.parts {
            return None;
        }
        let (first_seq, head, datas) = self.open.take().expect("set above");
        let (conf_state, base, replay_from) = head.head.expect("part 0 has its head");
        let mut snapshot = Snapshot {
            data: datas.concat().into(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = head.index;
        meta.term = head.term;
        meta.set_conf_state(conf_state);
        Some(Whole {
            first_seq,
            snapshot,
            base,
            replay_from,
        })
    }

    fn interrupt(&mut self) {
        self.open = None;
    }
}

/// Rebuilds a group's image from its log's records (`(seq, payload)`, in order), and the
/// writer that continues the log at `next_seq`. A group that never wrote starts as
/// `GroupStorage::new(voters)`.
pub fn replay(
    records: Vec<(u64, Bytes)>,
    next_seq: u64,
    voters: &[u64],
) -> Result<Recovered, String> {
    assert!(
        records.last().is_none_or(|(seq, _)| *seq < next_seq),
        "records come before the next sequence number"
    );
    let mut decoded = Vec::with_capacity(records.len());
    for (seq, payload) in records {
        let d = decode(payload).map_err(|e| format!("raft log record {seq}: {e}"))?;
        decoded.push((seq, d));
    }
    let replay_from = newest_replay_from(&decoded)?;
    let fresh = GroupStorage::new(voters);
    // The newest HardState wins wherever it is: one after the newest snapshot may have
    // been cut short by a crash while older ones are still there.
    let hard_state = decoded
        .iter()
        .filter_map(|(_, d)| match d {
            Decoded::HardState(hs) => Some(hs.clone()),
            _ => None,
        })
        .next_back()
        .unwrap_or_else(|| fresh.hard_state().clone());
    let mut snapshot = fresh.newest_snapshot().clone();
    let fresh_meta = fresh.newest_snapshot().get_metadata();
    let mut base = (fresh_meta.index, fresh_meta.term);
    let mut entries: BTreeMap<u64, Entry> = BTreeMap::new();
    let mut entry_records = VecDeque::new();
    let mut assembly = Assembly::default();
    for (seq, d) in decoded.into_iter().filter(|(seq, _)| *seq >= replay_from) {
        if !matches!(d, Decoded::SnapshotPart(_)) {
            assembly.interrupt();
        }
        match d {
            Decoded::Entries(new) => {
                // A gap is caught once the whole log is replayed (`GroupStorage::recovered`):
                // entries below a base met further on may legitimately start mid-way.
                let (first, last) = (new[0].index, new[new.len() - 1].index);
                entries.split_off(&first);
                entries.extend(new.into_iter().map(|e| (e.index, e)));
                note_entries(&mut entry_records, first, last, seq);
            }
            Decoded::HardState(_) => {}
            Decoded::SnapshotPart(part) => {
                let Some(whole) = assembly.add(seq, part) else {
                    continue;
                };
                if whole.base.clears_log {
                    entries.clear();
                } else {
                    entries = entries.split_off(&(whole.base.index + 1));
                }
                note_base(&mut entry_records, whole.base);
                base = (whole.base.index, whole.base.term);
                snapshot = whole.snapshot;
            }
        }
    }
    // Entries at or below the base are not the image's (a replay from before a snapshot
    // meets them before the snapshot's record drops them).
    let entries: Vec<Entry> = entries.split_off(&(base.0 + 1)).into_values().collect();
    let storage = GroupStorage::recovered(hard_state, snapshot, base, entries)?;
    Ok(Recovered {
        storage,
        log: ImageLog {
            next_seq,
            entry_records,
        },
    })
}

/// Where the newest whole snapshot says a replay starts (the first record when there is none).
fn newest_replay_from(decoded: &[(u64, Decoded)]) -> Result<u64, String> {
    let mut assembly = Assembly::default();
    let mut newest = 0;
    for (seq, d) in decoded {
        match d {
            Decoded::SnapshotPart(part) => {
                if let Some(whole) = assembly.add(*seq, part.clone()) {
                    if whole.replay_from > whole.first_seq {
                        return Err(format!(
                            "raft log record {}: a snapshot replays from {}, after itself",
                            whole.first_seq, whole.replay_from
                        ));
                    }
                    newest = whole.replay_from;
                }
            }
            _ => assembly.interrupt(),
        }
    }
    Ok(newest)
}

#[cfg(test)]
pub(super) mod tests;
