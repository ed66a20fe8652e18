//! Fan-out on write: a send to a conversation appends one pointer record to each member's
//! inbox partition, on that partition's owner, so a device reads one inbox instead of every
//! conversation it belongs to.
//!
//! In a cluster a pointer goes through its inbox's slot group, whose leader may change while
//! the append is in flight: the outcome is then unknown. Such a pointer is appended again,
//! under a claim (the message's id in that inbox) that the slot remembers for longer than the
//! retries last, so the copy committed after all answers as a duplicate: a pointer is stored
//! once, not lost and not doubled.

use super::mesh::{AppendReq, StreamError, StreamMsg, StreamReply};
use super::{now_ns, Engine, MESH_TIMEOUT_MS};
use crate::messaging::dedup::DedupKey;
use crate::messaging::slot::{DedupClaim, POINTER_CLAIM_TTL_NS};
use crate::messaging::topic::{self, Namespace};
use boltq_io::record::Record;
use bytes::Bytes;
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long a pointer whose append got no outcome (its inbox slot's leader changed, no
/// leader was elected yet, the cluster timed out) is tried again before it is given up and
/// counted as a failure.
pub const POINTER_RETRY_WINDOW_MS: u64 = 30_000;
/// The first pause between two attempts; each later pause doubles, up to the max.
pub const POINTER_RETRY_PAUSE_MS_MIN: u64 = 100;
pub const POINTER_RETRY_PAUSE_MS_MAX: u64 = 2_000;

// A retry must find the first attempt's claim: the slot keeps claims for twice the window.
const _: () = assert!(2 * POINTER_RETRY_WINDOW_MS as i64 * 1_000_000 <= POINTER_CLAIM_TTL_NS);

/// Called with (inbox topic, partition, seq) after a pointer became durable on this shard.
pub type PointerHook = Rc<dyn Fn(&str, u32, u64)>;

impl Engine {
    /// Installs the hook told of every inbox pointer this shard appends (one per shard).
    pub fn set_pointer_hook(&self, hook: PointerHook) {
        *self.pointer_hook.borrow_mut() = Some(hook);
    }

    /// Writes one inbox pointer per member (fan-out on write) to the send at `conv_seq` of
    /// `conv_partition` whose record holds `send_headers`, each on its inbox's owner shard,
    /// and waits until every owner wrote its pointer durably or gave it up (counted there).
    /// Used by a single node before it answers a send, so a `sent` reply means the pointers
    /// are on disk too, and in a cluster by the conversation slot's leader (`outbox.rs`).
    /// False when an owner never answered (the mesh refused or timed the request out):
    /// that pointer may be missing.
    pub(super) async fn write_pointers_to(
        &self,
        members: &[String],
        send_headers: &[(Bytes, Bytes)],
        (conv_seq, conv_partition): (u64, u32),
        sender: &str,
    ) -> bool {
        let headers =
            crate::messaging::fanout::pointer_headers(send_headers, conv_seq, conv_partition);
        let writes = members.iter().map(|member| {
            let inbox = topic::inbox_topic(member);
            let ns = Namespace::Inbox {
                user: member.clone(),
            };
            let partition =
                topic::partition_for(member.as_bytes(), self.partitions_of(&inbox, &ns));
            let owner = self.owner(&inbox, partition);
            let msg = StreamMsg::Pointers {
                topic: inbox,
                partition,
                user: sender.to_string(),
                pointers: vec![headers.to_vec()],
            };
            // The owner answers once its retries end: give it their whole window.
            self.ask_within(owner, msg, POINTER_RETRY_WINDOW_MS + MESH_TIMEOUT_MS)
        });
        let mut answered = true;
        for written in futures_util::future::join_all(writes).await {
            match written {
                Ok(StreamReply::Pointed) => {}
                Ok(other) => log::warn!("[stream] a pointer write answered {other:?}"),
                Err(e) => {
                    log::warn!("[stream] a pointer write got no answer: {e}");
                    answered = false;
                }
            }
        }
        answered
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
                    let claim = pointer_claim(&user, &inbox, &headers);
                    let req = AppendReq {
                        topic: inbox.clone(),
                        partition,
                        key: Bytes::from(member.clone()),
                        headers,
                        payload: Bytes::new(),
                        user: user.clone(),
                        dedup: None,
                        pointer_members: Vec::new(),
                    };
                    let attempt = || async {
                        if self.closing.get() {
                            // Shutting down: a retry could not finish; the pointer is lost
                            // as any in flight at a stop (counted below).
                            return Err(StreamError::Internal("shutting down".into()));
                        }
                        let claim = claim.clone();
                        let result = self.append_replicated(replication, &req, claim).await;
                        if matches!(result, Err(StreamError::Limited(_))) {
                            self.stats.borrow_mut().pointer_retries += 1;
                        }
                        result
                    };
                    retry_without_outcome(attempt, claim.is_some()).await?;
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

/// The claim that makes a pointer's append idempotent: the message's id in this inbox, for
/// this sender. None for a pointer without a `message_id` header (the gateway always sets
/// one): such a pointer is appended once, never retried.
fn pointer_claim(sender: &str, inbox: &str, headers: &[(Bytes, Bytes)]) -> Option<DedupClaim> {
    let (_, id) = headers.iter().find(|(k, _)| k.as_ref() == b"message_id")?;
    let id = std::str::from_utf8(id).ok()?;
    DedupKey::new(sender, inbox, id)
        .ok()
        .map(DedupClaim::Pointer)
}

/// Runs `attempt` again while it ends without an outcome (`StreamError::Limited`: no leader,
/// outcome unknown, timed out, too many in flight) and `retry` allows it, pausing between
/// attempts, for at most [`POINTER_RETRY_WINDOW_MS`]. Any other answer is final.
async fn retry_without_outcome<T, F, Fut>(mut attempt: F, retry: bool) -> Result<T, StreamError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StreamError>>,
{
    let deadline = Instant::now() + Duration::from_millis(POINTER_RETRY_WINDOW_MS);
    let mut pause_ms = POINTER_RETRY_PAUSE_MS_MIN;
    loop {
        match attempt().await {
            Err(StreamError::Limited(why)) if retry && Instant::now() < deadline => {
                log::debug!("[stream] pointer append without an outcome ({why}); again");
            }
            done => return done,
        }
        boltq_shards::sleep(Duration::from_millis(pause_ms)).await;
        pause_ms = (pause_ms * 2).min(POINTER_RETRY_PAUSE_MS_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    /// Answers without an outcome are tried again until one comes; a refusal is final, and
    /// an append without a claim is never repeated (it could store a second pointer).
    #[test]
    fn only_appends_without_an_outcome_and_with_a_claim_are_tried_again() {
        let outcomes = |answers: Vec<Result<u32, StreamError>>, retry: bool| {
            let run = move || -> std::pin::Pin<Box<dyn Future<Output = _>>> {
                Box::pin(async move {
                    let answers = RefCell::new(answers.into_iter());
                    let attempts = Cell::new(0);
                    let result = retry_without_outcome(
                        || {
                            attempts.set(attempts.get() + 1);
                            let next = answers.borrow_mut().next().expect("an answer left");
                            async move { next }
                        },
                        retry,
                    )
                    .await;
                    (result.map_err(|e| e.to_string()), attempts.get())
                })
            };
            boltq_shards::block_on("pointer-retry", run).expect("the executor runs")
        };
        let unknown = || Err(StreamError::Limited("outcome unknown".into()));
        assert_eq!(
            outcomes(vec![unknown(), unknown(), Ok(7)], true),
            (Ok(7), 3)
        );
        assert_eq!(
            outcomes(
                vec![unknown(), Err(StreamError::Invalid("refused".into()))],
                true
            ),
            (Err("refused".into()), 2)
        );
        assert_eq!(
            outcomes(vec![unknown(), Ok(7)], false),
            (Err("outcome unknown".into()), 1)
        );
    }

    #[test]
    fn a_pointers_claim_is_its_message_id_in_the_members_inbox() {
        let headers = crate::messaging::fanout::pointer_headers(
            &[
                ("message_id".into(), "01HM".into()),
                ("sender".into(), "alice".into()),
            ],
            4,
            0,
        );
        let claim = pointer_claim("alice", "chat.inbox.bob", &headers);
        let expected = DedupKey::new("alice", "chat.inbox.bob", "01HM").unwrap();
        assert_eq!(claim, Some(DedupClaim::Pointer(expected)));
        let other_inbox = pointer_claim("alice", "chat.inbox.carol", &headers);
        assert_ne!(
            claim, other_inbox,
            "each member's pointer has its own claim"
        );
        assert_eq!(pointer_claim("alice", "chat.inbox.bob", &[]), None);
    }
}
