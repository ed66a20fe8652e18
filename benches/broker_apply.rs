//! The queue broker's state machine: ns per `Broker::apply` of one command, as a shard
//! applies it for one slot (no WAL, no sockets: `benches/publish_json.rs` times the JSON
//! the WAL adds).
//!
//! `cargo bench --bench broker_apply [filter]`
//!
//! Every case runs on a fresh broker (default `BrokerConfig`: 30 s ack timeout, 2^20
//! messages per queue) whose queue `jobs` already holds `backlog` ready messages (0 or
//! 100,000) of 100 B, then times `OPS` commands, prepared beforehand:
//!
//! - `publish`: `Command::Publish` of `OPS` new messages (the backlog grows by `OPS`).
//! - `consume`: `Command::Consume` with `max` 1 (a v1 CONSUME) from a queue holding
//!   `backlog + OPS`, so each call delivers one message and makes it pending.
//! - `ack`: `Command::Ack` of `OPS` pending messages (consumed before the timing starts).
//! - `cycle`: publish one, consume one (the oldest), ack it; ns per cycle of three
//!   commands. The backlog stays where it started: the steady state of a busy queue.
//!
//! - `snapshot freeze`: `Broker::freeze` of a queue holding `SNAPSHOT_MESSAGES` messages
//!   of 1 KiB: the part of a compaction that runs on the shard, between two commands (ns
//!   per message held; O(1), so it falls with the queue's length). `snapshot copy`:
//!   `Frozen::snapshot`, and `snapshot encode`: serialising it, both on the blocking pool.
//!   `snapshot load`: decoding that body and restoring a broker from it (ns per message);
//!   `snapshot load chunked`: the same from the body's chunk records, as a restart reads
//!   them (`snapshot::Chunks`).
//!
//! `prio` cases give every message a priority drawn from 0..=9 (backlog and new messages
//! alike), so the ready set spans all ten levels; the others use priority 0.

mod common;

use boltq::queue::broker::{Broker, BrokerConfig, Command, ConsumerRef, Outcome};
use boltq::queue::message::{IdGenerator, Message, MessageId};
use boltq_io::testutil::Rng;
use bytes::Bytes;
use common::bench;
use std::hint::black_box;

/// Commands timed per repetition.
const OPS: usize = 10_000;
const QUEUE: &str = "jobs";
const PAYLOAD_BYTES: usize = 100;
const CONSUMER: ConsumerRef = ConsumerRef { shard: 0, conn: 1 };
const NOW_NS: i64 = 1_700_000_000_000_000_000;

/// Builds messages as the TCP front end does for a PUBLISH without delay or TTL.
struct Messages {
    ids: IdGenerator,
    rng: Rng,
    payload: Bytes,
    priorities: bool,
}

impl Messages {
    fn new(priorities: bool) -> Messages {
        let text = format!("\"{}\"", "x".repeat(PAYLOAD_BYTES - 2));
        Messages {
            ids: IdGenerator::new([7; 7]),
            rng: Rng::new(42),
            payload: Bytes::from(text),
            priorities,
        }
    }

    fn publish(&mut self) -> Command {
        let priority = if self.priorities {
            self.rng.below(10) as i64
        } else {
            0
        };
        Command::Publish {
            msg: Message {
                id: self.ids.next(0),
                topic: QUEUE.into(),
                payload: self.payload.clone(),
                extras: None,
                timestamp_ns: NOW_NS,
                retry: 0,
                max_retry: 5,
                priority,
                delay_ns: 0,
                ttl_ns: 0,
                deliver_at_ns: 0,
                expires_at_ns: 0,
            },
        }
    }

    fn publishes(&mut self, n: usize) -> Vec<Command> {
        (0..n).map(|_| self.publish()).collect()
    }
}

fn consume_one() -> Command {
    Command::Consume {
        queue: QUEUE.to_string(),
        consumer: CONSUMER,
        max: 1,
        now_ns: NOW_NS,
    }
}

fn apply_ok(broker: &mut Broker, cmd: &Command) -> Outcome {
    let (outcome, effects) = broker.apply(cmd);
    assert!(effects.is_empty(), "no effects expected: {effects:?}");
    assert!(!matches!(outcome, Outcome::Error(_)), "{outcome:?}");
    outcome
}

/// A broker whose queue holds `ready` messages, and the message source that filled it.
fn filled(ready: usize, priorities: bool) -> (Broker, Messages) {
    let mut broker = Broker::new(BrokerConfig::default());
    let mut messages = Messages::new(priorities);
    for _ in 0..ready {
        let cmd = messages.publish();
        apply_ok(&mut broker, &cmd);
    }
    (broker, messages)
}

fn delivered_id(outcome: &Outcome) -> MessageId {
    match outcome {
        Outcome::Delivered(ms) if ms.len() == 1 => ms[0].id,
        other => panic!("expected one message, got {other:?}"),
    }
}

/// Messages held by the queue the snapshot cases copy (the size of a publish-only
/// benchmark run's queue when its snapshot stalled the shard).
const SNAPSHOT_MESSAGES: usize = 440_000;

fn snapshot_cases() {
    let filled_1k = || {
        let mut broker = Broker::new(BrokerConfig::default());
        let mut messages = Messages::new(false);
        messages.payload = Bytes::from(format!("\"{}\"", "x".repeat(1022)));
        for _ in 0..SNAPSHOT_MESSAGES {
            let cmd = messages.publish();
            apply_ok(&mut broker, &cmd);
        }
        broker
    };
    bench(
        "snapshot freeze 1KiB",
        SNAPSHOT_MESSAGES as u64,
        filled_1k,
        |broker| {
            black_box(broker.freeze());
        },
    );
    bench(
        "snapshot copy 1KiB",
        SNAPSHOT_MESSAGES as u64,
        || filled_1k().freeze(),
        |frozen| {
            black_box(frozen.snapshot());
        },
    );
    bench(
        "snapshot encode 1KiB",
        SNAPSHOT_MESSAGES as u64,
        || Some(filled_1k().snapshot()),
        |snapshot| {
            // Since 2026-12-07 (packed ready messages) `encode` takes the snapshot and drops
            // it, so this also counts dropping the value.
            let snapshot = snapshot.take().expect("set up");
            black_box(boltq::queue::server::snapshot::encode(snapshot).unwrap());
        },
    );
    bench(
        "snapshot load 1KiB",
        SNAPSHOT_MESSAGES as u64,
        || boltq::queue::server::snapshot::encode(filled_1k().snapshot()).unwrap(),
        |body| {
            let snapshot = boltq::queue::server::snapshot::decode(body).unwrap();
            black_box(Broker::try_restore(snapshot, BrokerConfig::default()).unwrap());
        },
    );
    bench(
        "snapshot load chunked 1KiB",
        SNAPSHOT_MESSAGES as u64,
        || {
            let body = boltq::queue::server::snapshot::encode(filled_1k().snapshot()).unwrap();
            let chunk_bytes = boltq::queue::server::snapshot::CHUNK_BYTES;
            let chunks: Vec<Bytes> = body
                .chunks(chunk_bytes)
                .map(Bytes::copy_from_slice)
                .collect();
            Some(boltq::queue::server::snapshot::Chunks::new(chunks))
        },
        |chunks| {
            let chunks = chunks.take().expect("one load per setup");
            let snapshot = boltq::queue::server::snapshot::decode_from(chunks).unwrap();
            black_box(Broker::try_restore(snapshot, BrokerConfig::default()).unwrap());
        },
    );
}

fn main() {
    println!(
        "broker apply: {OPS} commands per repetition, {} repetitions, median; {PAYLOAD_BYTES} B payloads",
        common::reps()
    );
    for priorities in [false, true] {
        for backlog in [0usize, 100_000] {
            let tag = format!("backlog={backlog}{}", if priorities { " prio" } else { "" });

            bench(
                &format!("publish {tag}"),
                OPS as u64,
                || {
                    let (broker, mut messages) = filled(backlog, priorities);
                    (broker, messages.publishes(OPS))
                },
                |(broker, cmds)| {
                    for cmd in cmds.iter() {
                        black_box(broker.apply(cmd));
                    }
                    assert_eq!(broker.queue_held(QUEUE), Some(backlog + OPS));
                },
            );

            bench(
                &format!("consume {tag}"),
                OPS as u64,
                || (filled(backlog + OPS, priorities).0, consume_one()),
                |(broker, consume)| {
                    for _ in 0..OPS {
                        let (outcome, _) = broker.apply(consume);
                        black_box(delivered_id(&outcome));
                    }
                    assert_eq!(broker.counters().consumed, OPS as u64);
                },
            );

            bench(
                &format!("ack {tag}"),
                OPS as u64,
                || {
                    let (mut broker, _) = filled(backlog + OPS, priorities);
                    let acks: Vec<Command> = (0..OPS)
                        .map(|_| Command::Ack {
                            id: delivered_id(&apply_ok(&mut broker, &consume_one())),
                            now_ns: NOW_NS,
                        })
                        .collect();
                    (broker, acks)
                },
                |(broker, acks)| {
                    for cmd in acks.iter() {
                        black_box(broker.apply(cmd));
                    }
                    assert_eq!(broker.counters().acked, OPS as u64);
                },
            );

            bench(
                &format!("cycle publish+consume+ack {tag}"),
                OPS as u64,
                || {
                    let (broker, mut messages) = filled(backlog, priorities);
                    (broker, messages.publishes(OPS), consume_one())
                },
                |(broker, publishes, consume)| {
                    for publish in publishes.iter() {
                        black_box(broker.apply(publish));
                        let (outcome, _) = broker.apply(consume);
                        let ack = Command::Ack {
                            id: delivered_id(&outcome),
                            now_ns: NOW_NS,
                        };
                        black_box(broker.apply(&ack));
                    }
                    assert_eq!(broker.counters().acked, OPS as u64);
                    assert_eq!(broker.queue_held(QUEUE), Some(backlog));
                },
            );
        }
    }
    snapshot_cases();
}
