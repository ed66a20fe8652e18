//! A shard's numbers for the admin routes and `/metrics`, merged across shards on demand.

/// One shard's view; the admin side adds shards together.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct EngineStats {
    /// Partitions this shard owns that are open.
    pub partitions_open: u64,
    /// Partitions read by subscribers on this shard.
    pub partitions_watched: u64,
    pub appends: u64,
    pub pointer_appends: u64,
    pub pointer_failures: u64,
    /// In a cluster: pointer appends tried again after an attempt got no outcome.
    pub pointer_retries: u64,
    /// In a cluster: sends whose pointers this shard began writing as their conversation
    /// slot's leader, and of those the ones taken over from the slot's outbox (left by an
    /// earlier leader, or by a report that got no outcome).
    pub fan_outs: u64,
    pub fan_outs_resumed: u64,
    /// In a cluster: sends in the outboxes of the slots this node leads (pointers owed and
    /// not reported written); summed over nodes, each send counts once.
    pub outbox_sends: u64,
    pub duplicates: u64,
    pub cursor_keys: u64,
    pub cursor_commits: u64,
    pub topics: u64,
    /// Records appended to owned partitions and still waiting to become durable (the
    /// tail not yet visible to readers): a backlog here is storage falling behind.
    pub pending_records: u64,
    /// In a cluster: partitions whose copy on this node has a hole (a snapshot caught the
    /// node up) and refuses reads until filled from a peer; copies filled since start, and
    /// the records that took.
    pub partitions_incomplete: u64,
    pub copies_filled: u64,
    pub records_filled: u64,
    /// Records of a hole that no peer still had (their retention removed them): the copy
    /// restarted past them instead of refusing reads for good.
    pub records_skipped: u64,
}

impl EngineStats {
    pub fn add(&mut self, o: &EngineStats) {
        self.partitions_open += o.partitions_open;
        self.partitions_watched += o.partitions_watched;
        self.appends += o.appends;
        self.pointer_appends += o.pointer_appends;
        self.pointer_failures += o.pointer_failures;
        self.pointer_retries += o.pointer_retries;
        self.fan_outs += o.fan_outs;
        self.fan_outs_resumed += o.fan_outs_resumed;
        self.outbox_sends += o.outbox_sends;
        self.duplicates += o.duplicates;
        self.cursor_keys += o.cursor_keys;
        self.cursor_commits += o.cursor_commits;
        self.pending_records += o.pending_records;
        self.partitions_incomplete += o.partitions_incomplete;
        self.copies_filled += o.copies_filled;
        self.records_filled += o.records_filled;
        self.records_skipped += o.records_skipped;
        // Every shard holds the whole catalog: take one copy, not the sum.
        self.topics = self.topics.max(o.topics);
    }
}
