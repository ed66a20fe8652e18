//! What other shards send this engine: requests (answered through their reply token,
//! long ones from a spawned task so the mesh loop never waits on storage) and one-way
//! messages (tails for the mirror, inbox pointers, new topics, unwatches).

use super::mesh::{StreamMsg, StreamReply};
use super::Engine;
use boltq_shards::{Incoming, ReplyToken, ShardId};
use std::rc::Rc;

impl Engine {
    pub fn on_mesh(self: &Rc<Self>, from: ShardId, incoming: Incoming<StreamMsg>) {
        match incoming {
            Incoming::Request { msg, token } => self.on_request(from, msg, token),
            Incoming::Message(msg) => self.on_message(from, msg),
        }
    }

    pub(super) fn reply(&self, token: ReplyToken, r: StreamReply) {
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
                let c = match self.replication() {
                    Some(r) => Engine::cursor_replicated(r, &key),
                    None => self.cursors.get(&key),
                };
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
            StreamMsg::Pointers {
                topic,
                partition,
                user,
                pointers,
            } => {
                // Answered once the pointers are written or given up.
                let me = Rc::clone(self);
                boltq_shards::spawn(async move {
                    me.append_pointers(topic, partition, user, pointers).await;
                    me.reply(token, StreamReply::Pointed);
                })
                .detach();
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
            StreamMsg::Created { topic, partitions } => {
                self.catalog.borrow_mut().insert(topic, partitions);
            }
            other => log::warn!("[stream] {other:?} is not a one-way message"),
        }
    }
}
