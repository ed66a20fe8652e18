//! A client-facing append: routed to the partition's owner, checked against the dedup
//! table (a resent message answers with its first coordinates), appended durably, then
//! fanned out to the members' inboxes (durably too, before the answer).

use super::latency::latency_us;
use super::mesh::{AppendOk, AppendReq, StreamError, StreamMsg, StreamReply};
use super::mirror::PartitionKey;
use super::owned::Owned;
use super::{now_ns, Engine};
use crate::messaging::dedup::{Claim, Coordinates, DedupKey};
use crate::messaging::slot::DedupClaim;
use crate::messaging::topic::Namespace;
use boltq_io::record::Record;
use std::rc::Rc;

impl Engine {
    pub async fn append(&self, req: AppendReq) -> Result<AppendOk, StreamError> {
        let dest = self.owner(&req.topic, req.partition);
        match self.ask(dest, StreamMsg::Append(Box::new(req))).await? {
            StreamReply::Appended(r) => r,
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    pub(super) async fn append_owned(&self, req: AppendReq) -> Result<AppendOk, StreamError> {
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
        if let Some(replication) = self.replication() {
            let claim = dedup_key.map(DedupClaim::Send);
            // The pointers are the slot leader's to write, from the slot's outbox.
            let ok = self.append_replicated(replication, &req, claim).await?;
            let mut stats = self.stats.borrow_mut();
            match ok.duplicate {
                true => stats.duplicates += 1,
                false => stats.appends += 1,
            }
            return Ok(ok);
        }
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
        if let Ok(coords) = &result {
            self.stats.borrow_mut().appends += 1;
            // Before the claim completes: a retry meanwhile is told to wait (in flight),
            // and a duplicate answer, like the first, means the pointers are on disk.
            self.write_send_pointers(&req, coords).await;
        }
        match (&result, &dedup_key) {
            (Ok(coords), Some(k)) => {
                self.dedup
                    .borrow_mut()
                    .complete(k, coords.clone(), now_ns());
            }
            (Err(_), Some(k)) => {
                self.dedup.borrow_mut().release(k);
            }
            _ => {}
        }
        let coords = result?;
        Ok(AppendOk {
            coords,
            duplicate: false,
        })
    }

    /// A single node's fan-out of a stored send: its pointers, durable before the answer.
    async fn write_send_pointers(&self, req: &AppendReq, coords: &Coordinates) {
        if req.pointer_members.is_empty() {
            return;
        }
        let at = (coords.seq, coords.partition);
        let answered = self
            .write_pointers_to(&req.pointer_members, &req.headers, at, &req.user)
            .await;
        if !answered {
            self.stats.borrow_mut().pointer_failures += 1;
        }
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
}
