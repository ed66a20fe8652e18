//! The topic catalog every shard reads, and topic creation: shard 0 alone writes each
//! manifest (so concurrent first sends share one write and quotas hold), then tells the
//! other shards.

use super::catalog;
use super::mesh::{StreamError, StreamMsg, StreamReply};
use super::{now_ns, Engine};
use crate::messaging::topic::Namespace;
use boltq_shards::ReplyToken;
use std::rc::Rc;

impl Engine {
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

    /// Makes sure `topic` exists, creating it with `partitions` if not; returns its count.
    pub(super) async fn ensure_topic(
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

    pub(super) fn on_register(
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
        // A topic a slot group's log already holds was admitted by its leader: a node
        // applying it registers it whatever its own limits say.
        let replicated = user == super::replicated::REPLICA_USER;
        if !replicated && self.catalog.borrow().len() >= catalog::TOPICS_MAX {
            self.reply(
                token,
                refuse(format!("topic limit of {} reached", catalog::TOPICS_MAX)),
            );
            return;
        }
        if !replicated && !self.quota.borrow_mut().take(&user, now_ns()) {
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
}
