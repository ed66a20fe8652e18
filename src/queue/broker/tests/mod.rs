//! Tests of the broker and the exchange table: one rule per test (`rules`, `pubsub`,
//! `exchange`), a model-based test against a trivial model (`model`), and determinism across
//! replay and snapshot/restore (`determinism`). Random tests use an inline xorshift PRNG;
//! every failure prints its seed, and `BOLTQ_SEED=<n>` replays that seed alone.

mod determinism;
mod exchange;
pub(crate) mod gen;
mod model;
mod pubsub;
mod recovery;
mod rules;

use super::{Broker, BrokerConfig, Command, ConsumerRef, Effect, Outcome};
use crate::queue::message::{IdGenerator, Message, MessageId};
use bytes::Bytes;
use std::collections::BTreeMap;

pub(super) const C1: ConsumerRef = ConsumerRef { shard: 0, conn: 1 };
pub(super) const C2: ConsumerRef = ConsumerRef { shard: 1, conn: 2 };

/// Small limits so tests reach them: capacity 100, 2 retries, immediate retry, 1 µs ack
/// timeout.
pub(super) fn cfg() -> BrokerConfig {
    BrokerConfig {
        max_retry: 2,
        ack_timeout_ns: 1_000,
        capacity_per_queue: 100,
        retry_backoff_base_ns: 0,
        retry_backoff_max_ns: 0,
        dead_letter_capacity: 100,
        durable_kept_bytes_max: 1 << 20,
        queues_max: 16,
        slot_bytes_max: 1 << 30,
        idle_queue_ttl_ns: 0,
    }
}

/// Builds messages the way the connection does (spec §3.3): deliver_at/expires_at from
/// delay/ttl relative to the publish time.
pub(super) struct Factory {
    ids: IdGenerator,
    pub max_retry: u32,
}

impl Factory {
    pub fn new() -> Factory {
        Factory {
            ids: IdGenerator::new([9; 7]),
            max_retry: 2,
        }
    }

    pub fn msg(&mut self, topic: &str, priority: i64, now_ns: i64) -> Message {
        self.timed(topic, priority, now_ns, 0, 0)
    }

    pub fn timed(
        &mut self,
        topic: &str,
        priority: i64,
        now_ns: i64,
        delay_ns: i64,
        ttl_ns: i64,
    ) -> Message {
        let id = self.ids.next(0);
        Message {
            id,
            topic: topic.into(),
            payload: Bytes::from(format!("\"{}\"", id.to_hex())),
            extras: None,
            timestamp_ns: now_ns,
            retry: 0,
            max_retry: self.max_retry,
            priority,
            delay_ns,
            ttl_ns,
            deliver_at_ns: if delay_ns > 0 { now_ns + delay_ns } else { 0 },
            expires_at_ns: if ttl_ns > 0 { now_ns + ttl_ns } else { 0 },
        }
    }
}

/// Applies and checks every invariant afterwards.
pub(super) fn run(b: &mut Broker, cmd: Command) -> (Outcome, Vec<Effect>) {
    let out = b.apply(&cmd);
    b.check_invariants();
    out
}

pub(super) fn publish(b: &mut Broker, msg: &Message) -> Outcome {
    let (outcome, effects) = run(b, Command::Publish { msg: msg.clone() });
    assert!(effects.is_empty());
    outcome
}

pub(super) fn consume(b: &mut Broker, queue: &str, max: u32, now_ns: i64) -> Vec<Message> {
    let cmd = Command::Consume {
        queue: queue.into(),
        consumer: C1,
        max,
        now_ns,
    };
    match run(b, cmd).0 {
        Outcome::Delivered(msgs) => msgs,
        Outcome::Empty => Vec::new(),
        other => panic!("consume: {other:?}"),
    }
}

pub(super) fn consume_ids(b: &mut Broker, queue: &str, max: u32, now_ns: i64) -> Vec<MessageId> {
    consume(b, queue, max, now_ns)
        .iter()
        .map(|m| m.id)
        .collect()
}

pub(super) fn tick(b: &mut Broker, now_ns: i64) -> (bool, Vec<Effect>) {
    match run(b, Command::Tick { now_ns }) {
        (Outcome::Ticked { changed }, effects) => (changed, effects),
        other => panic!("tick: {other:?}"),
    }
}

pub(super) fn ack(b: &mut Broker, id: MessageId, now_ns: i64) -> Outcome {
    run(b, Command::Ack { id, now_ns }).0
}

pub(super) fn nack(b: &mut Broker, id: MessageId, now_ns: i64) -> Outcome {
    run(b, Command::Nack { id, now_ns }).0
}

/// Runs `f` for seeds `1..=seeds` (`BOLTQ_SEEDS=<n>` runs more for a soak; `BOLTQ_SEED=<n>`
/// only that one), printing the seed of a failure.
pub(super) fn for_seeds(name: &str, seeds: u64, f: impl Fn(u64)) {
    let seeds = std::env::var("BOLTQ_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seeds);
    let only: Option<u64> = std::env::var("BOLTQ_SEED").ok().map(|s| {
        s.parse()
            .unwrap_or_else(|_| panic!("BOLTQ_SEED must be a number, not {s:?}"))
    });
    let list: Vec<u64> = match only {
        Some(seed) => vec![seed],
        None => (1..=seeds).collect(),
    };
    for seed in list {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed)));
        if let Err(panic) = result {
            eprintln!("{name}: failed with seed {seed}; replay with BOLTQ_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}
