//! Fan-out on write: a send to a conversation appends one pointer record to each member's
//! inbox partition, on that partition's owner, so a device reads one inbox instead of every
//! conversation it belongs to.

use super::mesh::{AppendReq, StreamError, StreamMsg};
use super::{now_ns, Engine};
use crate::messaging::dedup::Coordinates;
use crate::messaging::topic::{self, Namespace};
use boltq_io::record::Record;
use bytes::Bytes;
use std::rc::Rc;

/// Called with (inbox topic, partition, seq) after a pointer became durable on this shard.
pub type PointerHook = Rc<dyn Fn(&str, u32, u64)>;

impl Engine {
    /// Installs the hook told of every inbox pointer this shard appends (one per shard).
    pub fn set_pointer_hook(&self, hook: PointerHook) {
        *self.pointer_hook.borrow_mut() = Some(hook);
    }

    /// Writes one inbox pointer per member (fan-out on write), batched per owner shard.
    pub(super) fn fan_out(&self, req: &AppendReq, coords: &Coordinates) {
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

    pub(super) async fn append_pointers(
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
            if let Some(replication) = self.replication() {
                // Through the inbox's slot group; every node writes it from the log, and
                // the leader's push dispatcher hears of it there (`apply_replicated`).
                for headers in pointers {
                    let req = AppendReq {
                        topic: inbox.clone(),
                        partition,
                        key: Bytes::from(member.clone()),
                        headers,
                        payload: Bytes::new(),
                        user: user.clone(),
                        dedup: None,
                        pointer_members: Vec::new(),
                        pointer_headers: Vec::new(),
                    };
                    self.append_replicated(replication, &req, None).await?;
                    self.stats.borrow_mut().pointer_appends += 1;
                }
                return Ok(());
            }
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
}
