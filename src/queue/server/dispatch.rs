//! From a decoded frame to a pending reply: each v1 command's step on the connection's side.
//!
//! `dispatch` runs synchronously for every frame of a batch, in order: local commands are
//! answered at once, slot commands are applied (or sent to their owner) at once. `resolve`
//! then awaits each reply in request order and encodes it.

use super::delivery::{CatchUp, Confirmations};
use super::exchanges::ExchangeOp;
use super::extra::{ExtraCommands, ExtraReply};
use super::outbound::Outbound;
use super::plane::{now_ns, Plane, StatsGather, Submitted};
use crate::queue::broker::{Command, ConsumerRef, Outcome};
use crate::queue::message::{Message, MessageExtras, MessageId};
use crate::queue::protocol::frame::Frame;
use crate::queue::protocol::reply;
use crate::queue::protocol::request::{self, Request};
use std::rc::Rc;

/// Histogram of TCP publish-to-reply latency in µs (including the group commit).
pub const PUBLISH_LATENCY_METRIC: &str = "boltq_publish_reply_latency_us";

/// Histogram of TCP CONSUME request-to-reply time in µs (long polls included).
pub const CONSUME_WAIT_METRIC: &str = "boltq_consume_wait_us";

/// Per-connection protocol state (v1 §2.2); lost on disconnect.
pub struct ConnState {
    pub me: ConsumerRef,
    out: Rc<Outbound>,
    authenticated: bool,
    /// 0 = no limit.
    prefetch: u64,
    /// CONSUMEs dispatched whose outcome is not known yet (they count against prefetch).
    consumes_in_flight: u64,
    confirm: bool,
    seq_no: u64,
    /// The handler of command bytes from `EXTRA_CODES_FROM` up, when the server
    /// registered one (see `extra.rs`).
    extra: Option<ExtraCommands>,
    /// Catch-ups of durable subscribes answered in this batch: written after the batch's
    /// replies, in writes of their own, a chunk at a time. The v1 Node SDK registers its
    /// handler only once the `subscribed` reply resolves, so pushes read together with
    /// that reply are emitted before anyone listens.
    pub catch_up: std::collections::VecDeque<CatchUp>,
    /// Durable pushes written to this connection and not yet confirmed to their slots.
    pub confirms: Confirmations,
    /// (topic, subscriber id) pairs this connection subscribed, counted when the SUBSCRIBE
    /// is dispatched (a refused or taken-over one keeps its place: the count errs high).
    subscriptions: std::collections::BTreeSet<(String, String)>,
    subscriptions_max: usize,
}

impl ConnState {
    pub fn new(me: ConsumerRef, out: Rc<Outbound>, requires_auth: bool) -> ConnState {
        ConnState {
            me,
            out,
            authenticated: !requires_auth,
            prefetch: 0,
            consumes_in_flight: 0,
            confirm: false,
            seq_no: 0,
            extra: None,
            catch_up: std::collections::VecDeque::new(),
            confirms: Confirmations::default(),
            subscriptions: std::collections::BTreeSet::new(),
            subscriptions_max: usize::MAX,
        }
    }

    /// The settings a connection that has not yet used any slot holds of its own: what
    /// moves with it to another shard (`affinity.rs`).
    pub fn carried(&self) -> Carried {
        debug_assert!(self.subscriptions.is_empty() && self.consumes_in_flight == 0);
        debug_assert!(self.catch_up.is_empty());
        Carried {
            authenticated: self.authenticated,
            prefetch: self.prefetch,
            confirm: self.confirm,
            seq_no: self.seq_no,
        }
    }

    /// Takes over the settings a connection brought from the shard it moved from.
    pub fn carry_on(&mut self, c: Carried) {
        self.authenticated = c.authenticated;
        self.prefetch = c.prefetch;
        self.confirm = c.confirm;
        self.seq_no = c.seq_no;
    }

    pub fn set_subscriptions_max(&mut self, max: usize) {
        self.subscriptions_max = max;
    }

    /// Takes a place for `(topic, sub_id)` on this connection; false at the limit (a pair it
    /// already holds always fits: a re-subscribe).
    fn admit_subscription(&mut self, topic: &str, sub_id: &str) -> bool {
        let key = (topic.to_string(), sub_id.to_string());
        if self.subscriptions.contains(&key) {
            return true;
        }
        if self.subscriptions.len() >= self.subscriptions_max {
            return false;
        }
        self.subscriptions.insert(key);
        true
    }

    /// True until AUTH succeeded, when the server requires it.
    pub fn awaits_auth(&self) -> bool {
        !self.authenticated
    }

    /// Gives the connection the handler of the other planes' commands.
    pub fn set_extra(&mut self, extra: Option<ExtraCommands>) {
        self.extra = extra;
    }

    fn next_confirm_seq(&mut self) -> Option<u64> {
        if !self.confirm {
            return None;
        }
        self.seq_no += 1;
        Some(self.seq_no)
    }
}

/// A connection's own settings (AUTH, PREFETCH, CONFIRM_SELECT), carried when it moves to
/// another shard before using any slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carried {
    authenticated: bool,
    prefetch: u64,
    confirm: bool,
    seq_no: u64,
}

/// What the reply to one request waits for.
///
/// Every request's value is moved into the batch's `Vec` and out again into its reply's
/// future, so the enum's size is copied twice per request: the rare requests' large
/// values are boxed (an allocation each, for requests that gather from every shard
/// anyway), which keeps the enum at the size of the hot ones (publish, consume, ack).
pub enum Pending {
    Ready(Vec<u8>),
    /// Reply, then close the connection (a command before AUTH).
    Close(Vec<u8>),
    Publish {
        submitted: Submitted,
        id: MessageId,
        topic: String,
        confirm_seq: Option<u64>,
        /// When the request was dispatched: publish-to-reply latency.
        started: std::time::Instant,
    },
    /// PUBLISH_EXCHANGE: one publish per routed queue.
    PublishCopies {
        parts: Copies,
        id: MessageId,
        topic: String,
        confirm_seq: Option<u64>,
    },
    Consume {
        submitted: Submitted,
        batch: bool,
        started: std::time::Instant,
    },
    Ack {
        submitted: Submitted,
        nack: bool,
    },
    /// ACK/NACK with `ids`: one answer per id, in order.
    AckMany {
        parts: Vec<(String, AckPart)>,
        nack: bool,
    },
    Subscribe {
        submitted: Submitted,
        topic: String,
        sub_id: String,
    },
    DlqRequeue {
        submitted: Submitted,
        queue: String,
    },
    DlqPurge {
        submitted: Submitted,
        queue: String,
    },
    Stats(Box<StatsGather>),
    ClusterStatus(Box<StatsGather>),
    /// CLUSTER_JOIN / CLUSTER_LEAVE: carried out when the reply is due (in pipeline order).
    Members(Box<super::replicated::MembersChange>),
    /// Another plane's command (see `extra.rs`), run when the reply is due.
    Extra(ExtraReply),
    Exchange(Box<super::plane::ExchangeSubmitted>),
    DlqList(Box<super::plane::DlqListGather>),
    DlqRead(Box<super::plane::DlqReadSubmitted>),
}

impl Pending {
    pub fn closes_connection(&self) -> bool {
        matches!(self, Pending::Close(_))
    }

    /// Awaits the outcome and appends the reply frame to `out` (a subscribe's catch-up
    /// pushes go to `st.catch_up`).
    pub async fn resolve(self, plane: &Plane, st: &mut ConnState, out: &mut Vec<u8>) {
        match self {
            Pending::Ready(bytes) | Pending::Close(bytes) => out.extend_from_slice(&bytes),
            Pending::Publish {
                submitted,
                id,
                topic,
                confirm_seq,
                started,
            } => match submitted.outcome(plane).await {
                Outcome::Published | Outcome::PublishedLive => {
                    let micros = started.elapsed().as_micros() as u64;
                    plane.publish_latency.record(micros);
                    reply::publish_ok(&id, &topic, confirm_seq, out)
                }
                other => error_reply(other, out),
            },
            Pending::PublishCopies {
                parts,
                id,
                topic,
                confirm_seq,
            } => match copies_outcome(plane, parts).await {
                Ok(()) => reply::publish_ok(&id, &topic, confirm_seq, out),
                Err(e) => reply::error(&e, out),
            },
            Pending::Consume {
                submitted,
                batch,
                started,
            } => {
                let outcome = submitted.outcome(plane).await;
                let micros = started.elapsed().as_micros() as u64;
                plane.consume_wait.record(micros);
                st.consumes_in_flight -= 1;
                consume_reply(outcome, batch, st, out);
            }
            Pending::Ack { submitted, nack } => match submitted.outcome(plane).await {
                Outcome::Acked => {
                    st.out.release_prefetch();
                    reply::acked(out);
                }
                Outcome::Nacked => {
                    st.out.release_prefetch();
                    reply::nacked(out);
                }
                other => {
                    let _ = nack;
                    error_reply(other, out)
                }
            },
            Pending::AckMany { parts, nack } => {
                let mut done = 0;
                let mut failed = Vec::new();
                for (id, part) in parts {
                    // A push never took a prefetch place; a work-queue message did.
                    let frees_prefetch = matches!(part, AckPart::Submitted(_));
                    match part.outcome(&id, plane).await {
                        Outcome::Acked | Outcome::Nacked => {
                            if frees_prefetch {
                                st.out.release_prefetch();
                            }
                            done += 1;
                        }
                        Outcome::Error(e) => failed.push((id, e)),
                        other => failed.push((id, format!("unexpected outcome {other:?}"))),
                    }
                }
                let status = if nack { "nacked" } else { "acked" };
                reply::acked_many(status, done, &failed, out);
            }
            Pending::Subscribe {
                submitted,
                topic,
                sub_id,
            } => match submitted.outcome(plane).await {
                Outcome::Subscribed {
                    catch_up,
                    first_delivery,
                } => {
                    reply::subscribed(out);
                    if !catch_up.is_empty() {
                        st.catch_up.push_back(CatchUp::new(
                            &topic,
                            &sub_id,
                            catch_up,
                            first_delivery,
                        ));
                    }
                }
                // v1: ERROR `failed to subscribe` on a node that could not serve it.
                Outcome::NotLeader { .. } => {
                    reply::error("failed to subscribe: no leader of its slot is known", out)
                }
                other => error_reply(other, out),
            },
            Pending::DlqRequeue { submitted, queue } => match submitted.outcome(plane).await {
                Outcome::Requeued(n) => reply::dlq_requeued(&queue, n as u64, out),
                other => error_reply(other, out),
            },
            Pending::DlqPurge { submitted, queue } => match submitted.outcome(plane).await {
                Outcome::Purged(n) => reply::dlq_purged(&queue, n, out),
                other => error_reply(other, out),
            },
            Pending::Stats(gather) => reply::stats(&gather.merged().await.stats, out),
            Pending::ClusterStatus(gather) => {
                let report = gather.merged().await;
                match plane.cluster_view() {
                    Some(view) => reply::cluster_status(&view.summary(&report.raft).info, out),
                    None => reply::cluster_disabled(out),
                }
            }
            Pending::Members(change) => {
                let name = change.name().to_string();
                let join = matches!(*change, super::replicated::MembersChange::Join { .. });
                match plane.change_members(*change).await {
                    Ok(()) if join => reply::cluster_joined(&name, out),
                    Ok(()) => reply::cluster_removed(&name, out),
                    Err(e) => reply::error(&e, out),
                }
            }
            Pending::Extra(reply) => out.extend_from_slice(&reply.await),
            Pending::Exchange(ex) => match ex.result(plane).await {
                Ok(()) => reply::ok(out),
                Err(e) => reply::error(&e, out),
            },
            Pending::DlqList(g) => {
                let counts = g.merged().await;
                reply::dlq_list(&counts, out);
            }
            Pending::DlqRead(r) => {
                let (queue, offset, messages) = r.messages().await;
                reply::dlq_read(&queue, offset, &messages, out);
            }
        }
    }
}

fn error_reply(outcome: Outcome, out: &mut Vec<u8>) {
    match outcome {
        Outcome::Error(e) => reply::error(&e, out),
        Outcome::NotLeader {
            leader,
            leader_id,
            leader_tcp,
            leader_http,
        } => {
            let known = |a: &str| Some(a.to_string()).filter(|a| !a.is_empty());
            let (tcp, http) = (known(&leader_tcp), known(&leader_http));
            reply::not_leader(&leader, &leader_id, tcp.as_deref(), http.as_deref(), out)
        }
        other => reply::error(
            &format!("internal error: unexpected outcome {other:?}"),
            out,
        ),
    }
}

fn consume_reply(outcome: Outcome, batch: bool, st: &mut ConnState, out: &mut Vec<u8>) {
    match outcome {
        Outcome::Delivered(messages) => {
            st.out.add_unacked(messages.len() as u64);
            let written = if batch {
                reply::messages(&messages, out).map(|_| ())
            } else {
                reply::message(&messages[0], out)
            };
            if written.is_err() {
                reply::error("message too large for one reply frame", out);
            }
        }
        // v1 answered EMPTY on a node that could not serve a consume; the v1 Node SDK
        // would take a NOT_LEADER body for a message (spec §2.5.2), so EMPTY it stays.
        Outcome::Empty | Outcome::NotLeader { .. } => reply::empty(out),
        other => error_reply(other, out),
    }
}

/// The slot that owns a queue or topic (and its dead letters and durable backlogs, which
/// live in the same broker).
pub fn slot_of_name(name: &str) -> u16 {
    boltq_shards::slot_of(name)
}

/// Turns one frame into a pending reply.
pub fn dispatch(plane: &Rc<Plane>, st: &mut ConnState, frame: Frame<'_>) -> Pending {
    if let Some(pending) = dispatch_extra(st, frame) {
        return pending;
    }
    let mut out = Vec::new();
    let request = match request::parse(frame) {
        Ok(r) => r,
        Err(e) => {
            if !st.authenticated {
                return auth_required();
            }
            reply::request_error(&e, &mut out);
            return Pending::Ready(out);
        }
    };
    if !st.authenticated && !matches!(request, Request::Auth { .. }) {
        return auth_required();
    }
    match request {
        Request::Publish(p) => publish(plane, st, p, false),
        Request::PublishTopic(p) => publish(plane, st, p, true),
        Request::Consume(c) => consume(plane, st, c),
        Request::Subscribe(s) => {
            if !st.admit_subscription(&s.topic, &s.id) {
                reply::error(
                    &format!(
                        "too many subscriptions on this connection (limit {}, \
                         queue.subscriptions_per_connection_max)",
                        st.subscriptions_max
                    ),
                    &mut out,
                );
                return Pending::Ready(out);
            }
            st.confirms.acks.set_mode(&s.topic, &s.id, s.ack);
            let slot = slot_of_name(&s.topic);
            let cmd = Command::Subscribe {
                topic: s.topic.clone(),
                sub_id: s.id.clone(),
                durable: s.durable,
                consumer: st.me,
                now_ns: now_ns(),
            };
            Pending::Subscribe {
                submitted: plane.submit(slot, cmd),
                topic: s.topic,
                sub_id: s.id,
            }
        }
        Request::Ack(target) | Request::Nack(target) if target.message_id().is_none() => {
            reply::error(
                &format!("message {} not found in pending", target.id),
                &mut out,
            );
            Pending::Ready(out)
        }
        Request::Ack(target) => {
            let id = target.message_id().expect("checked above");
            if st.confirms.acks.ack(id) {
                // A push of an acknowledging subscription: confirmed to its slot with the
                // connection's next round of confirmations (see `push_acks.rs`).
                reply::acked(&mut out);
                return Pending::Ready(out);
            }
            ack(plane, &target, false)
        }
        Request::Nack(target) => ack(plane, &target, true),
        Request::AckMany(targets) => ack_many(plane, st, targets, false),
        Request::NackMany(targets) => ack_many(plane, st, targets, true),
        Request::Ping => {
            reply::pong(&mut out);
            Pending::Ready(out)
        }
        Request::Stats => Pending::Stats(Box::new(plane.gather_stats())),
        Request::Auth { api_key } => {
            auth(plane, st, api_key, &mut out);
            Pending::Ready(out)
        }
        Request::Prefetch { count } => {
            st.prefetch = count.max(0) as u64;
            reply::ok(&mut out);
            Pending::Ready(out)
        }
        Request::ClusterJoin { .. } | Request::ClusterLeave { .. } if !plane.clustered() => {
            reply::error("clustering is not enabled", &mut out);
            Pending::Ready(out)
        }
        Request::ClusterJoin { node_id, addr } => {
            Pending::Members(Box::new(super::replicated::MembersChange::Join {
                name: node_id,
                addr,
                non_voter: false,
                shards: None,
                fresh: false,
                tcp_addr: String::new(),
                http_addr: String::new(),
            }))
        }
        Request::ClusterLeave { node_id } => {
            Pending::Members(Box::new(super::replicated::MembersChange::Leave {
                name: node_id,
            }))
        }
        Request::ClusterStatus if plane.clustered() => {
            Pending::ClusterStatus(Box::new(plane.gather_stats()))
        }
        Request::ClusterStatus => {
            reply::cluster_disabled(&mut out);
            Pending::Ready(out)
        }
        Request::ConfirmSelect => {
            st.confirm = true;
            reply::ok(&mut out);
            Pending::Ready(out)
        }
        Request::ExchangeDeclare(d) => {
            Pending::Exchange(Box::new(plane.submit_exchange(ExchangeOp::Declare {
                name: d.name,
                kind: d.kind.as_str().to_string(),
                durable: d.durable,
            })))
        }
        Request::ExchangeDelete { name } => {
            Pending::Exchange(Box::new(plane.submit_exchange(ExchangeOp::Delete { name })))
        }
        Request::BindQueue(b) => {
            Pending::Exchange(Box::new(plane.submit_exchange(ExchangeOp::Bind(b))))
        }
        Request::UnbindQueue(b) => {
            Pending::Exchange(Box::new(plane.submit_exchange(ExchangeOp::Unbind(b))))
        }
        Request::PublishExchange(p) => publish_exchange(plane, st, p),
        Request::DlqList { queue } => Pending::DlqList(Box::new(plane.gather_dlq_list(queue))),
        Request::DlqRead {
            queue,
            offset,
            limit,
        } => Pending::DlqRead(Box::new(plane.submit_dlq_read(queue, offset, limit))),
        Request::DlqRequeue { queue, limit } => {
            let slot = slot_of_name(&queue);
            let limit = limit.unwrap_or(u32::MAX as u64).min(u32::MAX as u64) as u32;
            let cmd = Command::DeadLetterRequeue {
                queue: queue.clone(),
                limit,
                now_ns: now_ns(),
            };
            Pending::DlqRequeue {
                submitted: plane.submit(slot, cmd),
                queue,
            }
        }
        Request::DlqPurge { queue } => {
            let slot = slot_of_name(&queue);
            let cmd = Command::DeadLetterPurge {
                queue: queue.clone(),
            };
            Pending::DlqPurge {
                submitted: plane.submit(slot, cmd),
                queue,
            }
        }
    }
}

/// Another plane's command, when `frame`'s byte is one: behind the same AUTH gate as
/// every command, and never consulted for the queue plane's own bytes.
fn dispatch_extra(st: &ConnState, frame: Frame<'_>) -> Option<Pending> {
    if frame.code < request::EXTRA_CODES_FROM {
        return None;
    }
    let extra = st.extra.as_ref()?;
    if !st.authenticated {
        return Some(auth_required());
    }
    extra(frame).map(Pending::Extra)
}

fn auth_required() -> Pending {
    let mut out = Vec::new();
    reply::error("authentication required, send AUTH first", &mut out);
    Pending::Close(out)
}

fn auth(
    plane: &Plane,
    st: &mut ConnState,
    api_key: Result<String, request::RequestError>,
    out: &mut Vec<u8>,
) {
    if !plane.requires_auth() {
        reply::ok(out);
        return;
    }
    match api_key {
        Err(e) => reply::request_error(&e, out),
        Ok(key) if plane.key_matches(&key) => {
            st.authenticated = true;
            reply::ok(out);
        }
        Ok(_) => reply::error("unauthorized", out),
    }
}

fn new_message(plane: &Plane, topic: String, p_payload: bytes::Bytes, now: i64) -> Message {
    let slot = slot_of_name(&topic);
    Message {
        id: plane.next_id(slot),
        topic: topic.into(),
        payload: p_payload,
        timestamp_ns: now,
        retry: 0,
        max_retry: plane.config().max_retry,
        priority: 0,
        delay_ns: 0,
        ttl_ns: 0,
        deliver_at_ns: 0,
        expires_at_ns: 0,
        extras: None,
    }
}

/// The command of a PUBLISH (work queue) or PUBLISH_TOPIC, with the new message's id and
/// the slot it goes to. Shared by the TCP and HTTP front ends.
pub fn publish_command(
    plane: &Plane,
    p: request::Publish,
    to_topic: bool,
) -> (Command, MessageId, u16) {
    let now = now_ns();
    let mut msg = new_message(plane, p.topic, p.payload, now);
    msg.set_extras(MessageExtras {
        headers: p.headers,
        ..MessageExtras::default()
    });
    msg.priority = p.priority;
    if !to_topic {
        msg.delay_ns = p.delay_ns;
        msg.ttl_ns = p.ttl_ns;
        if p.delay_ns > 0 {
            msg.deliver_at_ns = now.saturating_add(p.delay_ns);
        }
        if p.ttl_ns > 0 {
            msg.expires_at_ns = now.saturating_add(p.ttl_ns);
        }
    }
    let (id, slot) = (msg.id, slot_of_name(&msg.topic));
    let cmd = if to_topic {
        Command::PublishTopic { msg }
    } else {
        Command::Publish { msg }
    };
    (cmd, id, slot)
}

fn publish(plane: &Rc<Plane>, st: &mut ConnState, p: request::Publish, to_topic: bool) -> Pending {
    let topic = p.topic.clone();
    let (cmd, id, slot) = publish_command(plane, p, to_topic);
    let confirm_seq = st.next_confirm_seq();
    // v1's confirm mode fsyncs a PUBLISH (0x01) before replying, whatever the policy.
    let submitted = if confirm_seq.is_some() && !to_topic {
        plane.submit_synced(slot, cmd)
    } else {
        plane.submit(slot, cmd)
    };
    Pending::Publish {
        submitted,
        id,
        topic,
        confirm_seq,
        started: std::time::Instant::now(),
    }
}

/// The publishes of one exchange publish, by target queue.
pub type Copies = Vec<(String, Submitted)>;

/// Routes a PUBLISH_EXCHANGE and submits one publish per matched queue. Returns the
/// submitted copies, the id and topic the reply names (v1: for a named exchange the
/// template's id and ""; for the default exchange the stored message's id and the routing
/// key), or the routing error. Shared by the TCP and HTTP front ends.
pub fn submit_exchange_publish(
    plane: &Plane,
    p: request::PublishExchange,
) -> Result<(Copies, MessageId, String), String> {
    let now = now_ns();
    let queues = plane.route(&p.exchange, &p.routing_key, &p.headers)?;
    let default_exchange = p.exchange.is_empty();
    if queues.is_empty() && plane.report_unroutable() {
        return Err(format!(
            "unroutable: no queue bound to exchange \"{}\" matches routing key \"{}\"",
            p.exchange, p.routing_key
        ));
    }
    let template = new_message(plane, p.routing_key.clone(), p.payload.clone(), now);
    let mut parts = Vec::with_capacity(queues.len());
    for queue in queues {
        let mut msg = new_message(plane, queue.clone(), p.payload.clone(), now);
        if default_exchange {
            msg.id = template.id;
        }
        msg.set_extras(MessageExtras {
            headers: p.headers.clone(),
            exchange: p.exchange.clone(),
            routing_key: p.routing_key.clone(),
        });
        msg.priority = p.priority;
        let slot = slot_of_name(&queue);
        parts.push((queue, plane.submit(slot, Command::Publish { msg })));
    }
    let topic = if default_exchange {
        p.routing_key
    } else {
        String::new()
    };
    Ok((parts, template.id, topic))
}

/// Awaits every copy of an exchange publish; the first failure, worded as v1.
pub async fn copies_outcome(plane: &Plane, parts: Copies) -> Result<(), String> {
    let mut failed = None;
    for (queue, s) in parts {
        if let Outcome::Error(e) = s.outcome(plane).await {
            failed.get_or_insert(format!("publish to queue {queue}: {e}"));
        }
    }
    failed.map_or(Ok(()), Err)
}

fn publish_exchange(plane: &Rc<Plane>, st: &mut ConnState, p: request::PublishExchange) -> Pending {
    match submit_exchange_publish(plane, p) {
        Ok((parts, id, topic)) => Pending::PublishCopies {
            parts,
            id,
            topic,
            confirm_seq: st.next_confirm_seq(),
        },
        Err(e) => {
            let mut out = Vec::new();
            reply::error(&e, &mut out);
            Pending::Ready(out)
        }
    }
}

fn consume(plane: &Rc<Plane>, st: &mut ConnState, c: request::Consume) -> Pending {
    let mut out = Vec::new();
    if st.prefetch > 0 && st.out.unacked() + st.consumes_in_flight >= st.prefetch {
        reply::error("prefetch limit reached", &mut out);
        return Pending::Ready(out);
    }
    let mut max = c.max.unwrap_or(1).max(1) as u64;
    if st.prefetch > 0 {
        max = max.min(st.prefetch - st.out.unacked() - st.consumes_in_flight);
    }
    st.consumes_in_flight += 1;
    let slot = slot_of_name(&c.topic);
    let cmd = Command::Consume {
        queue: c.topic,
        consumer: st.me,
        max: max as u32,
        now_ns: now_ns(),
    };
    Pending::Consume {
        submitted: plane.submit_consume(slot, cmd, c.wait_ms),
        batch: c.max.is_some(),
        started: std::time::Instant::now(),
    }
}

/// One id of an ACK/NACK with `ids`.
pub enum AckPart {
    /// A push of an acknowledging subscription of this connection (ACK only).
    Push,
    /// Not an id this server could have issued.
    NotPending,
    /// A work-queue message's ACK or NACK, on its way to the message's slot.
    Submitted(Submitted),
}

impl AckPart {
    /// The outcome of settling message `id` (as the client sent it).
    pub async fn outcome(self, id: &str, plane: &Plane) -> Outcome {
        match self {
            AckPart::Push => Outcome::Acked,
            AckPart::NotPending => Outcome::Error(format!("message {id} not found in pending")),
            AckPart::Submitted(s) => s.outcome(plane).await,
        }
    }
}

/// Submits the ACK (or NACK) of the work-queue message `target` names to its slot (TCP and
/// HTTP alike).
pub fn settle(plane: &Plane, target: &request::AckTarget, nack: bool) -> AckPart {
    let Some(id) = target.message_id() else {
        return AckPart::NotPending;
    };
    let now = now_ns();
    let cmd = if nack {
        Command::Nack { id, now_ns: now }
    } else {
        Command::Ack { id, now_ns: now }
    };
    AckPart::Submitted(plane.submit(id.slot(), cmd))
}

/// ACK/NACK of several messages: each id goes to its slot (pipelined, in order), and the
/// reply counts what was done and lists what was not.
fn ack_many(
    plane: &Rc<Plane>,
    st: &mut ConnState,
    targets: Vec<request::AckTarget>,
    nack: bool,
) -> Pending {
    let parts = targets
        .into_iter()
        .map(|t| {
            let push = !nack && t.message_id().is_some_and(|id| st.confirms.acks.ack(id));
            let part = if push {
                AckPart::Push
            } else {
                settle(plane, &t, nack)
            };
            (t.id, part)
        })
        .collect();
    Pending::AckMany { parts, nack }
}

fn ack(plane: &Rc<Plane>, target: &request::AckTarget, nack: bool) -> Pending {
    let AckPart::Submitted(submitted) = settle(plane, target, nack) else {
        unreachable!("the caller answered ids this server could not have issued")
    };
    Pending::Ack { submitted, nack }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::protocol::frame::{self, status};
    use std::cell::Cell;

    /// A connection whose extra handler answers every byte it is asked about with OK
    /// `{}` and counts the calls.
    fn conn(requires_auth: bool, calls: &Rc<Cell<u32>>) -> ConnState {
        let me = ConsumerRef { shard: 0, conn: 1 };
        let mut st = ConnState::new(me, Rc::new(Outbound::default()), requires_auth);
        let calls = Rc::clone(calls);
        st.set_extra(Some(Rc::new(move |f: Frame<'_>| {
            calls.set(calls.get() + 1);
            let mut out = Vec::new();
            frame::encode(status::OK, b"{}", &mut out);
            (f.code != 0x30).then(|| Box::pin(std::future::ready(out)) as ExtraReply)
        })));
        st
    }

    fn at(code: u8) -> Frame<'static> {
        Frame {
            code,
            payload: b"{}",
        }
    }

    #[test]
    fn the_queue_planes_own_bytes_never_reach_the_handler() {
        let calls = Rc::new(Cell::new(0));
        let st = conn(false, &calls);
        for code in 0..request::EXTRA_CODES_FROM {
            assert!(dispatch_extra(&st, at(code)).is_none(), "0x{code:02x}");
        }
        assert_eq!(calls.get(), 0);
    }

    #[test]
    fn extra_bytes_go_to_the_handler_behind_the_auth_gate() {
        let calls = Rc::new(Cell::new(0));
        let locked = conn(true, &calls);
        let pending = dispatch_extra(&locked, at(request::EXTRA_CODES_FROM));
        assert!(pending.is_some_and(|p| p.closes_connection()));
        assert_eq!(calls.get(), 0, "not asked before AUTH");

        let open = conn(false, &calls);
        let pending = dispatch_extra(&open, at(request::EXTRA_CODES_FROM));
        assert!(matches!(pending, Some(Pending::Extra(_))));
        assert_eq!(calls.get(), 1);
        // A byte the handler does not know falls through to the queue parser.
        assert!(dispatch_extra(&open, at(0x30)).is_none());
    }

    #[test]
    fn without_a_handler_extra_bytes_are_the_queue_parsers() {
        let me = ConsumerRef { shard: 0, conn: 1 };
        let st = ConnState::new(me, Rc::new(Outbound::default()), false);
        assert!(dispatch_extra(&st, at(request::EXTRA_CODES_FROM)).is_none());
    }
}
