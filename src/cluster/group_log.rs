//! A group's raft log in the shard's store (design §9: entries and HardState are records of
//! the shard journal, one group commit per round for all groups of the shard): opening it
//! replays its records into the group's image; each `collect`'s records are appended; the
//! front is dropped once the snapshot that allows it is durable.
//!
//! Durability is the caller's round: append every group's records, wait for the journal
//! to cover the highest position returned (`Store::wait_durable`), then hand the group
//! `synced` and call `drop_covered_front`. An append error means the store has failed and
//! accepts nothing more; the caller must stop the group (its unsynced messages are never
//! sent, so nothing it did not persist is promised to a peer).

use super::image_log::{self, LogRecord, Recovered, Written};
use boltq_io::{LogRef, Record, Store};
use std::rc::Rc;

pub struct GroupLog {
    store: Rc<Store>,
    log: LogRef,
    /// (journal position of the records that allow it, drop records before this seq).
    cuts: Vec<(u64, u64)>,
    /// Records before this seq may go (their snapshot is durable).
    allowed_before: u64,
    /// The log's first seq as last seen here: what was dropped (whole segments only, so
    /// it can stay below `allowed_before` until the next segment is complete).
    dropped_before: u64,
}

/// A round's records of at least this many bytes (a snapshot's parts) are appended as a
/// background writer's (`append_round`); below, at once, as every ordinary round.
pub const ROUND_BYTES_PACED_MIN: usize = 4 * 1024 * 1024;

/// The store's log name of slot `slot`'s group.
pub fn log_name(slot: u16) -> String {
    format!("cluster/slot-{slot:03}/raft")
}

impl GroupLog {
    /// Opens slot `slot`'s raft log and replays it (`voters`: the membership of a group
    /// that has never written).
    pub async fn open(
        store: &Rc<Store>,
        slot: u16,
        voters: &[u64],
    ) -> Result<(GroupLog, Recovered), String> {
        let name = log_name(slot);
        let log = store
            .open_log(&name)
            .await
            .map_err(|e| format!("open {name}: {e}"))?;
        let mut records = Vec::new();
        let mut from = log.first_seq();
        loop {
            let batch = store
                .read(&log, from, 4096, 64 * 1024 * 1024)
                .await
                .map_err(|e| format!("read {name}: {e}"))?;
            let Some(last) = batch.last() else { break };
            from = last.seq + 1;
            records.extend(batch.into_iter().map(|r| (r.seq, r.payload)));
        }
        let recovered = image_log::replay(records, log.next_seq(), voters)
            .map_err(|e| format!("{name}: {e}"))?;
        let dropped_before = log.first_seq();
        let group_log = GroupLog {
            store: Rc::clone(store),
            log,
            cuts: Vec::new(),
            allowed_before: 0,
            dropped_before,
        };
        Ok((group_log, recovered))
    }

    /// Appends one `collect`'s records. Returns the journal position that must be durable
    /// before the group is told `synced` (None: nothing was written).
    pub fn append(&mut self, written: Written) -> Result<Option<u64>, String> {
        let mut lsn = None;
        for r in written.records {
            lsn = Some(self.append_record(r)?);
        }
        self.note_cut(lsn, written.truncate_before);
        Ok(lsn)
    }

    fn append_record(&mut self, r: LogRecord) -> Result<u64, String> {
        let mut record = Record {
            payload: r.payload.into(),
            ..Record::default()
        };
        let appended = self
            .store
            .append(&self.log, &mut record, boltq_io::store::now_ns())
            .map_err(|e| format!("append to {}: {e}", self.log.name()))?;
        // The writer numbered its records as the log does; a difference would make
        // every `replay_from` point at the wrong record.
        assert_eq!(appended.seq, r.seq, "raft log numbering drifted");
        Ok(appended.lsn)
    }

    /// Records before `before` may go once the record at `lsn` is durable.
    fn note_cut(&mut self, lsn: Option<u64>, before: Option<u64>) {
        if let (Some(lsn), Some(before)) = (lsn, before) {
            self.cuts.push((lsn, before));
        }
    }

    /// Appends one round's records. A round that carries a snapshot (taken here of a large
    /// slot, or installed from the leader) may hold more than the journal takes at once
    /// (`storage.journal_backlog_bytes_max`): its records then wait for room as a
    /// background writer's do, which holds the node's loop while they are written (seconds
    /// for a gigabyte), rather than failing the round — a refused append stops the node.
    /// An ordinary round's records wait for room too, if the journal has none: the
    /// shard's other writers (the messaging plane's copies of partitions, filled from peers
    /// in bursts) may hold its backlog at the limit.
    pub async fn append_round(&mut self, written: Written) -> Result<Option<u64>, String> {
        let bytes: usize = written.records.iter().map(|r| r.payload.len()).sum();
        let paced = bytes >= ROUND_BYTES_PACED_MIN;
        self.append_waiting(written, paced).await
    }

    /// Appends records as a background writer does (`Store::wait_for_background_room`
    /// before each): for a founding state, which may be far larger than the journal takes
    /// in one round. Returns the journal position of the last record.
    pub async fn append_paced(&mut self, written: Written) -> Result<Option<u64>, String> {
        self.append_waiting(written, true).await
    }

    /// Appends each record once the journal has room for it: in the background share
    /// (`paced`), or below its limit.
    async fn append_waiting(
        &mut self,
        written: Written,
        paced: bool,
    ) -> Result<Option<u64>, String> {
        let mut lsn = None;
        for r in written.records {
            let room = match paced {
                true => {
                    self.store
                        .wait_for_background_room(r.payload.len() as u64)
                        .await
                }
                false => self.store.wait_for_room().await,
            };
            room.map_err(|e| format!("append to {}: {e}", self.log.name()))?;
            // Nothing awaits between the wait and the append: the room is still there.
            lsn = Some(self.append_record(r)?);
        }
        self.note_cut(lsn, written.truncate_before);
        Ok(lsn)
    }

    /// Drops the front the durable snapshots allow: whole segments the store has
    /// checkpointed; what is not yet goes on a later call, so calling after each round
    /// keeps the log about one snapshot's reach long.
    pub async fn drop_covered_front(&mut self) -> Result<(), String> {
        let durable = self.store.journal().durable();
        for (_, before) in self.cuts.iter().filter(|(lsn, _)| *lsn <= durable) {
            self.allowed_before = self.allowed_before.max(*before);
        }
        self.cuts.retain(|(lsn, _)| *lsn > durable);
        self.dropped_before = self.dropped_before.max(self.log.first_seq());
        if self.allowed_before <= self.dropped_before {
            return Ok(());
        }
        self.store
            .truncate_before(&self.log, self.allowed_before)
            .await
            .map_err(|e| format!("truncate {}: {e}", self.log.name()))?;
        self.dropped_before = self.log.first_seq();
        Ok(())
    }

    pub fn first_seq(&self) -> u64 {
        self.log.first_seq()
    }

    /// Whether `drop_covered_front` may have anything to do: a cut waits for its record to
    /// be durable, or an allowed front is not dropped yet. The node asks every round, of
    /// every slot's log, so this stays a pair of field reads.
    pub fn has_front_to_drop(&self) -> bool {
        !self.cuts.is_empty() || self.allowed_before > self.dropped_before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::image_log::tests::{assert_same, VOTERS};
    use crate::cluster::storage::GroupStorage;
    use crate::cluster::tests::support::{open_store, run, store_config};
    use boltq_io::testutil::{Rng, TempDir};
    use raft::prelude::{ConfState, Entry, Snapshot};

    /// What a busy group writes: entries in small batches, commits following them,
    /// snapshots every 100 entries that keep 256 entries behind them (so a replay starts
    /// far back, several segments before the end), and now and then a received snapshot.
    fn busy(storage: &mut GroupStorage, term: &mut u64, rng: &mut Rng) {
        let last = raft::Storage::last_index(storage).unwrap();
        let n = 1 + rng.below(5);
        let new: Vec<Entry> = (last + 1..=last + n)
            .map(|index| Entry {
                index,
                term: *term,
                data: vec![index as u8; rng.below(60) as usize].into(),
                ..Entry::default()
            })
            .collect();
        storage.append(&new);
        let mut hs = storage.hard_state().clone();
        hs.term = *term;
        hs.commit = last + n - rng.below(2);
        storage.set_hard_state(hs);
        let commit = storage.hard_state().commit;
        if commit / 100 > storage.newest_snapshot().get_metadata().index / 100 {
            storage.compact(snapshot_at(commit, *term));
        } else if rng.below(300) == 0 {
            *term += 1;
            storage.install_snapshot(snapshot_at(last + n + 10, *term));
        }
    }

    fn snapshot_at(index: u64, term: u64) -> Snapshot {
        let mut s = Snapshot {
            data: vec![index as u8; 500].into(),
            ..Snapshot::default()
        };
        s.mut_metadata().index = index;
        s.mut_metadata().term = term;
        s.mut_metadata().set_conf_state(ConfState {
            voters: VOTERS.to_vec(),
            ..ConfState::default()
        });
        s
    }

    #[test]
    fn the_image_survives_restarts_of_the_store_and_the_front_is_dropped() {
        let dir = TempDir::new("group-log");
        let c = store_config(dir.path(), 4096);
        run("group-log-test", move || async move {
            let mut rng = Rng::new(5);
            let mut store = open_store(&c).await;
            let (mut log, recovered) = GroupLog::open(&store, 7, &VOTERS).await.unwrap();
            let Recovered {
                mut storage,
                log: mut writer,
            } = recovered;
            let mut term = storage.hard_state().term;
            let mut dropped_front = false;
            for round in 0..8 {
                for step in 0..400 {
                    busy(&mut storage, &mut term, &mut rng);
                    if let Some(lsn) = log.append(writer.write(storage.take_writes())).unwrap() {
                        // Some rounds crash with writes not yet durable.
                        if step < 390 || round % 2 == 0 {
                            store.wait_durable(lsn).await.unwrap();
                        }
                    }
                    log.drop_covered_front().await.unwrap();
                }
                if round % 2 == 0 {
                    store.checkpoint().await.unwrap();
                    log.drop_covered_front().await.unwrap();
                }
                // A crash: nothing more is written; the next process replays.
                store.halt().await;
                drop(log);
                drop(store);
                store = open_store(&c).await;
                let (reopened, recovered) = GroupLog::open(&store, 7, &VOTERS).await.unwrap();
                dropped_front |= reopened.first_seq() > 1;
                if round % 2 == 0 {
                    assert_same(&recovered.storage, &storage, &format!("round {round}"));
                }
                log = reopened;
                storage = recovered.storage;
                writer = recovered.log;
                term = term.max(storage.hard_state().term);
            }
            assert!(dropped_front, "no record was ever dropped");
        });
    }

    /// A round whose snapshot outweighs the journal's backlog limit is written, waiting for
    /// room, instead of failing (a failed round stops the node): a slot of a gigabyte once
    /// stopped the node that took or installed its snapshot. The same records appended at
    /// once are refused.
    #[test]
    fn a_round_larger_than_the_journal_takes_waits_for_room() {
        let dir = TempDir::new("group-log-large");
        let mut c = store_config(dir.path(), 64 * 1024 * 1024);
        c.journal_backlog_bytes_max = 2 * 1024 * 1024;
        run("group-log-large", move || async move {
            let store = open_store(&c).await;
            let (mut log, recovered) = GroupLog::open(&store, 9, &[1]).await.unwrap();
            let Recovered {
                mut storage,
                log: mut writer,
            } = recovered;
            storage.found_with(vec![0x5A; 12 * 1024 * 1024]);
            let written = writer.write(storage.take_writes());
            let at_once = Written {
                records: written.records.clone(),
                truncate_before: None,
            };
            let lsn = log.append_round(written).await.unwrap().unwrap();
            store.wait_synced(lsn).await.unwrap();
            store.halt().await;
            drop(log);
            drop(store);
            let store = open_store(&c).await;
            let (_, back) = GroupLog::open(&store, 9, &[1]).await.unwrap();
            assert_eq!(back.storage.newest_snapshot().data.len(), 12 * 1024 * 1024);
            // At once, the same records overrun the backlog limit.
            let (mut other, _) = GroupLog::open(&store, 10, &[1]).await.unwrap();
            let renumbered = Written {
                records: at_once
                    .records
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut r)| {
                        r.seq = other.log.next_seq() + i as u64;
                        r
                    })
                    .collect(),
                truncate_before: None,
            };
            assert!(other.append(renumbered).is_err());
        });
    }

    /// An ordinary round that finds the journal's backlog at its limit, filled by another
    /// writer of the shard, waits for room and is written: a refused round stops the node.
    #[test]
    fn a_small_round_meeting_a_full_journal_waits_for_room() {
        let dir = TempDir::new("group-log-full");
        let mut c = store_config(dir.path(), 64 * 1024 * 1024);
        c.journal_backlog_bytes_max = 1024 * 1024;
        run("group-log-full", move || async move {
            let store = open_store(&c).await;
            let (mut log, recovered) = GroupLog::open(&store, 11, &[1]).await.unwrap();
            let Recovered {
                mut storage,
                log: mut writer,
            } = recovered;
            // Another writer fills the backlog; nothing yields, so none of it is durable.
            let other = store.open_log("other").await.unwrap();
            let filled = std::iter::repeat(()).take_while(|()| {
                let mut r = Record {
                    payload: vec![0x11; 64 * 1024].into(),
                    ..Record::default()
                };
                store.append(&other, &mut r, 1).is_ok()
            });
            assert!(filled.count() > 0);
            assert!(matches!(
                store.check_room(),
                Err(boltq_io::AppendError::Backlogged { .. })
            ));
            let mut term = storage.hard_state().term;
            busy(&mut storage, &mut term, &mut Rng::new(11));
            let written = writer.write(storage.take_writes());
            assert!(!written.records.is_empty());
            let lsn = log.append_round(written).await.unwrap().unwrap();
            store.wait_synced(lsn).await.unwrap();
            store.halt().await;
            drop(log);
            drop(store);
            let store = open_store(&c).await;
            let (_, back) = GroupLog::open(&store, 11, &[1]).await.unwrap();
            assert_same(
                &back.storage,
                &storage,
                "after a round that waited for room",
            );
        });
    }
}
