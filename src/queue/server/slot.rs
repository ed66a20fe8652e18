//! A slot on its owner shard: its broker and, in disk mode, its command log and snapshot
//! log. Opening a slot recovers it (newest snapshot, then the commands after it); a slot
//! whose log has grown enough is snapshotted and the log before the snapshot dropped.

use super::plane::Plane;
use super::{snapshot, wal};
use crate::queue::broker::{Broker, Command};
use boltq_io::{LogRef, Store};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// A slot whose single-node data is being carried into its raft group.
pub(super) struct Carried {
    /// Taken when the group is founded with it.
    broker: Option<Broker>,
    logs: SlotLogs,
}

pub(super) struct SlotState {
    pub(super) broker: Broker,
    /// Command log and snapshot log; `None` in memory mode.
    pub(super) logs: Option<SlotLogs>,
}

pub(super) struct SlotLogs {
    pub(super) wal: LogRef,
    pub(super) snap: LogRef,
    /// Command bytes logged since the last snapshot.
    pub(super) bytes_since_snapshot: u64,
    pub(super) last_snapshot_bytes: u64,
    pub(super) last_snapshot_number: u64,
    pub(super) snapshotting: bool,
}

impl SlotLogs {
    /// Compaction rule: snapshot once the commands since the last snapshot outweigh both the
    /// threshold and the last snapshot itself, so rewriting the state costs at most about as
    /// much as the commands it replaces (amortised), and the log stays within about twice
    /// the state plus the threshold.
    fn snapshot_due(&self, threshold_bytes: u64) -> bool {
        threshold_bytes > 0
            && !self.snapshotting
            && self.bytes_since_snapshot > threshold_bytes.max(self.last_snapshot_bytes)
    }
}

/// Whether log `name` was ever written here (open in the store, or on disk), without
/// opening it: opening creates it.
pub(super) fn log_written(store: &Store, name: &str) -> bool {
    store.open_log_names().iter().any(|n| n == name)
        || boltq_io::store::logs_root(&store.config().data_dir)
            .join(name)
            .exists()
}

fn slot_log_name(slot: u16) -> String {
    format!("queue/slot-{slot:03}/wal")
}

fn slot_snapshot_log_name(slot: u16) -> String {
    format!("queue/slot-{slot:03}/snap")
}

impl Plane {
    pub(super) async fn open_slot(&self, slot: u16) -> Result<(), String> {
        let (broker, logs) = match &self.store {
            None => (Broker::new(self.cfg.clone()), None),
            Some(store) => {
                let (broker, logs) = self
                    .recover_slot(store, slot)
                    .await
                    .map_err(|e| format!("recover queue slot {slot}: {e}"))?;
                (broker, Some(logs))
            }
        };
        self.slots
            .borrow_mut()
            .insert(slot, Rc::new(RefCell::new(SlotState { broker, logs })));
        Ok(())
    }

    /// Clustered, a shard serves its slots from their raft groups only, so what this data
    /// dir holds from running as a single node would be hidden (still on disk, and served
    /// again without `cluster.enabled`). A node that founds its cluster alone (`carry`)
    /// carries it in: each slot holding data is kept here until its group was founded
    /// with it (`take_single_node_data`, then `forget_carried_data`). Any other node
    /// refuses to start, naming what is held: with several founders there is no one
    /// founding state, and a joining node's groups take the leaders' state.
    pub(super) async fn gather_single_node_data(&self, carry: bool) -> Result<(), String> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        self.gather_single_node_exchanges(carry).await?;
        for slot in self.owned_slots() {
            let written = log_written(&store, &slot_log_name(slot))
                || log_written(&store, &slot_snapshot_log_name(slot));
            if !written {
                continue;
            }
            let (broker, logs) = self
                .recover_slot(&store, slot)
                .await
                .map_err(|e| format!("recover queue slot {slot}: {e}"))?;
            let held = broker.held_data();
            if held.is_empty() {
                continue;
            }
            if !carry {
                return Err(format!(
                    "cluster.enabled: queue slot {slot} holds {} message(s) and {} durable \
                     subscription(s) from running as a single node, which only a node that \
                     founds its cluster alone carries in: start this node alone with \
                     cluster.bootstrap = true (its data becomes the cluster's) and have the \
                     others join it through cluster.seeds; or start without cluster.enabled \
                     and drain them first (consume or purge the queues, unsubscribe the \
                     durable subscribers); or start clustered on another data dir",
                    held.messages, held.durable_subscriptions
                ));
            }
            log::info!(
                "carrying queue slot {slot} into its raft group: {} message(s) and {} durable \
                 subscription(s) held as a single node",
                held.messages,
                held.durable_subscriptions
            );
            self.carried.borrow_mut().insert(
                slot,
                Carried {
                    broker: Some(broker),
                    logs,
                },
            );
        }
        Ok(())
    }

    /// The single-node states to found the groups with (each once; the logs stay until
    /// `forget_carried_data`).
    pub fn take_single_node_data(&self) -> BTreeMap<u16, Broker> {
        self.carried
            .borrow_mut()
            .iter_mut()
            .filter_map(|(&slot, c)| c.broker.take().map(|b| (slot, b)))
            .collect()
    }

    /// Once the groups hold the carried states durably: empties the single-node logs of
    /// those slots (an empty snapshot after their last command, synced, then what it
    /// replaces dropped), so a later start finds nothing left to carry. A crash before this
    /// ends leaves them as they were; the next start finds the groups founded and empties
    /// them then.
    pub async fn forget_carried_data(&self) -> Result<(), String> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        let carried = std::mem::take(&mut *self.carried.borrow_mut());
        let empty = snapshot::encode(Broker::new(self.cfg.clone()).snapshot())?;
        for (slot, Carried { logs, .. }) in carried {
            let wal_seq = logs.wal.next_seq() - 1;
            let number = logs.last_snapshot_number + 1;
            let forget = async {
                let w = snapshot::write(
                    &store,
                    &self.snapshot_pacer,
                    &logs.snap,
                    &empty,
                    wal_seq,
                    number,
                )
                .await?;
                snapshot::compact(&store, &logs.wal, &logs.snap, &w).await
            };
            forget
                .await
                .map_err(|e| format!("empty queue slot {slot}'s single-node logs: {e}"))?;
        }
        Ok(())
    }

    /// Newest complete snapshot + every command after it.
    pub(super) async fn recover_slot(
        &self,
        store: &Rc<Store>,
        slot: u16,
    ) -> Result<(Broker, SlotLogs), String> {
        let open = |name: String| async move {
            store
                .open_log(&name)
                .await
                .map_err(|e| format!("open {name}: {e}"))
        };
        let wal = open(slot_log_name(slot)).await?;
        let snap = open(slot_snapshot_log_name(slot)).await?;
        // Numbering continues after the highest snapshot number seen in any chunk, not the
        // newest complete one (issue 13 item 3: numbers stay unique across crashes).
        let loaded = snapshot::load_newest(store, &snap, &self.cfg).await?;
        let number = loaded.last_number;
        let (mut broker, from, snapshot_bytes) = match loaded.restored {
            Some(r) => (r.broker, r.wal_seq + 1, r.bytes),
            None => (Broker::new(self.cfg.clone()), 1, 0),
        };
        let replayed = wal::replay(store, &wal, from, &mut broker).await?;
        if broker.has_live_subscriptions() {
            // Subscriptions restored or replayed live belonged to connections of an earlier
            // process. Logged, so that later replays see the same offline period.
            let cmd = Command::DisconnectAll;
            broker.apply(&cmd);
            wal::append(store, &wal, &cmd, true)?;
        }
        Ok((
            broker,
            SlotLogs {
                wal,
                snap,
                bytes_since_snapshot: replayed.bytes,
                last_snapshot_bytes: snapshot_bytes,
                last_snapshot_number: number,
                snapshotting: false,
            },
        ))
    }

    /// Takes a snapshot of the slot when its command log has grown enough: the state is
    /// frozen now, between two commands (exactly the state after `wal_seq`), in O(1)
    /// (`Broker::freeze`); turning it into a snapshot and serialising that run on the
    /// shard's blocking pool, so a large state slows the shard down for a while instead of
    /// stopping it. Once the chunks are durable, what they replace is dropped
    /// (whole segments, in the background).
    ///
    /// A snapshot that came due while the last one was written is taken as soon as that
    /// one is done: only a command reaches this function, so a slot that went idle after a
    /// burst would otherwise keep its whole command log and replay it at every start (a
    /// fill of 1,000,000 × 1 KiB kept 1.1 GB of commands behind a 121 MB snapshot and
    /// took 8 s to start).
    pub(super) fn maybe_snapshot(&self, slot: u16, cell: &Rc<RefCell<SlotState>>) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let threshold_bytes = self.compaction_threshold_bytes;
        let Some(first) = SnapshotJob::begin(cell, threshold_bytes) else {
            return;
        };
        let taken = self
            .shard
            .metrics()
            .counter(super::replicated::SNAPSHOTS_METRIC, &[]);
        taken.inc();
        let written = self
            .shard
            .metrics()
            .counter(super::replicated::SNAPSHOTS_WRITTEN_METRIC, &[]);
        let cell = Rc::clone(cell);
        let pacer = Rc::clone(&self.snapshot_pacer);
        boltq_shards::spawn(async move {
            let mut job = first;
            loop {
                let result = job.run(&store, &pacer, &cell).await;
                if let Some(logs) = cell.borrow_mut().logs.as_mut() {
                    logs.snapshotting = false;
                }
                if let Err(e) = result {
                    // Not retried at once: the next command tries again.
                    log::warn!("snapshot of queue slot {slot} failed: {e}; the log keeps growing");
                    return;
                }
                written.inc();
                match SnapshotJob::begin(&cell, threshold_bytes) {
                    Some(next) => {
                        taken.inc();
                        job = next;
                    }
                    None => return,
                }
            }
        })
        .detach();
    }
}

/// One snapshot of a slot, from its frozen state to the compaction behind it.
struct SnapshotJob {
    state: crate::queue::broker::Frozen,
    wal_seq: u64,
    number: u64,
    wal: LogRef,
    snap: LogRef,
}

impl SnapshotJob {
    /// Freezes the slot's state if a snapshot is due (and none is being written), and
    /// marks one as being written.
    fn begin(cell: &RefCell<SlotState>, threshold_bytes: u64) -> Option<SnapshotJob> {
        let mut st = cell.borrow_mut();
        let st = &mut *st;
        let logs = st.logs.as_mut()?;
        if !logs.snapshot_due(threshold_bytes) {
            return None;
        }
        logs.snapshotting = true;
        logs.bytes_since_snapshot = 0;
        logs.last_snapshot_number += 1;
        Some(SnapshotJob {
            state: st.broker.freeze(),
            wal_seq: logs.wal.next_seq() - 1,
            number: logs.last_snapshot_number,
            wal: logs.wal.clone(),
            snap: logs.snap.clone(),
        })
    }

    async fn run(
        self,
        store: &Rc<Store>,
        pacer: &Rc<super::pacer::Pacer>,
        cell: &RefCell<SlotState>,
    ) -> Result<(), String> {
        let state = self.state;
        let body = boltq_shards::spawn_blocking(move || snapshot::encode(state.snapshot())).await?;
        let w = snapshot::write(store, pacer, &self.snap, &body, self.wal_seq, self.number).await?;
        if let Some(logs) = cell.borrow_mut().logs.as_mut() {
            logs.last_snapshot_bytes = w.bytes;
        }
        // Truncates only once the snapshot is fdatasync'ed (issue 13 item 4).
        snapshot::compact(store, &self.wal, &self.snap, &w).await
    }
}
