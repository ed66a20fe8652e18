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

use super::image_log::{self, Recovered, Written};
use boltq_io::{LogRef, Record, Store};
use std::rc::Rc;

pub struct GroupLog {
    store: Rc<Store>,
    log: LogRef,
    /// (journal position of the records that allow it, drop records before this seq).
    cuts: Vec<(u64, u64)>,
    /// Records before this seq may go (their snapshot is durable).
    allowed_before: u64,
}

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
        let group_log = GroupLog {
            store: Rc::clone(store),
            log,
            cuts: Vec::new(),
            allowed_before: 0,
        };
        Ok((group_log, recovered))
    }

    /// Appends one `collect`'s records. Returns the journal position that must be durable
    /// before the group is told `synced` (None: nothing was written).
    pub fn append(&mut self, written: Written) -> Result<Option<u64>, String> {
        let mut lsn = None;
        for r in written.records {
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
            lsn = Some(appended.lsn);
        }
        if let (Some(lsn), Some(before)) = (lsn, written.truncate_before) {
            self.cuts.push((lsn, before));
        }
        Ok(lsn)
    }

    /// Appends records as a background writer does (`Store::wait_for_background_room`
    /// before each): for a founding state, which may be far larger than the journal takes
    /// in one round. Returns the journal position of the last record.
    pub async fn append_paced(&mut self, written: Written) -> Result<Option<u64>, String> {
        let mut lsn = None;
        let truncate_before = written.truncate_before;
        for r in written.records {
            self.store
                .wait_for_background_room(r.payload.len() as u64)
                .await
                .map_err(|e| format!("append to {}: {e}", self.log.name()))?;
            let one = Written {
                records: vec![r],
                truncate_before: None,
            };
            lsn = self.append(one)?.or(lsn);
        }
        if let (Some(lsn), Some(before)) = (lsn, truncate_before) {
            self.cuts.push((lsn, before));
        }
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
        if self.allowed_before <= self.log.first_seq() {
            return Ok(());
        }
        self.store
            .truncate_before(&self.log, self.allowed_before)
            .await
            .map_err(|e| format!("truncate {}: {e}", self.log.name()))
    }

    pub fn first_seq(&self) -> u64 {
        self.log.first_seq()
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
}
