//! A broker's whole durable state as one serde value, for WAL compaction and Raft snapshots.
//!
//! It keeps the exact timer keys and enqueue counters, so a restored broker is
//! indistinguishable from the original: same delivery order, same timer firing order, same
//! future keys (the determinism test checks `restore(snapshot()) + commands` against the
//! original). Durable subscriptions keep the connection they were live on, so commands
//! replayed after the snapshot behave as they did originally; recovery applies
//! `Command::DisconnectAll` after the replay. Live non-durable subscriptions are not kept. Counters are process
//! metrics and start again from zero.
//!
//! A topic publish gives each durable registration a copy sharing one payload buffer; the
//! snapshot writes such a payload once (`shared_payloads`) and the copies refer to it, so a
//! publish to 4,096 durable subscribers costs its payload once in a snapshot, not 4,096
//! times, and the restored copies share one buffer again, as before the restart (issue 13
//! item 6). Snapshots written before this have every copy's payload inline and still load.

use super::dead_letter::DeadLetters;
use super::exchange::{Exchanges, ExchangesSnapshot};
use super::pending::Pending;
use super::pending::PendingEntry;
use super::pubsub::{all, Registrations, Subscription};
use super::queue::{Ready, ReadyKey, WorkQueue};
use super::timers::{TimerKey, TimerTarget, Timers};
use super::waiting::Waiting;
use super::{queue_or_create_restored, Broker, BrokerConfig, ConsumerRef};
use crate::queue::message::{IdHashing, Message, MessageId};
use serde::{Deserialize, Serialize};
use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;

pub const BROKER_SNAPSHOT_VERSION: u32 = 1;

fn durable_default() -> bool {
    true
}

/// A slot's durable state. This type and every type inside it are also read by position
/// (`queue::server::snapshot::encode` writes fields without names): a field added later
/// goes after the others, with `#[serde(default)]`, and no field is skipped when written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BrokerSnapshot {
    pub version: u32,
    pub next_timer_seq: u64,
    /// Every work queue, including empty ones (v1 keeps polled queues in stats).
    pub queues: Vec<QueueSnapshot>,
    pub waiting: Vec<WaitingSnapshot>,
    pub pending: Vec<PendingSnapshot>,
    pub dead_letters: Vec<DeadLetterSnapshot>,
    pub durable_subscriptions: Vec<DurableSnapshot>,
    /// The exchange table, when `Command::Exchange` changed it (with `cluster.enabled`,
    /// the exchange slot's broker holds the replicated table), and how many changes it
    /// has seen. Absent in every other snapshot.
    #[serde(default)]
    pub exchanges: Option<(u64, ExchangesSnapshot)>,
    /// Payloads shared by more than one durable copy, each once; copies refer to them by
    /// index (`DurableSnapshot::backlog_shared`, `unconfirmed_shared`).
    #[serde(default)]
    pub shared_payloads: Vec<SharedPayload>,
}

/// One payload several durable copies share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedPayload(#[serde(with = "crate::queue::message::payload_serde")] pub bytes::Bytes);

/// A durable copy whose payload is `BrokerSnapshot::shared_payloads[payload]`: the copy at
/// position `at` of its list, written with an empty payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedRef {
    pub at: u32,
    pub payload: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueSnapshot {
    pub name: String,
    pub next_seq: u64,
    /// In delivery order.
    pub ready: Vec<ReadySnapshot>,
    /// The queue's idle timer (see `WorkQueue::idle_timer`); absent in snapshots written
    /// before queues were forgotten, whose queues are then kept.
    #[serde(default)]
    pub idle_timer: Option<TimerKey>,
    #[serde(default)]
    pub last_used_ns: i64,
    /// Ready messages as written by `queue::server::snapshot::encode`: in the command log's
    /// binary message layout, which a restart reads in about half the time of serde's
    /// field-by-field MessagePack (`queue::server::packed_ready`, where its serde impls
    /// are). Only encoding fills it and decoding empties it back into `ready`, so a
    /// snapshot in memory always has it empty.
    #[serde(default)]
    pub ready_packed: PackedReady,
}

/// Ready entries of one queue, written packed ([`QueueSnapshot::ready_packed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PackedReady(pub Vec<ReadySnapshot>);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadySnapshot {
    pub key: ReadyKey,
    pub expiry: Option<TimerKey>,
    pub msg: Message,
}

/// A delayed or retry-waiting message; it becomes ready when `timer` fires (or is discarded
/// then if its TTL has passed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitingSnapshot {
    pub timer: TimerKey,
    pub msg: Message,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingSnapshot {
    pub consumer: ConsumerRef,
    pub ack_deadline_ns: i64,
    pub timer: TimerKey,
    pub msg: Message,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterSnapshot {
    /// The source work queue.
    pub queue: String,
    /// Oldest first.
    pub messages: Vec<Message>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DurableSnapshot {
    pub topic: String,
    pub sub_id: String,
    /// False for a live non-durable subscription (kept so that commands replayed after
    /// the snapshot push where they pushed originally).
    #[serde(default = "durable_default")]
    pub durable: bool,
    /// The connection it was live on when the snapshot was taken. Kept so that commands
    /// replayed after the snapshot treat it exactly as the original did (pushed live, not
    /// backlogged); recovery then applies `DisconnectAll`, since that connection is gone.
    #[serde(default)]
    pub live: Option<ConsumerRef>,
    /// Oldest first.
    pub backlog: Vec<Message>,
    /// Pushed to the live connection and not confirmed yet, oldest first (absent in
    /// snapshots written before durable delivery was confirmed).
    #[serde(default)]
    pub unconfirmed: Vec<Message>,
    /// Delivery number of the newest copy ever pushed (see `pubsub::Subscription`).
    #[serde(default)]
    pub delivery_seq: u64,
    /// The copies of `backlog` and of `unconfirmed` whose payload is shared, by position
    /// (increasing).
    #[serde(default)]
    pub backlog_shared: Vec<SharedRef>,
    #[serde(default)]
    pub unconfirmed_shared: Vec<SharedRef>,
}

/// A broker's durable state at one moment, copied in O(1): its maps are persistent and
/// share every node with the broker until the broker changes one (then only that node is
/// copied). Taken between two commands on the shard; [`Frozen::snapshot`] turns it into a
/// [`BrokerSnapshot`] elsewhere (the blocking pool), so a slot of any size is snapshotted
/// without stopping its shard. `Send`: the maps' nodes are reference-counted atomically.
#[derive(Clone)]
pub struct Frozen {
    next_timer_seq: u64,
    queues: imbl::OrdMap<String, WorkQueue>,
    waiting: Waiting,
    pending: Pending,
    dead_letters: DeadLetters,
    registrations: Registrations,
    exchanges: (u64, Arc<Exchanges>),
}

impl Broker {
    /// The durable state now, in O(1) (see [`Frozen`]).
    pub fn freeze(&self) -> Frozen {
        Frozen {
            next_timer_seq: self.timers.next_seq(),
            queues: self.queues.clone(),
            waiting: self.waiting.clone(),
            pending: self.pending.clone(),
            dead_letters: self.dead_letters.clone(),
            registrations: self.pubsub.registrations(),
            exchanges: self.exchanges.clone(),
        }
    }

    pub fn snapshot(&self) -> BrokerSnapshot {
        self.freeze().snapshot()
    }
}

impl Frozen {
    /// The state as one serde value: O(state), meant for off the shard.
    pub fn snapshot(&self) -> BrokerSnapshot {
        let mut shared = SharedPayloads::counted(&self.registrations);
        BrokerSnapshot {
            version: BROKER_SNAPSHOT_VERSION,
            next_timer_seq: self.next_timer_seq,
            queues: self
                .queues
                .iter()
                .map(|(name, q)| queue_snapshot(name, q))
                .collect(),
            waiting: self
                .waiting
                .iter()
                .map(|(timer, msg)| WaitingSnapshot {
                    timer: *timer,
                    msg: msg.clone(),
                })
                .collect(),
            pending: self.pending.iter().map(pending_snapshot).collect(),
            dead_letters: self
                .dead_letters
                .iter()
                .map(|(queue, dlq)| DeadLetterSnapshot {
                    queue: queue.clone(),
                    messages: dlq.iter().cloned().collect(),
                })
                .collect(),
            durable_subscriptions: all(&self.registrations)
                .map(|(topic, sub_id, sub)| {
                    let (backlog, backlog_shared) = shared.copies(&sub.backlog);
                    let (unconfirmed, unconfirmed_shared) = shared.copies(&sub.unconfirmed);
                    DurableSnapshot {
                        topic: topic.clone(),
                        sub_id: sub_id.clone(),
                        durable: sub.durable,
                        live: sub.live,
                        backlog,
                        unconfirmed,
                        delivery_seq: sub.delivery_seq,
                        backlog_shared,
                        unconfirmed_shared,
                    }
                })
                .collect(),
            exchanges: match &self.exchanges {
                (0, _) => None,
                (version, table) => Some((*version, table.snapshot())),
            },
            shared_payloads: shared.table,
        }
    }
}

/// Which durable copies share a payload: the copies of one topic publish, found by their
/// message id (each registration's copy keeps the publish's id) and equal payload bytes.
/// Keyed by what the state holds, not by where its buffers are, so equal states write
/// equal snapshots (replicas and replays are compared that way).
struct SharedPayloads {
    /// Per message id: its payload and how many copies hold exactly it; `None` once two
    /// copies of one id disagree (never for copies of one publish: those are written
    /// inline then, to be safe).
    counts: HashMap<MessageId, Option<(bytes::Bytes, u32)>, IdHashing>,
    /// Table index per message id, in order of first use.
    index: HashMap<MessageId, u32, IdHashing>,
    table: Vec<SharedPayload>,
}

impl SharedPayloads {
    fn counted(registrations: &Registrations) -> SharedPayloads {
        let mut counts: HashMap<MessageId, Option<(bytes::Bytes, u32)>, IdHashing> =
            HashMap::default();
        for (_, _, sub) in all(registrations) {
            for msg in sub.backlog.iter().chain(sub.unconfirmed.iter()) {
                if msg.payload.is_empty() {
                    continue;
                }
                match counts.entry(msg.id) {
                    Entry::Vacant(e) => {
                        e.insert(Some((msg.payload.clone(), 1)));
                    }
                    Entry::Occupied(mut e) => {
                        let agrees = matches!(e.get(), Some((p, _)) if *p == msg.payload);
                        match e.get_mut() {
                            Some((_, n)) if agrees => *n += 1,
                            slot => *slot = None,
                        }
                    }
                }
            }
        }
        counts.retain(|_, c| matches!(c, Some((_, n)) if *n > 1));
        SharedPayloads {
            counts,
            index: HashMap::default(),
            table: Vec::new(),
        }
    }

    /// The copies of one list, shared payloads taken out, and where they were.
    fn copies(&mut self, list: &imbl::Vector<Message>) -> (Vec<Message>, Vec<SharedRef>) {
        let mut refs = Vec::new();
        let copies = list
            .iter()
            .enumerate()
            .map(|(at, msg)| {
                let shared = match self.counts.get(&msg.id) {
                    Some(Some((payload, _))) if !msg.payload.is_empty() => payload,
                    _ => return msg.clone(),
                };
                let table = &mut self.table;
                let payload = *self.index.entry(msg.id).or_insert_with(|| {
                    table.push(SharedPayload(shared.clone()));
                    u32::try_from(table.len() - 1).expect("fewer payloads than 2^32")
                });
                let at = u32::try_from(at).expect("a backlog is capped far below 2^32");
                refs.push(SharedRef { at, payload });
                Message {
                    payload: bytes::Bytes::new(),
                    ..msg.clone()
                }
            })
            .collect();
        (copies, refs)
    }
}

impl Broker {
    /// Restores a snapshot this code wrote; panics if it is inconsistent (use `try_restore`
    /// for snapshots that may not be).
    pub fn restore(snapshot: BrokerSnapshot, cfg: BrokerConfig) -> Broker {
        Broker::try_restore(snapshot, cfg)
            .unwrap_or_else(|e| panic!("invalid broker snapshot: {e}"))
    }

    /// Restores a snapshot, checking every invariant the broker relies on (unique ids and
    /// timer keys, levels, deadlines). A snapshot taken under a larger capacity may hold more
    /// than `cfg` allows; publishes are then refused until the queue drains.
    pub fn try_restore(snapshot: BrokerSnapshot, cfg: BrokerConfig) -> Result<Broker, String> {
        if snapshot.version != BROKER_SNAPSHOT_VERSION {
            return Err(format!(
                "snapshot version {} (want {BROKER_SNAPSHOT_VERSION})",
                snapshot.version
            ));
        }
        cfg.validate()?;
        let mut broker = Broker::new(cfg);
        // Sized once: grown by doubling, the set was rehashed ~20 times on the way to a
        // million messages (4 % of a large slot's start in a profile).
        broker.ids.reserve(snapshot.held_messages());
        broker.timers = Timers::restored(snapshot.next_timer_seq);
        for q in snapshot.queues {
            broker.restore_queue(q)?;
        }
        for mut w in snapshot.waiting {
            broker.restore_held(&mut w.msg)?;
            broker
                .timers
                .insert_restored(w.timer, TimerTarget::Waiting)?;
            broker.waiting.insert(w.timer, w.msg);
        }
        for p in snapshot.pending {
            broker.restore_pending(p)?;
        }
        for d in snapshot.dead_letters {
            broker.restore_dead_letters(d)?;
        }
        for s in snapshot.durable_subscriptions {
            broker.restore_durable(s, &snapshot.shared_payloads)?;
        }
        if let Some((version, table)) = snapshot.exchanges {
            broker.exchanges = (version, Arc::new(Exchanges::restore(table)?));
        }
        broker.check_invariants();
        Ok(broker)
    }

    fn restore_queue(&mut self, q: QueueSnapshot) -> Result<(), String> {
        if q.name.is_empty() || self.queues.contains_key(&q.name) {
            return Err(format!(
                "queue {:?} is empty-named or appears twice",
                q.name
            ));
        }
        let mut queue = WorkQueue::restored(&q.name, q.next_seq, q.last_used_ns);
        if let Some(timer) = q.idle_timer {
            let target = TimerTarget::IdleQueue {
                queue: q.name.clone(),
            };
            self.timers.insert_restored(timer, target)?;
            queue.idle_timer = Some(timer);
        }
        for mut r in q.ready {
            check_ready(&q.name, q.next_seq, &r)?;
            r.msg.topic = Arc::clone(queue.name());
            if !self.hold_id(&r.msg) {
                return Err(format!("message {} appears twice", r.msg.id));
            }
            if let Some(expiry) = r.expiry {
                let target = TimerTarget::Ready {
                    queue: q.name.clone(),
                    key: r.key,
                };
                self.timers.insert_restored(expiry, target)?;
            }
            queue.hold();
            let ready = Ready {
                msg: r.msg,
                expiry: r.expiry,
            };
            if !queue.insert_new(r.key, ready) {
                return Err(format!(
                    "ready key {:?} of {:?} appears twice",
                    r.key, q.name
                ));
            }
        }
        self.queues.insert(q.name, queue);
        Ok(())
    }

    /// Counts a restored waiting or pending message in its queue and the id set, and
    /// points it at its queue's name.
    fn restore_held(&mut self, msg: &mut Message) -> Result<(), String> {
        if msg.topic.is_empty() {
            return Err(format!("message {} has no queue", msg.id));
        }
        if !self.hold_id(msg) {
            return Err(format!("message {} appears twice", msg.id));
        }
        let queue = queue_or_create_restored(&mut self.queues, &msg.topic)?;
        queue.hold();
        msg.topic = Arc::clone(queue.name());
        Ok(())
    }

    fn restore_pending(&mut self, mut p: PendingSnapshot) -> Result<(), String> {
        if p.timer.due_ns != PendingEntry::due_ns(&p.msg, p.ack_deadline_ns) {
            return Err(format!(
                "pending {} has timer {:?} off its deadline",
                p.msg.id, p.timer
            ));
        }
        self.restore_held(&mut p.msg)?;
        self.timers
            .insert_restored(p.timer, TimerTarget::Pending { id: p.msg.id })?;
        let PendingSnapshot {
            consumer,
            ack_deadline_ns,
            timer,
            msg,
        } = p;
        self.pending.insert(PendingEntry {
            msg,
            consumer,
            ack_deadline_ns,
            timer,
        });
        Ok(())
    }

    fn restore_dead_letters(&mut self, d: DeadLetterSnapshot) -> Result<(), String> {
        if self.dead_letters.len(&d.queue) > 0 {
            return Err(format!("dead letters of {:?} appear twice", d.queue));
        }
        let name = Arc::clone(queue_or_create_restored(&mut self.queues, &d.queue)?.name());
        self.dead_letters.restore_empty(&d.queue);
        for mut msg in d.messages {
            if *msg.topic != *d.queue {
                return Err(format!(
                    "dead letter {} of {:?} names queue {:?}",
                    msg.id, d.queue, msg.topic
                ));
            }
            if !self.hold_id(&msg) {
                return Err(format!("message {} appears twice", msg.id));
            }
            msg.topic = Arc::clone(&name);
            self.dead_letters.push_restored(msg);
        }
        Ok(())
    }

    fn restore_durable(
        &mut self,
        mut s: DurableSnapshot,
        shared: &[SharedPayload],
    ) -> Result<(), String> {
        if s.topic.is_empty() || s.sub_id.is_empty() {
            return Err("durable subscription with an empty topic or id".into());
        }
        let what = |list| format!("{list} of {}/{}", s.topic, s.sub_id);
        share_payloads(&mut s.backlog, &s.backlog_shared, shared, &what("backlog"))?;
        share_payloads(
            &mut s.unconfirmed,
            &s.unconfirmed_shared,
            shared,
            &what("unconfirmed"),
        )?;
        // The copies of one registration point at one name, as those of a publish do.
        let topic: Arc<str> = s.topic.as_str().into();
        for copy in s.backlog.iter_mut().chain(s.unconfirmed.iter_mut()) {
            if *copy.topic == *topic {
                copy.topic = Arc::clone(&topic);
            }
        }
        let mut sub = Subscription::new(s.durable, s.live);
        sub.backlog = imbl::Vector::from(s.backlog);
        sub.unconfirmed = imbl::Vector::from(s.unconfirmed);
        sub.delivery_seq = s.delivery_seq;
        sub.count_kept_bytes();
        self.pubsub.restore_subscription(&s.topic, &s.sub_id, sub)
    }
}

/// Gives the copies `refs` names their shared payloads back (a clone of one buffer each);
/// refuses a reference out of range, out of order, or to a copy that has a payload.
fn share_payloads(
    copies: &mut [Message],
    refs: &[SharedRef],
    shared: &[SharedPayload],
    what: &str,
) -> Result<(), String> {
    let mut next_at = 0usize;
    for r in refs {
        let at = r.at as usize;
        let payload = shared
            .get(r.payload as usize)
            .ok_or_else(|| format!("{what}: shared payload {} of {}", r.payload, shared.len()))?;
        if at < next_at || at >= copies.len() {
            return Err(format!("{what}: shared copy at {at} out of order or range"));
        }
        if !copies[at].payload.is_empty() {
            return Err(format!(
                "{what}: copy at {at} has a payload and a shared one"
            ));
        }
        copies[at].payload = payload.0.clone();
        next_at = at + 1;
    }
    Ok(())
}

impl BrokerSnapshot {
    /// Messages held outside durable registrations (each has an id in `Broker::ids`).
    fn held_messages(&self) -> usize {
        let ready: usize = self.queues.iter().map(|q| q.ready.len()).sum();
        let dead: usize = self.dead_letters.iter().map(|d| d.messages.len()).sum();
        ready + dead + self.waiting.len() + self.pending.len()
    }
}

fn queue_snapshot(name: &str, queue: &WorkQueue) -> QueueSnapshot {
    QueueSnapshot {
        name: name.to_string(),
        next_seq: queue.next_seq(),
        ready: queue
            .iter_ready()
            .map(|(key, r)| ReadySnapshot {
                key: *key,
                expiry: r.expiry,
                msg: r.msg.clone(),
            })
            .collect(),
        idle_timer: queue.idle_timer,
        last_used_ns: queue.last_used_ns,
        ready_packed: PackedReady::default(),
    }
}

fn pending_snapshot(entry: &PendingEntry) -> PendingSnapshot {
    PendingSnapshot {
        consumer: entry.consumer,
        ack_deadline_ns: entry.ack_deadline_ns,
        timer: entry.timer,
        msg: entry.msg.clone(),
    }
}

fn check_ready(queue: &str, next_seq: u64, r: &ReadySnapshot) -> Result<(), String> {
    let id = r.msg.id;
    if &*r.msg.topic != queue {
        return Err(format!(
            "ready {id} of {queue:?} names queue {:?}",
            r.msg.topic
        ));
    }
    if r.key.rank as usize >= super::PRIORITY_LEVELS || r.key.level() != r.msg.level() {
        return Err(format!("ready {id} is keyed at the wrong level"));
    }
    if r.key.seq >= next_seq {
        return Err(format!(
            "ready {id} has seq {} not below {next_seq}",
            r.key.seq
        ));
    }
    let expiry_ok = match r.expiry {
        None => r.msg.expires_at_ns == 0,
        Some(t) => r.msg.expires_at_ns != 0 && t.due_ns == r.msg.expires_at_ns,
    };
    if !expiry_ok {
        return Err(format!(
            "ready {id} has an expiry timer that does not match its TTL"
        ));
    }
    Ok(())
}
