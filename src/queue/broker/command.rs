//! The broker's inputs (commands), replies (outcomes) and side effects.
//!
//! A `Command` is every state change, and it is the WAL record: applying the same sequence to
//! a fresh broker always yields the same state, because every input — including the time —
//! is inside the command.

use super::ConsumerRef;
use crate::queue::message::{Message, MessageId};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Work-queue publish to queue `msg.topic`. The caller has set `deliver_at_ns` /
    /// `expires_at_ns` from delay/ttl, and `timestamp_ns` is the publish time: it is the
    /// "now" of this command (a message with `deliver_at_ns > timestamp_ns` is delayed).
    Publish {
        msg: Message,
    },
    /// Pub/sub publish to topic `msg.topic`: an `Effect::Push` per live subscriber, a backlog
    /// copy per offline durable subscriber. No subscribers is fine.
    PublishTopic {
        msg: Message,
    },
    /// Pops up to `max` ready messages (at least 1, at most `CONSUME_MESSAGES_MAX`), which
    /// become pending with ack deadline `now_ns + ack_timeout_ns`; skips and discards
    /// messages whose TTL has passed. Creates the queue (at `queues_max` queues, an unknown
    /// name is `Empty` and creates nothing). Runs no timers: the shard ticks first.
    Consume {
        queue: String,
        consumer: ConsumerRef,
        max: u32,
        now_ns: i64,
    },
    Ack {
        id: MessageId,
        now_ns: i64,
    },
    /// Negative ack: retry (after backoff) or dead-letter.
    Nack {
        id: MessageId,
        now_ns: i64,
    },
    /// Fires every timer due at `now_ns` (at most `TIMERS_PER_TICK_MAX` per tick): promotes
    /// delayed messages, expires TTLs, retries or dead-letters pending messages past their
    /// ack deadline.
    Tick {
        now_ns: i64,
    },
    /// Registers `(topic, sub_id)` live on `consumer`, replacing any previous live
    /// registration of the pair. `durable` keeps a backlog while it is offline.
    Subscribe {
        topic: String,
        sub_id: String,
        durable: bool,
        consumer: ConsumerRef,
        now_ns: i64,
    },
    /// The connection closed: its live subscriptions end (durable ones go offline and start
    /// backlogging). Its pending messages stay pending until acked or timed out (v1).
    Disconnect {
        consumer: ConsumerRef,
    },
    /// `consumer` has every push of durable registration `(topic, sub_id)` numbered up to
    /// `delivery` (the server saw the peer's TCP acknowledge their bytes): they are no longer
    /// handed out again after a disconnect. Ignored unless the registration is live on
    /// `consumer`.
    Confirm {
        consumer: ConsumerRef,
        topic: String,
        sub_id: String,
        delivery: u64,
    },
    /// Every connection is gone: apply once after recovery (and log it), since commands
    /// replayed from the WAL re-register subscriptions of connections that no longer exist.
    /// `Broker::restore` does the same to the restored state.
    DisconnectAll,
    /// Moves up to `limit` of the oldest dead letters of work queue `queue` back to the tail
    /// of their level in `queue`, with `retry` reset to 0, as far as capacity allows.
    DeadLetterRequeue {
        queue: String,
        limit: u32,
        now_ns: i64,
    },
    /// Creates work queue `queue` if it does not exist (v1: a BIND creates its queue).
    DeclareQueue {
        queue: String,
    },
    /// Discards every dead letter of work queue `queue`.
    /// Discards the ready messages of work queue `queue` (not pending, delayed or retry-
    /// waiting ones, as v1's HTTP purge). An unknown queue is an error naming it.
    Purge {
        queue: String,
    },
    DeadLetterPurge {
        queue: String,
    },
    /// Changes the exchange table this broker holds (with `cluster.enabled`, the exchange
    /// slot's: the replicated table; single-node servers keep theirs on the metadata shard).
    Exchange {
        op: super::exchange::ExchangeOp,
    },
}

impl Command {
    /// The time the command carries, for the commands that carry one.
    pub fn time_ns(&self) -> Option<i64> {
        match self {
            Command::Publish { msg } | Command::PublishTopic { msg } => Some(msg.timestamp_ns),
            Command::Consume { now_ns, .. }
            | Command::Ack { now_ns, .. }
            | Command::Nack { now_ns, .. }
            | Command::Tick { now_ns }
            | Command::Subscribe { now_ns, .. }
            | Command::DeadLetterRequeue { now_ns, .. } => Some(*now_ns),
            Command::Disconnect { .. }
            | Command::Confirm { .. }
            | Command::DisconnectAll
            | Command::DeclareQueue { .. }
            | Command::Purge { .. }
            | Command::DeadLetterPurge { .. }
            | Command::Exchange { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Published,
    /// A pub/sub publish that changed no state outliving a connection: every copy went to a
    /// live non-durable subscriber (or there was no subscriber, or a full registration
    /// refused it). Nothing is logged for it, so its reply does not wait for a disk round:
    /// non-durable delivery is at most once and would not survive a restart anyway, whereas
    /// a copy a durable registration keeps (an offline one's backlog, a live one's
    /// unconfirmed push) makes the publish [`Outcome::Published`] (logged).
    PublishedLive,
    /// At least one message, in delivery order.
    Delivered(Vec<Message>),
    Empty,
    Acked,
    Nacked,
    /// The connection sends the `subscribed` reply first, then pushes `catch_up` in order.
    /// `first_delivery` is set for a durable registration: `catch_up[i]` has delivery number
    /// `first_delivery + i`, which the connection confirms once the peer has it.
    Subscribed {
        catch_up: Vec<Message>,
        first_delivery: Option<u64>,
    },
    /// How many pushes a `Confirm` took off their registration.
    Confirmed(u64),
    /// How many dead letters left the dead-letter queue (ones whose TTL had passed are then
    /// discarded, like any expired message).
    Requeued(u32),
    Purged(u64),
    /// A `DeclareQueue`: whether it created the queue (false: it existed).
    Declared {
        created: bool,
    },
    /// `changed`: at least one timer fired.
    Ticked {
        changed: bool,
    },
    Disconnected,
    /// A `Command::Exchange` applied: the table's change count after it.
    Exchanged {
        version: u64,
    },
    /// Exact client-facing text, e.g. `message <id> not found in pending`.
    Error(String),
    /// Never from the broker: with `cluster.enabled`, no leader of the command's slot was
    /// known in time. `leader` is the raft address of the leader last known (v1's field),
    /// `leader_id` its node id; either may be empty. v1 clients reconnect on it.
    NotLeader {
        leader: String,
        leader_id: String,
        /// The leader's client-facing TCP and HTTP addresses (v1 clients dialled `leader`,
        /// a raft address, by mistake); empty when not known.
        leader_tcp: String,
        leader_http: String,
    },
}

// Effects live for one command and are few; boxing the message would add an allocation per
// push for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Deliver `msg` to a live subscriber. Without `delivery` (a non-durable registration)
    /// at most once: the connection may drop it when its buffer is full, as v1 does. With it
    /// (durable) the copy stays kept until the connection confirms that number, so the
    /// connection must never skip it silently: it confirms in order or not at all.
    Push {
        to: ConsumerRef,
        sub_id: String,
        msg: Message,
        delivery: Option<u64>,
    },
    /// A message consumed by `consumer` left pending without an ack (ack timeout or TTL):
    /// the connection releases one prefetch unit (fix of v1 §12 item 6).
    Released {
        consumer: ConsumerRef,
        id: MessageId,
    },
}
