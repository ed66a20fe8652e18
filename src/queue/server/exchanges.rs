//! Exchange metadata: one writer (shard 0), a read-only replica on every shard.
//!
//! Declare, delete, bind and unbind go to shard 0, which applies them to its table, appends
//! the table's durable part to `queue/meta/wal` (one record = the whole durable table, so
//! recovery reads only the last record), and sends the new table to every other shard
//! before it answers. Replies and the table travel in the same per-shard stream, so the
//! shard that asked routes with the new table as soon as it has the answer; other shards get
//! it within one mesh hop. A BIND then creates its queue on the queue's owner (v1 did), a
//! logged `DeclareQueue`, before it is answered.

use super::mesh::{QueueMsg, QueueReply, RemoteReply};
use super::plane::{Plane, REMOTE_TIMEOUT_MS};
use crate::queue::broker::exchange::{Exchanges, ExchangesSnapshot};
use crate::queue::broker::{Command, Outcome};
use boltq_io::{LogRef, Record, Store};
use boltq_shards::MeshError;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::rc::Rc;

/// The shard that owns exchange metadata.
pub const META_SHARD: usize = 0;
pub const META_LOG: &str = "queue/meta/wal";

/// With `cluster.enabled` the exchange table is replicated as `Command::Exchange`s in the
/// raft group of this name's slot (its broker holds the table), and every node's owner of
/// that slot passes each new table to its node's other shards.
pub const EXCHANGE_SLOT_NAME: &str = "__boltq.exchanges";

/// The slot whose group carries the exchange table (`EXCHANGE_SLOT_NAME`).
pub fn exchange_slot() -> u16 {
    super::dispatch::slot_of_name(EXCHANGE_SLOT_NAME)
}

/// How long a replicated exchange change waits for the asking shard's table to have it
/// before answering (one mesh hop from the slot's owner shard, after its replica applied).
pub const EXCHANGE_VISIBLE_WAIT_MS: u64 = 2_000;

pub use crate::queue::broker::exchange::ExchangeOp;

/// Appends the durable part of `table` as one record; returns the journal position.
pub fn persist(store: &Store, log: &LogRef, table: &Exchanges) -> Result<u64, String> {
    let snapshot = table.snapshot().durable_only();
    let payload = serde_json::to_vec(&snapshot).map_err(|e| format!("encode exchanges: {e}"))?;
    let mut record = Record {
        payload: Bytes::from(payload),
        ..Default::default()
    };
    store
        .append(log, &mut record, boltq_io::store::now_ns())
        .map(|a| a.lsn)
        .map_err(|e| e.to_string())
}

/// The table as of the last record of the meta log (durable exchanges only), and drops the
/// records before it: each record holds the whole table.
pub async fn recover(store: &Store, log: &LogRef) -> Result<Exchanges, String> {
    let last = log.next_seq() - 1;
    if last < log.first_seq() {
        return Ok(Exchanges::new());
    }
    let records = store
        .read(log, last, 1, usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let record = records.first().ok_or("meta log lost its last record")?;
    let snapshot: ExchangesSnapshot = serde_json::from_slice(&record.payload)
        .map_err(|e| format!("meta log record {} does not decode: {e}", record.seq))?;
    store
        .truncate_before(log, last)
        .await
        .map_err(|e| e.to_string())?;
    Exchanges::restore(snapshot)
}

/// Headers map type used by routing.
pub type Headers = BTreeMap<String, String>;

/// An exchange change on its way to (or applied on) the metadata shard, and the queue a
/// BIND creates once it is applied (v1: binding a queue creates it).
pub struct ExchangeSubmitted {
    change: ChangeSubmitted,
    declare_after: Option<String>,
}

enum ChangeSubmitted {
    Local(Result<(), String>, Option<u64>),
    Remote(RemoteReply),
    /// With `cluster.enabled`: a `Command::Exchange` through the exchange slot's group.
    Replicated(super::apply::Submitted),
}

impl ExchangeSubmitted {
    pub async fn result(self, plane: &Plane) -> Result<(), String> {
        let changed = match self.change {
            ChangeSubmitted::Local(result, lsn) => plane.exchange_durable(result, lsn).await,
            ChangeSubmitted::Remote(reply) => match reply.await {
                Ok(QueueReply::Exchange(r)) => r,
                Ok(_) | Err(MeshError::UnexpectedReply) => {
                    Err("internal error: unexpected reply between shards".into())
                }
                Err(e) => Err(format!("metadata shard did not answer: {e}")),
            },
            ChangeSubmitted::Replicated(submitted) => match submitted.outcome(plane).await {
                Outcome::Exchanged { version } => {
                    plane.until_exchanges_at(version).await;
                    Ok(())
                }
                Outcome::Error(e) => Err(e),
                Outcome::NotLeader { .. } => Err(
                    "not leader: no leader of the exchange table's slot is known (an election is under way); retry"
                        .into(),
                ),
                other => Err(format!("internal error: unexpected outcome {other:?}")),
            },
        };
        changed?;
        let Some(queue) = self.declare_after else {
            return Ok(());
        };
        let slot = super::dispatch::slot_of_name(&queue);
        match plane
            .submit(slot, Command::DeclareQueue { queue })
            .outcome(plane)
            .await
        {
            Outcome::Declared { .. } => Ok(()),
            Outcome::Error(e) => Err(format!("bound, but the queue was not created: {e}")),
            other => Err(format!("internal error: unexpected outcome {other:?}")),
        }
    }
}

impl Plane {
    /// Clustered, on shard 0: the durable exchanges this data dir holds from running as a
    /// single node. A node founding alone (`carry`) keeps them for the exchange slot's
    /// group to be founded with (`take_single_node_exchanges`); any other is told they
    /// are not served. The meta log is left as it is: once the slot's group is founded,
    /// a later start does not found it again, and a single-node start on this data dir
    /// is refused.
    pub(super) async fn gather_single_node_exchanges(&self, carry: bool) -> Result<(), String> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        if self.shard.id() != META_SHARD || !super::slot::log_written(&store, META_LOG) {
            return Ok(());
        }
        let log = store
            .open_log(META_LOG)
            .await
            .map_err(|e| format!("open exchange metadata: {e}"))?;
        let table = recover(&store, &log)
            .await
            .map_err(|e| format!("recover exchange metadata: {e}"))?;
        if table == Exchanges::new() {
            return Ok(());
        }
        if !carry {
            log::warn!(
                "the exchanges this node declared as a single node are not served in its \
                 cluster (only a node founding its cluster alone carries them in): declare \
                 them again"
            );
            return Ok(());
        }
        *self.single_node_exchanges.borrow_mut() = Some(table);
        Ok(())
    }

    /// The exchanges gathered by `gather_single_node_exchanges`, once.
    pub fn take_single_node_exchanges(&self) -> Option<Exchanges> {
        self.single_node_exchanges.borrow_mut().take()
    }

    /// This shard's replica of the exchange table.
    pub fn exchanges_snapshot(&self) -> crate::queue::broker::exchange::ExchangesSnapshot {
        self.exchanges.borrow().snapshot()
    }

    /// Queues a publish to `exchange` goes to, by this shard's replica of the table.
    pub fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<String>, String> {
        self.exchanges
            .borrow()
            .route(exchange, routing_key, headers)
    }

    /// Sends an exchange change to the metadata shard (or applies it here, if this is it).
    pub fn submit_exchange(&self, op: ExchangeOp) -> ExchangeSubmitted {
        let declare_after = match &op {
            ExchangeOp::Bind(b) => Some(b.queue.clone()),
            _ => None,
        };
        if self.replication.get().is_some() {
            let submitted = self.submit(exchange_slot(), Command::Exchange { op });
            return ExchangeSubmitted {
                change: ChangeSubmitted::Replicated(submitted),
                declare_after,
            };
        }
        let change = if self.shard.id() == META_SHARD {
            let (result, lsn) = self.apply_exchange_local(op);
            ChangeSubmitted::Local(result, lsn)
        } else {
            let req = QueueMsg::Exchange(op);
            ChangeSubmitted::Remote(self.shard.request(META_SHARD, req, REMOTE_TIMEOUT_MS))
        };
        ExchangeSubmitted {
            change,
            declare_after,
        }
    }

    pub(super) fn apply_exchange_local(&self, op: ExchangeOp) -> (Result<(), String>, Option<u64>) {
        assert_eq!(self.shard.id(), META_SHARD);
        let mut table = (**self.exchanges.borrow()).clone();
        if let Err(e) = op.apply(&mut table) {
            return (Err(e), None);
        }
        let lsn = match (&self.store, &self.meta_log) {
            (Some(store), Some(log)) => match persist(store, log, &table) {
                Ok(lsn) => Some(lsn),
                Err(e) => return (Err(format!("storage write: {e}")), None),
            },
            _ => None,
        };
        *self.exchanges.borrow_mut() = Rc::new(table);
        self.broadcast_exchanges();
        (Ok(()), lsn)
    }

    pub(super) async fn exchange_durable(
        &self,
        result: Result<(), String>,
        lsn: Option<u64>,
    ) -> Result<(), String> {
        result?;
        if let (Some(store), Some(lsn)) = (&self.store, lsn) {
            store
                .wait_durable(lsn)
                .await
                .map_err(|e| format!("storage write: {e}"))?;
        }
        Ok(())
    }

    /// With `cluster.enabled`: takes the replicated table at change count `version` if it
    /// is newer than this shard's, and passes it to the other shards (the owner of the
    /// exchange slot calls this whenever its replica may have changed it).
    pub fn install_replicated_exchanges(&self, version: u64, table: &Exchanges) {
        if version <= self.exchanges_version.get() {
            return;
        }
        *self.exchanges.borrow_mut() = Rc::new(table.clone());
        self.exchanges_version.set(version);
        let snapshot = table.snapshot();
        for dest in 0..self.shard.count() {
            if dest != self.shard.id() {
                let table = snapshot.clone();
                self.send_without_loss(dest, QueueMsg::Exchanges { version, table });
            }
        }
    }

    /// The change count of this shard's exchange table.
    pub fn exchanges_version(&self) -> u64 {
        self.exchanges_version.get()
    }

    /// Waits (up to `EXCHANGE_VISIBLE_WAIT_MS`) until this shard's table has change
    /// `version`, so that the client who made it routes with it next.
    async fn until_exchanges_at(&self, version: u64) {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(EXCHANGE_VISIBLE_WAIT_MS);
        while self.exchanges_version.get() < version && std::time::Instant::now() < deadline {
            boltq_shards::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Sends the table to every other shard; never dropped at an outbox cap (routing would
    /// stay stale), and versioned so a late one never replaces a newer one.
    pub(super) fn broadcast_exchanges(&self) {
        let version = self.exchanges_version.get() + 1;
        self.exchanges_version.set(version);
        let table = self.exchanges.borrow().snapshot();
        for dest in 0..self.shard.count() {
            if dest != self.shard.id() {
                let table = table.clone();
                self.send_without_loss(dest, QueueMsg::Exchanges { version, table });
            }
        }
    }
}
