//! The stream engine on one shard: the partitions this shard owns (appends, reads, cursors,
//! dedup) and its mirror of the partitions its subscribers read.
//!
//! Ownership: partition `(topic, p)` belongs to `owner_of_partition(topic, p)`; its cursors
//! live in the cursor log of the same slot on the same shard, so a commit never crosses to
//! a third shard. Every other shard reaches a partition only through `StreamMsg`.
//!
//! Durability: an append is answered, and its record pushed to subscribers, only after the
//! shard journal's group commit made it durable under the configured policy. Readers never
//! see a record a crash could take back.
//!
//! Where each step lives: `on_mesh` routes what other shards send; `append` (dedup, then a
//! durable append), `read`, `commit` and `admin` each hold both sides of their request
//! (the asking shard's method and the owner's handler); `owned` is an owned partition
//! (opened on first use, records made durable then published to watching shards);
//! `pointers` is fan-out on write into inboxes (`outbox`: the slot leader's writing of
//! them in a cluster); `topics` is the catalog and topic creation
//! on shard 0; `latency` the send-latency histograms; `replicated` the same steps through
//! the slots' Raft groups with `cluster.enabled`.

mod admin;
mod append;
pub mod catalog;
mod commit;
pub mod cursors;
mod latency;
pub mod mesh;
pub mod mirror;
mod on_mesh;
mod outbox;
mod owned;
mod pointers;
mod read;
pub mod replicated;
pub mod stats;
mod topics;

pub use latency::{SEND_DELIVERED_METRIC, SEND_DURABLE_METRIC};
pub use pointers::PointerHook;

use crate::messaging::dedup::DedupTable;
use crate::messaging::topic::PartitionCounts;
use boltq_io::log::LogConfig;
use boltq_io::Store;
use boltq_shards::{MeshError, Port, ReplyToken, ShardId};
use cursors::CursorStore;
use mesh::{StreamError, StreamMsg, StreamReply};
use mirror::{Mirror, PartitionKey};
use owned::Owned;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::rc::Rc;

/// How long a shard waits for another shard's answer about a partition.
pub const MESH_TIMEOUT_MS: u64 = 10_000;
/// Records per read (subscription catch-up and history pages are capped below this).
pub const READ_RECORDS_MAX: usize = 64;
/// Bytes (key + payload) per read page.
pub const READ_BYTES_MAX: usize = 256 * 1024;
/// Partitions one admin `/streams` request may ask the shards about; beyond it the answer
/// is cut (and says so), so a poll of a node with a million topics stays bounded.
pub const ADMIN_PARTITIONS_MAX: usize = 100_000;
/// How long the admin side waits for each shard's numbers.
pub const ADMIN_MESH_TIMEOUT_MS: u64 = 5_000;

/// What the engine needs from the configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub counts: PartitionCounts,
    pub log: LogConfig,
    pub fanout_on_write_limit: usize,
    pub dedup_ttl_ns: i64,
    pub dedup_entries_max: usize,
    /// Wait for an fdatasync before answering, whatever the queue plane's policy
    /// (`messaging.fsync = "always"`, the default).
    pub sync_always: bool,
}

pub struct Engine {
    shard: StreamPort,
    store: Rc<Store>,
    cfg: EngineConfig,
    /// Topic → partitions; the same on every shard (shard 0 writes, others follow).
    catalog: RefCell<HashMap<String, u32>>,
    /// Shard 0 only: creations in progress, so concurrent requests share one manifest write.
    registering: RefCell<HashMap<String, Vec<ReplyToken>>>,
    quota: RefCell<catalog::CreateQuota>,
    owned: RefCell<HashMap<PartitionKey, Rc<Owned>>>,
    /// Shards that read each owned partition (including this one).
    watchers: RefCell<HashMap<PartitionKey, BTreeSet<ShardId>>>,
    mirror: RefCell<Mirror>,
    dedup: RefCell<DedupTable>,
    cursors: CursorStore,
    stats: RefCell<stats::EngineStats>,
    /// Append → durable latency (µs) of client-facing appends.
    send_durable: boltq_shards::metrics::Histogram,
    /// Record timestamp → frame queued for a device (µs).
    send_delivered: boltq_shards::metrics::Histogram,
    closing: Cell<bool>,
    /// Told of every inbox pointer appended here (the push dispatcher of this shard), so an
    /// inbox is watched from its first pointer (spec §19 decision 14).
    pointer_hook: RefCell<Option<PointerHook>>,
    /// With `cluster.enabled`: the slot groups that hold this shard's partitions.
    replication: std::cell::OnceCell<Rc<dyn replicated::StreamReplication>>,
    /// Owned partitions whose copy here stops at a hole (seq of the first missing record):
    /// a snapshot carried this node's replica past records it never wrote.
    incomplete: RefCell<HashMap<PartitionKey, u64>>,
    /// Copies to compare with their slot's position (slot, partition, position), and
    /// whether a task is doing so (`replicated::verify_copies`).
    copies_to_verify: RefCell<std::collections::VecDeque<(u16, PartitionKey, u64)>>,
    verifying_copies: std::cell::Cell<bool>,
    /// With `cluster.enabled`: the sends whose pointers this shard writes as their slot's
    /// leader.
    outbox_work: outbox::OutboxWork,
}

/// The engine's view of its shard: it sends [`StreamMsg`]s and answers with
/// [`StreamReply`]s.
pub type StreamPort = Port<StreamMsg, StreamReply>;

fn now_ns() -> i64 {
    boltq_io::store::now_ns()
}

impl Engine {
    /// Starts the engine on this shard: loads the cursors of the slots it owns.
    pub async fn start(
        shard: StreamPort,
        store: Rc<Store>,
        cfg: EngineConfig,
        topics: HashMap<String, u32>,
    ) -> Result<Rc<Engine>, String> {
        let cursors = CursorStore::load(&store, &cfg.data_dir, shard.id(), shard.count()).await?;
        let dedup = DedupTable::new(cfg.dedup_ttl_ns, cfg.dedup_entries_max);
        let send_durable = shard.metrics().histogram(SEND_DURABLE_METRIC, &[]);
        let send_delivered = shard.metrics().histogram(SEND_DELIVERED_METRIC, &[]);
        let engine = Rc::new(Engine {
            shard,
            store,
            cfg,
            catalog: RefCell::new(topics),
            registering: RefCell::new(HashMap::new()),
            quota: RefCell::new(catalog::CreateQuota::default()),
            owned: RefCell::new(HashMap::new()),
            watchers: RefCell::new(HashMap::new()),
            mirror: RefCell::new(Mirror::default()),
            dedup: RefCell::new(dedup),
            cursors,
            stats: RefCell::new(stats::EngineStats::default()),
            send_durable,
            send_delivered,
            closing: Cell::new(false),
            pointer_hook: RefCell::new(None),
            replication: std::cell::OnceCell::new(),
            incomplete: RefCell::new(HashMap::new()),
            copies_to_verify: RefCell::new(std::collections::VecDeque::new()),
            verifying_copies: std::cell::Cell::new(false),
            outbox_work: outbox::OutboxWork::default(),
        });
        boltq_shards::spawn(Rc::clone(&engine).sweep_loop()).detach();
        Ok(engine)
    }

    pub fn shard(&self) -> &StreamPort {
        &self.shard
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Stops accepting appends (shutdown); reads keep working until the shard ends.
    pub fn close(&self) {
        self.closing.set(true);
    }

    pub fn mirror(&self) -> &RefCell<Mirror> {
        &self.mirror
    }

    fn owner(&self, topic: &str, partition: u32) -> ShardId {
        boltq_shards::owner_of_partition(topic, partition, self.shard.count())
    }

    /// Sends a request about `(topic, partition)` to its owner and waits for the answer.
    async fn ask(&self, dest: ShardId, msg: StreamMsg) -> Result<StreamReply, StreamError> {
        self.ask_within(dest, msg, MESH_TIMEOUT_MS).await
    }

    async fn ask_within(
        &self,
        dest: ShardId,
        msg: StreamMsg,
        timeout_ms: u64,
    ) -> Result<StreamReply, StreamError> {
        match self.shard.request(dest, msg, timeout_ms).await {
            Ok(r) => Ok(r),
            Err(MeshError::UnexpectedReply) => {
                Err(StreamError::Internal("unexpected reply".to_string()))
            }
            Err(e) => Err(StreamError::Internal(format!("shard {dest}: {e}"))),
        }
    }

    /// Sweeps expired dedup claims once a minute.
    async fn sweep_loop(self: Rc<Self>) {
        loop {
            boltq_shards::sleep(std::time::Duration::from_secs(60)).await;
            self.dedup.borrow_mut().sweep(now_ns());
        }
    }
}
