//! A group's durable image: its HardState (term, vote, commit), its membership, the newest
//! snapshot of its state machine, and the log entries after a base index. raft-rs reads it
//! through the [`raft::Storage`] trait; the group writes it while handling a Ready.
//!
//! The base is not the snapshot: the log keeps `ENTRIES_KEPT_BEHIND_SNAPSHOT` entries (by
//! default) behind the newest snapshot, so a follower that lags a little is caught up from
//! the log rather than sent the whole state. `base ≤ snapshot ≤ commit ≤ last` always.
//!
//! The image is held in memory; every change to it is also queued as an [`ImageWrite`],
//! which the group's raft log (`image_log.rs`) turns into records of the shard journal.
//! A restart replays those records into the same image.

use raft::prelude::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// Where a founding member's log starts: its image begins as a snapshot at this index and
/// term that holds the founding membership. A node that joins later starts empty (index 0),
/// so the leader can only catch it up with a snapshot — which is how it learns the
/// membership it joins. (From index 1, it would receive entries and never the founders'
/// membership, which no entry holds.)
pub const FOUNDING_INDEX: u64 = 5;
pub const FOUNDING_TERM: u64 = 5;

/// Entries the log keeps behind the newest snapshot, by default.
pub const ENTRIES_KEPT_BEHIND_SNAPSHOT: u64 = 256;

/// One change to the image, in the order it was made: what the raft log records and a
/// restart replays.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageWrite {
    /// Entries from the first one's index on; they replace whatever followed it.
    Entries(Vec<Entry>),
    HardState(HardState),
    /// A snapshot received from the leader (`clears_log`: the whole log goes) or taken
    /// here (the log keeps the entries after `base_index`, whose term is `base_term`).
    Snapshot {
        snapshot: Snapshot,
        base_index: u64,
        base_term: u64,
        clears_log: bool,
    },
}

#[derive(Clone, Debug)]
pub struct GroupStorage {
    hard_state: HardState,
    conf_state: ConfState,
    /// The newest snapshot (index 0 and no data until the first one is taken or received).
    snapshot: Snapshot,
    /// Index and term of the entry just before `entries[0]`.
    base_index: u64,
    base_term: u64,
    /// Entries `base_index + 1 ..= last()`, contiguous.
    entries: Vec<Entry>,
    /// Entries kept behind the newest snapshot (`ENTRIES_KEPT_BEHIND_SNAPSHOT`).
    kept_behind_snapshot: u64,
    /// Changes not yet taken by the raft log (`take_writes`).
    writes: Vec<ImageWrite>,
    /// Set when raft-rs asked for a snapshot for a member the newest one does not know
    /// (one that joined after it was taken): the replica takes a new one.
    snapshot_wanted: std::cell::Cell<bool>,
}

impl GroupStorage {
    /// The image of a new group whose voters are `voters` (every member starts the same way,
    /// so all agree on the membership at index 0).
    /// The image of a founding member of a group whose voters are `voters` (every founder
    /// starts the same way, so all agree on the membership and the log's start), or, with
    /// no voters, of a node that joins an existing group and learns everything from the
    /// leader's snapshot.
    pub fn new(voters: &[u64]) -> GroupStorage {
        let conf_state = ConfState {
            voters: voters.to_vec(),
            ..ConfState::default()
        };
        let (index, term) = if voters.is_empty() {
            (0, 0)
        } else {
            (FOUNDING_INDEX, FOUNDING_TERM)
        };
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().set_conf_state(conf_state.clone());
        snapshot.mut_metadata().index = index;
        snapshot.mut_metadata().term = term;
        GroupStorage {
            hard_state: HardState {
                term,
                commit: index,
                ..HardState::default()
            },
            conf_state,
            snapshot,
            base_index: index,
            base_term: term,
            entries: Vec::new(),
            kept_behind_snapshot: ENTRIES_KEPT_BEHIND_SNAPSHOT,
            writes: Vec::new(),
            snapshot_wanted: std::cell::Cell::new(false),
        }
    }

    /// The image a restart replayed (`image_log::replay`), checked for the invariants every
    /// image keeps, so a log that replays into nonsense is refused rather than served.
    pub(super) fn recovered(
        hard_state: HardState,
        snapshot: Snapshot,
        base: (u64, u64),
        entries: Vec<Entry>,
    ) -> Result<GroupStorage, String> {
        let (base_index, base_term) = base;
        let conf_state = snapshot.get_metadata().get_conf_state().clone();
        if conf_state.voters.is_empty() && snapshot.get_metadata().index > 0 {
            return Err("the recovered snapshot's membership has no voter".into());
        }
        let contiguous = entries
            .iter()
            .enumerate()
            .all(|(i, e)| e.index == base_index + 1 + i as u64);
        if !contiguous {
            return Err(format!(
                "recovered entries do not follow index {base_index} without a gap"
            ));
        }
        let last = base_index + entries.len() as u64;
        let snapshot_index = snapshot.get_metadata().index;
        if snapshot_index < base_index || snapshot_index > last {
            return Err(format!(
                "recovered snapshot at {snapshot_index} outside the log {base_index}..={last}"
            ));
        }
        if hard_state.commit > last {
            return Err(format!(
                "recovered commit {} past the log's end {last}",
                hard_state.commit
            ));
        }
        // A HardState written after the snapshot may have been cut short by the crash: the
        // snapshot's own index and term are committed and known, so they are floors.
        let mut hard_state = hard_state;
        hard_state.commit = hard_state.commit.max(snapshot_index);
        hard_state.term = hard_state.term.max(snapshot.get_metadata().term);
        Ok(GroupStorage {
            hard_state,
            conf_state,
            snapshot,
            base_index,
            base_term,
            entries,
            kept_behind_snapshot: ENTRIES_KEPT_BEHIND_SNAPSHOT,
            writes: Vec::new(),
            snapshot_wanted: std::cell::Cell::new(false),
        })
    }

    /// True once if a snapshot was asked for that the newest one cannot serve.
    pub fn take_snapshot_wanted(&self) -> bool {
        self.snapshot_wanted.replace(false)
    }

    /// The changes made since the last call, in order, for the raft log to record.
    pub fn take_writes(&mut self) -> Vec<ImageWrite> {
        std::mem::take(&mut self.writes)
    }

    /// Keeps `entries` behind each snapshot instead of the default (tests that want
    /// followers caught up by snapshot more often).
    pub fn keeping_behind_snapshot(mut self, entries: u64) -> GroupStorage {
        self.kept_behind_snapshot = entries;
        self
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The membership after a change was applied. Not written by itself: a restart
    /// restores the snapshot's and applies the changes after it again.
    pub fn set_conf_state(&mut self, conf_state: ConfState) {
        self.conf_state = conf_state;
    }

    /// The newest snapshot: what a restart restores before replaying the log after it.
    pub fn newest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn last(&self) -> u64 {
        self.base_index + self.entries.len() as u64
    }

    fn term_of(&self, index: u64) -> Option<u64> {
        if index == self.base_index {
            return Some(self.base_term);
        }
        if index < self.base_index || index > self.last() {
            return None;
        }
        Some(self.entries[(index - self.base_index - 1) as usize].term)
    }

    /// Appends entries a Ready asked to persist. A new leader's log may replace a suffix
    /// that was never committed: everything from the first new index on is replaced.
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first_new) = entries.first() else {
            return;
        };
        assert!(
            first_new.index > self.hard_state.commit,
            "entry {} would overwrite the committed log (commit {})",
            first_new.index,
            self.hard_state.commit
        );
        assert!(
            first_new.index <= self.last() + 1,
            "entry {} leaves a gap after {}",
            first_new.index,
            self.last()
        );
        assert!(
            entries
                .windows(2)
                .all(|pair| pair[0].index + 1 == pair[1].index),
            "appended entries are contiguous"
        );
        let keep = (first_new.index - self.base_index - 1) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
        self.writes.push(ImageWrite::Entries(entries.to_vec()));
    }

    pub fn set_hard_state(&mut self, hard_state: HardState) {
        assert!(
            hard_state.term >= self.hard_state.term,
            "term goes backwards"
        );
        assert!(
            hard_state.commit >= self.hard_state.commit,
            "commit goes backwards"
        );
        assert!(hard_state.commit <= self.last(), "commit past the log");
        self.hard_state = hard_state;
        self.writes
            .push(ImageWrite::HardState(self.hard_state.clone()));
    }

    pub fn set_commit(&mut self, commit: u64) {
        assert!(commit >= self.hard_state.commit, "commit goes backwards");
        assert!(commit <= self.last(), "commit {commit} past the log");
        self.hard_state.commit = commit;
        self.writes
            .push(ImageWrite::HardState(self.hard_state.clone()));
    }

    /// A snapshot received from the leader replaces the whole image up to its index.
    pub fn install_snapshot(&mut self, snapshot: Snapshot) {
        let meta = snapshot.get_metadata();
        assert!(
            meta.index >= self.hard_state.commit,
            "snapshot {} is older than the commit {}",
            meta.index,
            self.hard_state.commit
        );
        self.hard_state.commit = meta.index;
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.conf_state = meta.get_conf_state().clone();
        self.base_index = meta.index;
        self.base_term = meta.term;
        self.entries.clear();
        self.snapshot = snapshot;
        self.push_snapshot_write(true);
    }

    /// The snapshot as it now stands, then the HardState: a raft log replayed from the
    /// snapshot's record on must find a HardState after it (`image_log.rs`).
    fn push_snapshot_write(&mut self, clears_log: bool) {
        self.writes.push(ImageWrite::Snapshot {
            snapshot: self.snapshot.clone(),
            base_index: self.base_index,
            base_term: self.base_term,
            clears_log,
        });
        self.writes
            .push(ImageWrite::HardState(self.hard_state.clone()));
    }

    /// Whether this is still exactly the image a founder starts with: the founding
    /// snapshot, empty, and nothing after it — no entry, no vote, no later term. A group
    /// that ever elected or wrote anything is past it, and so is one founded with a state
    /// (`found_with`).
    pub fn is_unfounded(&self) -> bool {
        let meta = self.snapshot.get_metadata();
        meta.index == FOUNDING_INDEX
            && meta.term == FOUNDING_TERM
            && self.snapshot.data.is_empty()
            && self.entries.is_empty()
            && self.base_index == FOUNDING_INDEX
            && self.hard_state.term == FOUNDING_TERM
            && self.hard_state.vote == 0
            && self.hard_state.commit == FOUNDING_INDEX
    }

    /// Founds the group with `state` (a slot snapshot, `slot_snapshot.rs`) as what the
    /// founding snapshot holds: the state a node held before it founded its cluster alone,
    /// which every member that joins later receives with that snapshot. Only an unfounded
    /// image: any other member of the group must hold the same founding state, and a lone
    /// founder's is the only one that exists.
    pub fn found_with(&mut self, state: Vec<u8>) {
        assert!(self.is_unfounded(), "a group is founded once");
        assert!(!state.is_empty(), "an empty founding state is the default");
        assert_eq!(
            self.conf_state.voters.len(),
            1,
            "only a lone founder carries its state in"
        );
        self.snapshot.data = state.into();
        self.push_snapshot_write(true);
    }

    /// Keeps a snapshot taken locally at an applied (so committed) index, and drops the
    /// entries more than `kept_behind_snapshot` behind it.
    pub fn compact(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        assert!(
            index <= self.hard_state.commit,
            "snapshot of an uncommitted index"
        );
        assert!(
            index >= self.snapshot.get_metadata().index,
            "snapshot older than the newest one"
        );
        assert_eq!(
            Some(snapshot.get_metadata().term),
            self.term_of(index),
            "snapshot term differs from the log's"
        );
        let drop_to = index.saturating_sub(self.kept_behind_snapshot);
        if drop_to > self.base_index {
            let term = self.term_of(drop_to).expect("drop_to is in the log");
            self.entries.drain(..(drop_to - self.base_index) as usize);
            self.base_index = drop_to;
            self.base_term = term;
        }
        self.snapshot = snapshot;
        self.push_snapshot_write(false);
    }
}

impl raft::Storage for GroupStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state.clone(),
            conf_state: self.conf_state.clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.base_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let start = (low - self.base_index - 1) as usize;
        let end = (high - self.base_index - 1) as usize;
        let mut out = self.entries[start..end].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index < self.base_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_of(index)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.base_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, _request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let meta = self.snapshot.get_metadata();
        if meta.index == 0 {
            // Nothing taken yet: every follower is caught up from the log (none was
            // compacted away either).
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let cs = meta.get_conf_state();
        let knows = [
            &cs.voters,
            &cs.learners,
            &cs.voters_outgoing,
            &cs.learners_next,
        ]
        .iter()
        .any(|ids| ids.contains(&to));
        if !knows {
            // raft-rs on `to` refuses a snapshot whose membership does not name it: a node
            // that joined after the newest snapshot needs a newer one. raft-rs asks again
            // on its next probe.
            self.snapshot_wanted.set(true);
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::support::entry;
    use raft::Storage;

    fn snapshot_at(index: u64, term: u64) -> Snapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = index;
        s.mut_metadata().term = term;
        s.mut_metadata().set_conf_state(ConfState {
            voters: vec![1, 2, 3],
            ..ConfState::default()
        });
        s.data = vec![1, 2, 3].into();
        s
    }

    #[test]
    fn a_snapshot_that_does_not_name_the_follower_is_not_sent_and_a_new_one_is_wanted() {
        let mut s = GroupStorage::new(&[]);
        s.append(&[entry(1, 1)]);
        s.set_commit(1);
        s.compact(snapshot_at(1, 1));
        assert!(!s.take_snapshot_wanted());
        assert!(s.snapshot(0, 2).is_ok(), "node 2 is a voter in it");
        assert!(matches!(
            s.snapshot(0, 4),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            ))
        ));
        assert!(s.take_snapshot_wanted());
        assert!(!s.take_snapshot_wanted(), "taken once");
    }

    // The tests below start from a joining node's empty image (log from index 1); a
    // founder's starts at `FOUNDING_INDEX`, which `a_founders_log_starts_after_the_founding_snapshot` checks.

    #[test]
    fn a_founders_log_starts_after_the_founding_snapshot() {
        let s = GroupStorage::new(&[1, 2, 3]);
        assert_eq!(s.first_index().unwrap(), FOUNDING_INDEX + 1);
        assert_eq!(s.term(FOUNDING_INDEX).unwrap(), FOUNDING_TERM);
        assert_eq!(
            s.snapshot(0, 2)
                .unwrap()
                .get_metadata()
                .get_conf_state()
                .voters,
            vec![1, 2, 3]
        );
        let joiner = GroupStorage::new(&[]);
        assert_eq!(joiner.first_index().unwrap(), 1);
        assert!(
            joiner.snapshot(0, 2).is_err(),
            "a joiner has nothing to send"
        );
    }

    #[test]
    fn an_uncommitted_suffix_is_replaced_by_a_new_leaders_entries() {
        let mut s = GroupStorage::new(&[]);
        s.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        s.set_commit(1);
        s.append(&[entry(2, 2)]);
        assert_eq!(s.last_index().unwrap(), 2);
        assert_eq!(s.term(2).unwrap(), 2);
        assert_eq!(s.term(1).unwrap(), 1);
    }

    #[test]
    #[should_panic(expected = "overwrite the committed log")]
    fn the_committed_log_is_never_overwritten() {
        let mut s = GroupStorage::new(&[]);
        s.append(&[entry(1, 1), entry(2, 1)]);
        s.set_commit(2);
        s.append(&[entry(2, 2)]);
    }

    #[test]
    fn compaction_keeps_a_tail_behind_the_snapshot_and_reports_older_entries_compacted() {
        let mut s = GroupStorage::new(&[]);
        let n = ENTRIES_KEPT_BEHIND_SNAPSHOT + 100;
        let all: Vec<Entry> = (1..=n).map(|i| entry(i, 1)).collect();
        s.append(&all);
        s.set_commit(n);
        s.compact(snapshot_at(n, 1));
        assert_eq!(
            s.first_index().unwrap(),
            n - ENTRIES_KEPT_BEHIND_SNAPSHOT + 1
        );
        assert!(matches!(
            s.entries(1, 3, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        let tail = s
            .entries(n - 1, n + 1, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(tail.len(), 2);
        assert_eq!(s.snapshot(0, 2).unwrap().get_metadata().index, n);
    }

    #[test]
    fn an_installed_snapshot_replaces_the_log() {
        let mut s = GroupStorage::new(&[]);
        s.append(&[entry(1, 1)]);
        s.install_snapshot(snapshot_at(10, 3));
        assert_eq!(s.first_index().unwrap(), 11);
        assert_eq!(s.last_index().unwrap(), 10);
        assert_eq!(s.term(10).unwrap(), 3);
        assert_eq!(s.hard_state().commit, 10);
        s.append(&[entry(11, 3)]);
        assert_eq!(s.last_index().unwrap(), 11);
    }
}
