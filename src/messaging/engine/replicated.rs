//! The engine with `cluster.enabled` (issue 15): a partition's appends, cursor commits and
//! dedup claims go through its slot's Raft group (`messaging::slot`) instead of this
//! shard's logs, so a `sent` reply means a quorum of nodes has the send and the slot's
//! leader numbered it.
//!
//! The groups live a layer up (`cluster::serve`); this file is the engine's side of the
//! seam: what it asks of them ([`StreamReplication`]) and what it does with the records
//! they apply ([`Engine::apply_replicated`]): every node writes each committed record into
//! its own log of the partition and makes it visible to its readers at once (committed
//! means on a quorum's disks), so history and live subscriptions are served from the local
//! copy on every node.
//!
//! A node that installed a slot snapshot from its leader has the partitions' positions but
//! not the records before them: its copy of such a partition stops at the hole. It is then
//! filled from a peer's copy ([`Engine::fill`]: the slot's leader first, then any member),
//! up to what the replica applied, while the records the log applies meanwhile are left to
//! the fill; reads of the copy are refused (naming the hole) until it is whole, never
//! served with records missing.

use super::mesh::{AppendOk, AppendReq, StreamError};
use super::mirror::PartitionKey;
use super::owned::Owned;
use super::Engine;
use crate::messaging::cursor::CursorKey;
use crate::messaging::slot::{
    Append, Appended, DedupClaim, StreamCommand, StreamOutcome, StreamSlot,
};
use crate::messaging::topic::Namespace;
use boltq_io::record::Record;
use boltq_io::store::AppendError;
use boltq_shards::partition_slot;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// Records `[from_seq, to_seq)` of a partition, asked of another node's copy (to fill a
/// hole in this node's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRead {
    pub topic: String,
    pub partition: u32,
    pub from_seq: u64,
    pub to_seq: u64,
}

/// What the engine asks of the slot groups its shard hosts (`cluster::serve` implements
/// it).
pub trait StreamReplication {
    /// Runs `cmd` through slot `slot`'s group (on its leader, wherever it is); the error
    /// says why no outcome came (no leader, outcome unknown, timed out), for the client.
    fn submit(
        &self,
        slot: u16,
        cmd: StreamCommand,
    ) -> Pin<Box<dyn Future<Output = Result<StreamOutcome, StreamError>>>>;
    /// Calls `f` with slot `slot`'s messaging state as this node applied it.
    fn with_slot(&self, slot: u16, f: &mut dyn FnMut(&StreamSlot));
    /// Whether this node leads slot `slot` now.
    fn leads(&self, slot: u16) -> bool;
    /// Records of another node's copy of a partition, from `read.from_seq` on (at least
    /// one, in order); the error names why no member sent any.
    fn read_from_peers(
        &self,
        slot: u16,
        read: StreamRead,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Record>, String>>>>;
}

/// Most records and record bytes one peer read sends.
pub const PEER_READ_RECORDS_MAX: usize = 1024;
pub const PEER_READ_BYTES_MAX: usize = 1024 * 1024;
/// How long a fill waits before asking the peers again after none sent anything.
pub const FILL_RETRY_MS: u64 = 1_000;

/// What became of a committed record this node was to copy.
enum Copied {
    Appended,
    /// The copy holds it already (a restart applying its raft log again).
    Held,
    /// The copy ends at this seq, before the record: a hole.
    After(u64),
}

/// Who a replicated topic is registered for in this node's catalog: not a user (user ids
/// are never empty), so the per-user creation quota does not apply to a topic the log
/// already holds.
pub(super) const REPLICA_USER: &str = "";

impl Engine {
    /// From now on this shard's partitions are replicated through `replication`.
    pub fn set_replication(self: &Rc<Self>, replication: Rc<dyn StreamReplication>) {
        if self.replication.set(replication).is_err() {
            panic!("the engine's replication is set once");
        }
        boltq_shards::spawn(Rc::clone(self).outbox_loop()).detach();
    }

    pub(super) fn replication(&self) -> Option<&Rc<dyn StreamReplication>> {
        self.replication.get()
    }

    /// The slots this node leads now, or `None` without replication (every partition's
    /// work is then its owning shard's alone).
    pub fn led_slots(&self) -> Option<std::collections::BTreeSet<u16>> {
        let replication = self.replication()?;
        Some(
            (0..boltq_shards::SLOTS)
                .filter(|&slot| replication.leads(slot))
                .collect(),
        )
    }

    /// Whether this node acts for a partition: its slot's leader, or any node without
    /// replication.
    pub fn leads_partition(&self, topic: &str, partition: u32) -> bool {
        self.replication()
            .is_none_or(|r| r.leads(partition_slot(topic, partition)))
    }

    /// A send through the partition's slot group: the dedup claim, the numbering and the
    /// append happen in one applied command on every replica.
    pub(super) async fn append_replicated(
        &self,
        replication: &Rc<dyn StreamReplication>,
        req: &AppendReq,
        dedup: Option<DedupClaim>,
    ) -> Result<AppendOk, StreamError> {
        let cmd = StreamCommand::Append(Append {
            topic: req.topic.clone(),
            partition: req.partition,
            now_ns: super::now_ns(),
            dedup,
            key: req.key.clone(),
            headers: req.headers.clone(),
            payload: req.payload.clone(),
            fanout: req.pointer_members.clone(),
        });
        let slot = partition_slot(&req.topic, req.partition);
        match replication.submit(slot, cmd).await? {
            StreamOutcome::Appended { coords, duplicate } => Ok(AppendOk { coords, duplicate }),
            StreamOutcome::Refused(why) => Err(StreamError::Invalid(why)),
            StreamOutcome::Busy(why) => Err(StreamError::Limited(why)),
            other => Err(StreamError::Internal(format!(
                "an append answered {other:?}"
            ))),
        }
    }

    pub(super) async fn commit_replicated(
        &self,
        replication: &Rc<dyn StreamReplication>,
        key: CursorKey,
        seq: u64,
    ) -> Result<(), StreamError> {
        let slot = partition_slot(key.topic(), key.partition());
        match replication
            .submit(slot, StreamCommand::Commit { key, seq })
            .await?
        {
            StreamOutcome::Committed(_) => {
                self.stats.borrow_mut().cursor_commits += 1;
                Ok(())
            }
            StreamOutcome::Refused(why) => Err(StreamError::Invalid(why)),
            other => Err(StreamError::Internal(format!(
                "a commit answered {other:?}"
            ))),
        }
    }

    /// A cursor as this node's replica of its slot holds it.
    pub(super) fn cursor_replicated(
        replication: &Rc<dyn StreamReplication>,
        key: &CursorKey,
    ) -> Option<u64> {
        let mut found = None;
        let slot = partition_slot(key.topic(), key.partition());
        replication.with_slot(slot, &mut |s| found = s.cursors().get(key));
        found
    }

    /// The members of a cursor group as this node's replica holds them.
    pub(super) fn members_replicated(
        replication: &Rc<dyn StreamReplication>,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        replication.with_slot(partition_slot(topic, partition), &mut |s| {
            out = s
                .cursors()
                .members(topic, partition, group)
                .map(|(m, seq)| (m.to_string(), seq))
                .collect();
        });
        out
    }

    /// Writes records the slot groups committed into this node's logs of their partitions
    /// and makes them visible, in order (the cluster's stream sink). Records this copy
    /// already holds (a restart applying its raft log again) are skipped; a record past a
    /// hole marks the partition's copy incomplete. An error stops the node's replication:
    /// its copy could no longer follow the log.
    pub async fn apply_replicated(
        self: &Rc<Self>,
        records: Vec<(u16, Appended)>,
    ) -> Result<(), String> {
        // Published once per partition after the batch (one push to each watching shard,
        // as a single node publishes per durable round), then the push dispatcher is told.
        let mut newest: HashMap<PartitionKey, u64> = HashMap::new();
        let mut pointers: Vec<(PartitionKey, u64)> = Vec::new();
        let slots: std::collections::BTreeSet<u16> = records.iter().map(|(s, _)| *s).collect();
        let _applying = self.outbox_work.applying(slots.iter().copied());
        for (slot, appended) in records {
            let Appended {
                topic,
                partition,
                record,
            } = appended;
            let key = (topic, partition);
            if self.incomplete.borrow().contains_key(&key) {
                continue;
            }
            let seq = record.seq;
            match self.write_replicated(&key, record).await? {
                Copied::Appended => {}
                Copied::Held => continue,
                Copied::After(next) => {
                    self.start_fill(slot, key, next);
                    continue;
                }
            }
            let leads = self.replication().is_some_and(|r| r.leads(slot));
            if leads && key.0.starts_with("chat.inbox.") {
                // One node's push dispatcher acts on it: the slot's leader's.
                pointers.push((key.clone(), seq));
            }
            // Records come in log order: the last one of a partition is its newest.
            newest.insert(key, seq);
        }
        for (key, seq) in newest {
            self.publish_copied(&key, seq);
        }
        // The sends just applied that owe pointers: this node writes them if it leads.
        for slot in slots {
            self.write_outbox(slot, false);
        }
        let hook = self.pointer_hook.borrow().clone();
        if let Some(hook) = hook {
            for (key, seq) in pointers {
                hook(&key.0, key.1, seq);
            }
        }
        Ok(())
    }

    /// Makes the copy's records up to `seq` visible and pushes them to the watching shards.
    fn publish_copied(&self, key: &PartitionKey, seq: u64) {
        let part = self.owned.borrow().get(key).cloned();
        if let Some(part) = part {
            self.publish(key, &part, seq);
        }
    }

    /// Appends one committed record to this node's copy of its partition (registering the
    /// topic on this node first, as its leader did).
    async fn write_replicated(&self, key: &PartitionKey, record: Record) -> Result<Copied, String> {
        let part = self.open_copy(key).await?;
        let copied = self.copy(key, &part, record).await?;
        if let Copied::After(next) = copied {
            log::warn!(
                "[stream] {}/{}: this node's copy ends at {next} and the log continues past \
                 it (a snapshot caught this node up); filling it from a peer, reads of it are \
                 refused until then",
                key.0,
                key.1
            );
        }
        Ok(copied)
    }

    /// This node's copy of a partition, registering the topic on this node first, as its
    /// leader did.
    async fn open_copy(&self, key: &PartitionKey) -> Result<Rc<Owned>, String> {
        // The leader checked the name before proposing it; a name this node's rules
        // refuse (another version's) still gets a copy rather than stopping replication.
        let ns = Namespace::of(&key.0).unwrap_or(Namespace::Custom);
        self.ensure_topic(&key.0, self.cfg.counts.count_for(&ns), REPLICA_USER)
            .await
            .map_err(|e| format!("register {} on this node: {e}", key.0))?;
        self.open_owned(key)
            .await
            .map_err(|e| format!("open {}/{}: {e}", key.0, key.1))
    }

    /// Appends `record` to the copy if it is the next one. The caller publishes it (makes
    /// it visible: committed on a quorum's disks, so whatever this node's fsync).
    async fn copy(
        &self,
        key: &PartitionKey,
        part: &Owned,
        record: Record,
    ) -> Result<Copied, String> {
        let mut rec = record;
        let at_ns = rec.timestamp_ns;
        loop {
            // Checked again after every wait: another task may have appended meanwhile.
            let next = part.log.next_seq();
            if rec.seq < next {
                return Ok(Copied::Held);
            }
            if rec.seq > next {
                return Ok(Copied::After(next));
            }
            match self.store.append(&part.log, &mut rec, at_ns) {
                Ok(appended) => {
                    assert_eq!(
                        appended.seq, rec.seq,
                        "a copy numbers records as the slot did"
                    );
                    part.pending.borrow_mut().push_back(rec);
                    return Ok(Copied::Appended);
                }
                // The journal's buffer is full: wait for the round in progress to free it.
                Err(AppendError::Backlogged { .. }) => self
                    .store
                    .wait_for_room()
                    .await
                    .map_err(|e| format!("storage: {e}"))?,
                Err(e) => return Err(format!("append to {}/{}: {e}", key.0, key.1)),
            }
        }
    }

    /// Marks the copy of a partition incomplete from `from` and fills it, unless a fill of
    /// it runs already.
    fn start_fill(self: &Rc<Self>, slot: u16, key: PartitionKey, from: u64) {
        if self
            .incomplete
            .borrow_mut()
            .insert(key.clone(), from)
            .is_none()
        {
            boltq_shards::spawn(Rc::clone(self).fill(slot, key)).detach();
        }
    }

    /// After snapshots replaced the state of `slots`: a copy that ends before the position
    /// its slot's state holds has a hole, which otherwise shows only when the next record
    /// past it is applied — until then the copy would be served short of what was
    /// committed. The positions are taken now, once the round's records are written
    /// (`cluster::node::SnapshotsInstalled`): no record below them is still on its way to
    /// a copy, so a copy that ends before one lacks records for good. The copies are
    /// opened and compared in the background, one after another, off the raft loop.
    ///
    /// Not at start: that would open every partition's copy on every restart, for the rare
    /// fill a restart cut short (such a hole still shows at its next record).
    pub fn verify_copies(self: &Rc<Self>, slots: &[u16]) {
        let Some(replication) = self.replication().cloned() else {
            return;
        };
        let mut due = Vec::new();
        for &slot in slots {
            replication.with_slot(slot, &mut |s| {
                for ((topic, partition), position) in s.partitions() {
                    if position.next_seq > 1 {
                        due.push((slot, (topic.clone(), *partition), position.next_seq));
                    }
                }
            });
        }
        if due.is_empty() {
            return;
        }
        self.copies_to_verify.borrow_mut().extend(due);
        if !self.verifying_copies.replace(true) {
            boltq_shards::spawn(Rc::clone(self).verify_copies_loop()).detach();
        }
    }

    async fn verify_copies_loop(self: Rc<Self>) {
        loop {
            let next = self.copies_to_verify.borrow_mut().pop_front();
            let Some((slot, key, position)) = next else {
                self.verifying_copies.set(false);
                return;
            };
            if self.incomplete.borrow().contains_key(&key) {
                continue;
            }
            match self.open_copy(&key).await {
                Ok(part) => {
                    let local = part.log.next_seq();
                    if local < position {
                        log::warn!(
                            "[stream] {}/{}: this node's copy ends at {local}, its slot's state \
                             at {position} (a snapshot caught this node up); filling it from \
                             a peer, reads of it are refused until then",
                            key.0,
                            key.1
                        );
                        self.start_fill(slot, key, local);
                    }
                }
                Err(e) => log::error!("[stream] verify the copy: {e}"),
            }
        }
    }

    /// Fills this node's copy of a partition from peers' copies up to what its replica
    /// applied, then lets the log's records through again.
    async fn fill(self: Rc<Self>, slot: u16, key: PartitionKey) {
        // The engine is handed the groups right after its node starts, before the node's
        // first round; a hole found before that (none in the server's start order) waits.
        let replication = loop {
            if let Some(r) = self.replication().cloned() {
                break r;
            }
            boltq_shards::sleep(std::time::Duration::from_millis(FILL_RETRY_MS / 10)).await;
        };
        let mut filled = 0u64;
        loop {
            let mut target = 0;
            replication.with_slot(slot, &mut |s| {
                target = s.position(&key.0, key.1).next_seq;
            });
            let part = match self.open_owned(&key).await {
                Ok(part) => part,
                Err(e) => {
                    log::error!("[stream] fill {}/{}: {e}", key.0, key.1);
                    boltq_shards::sleep(std::time::Duration::from_millis(FILL_RETRY_MS)).await;
                    continue;
                }
            };
            let local = part.log.next_seq();
            if local >= target {
                // No await since `target` was read: every record applied so far is here,
                // and the log's next one continues the copy.
                self.incomplete.borrow_mut().remove(&key);
                let mut stats = self.stats.borrow_mut();
                stats.copies_filled += 1;
                stats.records_filled += filled;
                drop(stats);
                log::info!(
                    "[stream] {}/{}: copy filled with {filled} records from peers, whole up to {local}",
                    key.0,
                    key.1
                );
                return;
            }
            let read = StreamRead {
                topic: key.0.clone(),
                partition: key.1,
                from_seq: local,
                to_seq: target,
            };
            let records = match replication.read_from_peers(slot, read).await {
                Ok(records) => records,
                Err(e) => {
                    log::warn!("[stream] fill {}/{} from {local}: {e}", key.0, key.1);
                    boltq_shards::sleep(std::time::Duration::from_millis(FILL_RETRY_MS)).await;
                    continue;
                }
            };
            for record in records {
                let seq = record.seq;
                match self.copy(&key, &part, record).await {
                    Ok(Copied::Appended) => filled += 1,
                    Ok(Copied::Held) => {}
                    Ok(Copied::After(next)) => {
                        // No member sent the records from `next` (`Node::read_stream` takes
                        // a later start only when none had them): their retention removed
                        // them. The copy lets them go too, as retention would have here,
                        // and goes on from where the peers' copies start (or from what the
                        // replica applied, when that comes first), instead of refusing
                        // reads of the partition for good.
                        let start = seq.min(target);
                        match self.restart_copy(&part, start).await {
                            Ok(()) => {
                                self.stats.borrow_mut().records_skipped += start - next;
                                log::warn!(
                                    "[stream] {}/{}: records {next}..{start} were removed by the \
                                     peers' retention before this node copied them; its copy \
                                     now starts at {start}",
                                    key.0,
                                    key.1
                                );
                            }
                            Err(e) => {
                                log::error!("[stream] restart {}/{} at {start}: {e}", key.0, key.1);
                                boltq_shards::sleep(std::time::Duration::from_millis(
                                    FILL_RETRY_MS,
                                ))
                                .await;
                            }
                        }
                        break;
                    }
                    Err(e) => {
                        log::error!("[stream] fill {}/{}: {e}", key.0, key.1);
                        break;
                    }
                }
            }
            // One push to the watching shards per page.
            self.publish(&key, &part, part.log.next_seq().saturating_sub(1));
        }
    }

    /// Drops this node's copy of a partition below `start` and continues it there (the
    /// records it lacks are gone from every peer): durable before it returns.
    async fn restart_copy(&self, part: &Owned, start: u64) -> Result<(), String> {
        self.store
            .restart_log_at(&part.log, start)
            .await
            .map_err(|e| format!("storage: {e}"))?;
        // Everything pending lay below `start`, and readers see the copy from `start` on.
        part.pending.borrow_mut().clear();
        part.published_next.set(start);
        Ok(())
    }

    /// Records of this node's copy for a peer filling its own: from `read.from_seq`, below
    /// `read.to_seq`, bounded by `PEER_READ_*`; refused when this copy lacks the first
    /// because it is incomplete. When this copy's retention removed the first, the records
    /// from its first retained one are sent instead (at least one, even past `to_seq`):
    /// they tell the peer where the records now begin.
    pub async fn read_for_peer(&self, read: StreamRead) -> Result<Vec<Record>, String> {
        let key = (read.topic.clone(), read.partition);
        if let Some(&from) = self.incomplete.borrow().get(&key) {
            if from <= read.from_seq {
                return Err(format!("this node's copy lacks records from {from} too"));
            }
        }
        if !self.topic_exists(&key.0) {
            return Err(format!("no topic {} on this node", key.0));
        }
        let page = self
            .read_owned(
                &key,
                read.from_seq,
                PEER_READ_RECORDS_MAX,
                PEER_READ_BYTES_MAX,
            )
            .await
            .map_err(|e| e.to_string())?;
        let mut records = page.records;
        let below = records.iter().take_while(|r| r.seq < read.to_seq).count();
        records.truncate(if page.gap { below.max(1) } else { below });
        Ok(records)
    }

    /// Why a read of this copy of the partition is refused, if it is incomplete (a fill
    /// is running).
    pub(super) fn incomplete_refusal(&self, key: &PartitionKey) -> Option<StreamError> {
        let from = *self.incomplete.borrow().get(key)?;
        Some(StreamError::Internal(format!(
            "this node's copy of {}/{} lacks records from seq {from} (it caught up from a \
             snapshot); read it through another node",
            key.0, key.1
        )))
    }
}
