//! The operator's view: each shard's numbers, partition bounds and cursor groups, asked of
//! every shard with the admin timeout so a stuck shard cannot hang a poll.

use super::mesh::{GroupCursors, PartitionStats, StreamError, StreamMsg, StreamReply};
use super::mirror::PartitionKey;
use super::owned::Owned;
use super::{stats, Engine, ADMIN_MESH_TIMEOUT_MS, ADMIN_PARTITIONS_MAX};
use crate::messaging::topic;
use boltq_shards::ShardId;

impl Engine {
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
        s.partitions_incomplete = self.incomplete.borrow().len() as u64;
        if let Some(replication) = self.replication() {
            for slot in (0..boltq_shards::SLOTS).filter(|&slot| replication.leads(slot)) {
                replication.with_slot(slot, &mut |streams| {
                    s.outbox_sends += streams.outbox().len() as u64;
                });
            }
        }
        s
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
        self.ask_within(dest, msg, ADMIN_MESH_TIMEOUT_MS).await
    }

    /// Bounds of the partitions of `topics` this shard owns. A partition that is not open
    /// is opened only when its log exists on disk: a poll must not create directories for
    /// partitions nobody wrote (those report an empty partition starting at 1).
    pub(super) async fn partitions_owned(&self, topics: Vec<(String, u32)>) -> Vec<PartitionStats> {
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

    pub(super) fn cursors_owned(&self, topic: &str, partition: u32, group: &str) -> GroupCursors {
        let mut members = match self.replication() {
            Some(r) => Engine::members_replicated(r, topic, partition, group),
            None => self.cursors.members(topic, partition, group),
        };
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
mod tests {
    use super::*;

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
