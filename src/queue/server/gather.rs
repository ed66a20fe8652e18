//! Questions asked of every shard (stats, dead-letter counts) or of one queue's owner
//! (dead letters), and the merging of the answers.

use super::mesh::{QueueMsg, QueueReply, RemoteReply, ShardReport};
use super::plane::{Plane, REMOTE_TIMEOUT_MS};
use crate::queue::message::Message;

/// Dead-letter counts of this shard plus the answers of the others.
pub struct DlqListGather {
    local: std::collections::BTreeMap<String, u64>,
    remote: Vec<RemoteReply>,
}

impl DlqListGather {
    pub async fn merged(self) -> std::collections::BTreeMap<String, u64> {
        let mut total = self.local;
        for r in self.remote {
            if let Ok(QueueReply::DlqCounts(c)) = r.await {
                total.extend(c);
            }
        }
        total
    }
}

/// A read of dead letters on the owner of their queue.
pub struct DlqReadSubmitted {
    queue: String,
    offset: u64,
    local: Option<Vec<Message>>,
    remote: Option<RemoteReply>,
}

impl DlqReadSubmitted {
    pub async fn messages(self) -> (String, u64, Vec<Message>) {
        let messages = match (self.local, self.remote) {
            (Some(m), _) => m,
            (None, Some(r)) => match r.await {
                Ok(QueueReply::DlqMessages(m)) => m,
                _ => Vec::new(),
            },
            (None, None) => Vec::new(),
        };
        (self.queue, self.offset, messages)
    }
}

/// This shard's report plus the answers of the others.
pub struct StatsGather {
    local: ShardReport,
    remote: Vec<RemoteReply>,
}

impl StatsGather {
    pub async fn merged(self) -> ShardReport {
        let mut total = self.local;
        for r in self.remote {
            match r.await {
                Ok(QueueReply::Report(s)) => total.merge(&s),
                _ => total.shards_missing += 1,
            }
        }
        total
    }
}

impl Plane {
    /// Sends `msg()` as a request to every other shard; the answers, in shard order.
    pub(super) fn ask_other_shards(&self, msg: impl Fn() -> QueueMsg) -> Vec<RemoteReply> {
        (0..self.shard.count())
            .filter(|&dest| dest != self.shard.id())
            .map(|dest| self.shard.request(dest, msg(), REMOTE_TIMEOUT_MS))
            .collect()
    }

    pub(super) fn local_dlq_counts(
        &self,
        queue: Option<&str>,
    ) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        self.each_broker(|_, broker| {
            for (q, n) in broker.dead_letter_queues() {
                if queue.is_none_or(|want| want == q) {
                    out.insert(q, n);
                }
            }
        });
        out
    }

    pub(super) fn local_dead_letters(&self, queue: &str, offset: u64, limit: u32) -> Vec<Message> {
        let slot = super::dispatch::slot_of_name(queue);
        let mut out = Vec::new();
        self.each_broker(|s, broker| {
            if s == slot {
                out = broker.dead_letters(queue, offset as usize, limit as usize);
            }
        });
        out
    }

    pub fn gather_dlq_list(&self, queue: Option<String>) -> DlqListGather {
        let remote = self.ask_other_shards(|| QueueMsg::DlqList {
            queue: queue.clone(),
        });
        DlqListGather {
            local: self.local_dlq_counts(queue.as_deref()),
            remote,
        }
    }

    pub fn submit_dlq_read(&self, queue: String, offset: u64, limit: u32) -> DlqReadSubmitted {
        let slot = super::dispatch::slot_of_name(&queue);
        let owner = self.owner_of(slot);
        if owner == self.shard.id() {
            let messages = self.local_dead_letters(&queue, offset, limit);
            return DlqReadSubmitted {
                queue,
                offset,
                local: Some(messages),
                remote: None,
            };
        }
        let req = QueueMsg::DlqRead {
            queue: queue.clone(),
            offset,
            limit,
        };
        DlqReadSubmitted {
            queue,
            offset,
            local: None,
            remote: Some(self.shard.request(owner, req, REMOTE_TIMEOUT_MS)),
        }
    }

    pub fn local_report(&self) -> ShardReport {
        let mut report = ShardReport::default();
        self.each_broker(|_, broker| {
            report.stats.merge(&broker.stats());
            report.counters.merge(&broker.counters());
        });
        if let Some(store) = &self.store {
            report.storage_bytes = store.size_bytes();
            report.journal_commit_rounds = store.journal().commit_rounds();
            report.journal_syncs = store.journal().syncs();
            report.journal_files_created_inline = store.journal().files_created_inline();
        }
        report.connections = self.conns.borrow().len() as u64;
        report.connection_list = self
            .conns
            .borrow()
            .values()
            .take(super::mesh::CONNECTION_LIST_MAX)
            .map(|o| super::mesh::ConnectionEntry {
                shard: self.shard.id(),
                peer: o.peer.borrow().clone(),
                since_ms: o.since_ms.get(),
                idle_ms: o.idle_ms(),
            })
            .collect();
        report.metrics = self.shard.metrics().snapshot();
        if let Some(replication) = self.replication.get() {
            report.raft = replication.slot_status();
            report.refused_links = replication.refused_links();
        }
        report
    }

    /// Asks every other shard for its stats now; await [`StatsGather::merged`].
    pub fn gather_stats(&self) -> StatsGather {
        let remote = self.ask_other_shards(|| QueueMsg::Stats);
        StatsGather {
            local: self.local_report(),
            remote,
        }
    }
}
