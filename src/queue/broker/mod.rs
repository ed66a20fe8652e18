//! The broker of one queue slot: a deterministic, sans-IO state machine (design.md §6).
//!
//! Plain structs: no sockets, files, clocks or runtime. Time comes in inside the commands
//! (Unix ns); `apply(command)` returns the reply and the effects for the shard to carry out.
//! Applying the same command sequence to a fresh broker always yields the same state: all
//! maps that are iterated are ordered (`BTreeMap`, or `imbl::OrdMap` where a snapshot must
//! copy them in O(1)), and the one hash set (`ids`) is only ever asked for membership.
//!
//! Where the semantics differ from v1 (spec §3, §12) and why:
//!
//! - **One capacity per queue** (`capacity_per_queue`), across all ten priority levels. It
//!   counts every message of the queue the broker holds except dead letters: ready, delayed,
//!   retry-waiting *and pending*. Counting pending means a NACK or ack timeout never needs a
//!   new place — the message already holds one — so a requeue can never overflow and can
//!   never lose the message (v1 lost it: `queue <q> is full during retry`), and the memory a
//!   queue can hold is bounded by its capacity. A publish to a full queue is rejected with
//!   `queue "<q>" is full (capacity N)`; nothing spills.
//! - **Retry backoff**: the n-th retry waits `min(base · 2^(n−1), max)` before it is ready
//!   again; `retry_backoff_base_ns = 0` requeues at once (v1).
//! - **Dead-letter queue full**: a message that ran out of retries while its dead-letter
//!   queue is at `dead_letter_capacity` is not dropped (v1 dropped it silently): it is
//!   retried again after the maximum backoff (at once when backoff is off), its `retry`
//!   keeps counting, and `BrokerCounters::dead_letter_overflow` counts it. It keeps its place
//!   in the source queue's capacity, so memory stays bounded; it reaches the dead-letter
//!   queue on a later failure once an operator requeues or purges dead letters.
//! - **TTL** is enforced by the timer index in every state: a ready, delayed or
//!   retry-waiting message is discarded at the tick after its TTL (v1 left expired ready
//!   messages in place until a consumer reached them), a pending one leaves pending (v1).
//!   CONSUME still skips and discards expired messages a tick has not reached yet.
//! - **Pub/sub** fixes are in `pubsub.rs`; prefetch release is `Effect::Released`.
//!
//! Every collection has a named limit: `capacity_per_queue` (messages per queue and per
//! durable backlog), `dead_letter_capacity`, `queues_max`, `TOPICS_MAX`,
//! `SUBSCRIBERS_PER_TOPIC_MAX`, `CONSUME_MESSAGES_MAX`, `TIMERS_PER_TICK_MAX`,
//! `DEAD_LETTER_REQUEUE_MAX`, `DEAD_LETTER_LIST_MAX`. Pending messages are bounded by
//! their queues' capacities.

mod command;
mod dead_letter;
pub mod exchange;
mod invariants;
mod pending;
mod pubsub;
mod queue;
mod snapshot;
mod stats;
mod timers;
mod waiting;

#[cfg(test)]
pub(crate) mod tests;

pub use command::{Command, Effect, Outcome};
pub use dead_letter::DEAD_LETTER_SUFFIX;
pub use pubsub::{SUBSCRIBERS_PER_TOPIC_MAX, TOPICS_MAX};
pub use queue::{ReadyKey, PRIORITY_LEVELS};
pub use snapshot::{
    BrokerSnapshot, DeadLetterSnapshot, DurableSnapshot, Frozen, PackedReady, PendingSnapshot,
    QueueSnapshot, ReadySnapshot, WaitingSnapshot, BROKER_SNAPSHOT_VERSION,
};
pub use stats::{BrokerCounters, BrokerStats};
pub use timers::TimerKey;

use crate::queue::message::{IdHashing, Message, MessageId};
use dead_letter::DeadLetters;
use pending::{Pending, PendingEntry};
use pubsub::PubSub;
use queue::{Ready, WorkQueue};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;
use timers::{TimerTarget, Timers};
use waiting::Waiting;

/// Default of [`BrokerConfig::queues_max`] (`queue.queues_per_slot_max`). Queues are created
/// by publish and consume and kept (v1 shows a polled queue in stats with 0), so the limit
/// bounds the names a client can create.
pub const QUEUES_MAX_DEFAULT: usize = 1_024;
/// Largest [`BrokerConfig::queues_max`].
pub const QUEUES_MAX_CEILING: usize = 65_536;
/// Messages one CONSUME can return.
pub const CONSUME_MESSAGES_MAX: u32 = 1_024;
/// Timers one tick fires; a tick that stops here reports `changed` and leaves
/// `next_deadline_ns() <= now`, so the shard ticks again without starving its other work.
pub const TIMERS_PER_TICK_MAX: usize = 65_536;
/// Dead letters one requeue command moves.
pub const DEAD_LETTER_REQUEUE_MAX: u32 = 65_536;
/// Dead letters one `dead_letters` read returns.
pub const DEAD_LETTER_LIST_MAX: usize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerConfig {
    /// What the caller stamps on new messages as `max_retry`. The broker honours each
    /// message's own `max_retry` (v1: fixed at publish), so a config change never rewrites
    /// messages already held.
    pub max_retry: u32,
    /// Time a consumer has to ACK before the message is retried. > 0.
    pub ack_timeout_ns: i64,
    /// Messages one work queue (or one durable backlog) holds; see the module docs. ≥ 1.
    pub capacity_per_queue: usize,
    /// First retry delay; 0 = retry at once (v1). ≥ 0.
    pub retry_backoff_base_ns: i64,
    /// Largest retry delay; ≥ base when base > 0.
    pub retry_backoff_max_ns: i64,
    /// Dead letters kept per source queue. ≥ 1.
    pub dead_letter_capacity: usize,
    /// Payload bytes one durable registration keeps (backlog and unconfirmed pushes
    /// together): a copy that would pass it is not kept, as one past `capacity_per_queue`.
    /// ≥ 1.
    pub durable_kept_bytes_max: u64,
    /// Work queues this slot holds; a command that would create one more is refused
    /// (CONSUME answers empty). Replay and restore are exempt: what was accepted once is
    /// never dropped because the limit was lowered since. 1..=`QUEUES_MAX_CEILING`.
    pub queues_max: usize,
    /// Payload bytes of the work-queue messages this slot holds in any state (ready,
    /// delayed, retry-waiting, pending, dead-lettered): a publish that would pass it is
    /// refused, as one past `capacity_per_queue` (replay exempt, likewise). It bounds what
    /// one slot keeps in memory and writes in each of its snapshots. Durable backlogs have
    /// their own cap, `durable_kept_bytes_max` per registration. ≥ 1.
    #[serde(default = "slot_bytes_max_default")]
    pub slot_bytes_max: u64,
    /// A queue a publish or CONSUME created (not one declared) is forgotten once it held
    /// nothing — no message in any state, no dead letter — and no publish or delivery used
    /// it for this long; the next publish or CONSUME of its name creates it again, as it
    /// was (a queue has nothing but its name). 0 = never (v1 lists every queue ever
    /// polled). Every node of a cluster must use the same value. ≥ 0.
    #[serde(default)]
    pub idle_queue_ttl_ns: i64,
}

fn slot_bytes_max_default() -> u64 {
    SLOT_BYTES_MAX_DEFAULT
}

/// Default of [`BrokerConfig::slot_bytes_max`] (`queue.slot_bytes_max`): 1 GiB per slot.
pub const SLOT_BYTES_MAX_DEFAULT: u64 = 1 << 30;

impl Default for BrokerConfig {
    /// v1's defaults (5 retries, 30 s, 2^20 messages) with the config file's default backoff.
    fn default() -> Self {
        BrokerConfig {
            max_retry: 5,
            ack_timeout_ns: 30_000_000_000,
            capacity_per_queue: 1 << 20,
            retry_backoff_base_ns: 1_000_000_000,
            retry_backoff_max_ns: 30_000_000_000,
            dead_letter_capacity: 1 << 20,
            durable_kept_bytes_max: DURABLE_KEPT_BYTES_MAX_DEFAULT,
            queues_max: QUEUES_MAX_DEFAULT,
            slot_bytes_max: SLOT_BYTES_MAX_DEFAULT,
            idle_queue_ttl_ns: 0,
        }
    }
}

/// Default of [`BrokerConfig::durable_kept_bytes_max`] (`queue.durable_backlog_bytes_max`):
/// 256 MiB per durable registration.
pub const DURABLE_KEPT_BYTES_MAX_DEFAULT: u64 = 256 << 20;

impl BrokerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.ack_timeout_ns <= 0 {
            return Err(format!(
                "ack_timeout_ns must be > 0, not {}",
                self.ack_timeout_ns
            ));
        }
        if self.capacity_per_queue == 0 || self.dead_letter_capacity == 0 {
            return Err("capacity_per_queue and dead_letter_capacity must be ≥ 1".into());
        }
        if self.durable_kept_bytes_max == 0 || self.slot_bytes_max == 0 {
            return Err("durable_kept_bytes_max and slot_bytes_max must be ≥ 1".into());
        }
        if !(1..=QUEUES_MAX_CEILING).contains(&self.queues_max) {
            return Err(format!(
                "queues_max must be in 1..={QUEUES_MAX_CEILING}, not {}",
                self.queues_max
            ));
        }
        if self.idle_queue_ttl_ns < 0 {
            return Err(format!(
                "idle_queue_ttl_ns must be ≥ 0, not {}",
                self.idle_queue_ttl_ns
            ));
        }
        if self.retry_backoff_base_ns < 0 {
            return Err(format!(
                "retry_backoff_base_ns must be ≥ 0, not {}",
                self.retry_backoff_base_ns
            ));
        }
        if self.retry_backoff_base_ns > 0 && self.retry_backoff_max_ns < self.retry_backoff_base_ns
        {
            return Err("retry_backoff_max_ns must be ≥ retry_backoff_base_ns".into());
        }
        Ok(())
    }

    /// Delay before the `retry`-th retry: `min(base · 2^(retry−1), max)`, 0 when backoff is off.
    pub fn retry_backoff_ns(&self, retry: u32) -> i64 {
        if self.retry_backoff_base_ns == 0 || retry == 0 {
            return 0;
        }
        // 2^62 already exceeds any i64 delay; saturate instead of overflowing.
        let doublings = (retry - 1).min(62);
        let delay_ns = self.retry_backoff_base_ns.checked_mul(1i64 << doublings);
        delay_ns.unwrap_or(i64::MAX).min(self.retry_backoff_max_ns)
    }

    /// Delay before a message whose dead-letter queue was full is retried again.
    fn dead_letter_overflow_delay_ns(&self) -> i64 {
        if self.retry_backoff_base_ns == 0 {
            0
        } else {
            self.retry_backoff_max_ns
        }
    }
}

/// Who consumed / subscribed: opaque to the broker, handed back in effects.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
pub struct ConsumerRef {
    pub shard: u16,
    pub conn: u64,
}

pub struct Broker {
    cfg: BrokerConfig,
    queues: imbl::OrdMap<String, WorkQueue>,
    waiting: Waiting,
    pending: Pending,
    dead_letters: DeadLetters,
    pubsub: PubSub,
    timers: Timers,
    /// Ids of every work-queue message held (any state, dead letters included): ids are
    /// unique within a broker, which ACK/NACK by id rely on.
    ids: HashSet<MessageId, IdHashing>,
    /// Payload bytes of the messages in `ids`, against `BrokerConfig::slot_bytes_max`.
    held_bytes: u64,
    counters: BrokerCounters,
    /// The exchange table `Command::Exchange` changes, and how many changes it has seen
    /// (0: never changed, the default table). With `cluster.enabled` the exchange slot's
    /// broker holds the replicated table; elsewhere it stays the default.
    exchanges: (u64, std::sync::Arc<exchange::Exchanges>),
    /// Commands are being replayed from the log: they were accepted when first applied,
    /// so admission limits that may have been lowered since (`queues_max`, a publish's
    /// `capacity_per_queue`) are not applied again. Only limits whose refusal keeps the
    /// command out of the log are skipped: a replay then reproduces exactly what was
    /// accepted, where applying them again would drop acknowledged messages.
    replaying: bool,
}

/// A command applied by [`Broker::apply_logged`].
#[derive(Debug)]
pub struct Applied {
    pub outcome: Outcome,
    pub effects: Vec<Effect>,
    /// The command changed state a restart must reproduce: it belongs in the log.
    pub logged: bool,
}

/// `queue "<q>" is full (capacity N)`.
/// Bytes a consumed batch may take in its reply: one protocol frame (4 MiB) less room for
/// the envelope. Bounded with `Message::reply_bytes_max`, an upper bound, so the batch
/// always fits.
pub const CONSUME_BATCH_BYTES_MAX: u64 = 4 * 1024 * 1024 - 64 * 1024;

/// See [`Broker::held_data`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldData {
    pub messages: u64,
    pub durable_subscriptions: u64,
}

impl HeldData {
    pub fn is_empty(&self) -> bool {
        *self == HeldData::default()
    }
}

pub fn queue_full_error(queue: &str, capacity: usize) -> String {
    format!("queue \"{queue}\" is full (capacity {capacity})")
}

/// A publish refused because its slot holds `slot_bytes_max` payload bytes already.
pub fn slot_full_error(queue: &str, held_bytes: u64, bytes_max: u64) -> String {
    format!(
        "queue \"{queue}\" is full: its slot holds {held_bytes} payload bytes and may hold {bytes_max} (queue.slot_bytes_max)"
    )
}

/// `message <id> not found in pending` (v1 text).
pub fn not_pending_error(id: &MessageId) -> String {
    format!("message {id} not found in pending")
}

impl Broker {
    pub fn new(cfg: BrokerConfig) -> Broker {
        if let Err(e) = cfg.validate() {
            panic!("invalid broker config: {e}");
        }
        Broker {
            dead_letters: DeadLetters::new(cfg.dead_letter_capacity),
            cfg,
            queues: imbl::OrdMap::new(),
            waiting: Waiting::default(),
            pending: Pending::default(),
            pubsub: PubSub::default(),
            timers: Timers::default(),
            ids: HashSet::default(),
            held_bytes: 0,
            counters: BrokerCounters::default(),
            exchanges: (0, std::sync::Arc::new(exchange::Exchanges::new())),
            replaying: false,
        }
    }

    /// Makes `table` the exchange table of a broker that founds a cluster's exchange slot
    /// (what a single node declared, carried into its cluster): change 1, so every shard
    /// of every node installs it as newer than its default.
    pub fn found_exchanges(&mut self, table: exchange::Exchanges) {
        assert_eq!(self.exchanges.0, 0, "only a table never changed is founded");
        self.exchanges = (1, std::sync::Arc::new(table));
    }

    /// The exchange table this broker holds and its change count (`Command::Exchange`).
    pub fn exchanges(&self) -> &(u64, std::sync::Arc<exchange::Exchanges>) {
        &self.exchanges
    }

    fn change_exchanges(&mut self, op: &exchange::ExchangeOp) -> Outcome {
        let mut table = (*self.exchanges.1).clone();
        match op.apply(&mut table) {
            Ok(()) => {
                let version = self.exchanges.0 + 1;
                self.exchanges = (version, std::sync::Arc::new(table));
                Outcome::Exchanged { version }
            }
            Err(e) => Outcome::Error(e),
        }
    }

    /// While on, [`Broker::apply`] replays logged commands: see `replaying`.
    pub fn set_replaying(&mut self, on: bool) {
        self.replaying = on;
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

    pub fn apply(&mut self, cmd: &Command) -> (Outcome, Vec<Effect>) {
        // A replayed command was counted by the process that first applied it: counted
        // again, every restart would add the log's history to the rates a scrape shows.
        let counted_before = self.replaying.then_some(self.counters);
        let mut effects = Vec::new();
        let outcome = match cmd {
            Command::Publish { msg } => self.publish(msg),
            Command::PublishTopic { msg } => self.publish_topic(msg, &mut effects),
            Command::Consume {
                queue,
                consumer,
                max,
                now_ns,
            } => self.consume(queue, *consumer, *max, *now_ns),
            Command::Ack { id, now_ns: _ } => self.ack(id),
            Command::Nack { id, now_ns } => self.nack(id, *now_ns),
            Command::Tick { now_ns } => self.tick(*now_ns, &mut effects),
            Command::Subscribe {
                topic,
                sub_id,
                durable,
                consumer,
                now_ns: _,
            } => self.subscribe(topic, sub_id, *durable, *consumer),
            Command::Confirm {
                consumer,
                topic,
                sub_id,
                delivery,
            } => Outcome::Confirmed(self.pubsub.confirm(*consumer, topic, sub_id, *delivery)),
            Command::Disconnect { consumer } => {
                self.pubsub.disconnect(*consumer);
                Outcome::Disconnected
            }
            Command::DisconnectAll => {
                self.pubsub.disconnect_all();
                Outcome::Disconnected
            }
            Command::DeadLetterRequeue {
                queue,
                limit,
                now_ns,
            } => self.dead_letter_requeue(queue, *limit, *now_ns),
            Command::DeadLetterPurge { queue } => self.dead_letter_purge(queue),
            Command::Purge { queue } => self.purge(queue),
            Command::DeclareQueue { queue } => self.declare_queue(queue),
            Command::Exchange { op } => self.change_exchanges(op),
        };
        if let Some(counters) = counted_before {
            self.counters = counters;
        }
        (outcome, effects)
    }

    /// Applies `cmd` and says whether it must be in the slot's command log: whether it
    /// changed state a restart has to reproduce. The broker decides, not the log, because
    /// only the broker knows which registrations are durable: a subscribe that leaves a
    /// durable registration live on a connection, and the disconnect that takes it offline,
    /// decide whether later topic publishes are pushed or backlogged, so replay needs both.
    /// Refusals, empty polls that discarded nothing, idle ticks and purely live pub/sub
    /// change nothing that outlives the process.
    pub fn apply_logged(&mut self, cmd: &Command) -> Applied {
        let ends_durable_live = match cmd {
            Command::Disconnect { consumer } => self.pubsub.holds_durable(*consumer),
            Command::DisconnectAll => self.pubsub.has_live_durable(),
            _ => false,
        };
        let expired_before = self.counters.expired;
        let timers_issued_before = self.timers.next_seq();
        let timers_before = self.timers.len();
        let (outcome, effects) = self.apply(cmd);
        let logged = match (cmd, &outcome) {
            // An empty poll that met expired messages discarded them, and one that created
            // a queue to be forgotten once idle set its timer: both are changes.
            (Command::Consume { .. }, Outcome::Empty) => {
                self.counters.expired != expired_before
                    || self.timers.next_seq() != timers_issued_before
            }
            (_, Outcome::Error(_) | Outcome::Empty | Outcome::PublishedLive) => false,
            (Command::Tick { .. }, Outcome::Ticked { changed }) => *changed,
            (Command::Confirm { .. }, Outcome::Confirmed(count)) => *count > 0,
            (Command::DeclareQueue { .. }, Outcome::Declared { created }) => {
                *created || self.timers.len() != timers_before
            }
            (Command::Subscribe { topic, sub_id, .. }, _) => self.pubsub.is_durable(topic, sub_id),
            (Command::Disconnect { .. } | Command::DisconnectAll, _) => ends_durable_live,
            _ => true,
        };
        Applied {
            outcome,
            effects,
            logged,
        }
    }

    /// Whether `cmd` would change nothing and answer `Empty`, decided without applying it:
    /// a CONSUME of a queue that exists and holds no ready message (the read-only precheck
    /// of issue 13). Such a poll need not go through the log; in a cluster it would cost an
    /// entry on every member. `apply_logged` agrees (`a_consume_the_precheck_passes_changes_nothing`).
    pub fn finds_nothing(&self, cmd: &Command) -> bool {
        match cmd {
            Command::Consume { queue, .. } => {
                !queue.is_empty()
                    && self
                        .queues
                        .get(queue.as_str())
                        .is_some_and(|q| q.iter_ready().next().is_none())
            }
            _ => false,
        }
    }

    /// When the next tick would change something (`None`: nothing is waiting for a time).
    pub fn next_deadline_ns(&self) -> Option<i64> {
        self.timers.next_due_ns()
    }

    fn publish(&mut self, msg: &Message) -> Outcome {
        if msg.topic.is_empty() {
            return Outcome::Error("topic is required".into());
        }
        if self.ids.contains(&msg.id) {
            return Outcome::Error(format!("message {} already exists", msg.id));
        }
        let capacity = self.cfg.capacity_per_queue;
        let replaying = self.replaying;
        let (held_bytes, bytes_max) = (self.held_bytes, self.cfg.slot_bytes_max);
        let slot_full = held_bytes + msg.payload.len() as u64 > bytes_max && !replaying;
        let creates = !self.queues.contains_key(&*msg.topic);
        let may_create = replaying || self.queues.len() < self.cfg.queues_max;
        if slot_full && creates && may_create {
            // Refused before the queue is created: a refusal is not logged, so it must
            // change nothing (a new queue would be state no replay reproduces). Past the
            // queue limit, `queue_or_create` refuses first, as before.
            self.counters.rejected_full += 1;
            return Outcome::Error(slot_full_error(&msg.topic, held_bytes, bytes_max));
        }
        let queue = match self.queue_or_create(&msg.topic, Some(msg.timestamp_ns)) {
            Ok(queue) => queue,
            Err(e) => return Outcome::Error(e),
        };
        if queue.held() >= capacity && !replaying {
            self.counters.rejected_full += 1;
            return Outcome::Error(queue_full_error(&msg.topic, capacity));
        }
        if slot_full {
            self.counters.rejected_full += 1;
            return Outcome::Error(slot_full_error(&msg.topic, held_bytes, bytes_max));
        }
        queue.hold();
        queue.touch(msg.timestamp_ns);
        // Held, the message points at its queue's name rather than its own copy.
        let held = Message {
            topic: Arc::clone(queue.name()),
            ..msg.clone()
        };
        let new = self.hold_id(&held);
        assert!(new, "message {} was checked absent", msg.id);
        self.counters.published += 1;
        let publish_ns = held.timestamp_ns;
        if held.deliver_at_ns > publish_ns && !held.is_expired(publish_ns) {
            let deliver_at_ns = held.deliver_at_ns;
            self.wait(held, deliver_at_ns);
        } else {
            self.enqueue_ready(held, publish_ns);
        }
        Outcome::Published
    }

    fn publish_topic(&mut self, msg: &Message, effects: &mut Vec<Effect>) -> Outcome {
        if msg.topic.is_empty() {
            return Outcome::Error("topic is required".into());
        }
        let pushes_before = effects.len();
        let limits = pubsub::KeptLimits {
            messages: self.cfg.capacity_per_queue,
            bytes: self.cfg.durable_kept_bytes_max,
        };
        let fanned = self.pubsub.publish(msg, limits, effects);
        self.counters.published_topic += 1;
        self.counters.pushed += (effects.len() - pushes_before) as u64;
        self.counters.backlog_dropped += fanned.dropped;
        if fanned.kept > 0 {
            Outcome::Published
        } else {
            Outcome::PublishedLive
        }
    }

    fn consume(&mut self, queue: &str, consumer: ConsumerRef, max: u32, now_ns: i64) -> Outcome {
        if queue.is_empty() {
            return Outcome::Error("topic is required".into());
        }
        // At the queue limit, polling a new name has nothing to deliver and creates nothing.
        if self.queue_or_create(queue, Some(now_ns)).is_err() {
            return Outcome::Empty;
        }
        let want = max.clamp(1, CONSUME_MESSAGES_MAX) as usize;
        let mut delivered = Vec::new();
        let mut batch_bytes = 0u64;
        while delivered.len() < want {
            // A batch must fit one reply frame: stop before the message that would not fit
            // (it stays first in line), rather than take it and be unable to send it.
            let next_bytes = match self.queues.get(queue).and_then(|q| q.iter_ready().next()) {
                Some((_, r)) => r.msg.reply_bytes_max(),
                None => break,
            };
            if !delivered.is_empty() && batch_bytes + next_bytes > CONSUME_BATCH_BYTES_MAX {
                break;
            }
            let Some(msg) = self.pop_ready(queue) else {
                break;
            };
            if msg.is_expired(now_ns) {
                self.discard_expired(&msg);
                continue;
            }
            self.make_pending(msg.clone(), consumer, now_ns);
            batch_bytes += next_bytes;
            delivered.push(msg);
        }
        self.counters.consumed += delivered.len() as u64;
        if delivered.is_empty() {
            Outcome::Empty
        } else {
            // Only a delivery counts as use: an empty poll is not logged, and what decides
            // forgetting must be in the log.
            self.queue_mut(queue).touch(now_ns);
            Outcome::Delivered(delivered)
        }
    }

    fn pop_ready(&mut self, queue: &str) -> Option<Message> {
        let (_, ready) = self.queues.get_mut(queue)?.pop_first()?;
        if let Some(expiry) = ready.expiry {
            self.timers.cancel(expiry);
        }
        Some(ready.msg)
    }

    fn make_pending(&mut self, msg: Message, consumer: ConsumerRef, now_ns: i64) {
        let ack_deadline_ns = now_ns.saturating_add(self.cfg.ack_timeout_ns);
        let due_ns = PendingEntry::due_ns(&msg, ack_deadline_ns);
        let timer = self
            .timers
            .schedule(due_ns, TimerTarget::Pending { id: msg.id });
        self.pending.insert(PendingEntry {
            msg,
            consumer,
            ack_deadline_ns,
            timer,
        });
    }

    fn ack(&mut self, id: &MessageId) -> Outcome {
        let Some(entry) = self.pending.remove(id) else {
            return Outcome::Error(not_pending_error(id));
        };
        self.timers.cancel(entry.timer);
        self.forget(&entry.msg);
        self.counters.acked += 1;
        Outcome::Acked
    }

    fn nack(&mut self, id: &MessageId, now_ns: i64) -> Outcome {
        let Some(entry) = self.pending.remove(id) else {
            return Outcome::Error(not_pending_error(id));
        };
        self.timers.cancel(entry.timer);
        self.counters.nacked += 1;
        self.retry_or_dead_letter(entry.msg, now_ns);
        Outcome::Nacked
    }

    fn tick(&mut self, now_ns: i64, effects: &mut Vec<Effect>) -> Outcome {
        let mut fired = 0;
        while fired < TIMERS_PER_TICK_MAX {
            let Some((key, target)) = self.timers.pop_due(now_ns) else {
                break;
            };
            fired += 1;
            self.fire(key, target, now_ns, effects);
        }
        Outcome::Ticked { changed: fired > 0 }
    }

    fn fire(&mut self, key: TimerKey, target: TimerTarget, now_ns: i64, effects: &mut Vec<Effect>) {
        match target {
            TimerTarget::Waiting => {
                // Discarded instead if its TTL has passed.
                let msg = self.waiting.remove(&key);
                self.enqueue_ready(msg, now_ns);
            }
            TimerTarget::Ready {
                queue,
                key: ready_key,
            } => {
                let queue = self
                    .queues
                    .get_mut(&queue)
                    .expect("a timed ready message's queue");
                let ready = queue
                    .remove(&ready_key)
                    .expect("a timed ready message is ready");
                assert_eq!(ready.expiry, Some(key));
                assert!(
                    ready.msg.is_expired(now_ns),
                    "ready expiry fired before the TTL"
                );
                self.discard_expired(&ready.msg);
            }
            TimerTarget::IdleQueue { queue } => self.forget_if_idle(&queue, key, now_ns),
            TimerTarget::Pending { id } => {
                let entry = self
                    .pending
                    .remove(&id)
                    .expect("a timed pending message is pending");
                assert_eq!(entry.timer, key);
                effects.push(Effect::Released {
                    consumer: entry.consumer,
                    id,
                });
                if entry.msg.is_expired(now_ns) {
                    self.discard_expired(&entry.msg);
                } else {
                    self.counters.ack_timeouts += 1;
                    self.retry_or_dead_letter(entry.msg, now_ns);
                }
            }
        }
    }

    /// The NACK / ack-timeout path (v1 §3.6) with backoff. The message keeps the place it
    /// holds in its queue's capacity unless it is dead-lettered.
    fn retry_or_dead_letter(&mut self, mut msg: Message, now_ns: i64) {
        msg.retry = msg.retry.saturating_add(1);
        let delay_ns = if msg.retry <= msg.max_retry {
            self.counters.retried += 1;
            self.cfg.retry_backoff_ns(msg.retry)
        } else if self.dead_letters.has_room(&msg.topic) {
            self.queue_mut(&msg.topic).release();
            self.counters.dead_lettered += 1;
            self.dead_letters.push(msg);
            return;
        } else {
            self.counters.dead_letter_overflow += 1;
            self.cfg.dead_letter_overflow_delay_ns()
        };
        if delay_ns == 0 {
            self.enqueue_ready(msg, now_ns);
        } else {
            self.wait(msg, now_ns.saturating_add(delay_ns));
        }
    }

    /// Puts a held message at the tail of its level, or discards it if its TTL has passed.
    fn enqueue_ready(&mut self, msg: Message, now_ns: i64) {
        if msg.is_expired(now_ns) {
            self.discard_expired(&msg);
            return;
        }
        let queue = self
            .queues
            .get_mut(&*msg.topic)
            .expect("a held message's queue exists");
        let key = queue.next_key(msg.level());
        let expiry = (msg.expires_at_ns != 0).then(|| {
            let target = TimerTarget::Ready {
                queue: msg.topic.to_string(),
                key,
            };
            self.timers.schedule(msg.expires_at_ns, target)
        });
        queue.insert(key, Ready { msg, expiry });
    }

    /// An undeclared queue's idle timer fired: the queue is forgotten when it holds nothing
    /// (no message in any state, no dead letter) and no publish or delivery used it for
    /// `idle_queue_ttl_ns`; otherwise the timer is set for when that could next hold.
    fn forget_if_idle(&mut self, name: &str, key: TimerKey, now_ns: i64) {
        let ttl = self.cfg.idle_queue_ttl_ns;
        let holds_dead_letters = self.dead_letters.len(name) > 0;
        let queue = self.queue_mut(name);
        assert_eq!(queue.idle_timer, Some(key), "idle timer of {name}");
        queue.idle_timer = None;
        if ttl == 0 {
            return; // forgetting was turned off since the timer was set
        }
        let idle_from_ns = queue.last_used_ns.saturating_add(ttl);
        if queue.held() == 0 && !holds_dead_letters && idle_from_ns <= now_ns {
            self.queues.remove(name);
            self.dead_letters.forget(name);
            self.counters.queues_forgotten += 1;
            return;
        }
        let due_ns = if idle_from_ns > now_ns {
            idle_from_ns
        } else {
            now_ns.saturating_add(ttl)
        };
        let timer = self.schedule_idle_check(name, due_ns);
        self.queue_mut(name).idle_timer = Some(timer);
    }

    /// Sets the timer that looks at queue `name` again at `due_ns` (`forget_if_idle`).
    fn schedule_idle_check(&mut self, name: &str, due_ns: i64) -> TimerKey {
        let target = TimerTarget::IdleQueue {
            queue: name.to_string(),
        };
        self.timers.schedule(due_ns, target)
    }

    /// Parks a held message until `wake_ns` (delay or backoff).
    fn wait(&mut self, msg: Message, wake_ns: i64) {
        let timer = self
            .timers
            .schedule(Waiting::due_ns(&msg, wake_ns), TimerTarget::Waiting);
        self.waiting.insert(timer, msg);
    }

    fn discard_expired(&mut self, msg: &Message) {
        self.counters.expired += 1;
        self.forget(msg);
    }

    /// The message leaves the broker: its queue's place and its id are freed.
    fn forget(&mut self, msg: &Message) {
        self.queue_mut(&msg.topic).release();
        let known = self.release_id(msg);
        assert!(known, "message {} was not held", msg.id);
    }

    /// Counts `msg` as held (its id and payload bytes); false if its id already was.
    fn hold_id(&mut self, msg: &Message) -> bool {
        let new = self.ids.insert(msg.id);
        if new {
            self.held_bytes += msg.payload.len() as u64;
        }
        new
    }

    /// Undoes [`Broker::hold_id`]; false if `msg` was not held.
    fn release_id(&mut self, msg: &Message) -> bool {
        let known = self.ids.remove(&msg.id);
        if known {
            self.held_bytes -= msg.payload.len() as u64;
        }
        known
    }

    /// The queue `name`, created if absent unless the slot holds `queues_max` already. A
    /// queue created by a command at `used_at_ns` (a publish or CONSUME, not a declare) is
    /// forgotten once idle and empty (`idle_queue_ttl_ns`).
    fn queue_or_create(
        &mut self,
        name: &str,
        used_at_ns: Option<i64>,
    ) -> Result<&mut WorkQueue, String> {
        let at_limit = self.queues.len() >= self.cfg.queues_max;
        if at_limit && !self.replaying && !self.queues.contains_key(name) {
            self.counters.queues_refused += 1;
            return Err(too_many_queues_error(self.cfg.queues_max));
        }
        if !self.queues.contains_key(name) {
            let mut queue = WorkQueue::new(name);
            let ttl = self.cfg.idle_queue_ttl_ns;
            if let (Some(now_ns), true) = (used_at_ns, ttl > 0) {
                queue.last_used_ns = now_ns;
                queue.idle_timer = Some(self.schedule_idle_check(name, now_ns.saturating_add(ttl)));
            }
            self.queues.insert(name.to_string(), queue);
        }
        // The name is copied only when the queue is new: a publish or consume of a queue
        // that exists allocates nothing here.
        Ok(self.queues.get_mut(name).expect("present or just inserted"))
    }

    fn queue_mut(&mut self, queue: &str) -> &mut WorkQueue {
        self.queues
            .get_mut(queue)
            .expect("a held message's queue exists")
    }

    fn subscribe(
        &mut self,
        topic: &str,
        sub_id: &str,
        durable: bool,
        consumer: ConsumerRef,
    ) -> Outcome {
        if topic.is_empty() {
            return Outcome::Error("topic is required".into());
        }
        if sub_id.is_empty() {
            return Outcome::Error("id is required".into());
        }
        match self.pubsub.subscribe(topic, sub_id, durable, consumer) {
            Ok(catch_up) => Outcome::Subscribed {
                catch_up: catch_up.messages,
                first_delivery: catch_up.first_delivery,
            },
            Err(e) => Outcome::Error(e),
        }
    }

    fn dead_letter_requeue(&mut self, queue: &str, limit: u32, now_ns: i64) -> Outcome {
        let available = self.dead_letters.len(queue);
        if available == 0 || limit == 0 {
            return Outcome::Requeued(0);
        }
        let capacity = self.cfg.capacity_per_queue;
        let held = self
            .queues
            .get(queue)
            .expect("a dead-letter queue's source queue exists")
            .held();
        let room = capacity.saturating_sub(held);
        if room == 0 {
            return Outcome::Error(queue_full_error(queue, capacity));
        }
        let n = (limit.min(DEAD_LETTER_REQUEUE_MAX) as usize)
            .min(available)
            .min(room);
        for mut msg in self.dead_letters.take_front(queue, n) {
            msg.retry = 0;
            self.queue_mut(queue).hold();
            self.enqueue_ready(msg, now_ns);
        }
        self.counters.dead_letters_requeued += n as u64;
        Outcome::Requeued(n as u32)
    }

    fn declare_queue(&mut self, queue: &str) -> Outcome {
        if queue.is_empty() {
            return Outcome::Error("queue is required".into());
        }
        let created = !self.queues.contains_key(queue);
        let idle_timer = match self.queue_or_create(queue, None) {
            Ok(q) => q.idle_timer.take(),
            Err(e) => return Outcome::Error(e),
        };
        // A declared queue is kept: one that was to be forgotten once idle no longer is
        // (a change `apply_logged` logs, as it logs a creation).
        if let Some(timer) = idle_timer {
            self.timers.cancel(timer);
        }
        Outcome::Declared { created }
    }

    fn purge(&mut self, queue: &str) -> Outcome {
        if !self.queues.contains_key(queue) {
            return Outcome::Error(format!("queue {queue} not found"));
        }
        let mut purged = 0u64;
        while let Some(msg) = self.pop_ready(queue) {
            self.forget(&msg);
            purged += 1;
        }
        Outcome::Purged(purged)
    }

    fn dead_letter_purge(&mut self, queue: &str) -> Outcome {
        let purged = self.dead_letters.take_front(queue, usize::MAX);
        for msg in &purged {
            let known = self.release_id(msg);
            assert!(known, "dead letter {} was not held", msg.id);
        }
        self.counters.dead_letters_purged += purged.len() as u64;
        Outcome::Purged(purged.len() as u64)
    }

    /// True while any subscription is registered on a connection (after recovery these
    /// belong to connections of an earlier process: apply `DisconnectAll`).
    pub fn has_live_subscriptions(&self) -> bool {
        self.pubsub.has_live()
    }

    /// The connections that have live subscriptions.
    pub fn live_subscribers(&self) -> impl Iterator<Item = ConsumerRef> + '_ {
        self.pubsub.live_consumers()
    }

    pub fn stats(&self) -> BrokerStats {
        let mut stats = BrokerStats {
            pending_count: self.pending.len() as u64,
            delayed_count: self.waiting.len() as u64,
            ..BrokerStats::default()
        };
        for (name, queue) in &self.queues {
            stats.queues.insert(name.clone(), queue.ready_len() as u64);
        }
        for (topic, sub_id, sub) in self.pubsub.durable() {
            *stats.queues.entry(format!("{topic}:{sub_id}")).or_insert(0) +=
                sub.backlog.len() as u64;
        }
        for (topic, n) in self.pubsub.topic_counts() {
            stats.topics.insert(topic.clone(), n as u64);
        }
        for (queue, n) in self.dead_letters.counts() {
            stats
                .dead_letters
                .insert(format!("{queue}{DEAD_LETTER_SUFFIX}"), n as u64);
        }
        stats
    }

    /// Whether the work-queue message `id` is held in any state (ready, delayed, pending or
    /// dead-lettered): what replication tests check acknowledged publishes against.
    pub fn holds(&self, id: &MessageId) -> bool {
        self.ids.contains(id)
    }

    /// What this state holds that a client would miss if it were not served: work-queue
    /// messages in any state, and durable subscriptions (with their backlogs).
    pub fn held_data(&self) -> HeldData {
        HeldData {
            messages: self.ids.len() as u64,
            durable_subscriptions: self.pubsub.durable().count() as u64,
        }
    }

    pub fn counters(&self) -> BrokerCounters {
        self.counters
    }

    /// `(source queue, dead letters)` for every queue that has any, by name (DLQ_LIST and
    /// the dashboard: nothing to read or requeue in an empty one, which only STATS lists, at
    /// 0, as v1). The v1 stat key of each is `<queue>_dead_letter`.
    pub fn dead_letter_queues(&self) -> Vec<(String, u64)> {
        self.dead_letters
            .counts()
            .filter(|(_, n)| *n > 0)
            .map(|(q, n)| (q.clone(), n as u64))
            .collect()
    }

    /// Dead letters of work queue `queue`, oldest first, without removing them; `limit` is
    /// capped at `DEAD_LETTER_LIST_MAX`.
    pub fn dead_letters(&self, queue: &str, offset: usize, limit: usize) -> Vec<Message> {
        self.dead_letters
            .list(queue, offset, limit.min(DEAD_LETTER_LIST_MAX))
    }

    /// Messages `queue` holds against its capacity (ready + delayed + retry-waiting +
    /// pending); `None` if the queue does not exist.
    pub fn queue_held(&self, queue: &str) -> Option<usize> {
        self.queues.get(queue).map(WorkQueue::held)
    }
}

/// A summary: the full state is `snapshot()`.
impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("stats", &self.stats())
            .field("next_deadline_ns", &self.next_deadline_ns())
            .finish()
    }
}

/// Creates `name` when absent, for a snapshot being restored: bounded only by
/// `QUEUES_MAX_CEILING`, which no accepted history passes (a snapshot taken before
/// `queues_max` was lowered still restores whole).
fn queue_or_create_restored<'a>(
    queues: &'a mut imbl::OrdMap<String, WorkQueue>,
    name: &str,
) -> Result<&'a mut WorkQueue, String> {
    if queues.len() >= QUEUES_MAX_CEILING && !queues.contains_key(name) {
        return Err(format!("too many queues (limit {QUEUES_MAX_CEILING})"));
    }
    Ok(queues
        .entry(name.to_string())
        .or_insert_with(|| WorkQueue::new(name)))
}

/// The refusal of a queue past `queues_max`.
pub fn too_many_queues_error(queues_max: usize) -> String {
    format!("too many queues in this queue's slot (limit {queues_max}, queue.queues_per_slot_max)")
}
