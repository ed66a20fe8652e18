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

pub mod catalog;
pub mod cursors;
pub mod mesh;
pub mod mirror;
pub mod stats;

use crate::messaging::cursor::CursorKey;
use crate::messaging::dedup::{Claim, Coordinates, DedupKey, DedupTable};
use crate::messaging::topic::{self, Namespace, PartitionCounts};
use boltq_io::log::{LogConfig, ReadError};
use boltq_io::record::Record;
use boltq_io::store::{AppendError, LogRef};
use boltq_io::Store;
use boltq_shards::{Incoming, MeshError, Port, ReplyToken, ShardId};
use bytes::Bytes;
use cursors::CursorStore;
use mesh::{
    AppendOk, AppendReq, GroupCursors, PartitionStats, ReadOk, StreamError, StreamMsg, StreamReply,
};
use mirror::{Mirror, PartitionKey};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap, VecDeque};
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
/// Histogram of append → durable, in µs, per shard registry (`/metrics`).
pub const SEND_DURABLE_METRIC: &str = "boltq_messaging_send_durable_seconds";
/// Histogram of record timestamp → record frame queued for a device, in µs.
pub const SEND_DELIVERED_METRIC: &str = "boltq_messaging_send_delivered_seconds";

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

/// A partition this shard owns and has open.
struct Owned {
    log: LogRef,
    /// One past the newest durable record: what readers may see.
    published_next: Cell<u64>,
    /// Appended, not yet durable, in sequence order.
    pending: RefCell<VecDeque<Record>>,
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
}

/// The engine's view of its shard: it sends [`StreamMsg`]s and answers with
/// [`StreamReply`]s.
pub type StreamPort = Port<StreamMsg, StreamReply>;

/// Called with (inbox topic, partition, seq) after a pointer became durable on this shard.
pub type PointerHook = Rc<dyn Fn(&str, u32, u64)>;

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

    /// The partition count of `topic`: as created, or what it would get if created now.
    pub fn partitions_of(&self, topic: &str, ns: &Namespace) -> u32 {
        self.catalog
            .borrow()
            .get(topic)
            .copied()
            .unwrap_or_else(|| self.cfg.counts.count_for(ns))
    }

    pub fn topic_exists(&self, topic: &str) -> bool {
        self.catalog.borrow().contains_key(topic)
    }

    pub fn topics(&self) -> Vec<(String, u32)> {
        let mut t: Vec<_> = self
            .catalog
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        t.sort();
        t
    }

    /// Installs the hook told of every inbox pointer this shard appends (one per shard).
    pub fn set_pointer_hook(&self, hook: PointerHook) {
        *self.pointer_hook.borrow_mut() = Some(hook);
    }

    pub fn mirror(&self) -> &RefCell<Mirror> {
        &self.mirror
    }

    pub fn local_stats(&self) -> stats::EngineStats {
        let mut s = self.stats.borrow().clone();
        s.partitions_open = self.owned.borrow().len() as u64;
        s.partitions_watched = self.mirror.borrow().watched() as u64;
        s.cursor_keys = self.cursors.keys() as u64;
        s.topics = self.catalog.borrow().len() as u64;
        s.pending_records = self
            .owned
            .borrow()
            .values()
            .map(|o| o.pending.borrow().len() as u64)
            .sum();
        s
    }

    /// Records the send → delivered latency of records whose frame was just queued for a
    /// device. Inbox pointers count with their own timestamp (the pointer's append), so
    /// this measures how late devices hear of each record, not of each message.
    pub fn note_delivered(&self, records: &[Record]) {
        let now = now_ns();
        for r in records {
            self.send_delivered.record(latency_us(r.timestamp_ns, now));
        }
    }

    fn owner(&self, topic: &str, partition: u32) -> ShardId {
        boltq_shards::owner_of_partition(topic, partition, self.shard.count())
    }

    // ---- requests from the gateway (any shard) -------------------------------------------

    /// Sends a request about `(topic, partition)` to its owner and waits for the answer.
    async fn ask(&self, dest: ShardId, msg: StreamMsg) -> Result<StreamReply, StreamError> {
        match self.shard.request(dest, msg, MESH_TIMEOUT_MS).await {
            Ok(r) => Ok(r),
            Err(MeshError::UnexpectedReply) => {
                Err(StreamError::Internal("unexpected reply".to_string()))
            }
            Err(e) => Err(StreamError::Internal(format!("shard {dest}: {e}"))),
        }
    }

    pub async fn append(&self, req: AppendReq) -> Result<AppendOk, StreamError> {
        let dest = self.owner(&req.topic, req.partition);
        match self.ask(dest, StreamMsg::Append(Box::new(req))).await? {
            StreamReply::Appended(r) => r,
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// Reads a page of a partition from its owner; with `watch`, the owner also starts
    /// pushing the partition's new records to this shard's mirror.
    pub async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        records_max: usize,
        watch: bool,
    ) -> Result<ReadOk, StreamError> {
        let msg = StreamMsg::Read {
            topic: topic.to_string(),
            partition,
            from,
            records_max: records_max.clamp(1, READ_RECORDS_MAX.max(records_max)),
            bytes_max: READ_BYTES_MAX,
            watch,
        };
        match self.ask(self.owner(topic, partition), msg).await? {
            StreamReply::Read(r) => {
                if let Ok(ok) = &r {
                    self.mirror.borrow_mut().learn_bounds(
                        &(topic.to_string(), partition),
                        ok.first_seq,
                        ok.next_seq,
                    );
                }
                r
            }
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// The last local subscriber of a partition left: stop its tail notifications.
    pub fn unwatch(&self, topic: &str, partition: u32) {
        let msg = StreamMsg::Unwatch {
            topic: topic.to_string(),
            partition,
        };
        let _ = self.shard.send(self.owner(topic, partition), msg);
    }

    pub async fn commit(&self, key: CursorKey, seq: u64) -> Result<(), StreamError> {
        let dest = self.owner(key.topic(), key.partition());
        match self.ask(dest, StreamMsg::Commit { key, seq }).await? {
            StreamReply::Committed(r) => r,
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    pub async fn cursor(&self, key: CursorKey) -> Result<Option<u64>, StreamError> {
        let dest = self.owner(key.topic(), key.partition());
        match self.ask(dest, StreamMsg::CursorGet { key }).await? {
            StreamReply::Cursor(c) => Ok(c),
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// Every shard's numbers added up.
    pub async fn stats(&self) -> stats::EngineStats {
        let mut total = stats::EngineStats::default();
        for s in self.stats_per_shard().await.into_iter().flatten() {
            total.add(&s);
        }
        total
    }

    /// Each shard's numbers, by shard id; `None` for a shard that did not answer.
    pub async fn stats_per_shard(&self) -> Vec<Option<stats::EngineStats>> {
        let mut out = Vec::with_capacity(self.shard.count());
        for dest in 0..self.shard.count() {
            out.push(match self.ask_admin(dest, StreamMsg::Stats).await {
                Ok(StreamReply::Stats(s)) => Some(*s),
                _ => None,
            });
        }
        out
    }

    /// Bounds of every partition of `topics` (`(name, partition count)`), from their owners,
    /// sorted by topic then partition. At most [`ADMIN_PARTITIONS_MAX`] partitions: the
    /// caller cuts the list.
    pub async fn partition_stats(
        &self,
        topics: Vec<(String, u32)>,
    ) -> Result<Vec<PartitionStats>, StreamError> {
        let asked: usize = topics.iter().map(|(_, n)| *n as usize).sum();
        if asked > ADMIN_PARTITIONS_MAX {
            return Err(StreamError::Limited(format!(
                "{asked} partitions asked for; at most {ADMIN_PARTITIONS_MAX}"
            )));
        }
        let mut all = Vec::with_capacity(asked);
        for dest in 0..self.shard.count() {
            let msg = StreamMsg::Partitions {
                topics: topics.clone(),
            };
            match self.ask_admin(dest, msg).await? {
                StreamReply::Partitions(p) => all.extend(p),
                other => return Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
            }
        }
        all.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(all)
    }

    /// One cursor group of one partition, with the partition's bounds, from its owner.
    pub async fn group_cursors(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<GroupCursors, StreamError> {
        let msg = StreamMsg::Cursors {
            topic: topic.to_string(),
            partition,
            group: group.to_string(),
        };
        match self.ask_admin(self.owner(topic, partition), msg).await? {
            StreamReply::Cursors(c) => Ok(*c),
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// `ask` with the admin timeout: an operator's poll should not hang for the full
    /// request timeout on a stuck shard.
    async fn ask_admin(&self, dest: ShardId, msg: StreamMsg) -> Result<StreamReply, StreamError> {
        match self.shard.request(dest, msg, ADMIN_MESH_TIMEOUT_MS).await {
            Ok(r) => Ok(r),
            Err(MeshError::UnexpectedReply) => {
                Err(StreamError::Internal("unexpected reply".to_string()))
            }
            Err(e) => Err(StreamError::Internal(format!("shard {dest}: {e}"))),
        }
    }

    // ---- the mesh handler ----------------------------------------------------------------

    pub fn on_mesh(self: &Rc<Self>, from: ShardId, incoming: Incoming<StreamMsg>) {
        match incoming {
            Incoming::Request { msg, token } => self.on_request(from, msg, token),
            Incoming::Message(msg) => self.on_message(from, msg),
        }
    }

    fn reply(&self, token: ReplyToken, r: StreamReply) {
        self.shard.reply(token, r);
    }

    fn on_request(self: &Rc<Self>, from: ShardId, msg: StreamMsg, token: ReplyToken) {
        match msg {
            StreamMsg::Append(req) => {
                let me = Rc::clone(self);
                boltq_shards::spawn(async move {
                    let r = me.append_owned(*req).await;
                    me.reply(token, StreamReply::Appended(r));
                })
                .detach();
            }
            StreamMsg::Read {
                topic,
                partition,
                from: from_seq,
                records_max,
                bytes_max,
                watch,
            } => {
                let key = (topic, partition);
                if watch {
                    // Before any await: a record that becomes durable from now on is
                    // pushed to `from`, and this reply's bounds cover everything before.
                    self.watchers
                        .borrow_mut()
                        .entry(key.clone())
                        .or_default()
                        .insert(from);
                }
                let me = Rc::clone(self);
                boltq_shards::spawn(async move {
                    let r = me.read_owned(&key, from_seq, records_max, bytes_max).await;
                    me.reply(token, StreamReply::Read(r));
                })
                .detach();
            }
            StreamMsg::Commit { key, seq } => {
                let me = Rc::clone(self);
                boltq_shards::spawn(async move {
                    let r = me.commit_owned(key, seq).await;
                    me.reply(token, StreamReply::Committed(r));
                })
                .detach();
            }
            StreamMsg::CursorGet { key } => {
                let c = self.cursors.get(&key);
                self.reply(token, StreamReply::Cursor(c));
            }
            StreamMsg::Register {
                topic,
                partitions,
                user,
            } => self.on_register(topic, partitions, user, token),
            StreamMsg::Stats => {
                let s = Box::new(self.local_stats());
                self.reply(token, StreamReply::Stats(s));
            }
            StreamMsg::Partitions { topics } => {
                let me = Rc::clone(self);
                boltq_shards::spawn(async move {
                    let p = me.partitions_owned(topics).await;
                    me.reply(token, StreamReply::Partitions(p));
                })
                .detach();
            }
            StreamMsg::Cursors {
                topic,
                partition,
                group,
            } => {
                let c = self.cursors_owned(&topic, partition, &group);
                self.reply(token, StreamReply::Cursors(Box::new(c)));
            }
            other => log::warn!("[stream] {other:?} is not a request"),
        }
    }

    fn on_message(self: &Rc<Self>, from: ShardId, msg: StreamMsg) {
        match msg {
            StreamMsg::Unwatch { topic, partition } => {
                let key = (topic, partition);
                let mut w = self.watchers.borrow_mut();
                if let Some(set) = w.get_mut(&key) {
                    set.remove(&from);
                    if set.is_empty() {
                        w.remove(&key);
                    }
                }
            }
            StreamMsg::Tail {
                topic,
                partition,
                records,
                first_seq,
            } => {
                self.mirror
                    .borrow_mut()
                    .apply_tail(&(topic, partition), records, first_seq);
            }
            StreamMsg::Pointers {
                topic,
                partition,
                user,
                pointers,
            } => {
                let me = Rc::clone(self);
                boltq_shards::spawn(async move {
                    me.append_pointers(topic, partition, user, pointers).await;
                })
                .detach();
            }
            StreamMsg::Created { topic, partitions } => {
                self.catalog.borrow_mut().insert(topic, partitions);
            }
            other => log::warn!("[stream] {other:?} is not a one-way message"),
        }
    }

    // ---- topic creation (shard 0) --------------------------------------------------------

    /// Makes sure `topic` exists, creating it with `partitions` if not; returns its count.
    async fn ensure_topic(
        &self,
        topic: &str,
        partitions: u32,
        user: &str,
    ) -> Result<u32, StreamError> {
        if let Some(n) = self.catalog.borrow().get(topic) {
            return Ok(*n);
        }
        let msg = StreamMsg::Register {
            topic: topic.to_string(),
            partitions,
            user: user.to_string(),
        };
        match self.ask(0, msg).await? {
            StreamReply::Registered(Ok(n)) => {
                self.catalog.borrow_mut().insert(topic.to_string(), n);
                Ok(n)
            }
            StreamReply::Registered(Err(e)) => Err(e),
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    fn on_register(
        self: &Rc<Self>,
        topic: String,
        partitions: u32,
        user: String,
        token: ReplyToken,
    ) {
        assert_eq!(self.shard.id(), 0, "topics are created on shard 0 only");
        if let Some(n) = self.catalog.borrow().get(&topic) {
            self.reply(token, StreamReply::Registered(Ok(*n)));
            return;
        }
        if let Some(waiting) = self.registering.borrow_mut().get_mut(&topic) {
            waiting.push(token);
            return;
        }
        let refuse = |m: String| StreamReply::Registered(Err(StreamError::Limited(m)));
        if self.catalog.borrow().len() >= catalog::TOPICS_MAX {
            self.reply(
                token,
                refuse(format!("topic limit of {} reached", catalog::TOPICS_MAX)),
            );
            return;
        }
        if !self.quota.borrow_mut().take(&user, now_ns()) {
            self.reply(
                token,
                refuse("topic creation rate limit reached; retry later".into()),
            );
            return;
        }
        if partitions == 0 || partitions > catalog::PARTITIONS_MAX {
            let e = StreamError::Invalid(format!("partition count {partitions} out of range"));
            self.reply(token, StreamReply::Registered(Err(e)));
            return;
        }
        self.registering
            .borrow_mut()
            .insert(topic.clone(), vec![token]);
        let me = Rc::clone(self);
        boltq_shards::spawn(async move {
            let dir = me.cfg.data_dir.clone();
            let name = topic.clone();
            let written = boltq_shards::spawn_blocking(move || {
                catalog::write_manifest(&dir, &name, partitions, now_ns())
            })
            .await;
            let tokens = me
                .registering
                .borrow_mut()
                .remove(&topic)
                .unwrap_or_default();
            let reply = match written {
                Ok(()) => {
                    me.catalog.borrow_mut().insert(topic.clone(), partitions);
                    for dest in 1..me.shard.count() {
                        let msg = StreamMsg::Created {
                            topic: topic.clone(),
                            partitions,
                        };
                        if me.shard.send(dest, msg).is_err() {
                            // The requester learns the count from its reply; others learn it
                            // when they first ask (ensure_topic) — nothing is lost.
                            log::warn!("[stream] outbox to shard {dest} full; it will ask later");
                        }
                    }
                    Ok(partitions)
                }
                Err(e) => {
                    log::error!("[stream] {e}");
                    Err(StreamError::Internal("could not create the topic".into()))
                }
            };
            for t in tokens {
                me.reply(t, StreamReply::Registered(reply.clone()));
            }
        })
        .detach();
    }

    // ---- owner side ------------------------------------------------------------------------

    /// The owned partition, opened on first use.
    async fn open_owned(&self, key: &PartitionKey) -> Result<Rc<Owned>, StreamError> {
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

    async fn append_owned(&self, req: AppendReq) -> Result<AppendOk, StreamError> {
        if self.closing.get() {
            return Err(StreamError::Internal("shutting down".into()));
        }
        let ns = Namespace::of(&req.topic).map_err(|e| StreamError::Invalid(e.to_string()))?;
        let count = self
            .ensure_topic(&req.topic, self.cfg.counts.count_for(&ns), &req.user)
            .await?;
        if req.partition >= count {
            return Err(StreamError::Invalid(format!(
                "partition {} out of range: {} has {count}",
                req.partition, req.topic
            )));
        }
        let key = (req.topic.clone(), req.partition);
        let part = self.open_owned(&key).await?;
        let dedup_key = match &req.dedup {
            Some((conversation, client_msg_id)) => Some(
                DedupKey::new(&req.user, conversation, client_msg_id)
                    .map_err(|e| StreamError::Invalid(e.to_string()))?,
            ),
            None => None,
        };
        if let Some(k) = &dedup_key {
            match self.dedup.borrow_mut().claim(k, now_ns()) {
                Claim::Fresh => {}
                Claim::Duplicate(coords) => {
                    self.stats.borrow_mut().duplicates += 1;
                    return Ok(AppendOk {
                        coords,
                        duplicate: true,
                    });
                }
                Claim::InFlight => return Err(StreamError::InFlight),
                Claim::Full => {
                    return Err(StreamError::Limited(
                        "too many sends in flight; retry shortly".into(),
                    ))
                }
            }
        }
        let result = self.append_durable(&key, &part, &req).await;
        let mut dedup = self.dedup.borrow_mut();
        match (&result, &dedup_key) {
            (Ok(coords), Some(k)) => {
                dedup.complete(k, coords.clone(), now_ns());
            }
            (Err(_), Some(k)) => {
                dedup.release(k);
            }
            _ => {}
        }
        drop(dedup);
        let coords = result?;
        self.stats.borrow_mut().appends += 1;
        if !req.pointer_members.is_empty() {
            self.fan_out(&req, &coords);
        }
        Ok(AppendOk {
            coords,
            duplicate: false,
        })
    }

    /// Appends one record and waits until it is durable; then it is visible.
    async fn append_durable(
        &self,
        key: &PartitionKey,
        part: &Rc<Owned>,
        req: &AppendReq,
    ) -> Result<Coordinates, StreamError> {
        let now = now_ns();
        let mut rec = Record {
            seq: 0,
            // Client paths always get the server's clock (client timestamps are not trusted).
            timestamp_ns: now,
            flags: 0,
            epoch: 0,
            key: req.key.clone(),
            headers: req.headers.clone(),
            payload: req.payload.clone(),
        };
        let seq = self.append_record(part, &mut rec).await?;
        self.send_durable.record(latency_us(now, now_ns()));
        self.publish(key, part, seq);
        let message_id = rec
            .headers
            .iter()
            .find(|(k, _)| k.as_ref() == b"message_id")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default();
        Ok(Coordinates {
            message_id,
            topic: key.0.clone(),
            partition: key.1,
            seq,
            timestamp_ns: rec.timestamp_ns,
        })
    }

    async fn append_record(&self, part: &Rc<Owned>, rec: &mut Record) -> Result<u64, StreamError> {
        let appended = match self.store.append(&part.log, rec, rec.timestamp_ns) {
            Ok(a) => a,
            Err(AppendError::Backlogged { .. }) => {
                return Err(StreamError::Limited(
                    "storage is busy; retry shortly".into(),
                ))
            }
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
    fn publish(&self, key: &PartitionKey, part: &Owned, durable_seq: u64) {
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

    /// Writes one inbox pointer per member (fan-out on write), batched per owner shard.
    fn fan_out(&self, req: &AppendReq, coords: &Coordinates) {
        let headers = crate::messaging::fanout::pointer_headers(
            &req.pointer_headers,
            coords.seq,
            coords.partition,
        );
        for member in &req.pointer_members {
            let inbox = topic::inbox_topic(member);
            let count = self.partitions_of(
                &inbox,
                &Namespace::Inbox {
                    user: member.clone(),
                },
            );
            let partition = topic::partition_for(member.as_bytes(), count);
            let msg = StreamMsg::Pointers {
                topic: inbox.clone(),
                partition,
                user: req.user.clone(),
                pointers: vec![headers.clone()],
            };
            if self.shard.send(self.owner(&inbox, partition), msg).is_err() {
                self.stats.borrow_mut().pointer_failures += 1;
                log::warn!(
                    "[stream] partial fan-out for {}: outbox full",
                    coords.message_id
                );
            }
        }
    }

    async fn append_pointers(
        &self,
        inbox: String,
        partition: u32,
        user: String,
        pointers: Vec<Vec<(Bytes, Bytes)>>,
    ) {
        let member = inbox.strip_prefix("chat.inbox.").unwrap_or("").to_string();
        let run = async {
            let ns = Namespace::Inbox {
                user: member.clone(),
            };
            self.ensure_topic(&inbox, self.cfg.counts.count_for(&ns), &user)
                .await?;
            let key = (inbox.clone(), partition);
            let part = self.open_owned(&key).await?;
            for headers in pointers {
                let mut rec = Record {
                    seq: 0,
                    timestamp_ns: now_ns(),
                    flags: 0,
                    epoch: 0,
                    key: Bytes::from(member.clone()),
                    headers,
                    payload: Bytes::new(),
                };
                let seq = self.append_record(&part, &mut rec).await?;
                self.publish(&key, &part, seq);
                self.stats.borrow_mut().pointer_appends += 1;
                let hook = self.pointer_hook.borrow().clone();
                if let Some(hook) = hook {
                    hook(&key.0, key.1, seq);
                }
            }
            Ok::<(), StreamError>(())
        };
        if let Err(e) = run.await {
            self.stats.borrow_mut().pointer_failures += 1;
            log::warn!("[stream] partial fan-out to {inbox}: {e}");
        }
    }

    async fn read_owned(
        &self,
        key: &PartitionKey,
        from: u64,
        records_max: usize,
        bytes_max: usize,
    ) -> Result<ReadOk, StreamError> {
        if !self.topic_exists(&key.0) {
            // Not created yet: an empty partition that starts at 1.
            return Ok(ReadOk {
                records: Vec::new(),
                first_seq: 1,
                next_seq: 1,
                gap: false,
            });
        }
        let part = self.open_owned(key).await?;
        let first_seq = part.log.first_seq();
        let next_seq = part.published_next.get();
        let mut from = if from == 0 { first_seq } else { from };
        let gap = from < first_seq;
        if gap {
            from = first_seq;
        }
        if from >= next_seq {
            return Ok(ReadOk {
                records: Vec::new(),
                first_seq,
                next_seq,
                gap,
            });
        }
        let records_max = records_max.min((next_seq - from) as usize);
        match self
            .store
            .read(&part.log, from, records_max, bytes_max)
            .await
        {
            Ok(mut records) => {
                records.retain(|r| r.seq < next_seq);
                Ok(ReadOk {
                    records,
                    first_seq,
                    next_seq,
                    gap,
                })
            }
            Err(ReadError::Truncated { first_seq, .. }) => Ok(ReadOk {
                records: Vec::new(),
                first_seq,
                next_seq,
                gap: true,
            }),
            Err(e) => {
                log::error!("[stream] reading {}/{}: {e}", key.0, key.1);
                Err(StreamError::Internal("could not read the partition".into()))
            }
        }
    }

    async fn commit_owned(&self, key: CursorKey, seq: u64) -> Result<(), StreamError> {
        if !self.topic_exists(key.topic()) {
            return Err(StreamError::Invalid(format!(
                "no such topic {:?}",
                key.topic()
            )));
        }
        let pkey = (key.topic().to_string(), key.partition());
        let next_seq = self.open_owned(&pkey).await?.published_next.get();
        self.stats.borrow_mut().cursor_commits += 1;
        self.cursors.commit(&self.store, key, seq, next_seq).await
    }

    /// Bounds of the partitions of `topics` this shard owns. A partition that is not open
    /// is opened only when its log exists on disk: a poll must not create directories for
    /// partitions nobody wrote (those report an empty partition starting at 1).
    async fn partitions_owned(&self, topics: Vec<(String, u32)>) -> Vec<PartitionStats> {
        let me = self.shard.id();
        let mine: Vec<PartitionKey> = topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p)))
            .filter(|(t, p)| self.owner(t, *p) == me && topic::validate_topic(t).is_ok())
            .collect();
        let closed: Vec<PartitionKey> = {
            let owned = self.owned.borrow();
            mine.iter()
                .filter(|k| !owned.contains_key(*k))
                .cloned()
                .collect()
        };
        let on_disk: std::collections::HashSet<PartitionKey> = if closed.is_empty() {
            Default::default()
        } else {
            let root = boltq_io::store::logs_root(&self.cfg.data_dir);
            boltq_shards::spawn_blocking(move || {
                closed
                    .into_iter()
                    .filter(|(t, p)| root.join(topic::log_name(t, *p)).exists())
                    .collect()
            })
            .await
        };
        let mut out = Vec::with_capacity(mine.len());
        for key in mine {
            let open = self.owned.borrow().contains_key(&key) || on_disk.contains(&key);
            let part = if open {
                self.open_owned(&key).await.ok()
            } else {
                None
            };
            out.push(partition_stats_of(key, part.as_deref()));
        }
        out
    }

    fn cursors_owned(&self, topic: &str, partition: u32, group: &str) -> GroupCursors {
        let mut members = self.cursors.members(topic, partition, group);
        members.sort();
        let exists = self
            .catalog
            .borrow()
            .get(topic)
            .is_some_and(|n| partition < *n);
        let bounds = exists.then(|| {
            match self.owned.borrow().get(&(topic.to_string(), partition)) {
                Some(o) => (o.log.first_seq(), o.published_next.get()),
                // Not open: nothing was appended since start; the cursors know no more
                // than an empty partition would tell.
                None => (1, 1),
            }
        });
        GroupCursors { members, bounds }
    }

    /// Sweeps expired dedup claims once a minute.
    async fn sweep_loop(self: Rc<Self>) {
        loop {
            boltq_shards::sleep(std::time::Duration::from_secs(60)).await;
            self.dedup.borrow_mut().sweep(now_ns());
        }
    }
}

/// Microseconds from `from_ns` to `to_ns`; 0 when the clock went back.
fn latency_us(from_ns: i64, to_ns: i64) -> u64 {
    (to_ns.saturating_sub(from_ns).max(0) / 1_000) as u64
}

fn partition_stats_of(key: PartitionKey, part: Option<&Owned>) -> PartitionStats {
    let (first_seq, next_seq, bytes) = match part {
        Some(o) => (
            o.log.first_seq(),
            o.published_next.get(),
            o.log.size_bytes(),
        ),
        None => (1, 1, 0),
    };
    PartitionStats {
        topic: key.0,
        partition: key.1,
        first_seq,
        next_seq,
        bytes,
    }
}

#[cfg(test)]
mod admin_tests {
    use super::*;

    #[test]
    fn latency_is_microseconds_and_never_negative() {
        assert_eq!(latency_us(1_000, 3_500_000), 3_499);
        assert_eq!(latency_us(5_000, 1_000), 0);
        assert_eq!(latency_us(i64::MIN, i64::MAX), (i64::MAX / 1_000) as u64);
    }

    #[test]
    fn a_partition_that_is_not_open_reports_empty_from_one() {
        let p = partition_stats_of(("t".into(), 3), None);
        assert_eq!(
            p,
            PartitionStats {
                topic: "t".into(),
                partition: 3,
                first_seq: 1,
                next_seq: 1,
                bytes: 0
            }
        );
    }
}
