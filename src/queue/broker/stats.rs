//! The v1 Stats object (spec §3.11) of one broker, and counters for metrics.
//!
//! A server has one broker per slot; the owner merges the stats of its slots and the
//! connection merges the shards' (`merge`). Serialising `BrokerStats` gives v1's exact shape:
//! capitalised keys, maps `{}` when empty.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerStats {
    /// Ready messages per work queue, plus durable backlogs as `"<topic>:<sub_id>"` (v1 shows
    /// them as queues). Delayed, retry-waiting and pending messages are not counted here.
    #[serde(rename = "Queues")]
    pub queues: BTreeMap<String, u64>,
    /// Registrations (live, and offline durable) per topic that has any.
    #[serde(rename = "Topics")]
    pub topics: BTreeMap<String, u64>,
    /// Dead letters per `"<queue>_dead_letter"`, for queues that have any.
    #[serde(rename = "DeadLetters")]
    pub dead_letters: BTreeMap<String, u64>,
    #[serde(rename = "PendingCount")]
    pub pending_count: u64,
    /// Delayed publishes plus messages waiting out a retry backoff.
    #[serde(rename = "DelayedCount")]
    pub delayed_count: u64,
}

impl BrokerStats {
    /// Adds another broker's stats (another slot or shard). Names are unique per slot, so
    /// map entries only collide when a work queue shares its name with a durable backlog;
    /// their counts are then summed.
    pub fn merge(&mut self, other: &BrokerStats) {
        add_all(&mut self.queues, &other.queues);
        add_all(&mut self.topics, &other.topics);
        add_all(&mut self.dead_letters, &other.dead_letters);
        self.pending_count += other.pending_count;
        self.delayed_count += other.delayed_count;
    }
}

fn add_all(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (name, n) in from {
        *into.entry(name.clone()).or_insert(0) += n;
    }
}

/// Monotonic event counts since this broker was created or restored (process metrics: not
/// part of snapshots, so they restart from zero, as Prometheus counters may).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerCounters {
    pub published: u64,
    pub published_topic: u64,
    /// Publishes refused because the queue was at capacity.
    pub rejected_full: u64,
    /// Messages handed to consumers.
    pub consumed: u64,
    pub acked: u64,
    pub nacked: u64,
    pub ack_timeouts: u64,
    /// Requeues after a NACK or ack timeout (immediately or after a backoff).
    pub retried: u64,
    /// Messages discarded because their TTL passed (ready, waiting or pending).
    pub expired: u64,
    pub dead_lettered: u64,
    /// Messages that ran out of retries while their dead-letter queue was full, and were
    /// retried again instead (see the broker module docs).
    pub dead_letter_overflow: u64,
    pub dead_letters_requeued: u64,
    pub dead_letters_purged: u64,
    /// Topic messages not kept for an offline durable subscriber whose backlog was full.
    pub backlog_dropped: u64,
    pub pushed: u64,
    /// Commands refused because they would have created a queue past `queues_max`
    /// (a CONSUME of an unknown name at the limit included).
    pub queues_refused: u64,
    /// Queues forgotten once idle and empty (`idle_queue_ttl_ns`).
    pub queues_forgotten: u64,
}

impl BrokerCounters {
    pub fn merge(&mut self, o: &BrokerCounters) {
        self.published += o.published;
        self.published_topic += o.published_topic;
        self.rejected_full += o.rejected_full;
        self.consumed += o.consumed;
        self.acked += o.acked;
        self.nacked += o.nacked;
        self.ack_timeouts += o.ack_timeouts;
        self.retried += o.retried;
        self.expired += o.expired;
        self.dead_lettered += o.dead_lettered;
        self.dead_letter_overflow += o.dead_letter_overflow;
        self.dead_letters_requeued += o.dead_letters_requeued;
        self.dead_letters_purged += o.dead_letters_purged;
        self.backlog_dropped += o.backlog_dropped;
        self.pushed += o.pushed;
        self.queues_refused += o.queues_refused;
        self.queues_forgotten += o.queues_forgotten;
    }
}
