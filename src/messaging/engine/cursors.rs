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
        let stored = match commit {
            cursor::Commit::Unchanged { .. } => return Ok(()),
            cursor::Commit::Stored { seq, .. } => seq,
        };
        let mut body = Vec::new();
        cursor::encode_commit(&key, stored, &mut body);
        append_durable(store, &slot, body).await?;
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

/// Appends one record and waits as `storage.fsync` says; returns its journal position.
async fn append_durable(store: &Store, slot: &Slot, body: Vec<u8>) -> Result<u64, StreamError> {
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
    Ok(appended.lsn)
}

/// Appends the slot's whole map again and drops the log before it once that is
/// fdatasync'ed, whatever the policy: under `interval` and `never` `wait_durable` returns at
/// once, and a crash after the truncation but before the copy reached the disk would lose
/// every cursor of the slot.
async fn compact(store: &Store, slot: &Slot) -> Result<(), StreamError> {
    let snapshot: Vec<(CursorKey, u64)> = slot
        .map
        .borrow()
        .snapshot()
        .map(|(k, v)| (k.clone(), v))
        .collect();
    let start = slot.log.next_seq();
    slot.records.set(0);
    let mut last = None;
    for (key, seq) in snapshot {
        let mut body = Vec::new();
        cursor::encode_commit(&key, seq, &mut body);
        last = Some(append_durable(store, slot, body).await?);
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
    use boltq_io::testutil::TempDir;
    use boltq_io::{Durability, StoreConfig};

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
