//! What the queue plane sends between shards, and how it handles what it receives.

use super::exchanges::ExchangeOp;
use super::plane::Plane;
use crate::queue::broker::exchange::Exchanges;
use crate::queue::broker::exchange::ExchangesSnapshot;
use crate::queue::broker::{BrokerCounters, Command, ConsumerRef, Effect, Outcome};
use crate::queue::message::Message;
use crate::queue::protocol::reply::Stats;
use boltq_shards::{Incoming, PortReply};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Requests and one-way messages of the queue plane.
#[derive(Debug)]
pub enum QueueMsg {
    /// Request: apply `cmd` on the owner of `slot`; answered with `QueueReply::Applied` once
    /// the outcome is durable (and fdatasync'ed, with `sync`, whatever the policy).
    Apply { slot: u16, cmd: Command, sync: bool },
    /// Request: a CONSUME that may long-poll up to `wait_ms` on the owner; answered with
    /// `QueueReply::Applied` when served or at the deadline.
    ConsumeWait {
        slot: u16,
        cmd: Command,
        wait_ms: u64,
    },
    /// One-way: a push or prefetch release for a connection of the receiving shard.
    Effect(Effect),
    /// One-way: apply `cmd` (a `Command::Confirm`) on the owner of `slot`; nobody waits
    /// for the outcome.
    Confirm { slot: u16, cmd: Command },
    /// One-way: a connection closed; end its live subscriptions on the receiving shard.
    Disconnect { consumer: ConsumerRef },
    /// Request: this shard's report.
    Stats,
    /// Request to the metadata shard: change the exchange table.
    Exchange(ExchangeOp),
    /// One-way from the metadata shard: the whole new exchange table, and its version.
    Exchanges {
        version: u64,
        table: ExchangesSnapshot,
    },
    /// Request: dead-letter counts of this shard's queues (all, or of one queue).
    DlqList { queue: Option<String> },
    /// Request (clustered): take this member directory (encoded) and answer, once this
    /// shard's groups have member `name` as it wants or `wait_ms` passed, how many do not.
    Members {
        directory: Vec<u8>,
        name: String,
        wait_ms: u64,
    },
    /// One-way: serve this connection from now on (`affinity.rs`). Boxed: rare, and it
    /// would make every message larger.
    HandOver(Box<super::affinity::HandedOver>),
    /// One-way to the shard that accepted a handed-over connection (its id there): it
    /// ended, so its place under the connection cap is free.
    HandedOverEnded { conn: u64 },
    /// Request to the owner of `queue`'s slot: dead letters without removing them.
    DlqRead {
        queue: String,
        offset: u64,
        limit: u32,
    },
}

/// Most connections one shard lists in a report (the count stays exact).
pub const CONNECTION_LIST_MAX: usize = 1000;

/// One open connection, for `/connections`.
#[derive(Debug, Clone, Default)]
pub struct ConnectionEntry {
    pub shard: usize,
    /// `ip:port`.
    pub peer: String,
    /// Connected, Unix ms.
    pub since_ms: u64,
    /// Since the server last read bytes from it.
    pub idle_ms: u64,
}

/// One shard's numbers for STATS, `/stats`, `/overview` and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct ShardReport {
    pub stats: Stats,
    pub counters: BrokerCounters,
    /// Bytes of this shard's logs on disk and in memory.
    pub storage_bytes: u64,
    /// This shard journal's commit rounds, and those that ended with an fdatasync.
    pub journal_commit_rounds: u64,
    pub journal_syncs: u64,
    /// This shard journal's files created inline (each held a commit round).
    pub journal_files_created_inline: u64,
    pub connections: u64,
    /// At most `CONNECTION_LIST_MAX` per shard.
    pub connection_list: Vec<ConnectionEntry>,
    /// Shards that did not answer this gather in time (their numbers are missing).
    pub shards_missing: u64,
    /// The shard's metrics registry (latencies, HTTP and mesh counters, snapshots).
    pub metrics: boltq_shards::MetricsSnapshot,
    /// With `cluster.enabled`: the shard's raft groups, by slot.
    pub raft: Vec<super::replicated::SlotStatus>,
    /// With `cluster.enabled`: peers whose links the shard's node refused lately (raft
    /// id, why); the same peer may come from several shards.
    pub refused_links: Vec<(u64, String)>,
}

impl ShardReport {
    pub fn merge(&mut self, other: &ShardReport) {
        self.stats.merge(&other.stats);
        self.counters.merge(&other.counters);
        self.storage_bytes += other.storage_bytes;
        self.journal_commit_rounds += other.journal_commit_rounds;
        self.journal_syncs += other.journal_syncs;
        self.journal_files_created_inline += other.journal_files_created_inline;
        self.connections += other.connections;
        self.shards_missing += other.shards_missing;
        self.connection_list
            .extend(other.connection_list.iter().cloned());
        self.raft.extend(other.raft.iter().cloned());
        self.refused_links
            .extend(other.refused_links.iter().cloned());
        self.metrics = boltq_shards::MetricsSnapshot::merge([
            std::mem::take(&mut self.metrics),
            other.metrics.clone(),
        ]);
    }
}

#[derive(Debug)]
pub enum QueueReply {
    Applied(Outcome),
    /// Boxed: a report is large and rare, applies are small and frequent.
    Report(Box<ShardReport>),
    Exchange(Result<(), String>),
    DlqCounts(BTreeMap<String, u64>),
    DlqMessages(Vec<Message>),
    /// Groups of the shard that do not yet reflect a members change.
    Unsettled(usize),
}

/// The queue plane's view of its shard: it sends [`QueueMsg`]s and answers with
/// [`QueueReply`]s.
pub type QueuePort = boltq_shards::Port<QueueMsg, QueueReply>;

/// The answer to a request sent to another shard's queue plane.
pub type RemoteReply = PortReply<QueueReply>;

impl Plane {
    /// The mesh handler's part for the queue plane.
    pub fn on_mesh(self: &Rc<Self>, incoming: Incoming<QueueMsg>) {
        match incoming {
            Incoming::Message(QueueMsg::Effect(e)) => self.deliver_effect(e),
            Incoming::Message(QueueMsg::Disconnect { consumer }) => self.disconnect_local(consumer),
            Incoming::Message(QueueMsg::HandOver(moved)) => self.adopt(moved),
            Incoming::Message(QueueMsg::HandedOverEnded { conn }) => self.release_handed_over(conn),
            Incoming::Message(QueueMsg::Confirm { slot, cmd }) => match self.replication.get() {
                Some(replication) => replication.submit(slot, cmd, Box::new(|_, _| {})),
                None => self.apply_in_turn(slot, cmd, |_, _| {}),
            },
            Incoming::Request {
                msg: QueueMsg::Apply { slot, cmd, .. },
                token,
            } if self.replication.get().is_some() => {
                let plane = Rc::clone(self);
                let answer =
                    move |outcome, _| plane.shard.reply(token, QueueReply::Applied(outcome));
                let replication = self.replication.get().expect("matched");
                replication.submit(slot, cmd, Box::new(answer));
            }
            Incoming::Request {
                msg: QueueMsg::Apply { slot, cmd, sync },
                token,
            } => {
                let plane = Rc::clone(self);
                self.apply_in_turn(slot, cmd, move |outcome, lsn| {
                    if !sync {
                        return plane.reply_when_durable(token, outcome, lsn);
                    }
                    boltq_shards::spawn(async move {
                        let outcome = plane.when_synced(outcome, lsn).await;
                        plane.shard.reply(token, QueueReply::Applied(outcome));
                    })
                    .detach();
                });
            }
            Incoming::Request {
                msg: QueueMsg::ConsumeWait { slot, cmd, wait_ms },
                token,
            } => {
                let plane = Rc::clone(self);
                let answer = move |outcome, lsn| plane.reply_when_durable(token, outcome, lsn);
                self.consume_or_park(slot, cmd, wait_ms, Box::new(answer));
            }
            Incoming::Request {
                msg: QueueMsg::Stats,
                token,
            } => {
                let report = Box::new(self.local_report());
                self.shard.reply(token, QueueReply::Report(report));
            }
            Incoming::Request {
                msg: QueueMsg::Exchange(op),
                token,
            } => {
                let (result, lsn) = self.apply_exchange_local(op);
                let plane = Rc::clone(self);
                boltq_shards::spawn(async move {
                    let result = plane.exchange_durable(result, lsn).await;
                    plane.shard.reply(token, QueueReply::Exchange(result));
                })
                .detach();
            }
            Incoming::Message(QueueMsg::Exchanges { version, table }) => {
                if version <= self.exchanges_version.get() {
                    return; // a newer table is already here
                }
                match Exchanges::restore(table) {
                    Ok(table) => {
                        *self.exchanges.borrow_mut() = Rc::new(table);
                        self.exchanges_version.set(version);
                    }
                    Err(e) => log::error!("exchange table from the metadata shard refused: {e}"),
                }
            }
            Incoming::Request {
                msg:
                    QueueMsg::Members {
                        directory,
                        name,
                        wait_ms,
                    },
                token,
            } => match self.replication.get() {
                Some(replication) => {
                    let plane = Rc::clone(self);
                    let settled = replication.take_members(directory, name, wait_ms);
                    boltq_shards::spawn(async move {
                        let left = settled.await;
                        plane.shard.reply(token, QueueReply::Unsettled(left));
                    })
                    .detach();
                }
                None => self.shard.reply(token, QueueReply::Unsettled(0)),
            },
            Incoming::Request {
                msg: QueueMsg::DlqList { queue },
                token,
            } => {
                let counts = self.local_dlq_counts(queue.as_deref());
                self.shard.reply(token, QueueReply::DlqCounts(counts));
            }
            Incoming::Request {
                msg:
                    QueueMsg::DlqRead {
                        queue,
                        offset,
                        limit,
                    },
                token,
            } => {
                let messages = self.local_dead_letters(&queue, offset, limit);
                self.shard.reply(token, QueueReply::DlqMessages(messages));
            }
            Incoming::Request { token, .. } => {
                log::error!(
                    "queue plane: unexpected request from shard {}",
                    token.origin()
                );
                drop(token);
            }
            Incoming::Message(_) => log::error!("queue plane: unexpected message"),
        }
    }
}
