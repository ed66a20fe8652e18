//! A partition this shard owns: opened on first use, its appends held back until the
//! journal made them durable, then published to readers and pushed to watching shards.

use super::mesh::{StreamError, StreamMsg};
use super::mirror::PartitionKey;
use super::Engine;
use crate::messaging::topic;
use boltq_io::record::Record;
use boltq_io::store::{AppendError, LogRef};
use boltq_shards::ShardId;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

/// A partition this shard owns and has open.
pub(super) struct Owned {
    pub(super) log: LogRef,
    /// One past the newest durable record: what readers may see.
    pub(super) published_next: Cell<u64>,
    /// Appended, not yet durable, in sequence order.
    pub(super) pending: RefCell<VecDeque<Record>>,
}

impl Engine {
    /// The owned partition, opened on first use.
    pub(super) async fn open_owned(&self, key: &PartitionKey) -> Result<Rc<Owned>, StreamError> {
        if let Some(o) = self.owned.borrow().get(key) {
            return Ok(Rc::clone(o));
        }
        debug_assert_eq!(self.owner(&key.0, key.1), self.shard.id());
        let name = topic::log_name(&key.0, key.1);
        let log = self
            .store
            .open_log_with(&name, self.cfg.log.clone())
            .await
            .map_err(|e| {
                log::error!("[stream] opening {name}: {e}");
                StreamError::Internal("could not open the partition".into())
            })?;
        let mut owned = self.owned.borrow_mut();
        // Opened concurrently by another task: keep the first (it may hold pending records).
        let o = owned.entry(key.clone()).or_insert_with(|| {
            Rc::new(Owned {
                published_next: Cell::new(log.next_seq()),
                log,
                pending: RefCell::new(VecDeque::new()),
            })
        });
        Ok(Rc::clone(o))
    }

    pub(super) async fn append_record(
        &self,
        part: &Rc<Owned>,
        rec: &mut Record,
    ) -> Result<u64, StreamError> {
        // A journal behind its disk is waited for, not refused: a refused pointer append
        // was a member's inbox entry lost behind an acknowledged group send.
        let at_ns = rec.timestamp_ns;
        let appended = match self.store.append_when_room(&part.log, rec, at_ns).await {
            Ok(a) => a,
            Err(e @ (AppendError::Encode(_) | AppendError::TooLargeForJournal { .. })) => {
                return Err(StreamError::Invalid(e.to_string()))
            }
            Err(e) => {
                log::error!("[stream] append: {e}");
                return Err(StreamError::Internal("storage failed".into()));
            }
        };
        part.pending.borrow_mut().push_back(rec.clone());
        let waited = if self.cfg.sync_always {
            self.store.wait_synced(appended.lsn).await
        } else {
            self.store.wait_durable(appended.lsn).await
        };
        if let Err(e) = waited {
            log::error!("[stream] waiting for durability: {e}");
            return Err(StreamError::Internal("storage failed".into()));
        }
        Ok(appended.seq)
    }

    /// Makes the pending records up to `durable_seq` visible and pushes them to the watching
    /// shards. Pending records are in sequence order, which is also journal order, so once
    /// `durable_seq` is durable every record before it is too.
    pub(super) fn publish(&self, key: &PartitionKey, part: &Owned, durable_seq: u64) {
        let mut batch = Vec::new();
        {
            let mut pending = part.pending.borrow_mut();
            while pending.front().is_some_and(|r| r.seq <= durable_seq) {
                batch.push(pending.pop_front().expect("non-empty"));
            }
        }
        self.push_tail(key, part, batch);
    }

    fn push_tail(&self, key: &PartitionKey, part: &Owned, batch: Vec<Record>) {
        let Some(last) = batch.last() else {
            return;
        };
        part.published_next.set(last.seq + 1);
        let first_seq = part.log.first_seq();
        let watchers: Vec<ShardId> = self
            .watchers
            .borrow()
            .get(key)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for dest in watchers {
            let msg = StreamMsg::Tail {
                topic: key.0.clone(),
                partition: key.1,
                records: batch.clone(),
                first_seq,
            };
            if self.shard.send(dest, msg).is_err() {
                // The mirror there misses these; its subscribers notice the hole (the next
                // push does not continue the cache) and read them from here.
                log::warn!("[stream] outbox to shard {dest} full; its subscribers will re-read");
            }
        }
    }
}
