//! Read positions of the partitions a shard owns, persisted in one compacted log per slot
//! (`logs/cursors/<slot>`), outside the topic namespace.
//!
//! A commit that moves a cursor appends one small record to its slot's log through the
//! shard journal and is answered once that record is durable (group commit: many devices'
//! commits share one fdatasync). When a slot's log holds far more records than live keys,
//! its current state is appended again as a snapshot and everything before the snapshot is
//! dropped; replaying any suffix that starts at a snapshot gives the same map, because later
//! records win.

use super::mesh::StreamError;
use crate::messaging::cursor::{self, CursorKey, CursorMap};
use boltq_io::record::Record;
use boltq_io::store::LogRef;
use boltq_io::Store;
use boltq_shards::{owner_of_slot, partition_slot, ShardId, SLOTS};
use bytes::Bytes;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

struct Slot {
    log: LogRef,
    map: RefCell<CursorMap>,
    /// Records in the log since its last snapshot began.
    records: Cell<u64>,
    compacting: Cell<bool>,
}

pub struct CursorStore {
    slots: RefCell<HashMap<u16, Rc<Slot>>>,
}

fn log_name(slot: u16) -> String {
    format!("cursors/{slot:03}")
}

impl CursorStore {
    /// Replays the cursor logs of every slot this shard owns (startup).
    pub async fn load(
        store: &Store,
        data_dir: &Path,
        shard: ShardId,
        shard_count: usize,
    ) -> Result<CursorStore, String> {
        let cs = CursorStore {
            slots: RefCell::new(HashMap::new()),
        };
        for slot in 0..SLOTS {
            if owner_of_slot(slot, shard_count) != shard {
                continue;
            }
            let dir = boltq_io::store::logs_root(data_dir).join(log_name(slot));
            if !dir.exists() {
                continue; // startup only: a stat per owned slot
            }
            let s = cs.open(store, slot).await.map_err(|e| e.to_string())?;
            replay(store, &s).await?;
        }
        Ok(cs)
    }

    async fn open(&self, store: &Store, slot: u16) -> Result<Rc<Slot>, StreamError> {
        if let Some(s) = self.slots.borrow().get(&slot) {
            return Ok(Rc::clone(s));
        }
        let log = store.open_log(&log_name(slot)).await.map_err(|e| {
            log::error!("[stream] opening cursor log {slot}: {e}");
            StreamError::Internal("could not open the cursor store".into())
        })?;
        let mut slots = self.slots.borrow_mut();
        let s = slots.entry(slot).or_insert_with(|| {
            Rc::new(Slot {
                log,
                map: RefCell::new(CursorMap::default()),
                records: Cell::new(0),
                compacting: Cell::new(false),
            })
        });
        Ok(Rc::clone(s))
    }

    pub fn get(&self, key: &CursorKey) -> Option<u64> {
        let slot = partition_slot(key.topic(), key.partition());
        self.slots.borrow().get(&slot)?.map.borrow().get(key)
    }

    pub fn keys(&self) -> usize {
        self.slots
            .borrow()
            .values()
            .map(|s| s.map.borrow().len())
            .sum()
    }

    /// Every cursor of one partition's group: (member, position).
    pub fn members(&self, topic: &str, partition: u32, group: &str) -> Vec<(String, u64)> {
        let slot = partition_slot(topic, partition);
        match self.slots.borrow().get(&slot) {
            Some(s) => s
                .map
                .borrow()
                .members(topic, partition, group)
                .map(|(m, seq)| (m.to_string(), seq))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Moves a cursor forward (never back; clamped to `next_seq`) and waits until the move
    /// is durable. A commit that changes nothing is answered at once.
    pub async fn commit(
        &self,
        store: &Store,
        key: CursorKey,
        seq: u64,
        next_seq: u64,
    ) -> Result<(), StreamError> {
        let slot = self
            .open(store, partition_slot(key.topic(), key.partition()))
            .await?;
        let commit = slot
            .map
            .borrow_mut()
            .commit(&key, seq, next_seq)
            .map_err(|e| StreamError::Invalid(e.to_string()))?;
        if let cursor::Commit::Unchanged { .. } = commit {
            return Ok(());
        }
        append_durable(store, &slot, &key).await?;
        self.maybe_compact(store, &slot).await;
        Ok(())
    }

    async fn maybe_compact(&self, store: &Store, slot: &Rc<Slot>) {
        let live = slot.map.borrow().len();
        if slot.compacting.get() || !cursor::should_compact(slot.records.get(), live) {
            return;
        }
        slot.compacting.set(true);
        let result = compact(store, slot).await;
        slot.compacting.set(false);
        if let Err(e) = result {
            log::warn!("[stream] cursor compaction: {e}; the log keeps everything meanwhile");
        }
    }
}

/// Appends `key`'s position as it is when the journal has room (waiting for it, if
/// needed), and waits as `storage.fsync` says; returns the record's journal position (None:
/// the cursor is gone). The position is read after the wait: replay keeps a key's last
/// record, and a commit (or a compaction's copy) that waited behind a later commit of the
/// same key would otherwise land after it with an older position.
async fn append_durable(
    store: &Store,
    slot: &Slot,
    key: &CursorKey,
) -> Result<Option<u64>, StreamError> {
    store
        .wait_for_room()
        .await
        .map_err(|e| StreamError::Internal(format!("cursor store: {e}")))?;
    let Some(seq) = slot.map.borrow().get(key) else {
        return Ok(None);
    };
    let mut body = Vec::new();
    cursor::encode_commit(key, seq, &mut body);
    let mut rec = Record {
        seq: 0,
        timestamp_ns: 0,
        flags: 0,
        epoch: 0,
        key: Bytes::new(),
        headers: Vec::new(),
        payload: Bytes::from(body),
    };
    let appended = store
        .append(&slot.log, &mut rec, boltq_io::store::now_ns())
        .map_err(|e| StreamError::Internal(format!("cursor store: {e}")))?;
    slot.records.set(slot.records.get() + 1);
    store
        .wait_durable(appended.lsn)
        .await
        .map_err(|e| StreamError::Internal(format!("cursor store: {e}")))?;
    Ok(Some(appended.lsn))
}

/// Appends the slot's whole map again and drops the log before it once that is
/// fdatasync'ed, whatever the policy: under `interval` and `never` `wait_durable` returns at
/// once, and a crash after the truncation but before the copy reached the disk would lose
/// every cursor of the slot.
async fn compact(store: &Store, slot: &Slot) -> Result<(), StreamError> {
    let keys: Vec<CursorKey> = slot
        .map
        .borrow()
        .snapshot()
        .map(|(k, _)| k.clone())
        .collect();
    let start = slot.log.next_seq();
    slot.records.set(0);
    let mut last = None;
    for key in keys {
        last = append_durable(store, slot, &key).await?.or(last);
    }
    if let Some(lsn) = last {
        store
            .wait_synced(lsn)
            .await
            .map_err(|e| StreamError::Internal(format!("cursor compaction: {e}")))?;
        store
            .truncate_before(&slot.log, start)
            .await
            .map_err(|e| StreamError::Internal(format!("cursor compaction: {e}")))?;
    }
    Ok(())
}

async fn replay(store: &Store, slot: &Slot) -> Result<(), String> {
    let mut from = 0;
    loop {
        let records = store
            .read(&slot.log, from, 4096, 4 * 1024 * 1024)
            .await
            .map_err(|e| format!("reading cursor log {}: {e}", slot.log.name()))?;
        let Some(last) = records.last() else {
            return Ok(());
        };
        from = last.seq + 1;
        let mut map = slot.map.borrow_mut();
        for r in &records {
            match cursor::decode_record(&r.payload).and_then(|rec| map.apply(&rec)) {
                Ok(()) => {}
                // A record the codec refuses was never written by it: skip it, loudly.
                Err(e) => log::error!(
                    "[stream] cursor log {} record {}: {e}; skipped",
                    slot.log.name(),
                    r.seq
                ),
            }
        }
        slot.records.set(slot.records.get() + records.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::{open_store, TempDir};
    use boltq_io::{AppendError, Durability, StoreConfig};
    use std::time::Duration;

    /// Appends to another log until the journal refuses: its backlog is at the limit.
    fn fill_the_journal(store: &Store, other: &boltq_io::LogRef) {
        loop {
            let mut r = Record {
                payload: vec![0x22; 64 * 1024].into(),
                ..Record::default()
            };
            match store.append(other, &mut r, 1) {
                Ok(_) => {}
                Err(AppendError::Backlogged { .. }) => return,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A commit that meets a journal behind its disk waits for room instead of failing
    /// (until 2026-12-07 the device was told "cursor store: storage is behind"), and one
    /// that waited behind a later commit of the same cursor does not land after it with
    /// its older position: after a restart the cursor is the newest one committed.
    #[test]
    fn a_commit_that_waits_for_room_never_writes_an_older_position_after_a_newer_one() {
        let tmp = TempDir::new("cursorroom");
        let mut c = StoreConfig::new(tmp.path());
        c.durability = Durability::Never;
        c.journal_file_bytes = 16 * 1024 * 1024;
        c.journal_backlog_bytes_max = 1024 * 1024;
        boltq_shards::block_on("cursor-room", move || {
            Box::pin(async move {
                let store = open_store(&c).await;
                let other = store.open_log("other").await.unwrap();
                let cursors = Rc::new(CursorStore::load(&store, &c.data_dir, 0, 1).await.unwrap());
                let key = CursorKey::new("t", 0, "g", "m").unwrap();
                cursors
                    .commit(&store, key.clone(), 1, 10_000)
                    .await
                    .unwrap();
                // The older commit starts first, meets a full journal and waits; the newer
                // one is made the moment there is room, and the journal is filled again
                // before the older one looks. Tries until it goes that way (the two waits
                // race; the older one polls every millisecond, this every 100 µs).
                let mut went_that_way = false;
                for round in 0..20u64 {
                    let (older, newer) = (10 + 2 * round, 11 + 2 * round);
                    fill_the_journal(&store, &other);
                    let done = Rc::new(std::cell::Cell::new(false));
                    let task = {
                        let (store, cursors, key, done) = (
                            Rc::clone(&store),
                            Rc::clone(&cursors),
                            key.clone(),
                            Rc::clone(&done),
                        );
                        boltq_shards::spawn(async move {
                            cursors.commit(&store, key, older, 10_000).await.unwrap();
                            done.set(true);
                        })
                    };
                    while store.check_room().is_err() {
                        boltq_shards::sleep(Duration::from_micros(100)).await;
                    }
                    if done.get() {
                        continue; // the older one went first: nothing to show this round
                    }
                    cursors
                        .commit(&store, key.clone(), newer, 10_000)
                        .await
                        .unwrap();
                    fill_the_journal(&store, &other);
                    task.await;
                    assert_eq!(cursors.get(&key), Some(newer));
                    went_that_way = true;
                    break;
                }
                assert!(
                    went_that_way,
                    "the newer commit never went first in 20 tries"
                );
                let newest = cursors.get(&key).unwrap();
                store.close().await.unwrap();
                drop(cursors);
                let store = open_store(&c).await;
                let back = CursorStore::load(&store, &c.data_dir, 0, 1).await.unwrap();
                assert_eq!(
                    back.get(&key),
                    Some(newest),
                    "the log replays an older position"
                );
                store.close().await.unwrap();
            })
        })
        .unwrap();
    }

    /// Issue 13 item 4: compaction dropped the old records as soon as the copy was buffered
    /// under `interval` and `never`.
    #[test]
    fn compaction_truncates_only_after_the_copy_is_synced_under_every_policy() {
        for durability in [
            Durability::Never,
            Durability::Interval {
                interval_ms: 10_000,
            },
        ] {
            let tmp = TempDir::new("cursorsync");
            let dir = tmp.path().to_path_buf();
            boltq_shards::block_on("cursor-test", move || {
                Box::pin(async move {
                    let mut c = StoreConfig::new(&dir);
                    c.durability = durability;
                    c.journal_file_bytes = 4 * 1024 * 1024;
                    boltq_io::probe::warm_iopoll(&dir).await.unwrap();
                    boltq_io::recovery::recover(&dir, &c.log).await.unwrap();
                    let store = Store::open(c, 0).await.unwrap();
                    let cursors = CursorStore::load(&store, &dir, 0, 1).await.unwrap();
                    let key = CursorKey::new("t", 0, "g", "m").unwrap();
                    let mut compactions = 0;
                    for seq in 1..=2_000u64 {
                        cursors
                            .commit(&store, key.clone(), seq, 10_000)
                            .await
                            .unwrap();
                        let slot = partition_slot("t", 0);
                        let records = cursors.slots.borrow()[&slot].records.get();
                        if seq > 1 && records == 1 {
                            // This commit compacted (its copy is the slot's only record
                            // since); nothing else appended after it.
                            compactions += 1;
                            assert!(
                                store.journal().synced() >= store.journal().appended(),
                                "{durability:?}: truncated before the copy was synced"
                            );
                        }
                    }
                    assert!(compactions > 0, "the commits compacted the log");
                    store.close().await.unwrap();
                })
            })
            .unwrap();
        }
    }
}
