//! Random command sequences for the model and determinism tests: an inline xorshift PRNG
//! (no dependency, same sequence on every platform) and a generator that knows nothing of
//! the broker's state, apart from an optional hint of pending ids to ACK/NACK.

use super::super::{BrokerConfig, Command, ConsumerRef};
use crate::queue::message::{IdGenerator, Message, MessageExtras, MessageId};
use bytes::Bytes;
use std::collections::BTreeMap;

pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Spread small seeds; xorshift must not start at 0.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

pub(crate) const QUEUES: [&str; 3] = ["a", "b", "c"];
pub(crate) const TOPICS: [&str; 2] = ["t", "u"];
pub(crate) const SUB_IDS: [&str; 3] = ["s1", "s2", "s3"];
pub(crate) const CONSUMERS: [ConsumerRef; 3] = [
    ConsumerRef { shard: 0, conn: 1 },
    ConsumerRef { shard: 0, conn: 2 },
    ConsumerRef { shard: 1, conn: 1 },
];

/// One step: a command, or a "reboot" (snapshot, serialise, restore).
#[allow(clippy::large_enum_variant)] // test-only, one at a time
#[derive(Clone, Debug)]
pub(crate) enum Step {
    Cmd(Command),
    Reboot,
}

pub(crate) struct Gen {
    pub rng: Rng,
    ids: IdGenerator,
    pub now_ns: i64,
    published: Vec<MessageId>,
    ack_timeout_ns: i64,
}

/// A random small config, so every limit is reached: capacity, dead-letter capacity, the
/// bytes a durable registration keeps and a slot holds (payloads here are 7–9 bytes),
/// backoff on or off, short ack timeout.
pub(crate) fn random_config(rng: &mut Rng) -> BrokerConfig {
    let base = if rng.chance(50) { 0 } else { rng.range(10, 80) };
    BrokerConfig {
        max_retry: rng.range(0, 3) as u32,
        ack_timeout_ns: rng.range(100, 600),
        capacity_per_queue: rng.range(1, 8) as usize,
        retry_backoff_base_ns: base,
        retry_backoff_max_ns: if base == 0 {
            rng.range(0, 100)
        } else {
            base * rng.range(1, 5)
        },
        dead_letter_capacity: rng.range(1, 4) as usize,
        durable_kept_bytes_max: if rng.chance(50) {
            rng.range(8, 40) as u64
        } else {
            1 << 20
        },
        // Below the 3 queue names sometimes, so creations are refused.
        queues_max: rng.range(1, 5) as usize,
        // A few messages' worth sometimes, so a slot fills up before its queues do.
        slot_bytes_max: if rng.chance(50) {
            rng.range(20, 60) as u64
        } else {
            1 << 20
        },
        // Drawn last, so the draws above stay what they were. Short enough that queues
        // are forgotten (and created again) within a run.
        idle_queue_ttl_ns: if rng.chance(50) {
            0
        } else {
            rng.range(50, 3_000)
        },
    }
}

impl Gen {
    pub fn new(seed: u64, cfg: &BrokerConfig) -> Gen {
        let mut prefix = [0u8; 7];
        prefix.copy_from_slice(&seed.to_le_bytes()[..7]);
        Gen {
            rng: Rng::new(seed),
            ids: IdGenerator::new(prefix),
            now_ns: 1_000_000,
            published: Vec::new(),
            ack_timeout_ns: cfg.ack_timeout_ns,
        }
    }

    /// The next step; `pending` (ids the caller knows are pending) makes ACK/NACK hit more.
    pub fn step(&mut self, pending: &[MessageId]) -> Step {
        // Time flows a little on every command, so consumes also meet TTLs no tick reached.
        self.now_ns += self.rng.range(0, 8);
        let roll = self.rng.below(1000);
        let cmd = match roll {
            0..=299 => Command::Publish {
                msg: self.work_message(),
            },
            300..=379 => Command::PublishTopic {
                msg: self.topic_message(),
            },
            380..=579 => Command::Consume {
                queue: self.rng.pick(&QUEUES).to_string(),
                consumer: *self.rng.pick(&CONSUMERS),
                max: self.rng.range(0, 3) as u32,
                now_ns: self.now_ns,
            },
            580..=679 => Command::Ack {
                id: self.some_id(pending),
                now_ns: self.now_ns,
            },
            680..=759 => Command::Nack {
                id: self.some_id(pending),
                now_ns: self.now_ns,
            },
            760..=889 => {
                self.now_ns += self.jump_ns();
                Command::Tick {
                    now_ns: self.now_ns,
                }
            }
            890..=929 => Command::Subscribe {
                topic: self.rng.pick(&TOPICS).to_string(),
                sub_id: self.rng.pick(&SUB_IDS).to_string(),
                durable: self.rng.chance(50),
                consumer: *self.rng.pick(&CONSUMERS),
                now_ns: self.now_ns,
            },
            930..=949 => Command::Disconnect {
                consumer: *self.rng.pick(&CONSUMERS),
            },
            950..=959 => Command::Confirm {
                consumer: *self.rng.pick(&CONSUMERS),
                topic: self.rng.pick(&TOPICS).to_string(),
                sub_id: self.rng.pick(&SUB_IDS).to_string(),
                delivery: self.rng.range(0, 12) as u64,
            },
            960..=974 => Command::DeadLetterRequeue {
                queue: self.rng.pick(&QUEUES).to_string(),
                limit: self.rng.range(0, 3) as u32,
                now_ns: self.now_ns,
            },
            975..=979 => Command::DeclareQueue {
                queue: self.rng.pick(&QUEUES).to_string(),
            },
            980..=984 => Command::DeadLetterPurge {
                queue: self.rng.pick(&QUEUES).to_string(),
            },
            985..=989 => Command::Purge {
                queue: self.rng.pick(&QUEUES).to_string(),
            },
            990..=994 => Command::DisconnectAll,
            _ => return Step::Reboot,
        };
        Step::Cmd(cmd)
    }

    fn jump_ns(&mut self) -> i64 {
        match self.rng.below(10) {
            0..=5 => self.rng.range(0, 50),
            6..=8 => self.rng.range(50, 300),
            // Past any ack timeout.
            _ => self.rng.range(self.ack_timeout_ns, 3 * self.ack_timeout_ns),
        }
    }

    fn some_id(&mut self, pending: &[MessageId]) -> MessageId {
        if !pending.is_empty() && self.rng.chance(70) {
            return *self.rng.pick(pending);
        }
        if !self.published.is_empty() && self.rng.chance(80) {
            let recent = &self.published[self.published.len().saturating_sub(16)..];
            return *self.rng.pick(recent);
        }
        self.ids.next(0) // never published
    }

    fn base_message(&mut self, topic: &str) -> Message {
        let id = self.ids.next(0);
        let mut headers = BTreeMap::new();
        if self.rng.chance(20) {
            headers.insert("k".to_string(), self.rng.below(3).to_string());
        }
        Message {
            id,
            topic: topic.into(),
            payload: Bytes::from(format!("{{\"n\":{}}}", self.rng.below(1000))),
            extras: None,
            timestamp_ns: self.now_ns,
            retry: 0,
            max_retry: self.rng.range(0, 3) as u32,
            priority: self.rng.range(-1, 10),
            delay_ns: 0,
            ttl_ns: 0,
            deliver_at_ns: 0,
            expires_at_ns: 0,
        }
        .with_extras(MessageExtras {
            headers,
            ..MessageExtras::default()
        })
    }

    fn work_message(&mut self) -> Message {
        let queue = self.rng.pick(&QUEUES).to_string();
        let mut m = self.base_message(&queue);
        if self.rng.chance(30) {
            m.delay_ns = self.rng.range(1, 300);
            m.deliver_at_ns = m.timestamp_ns + m.delay_ns;
        }
        if self.rng.chance(25) {
            m.ttl_ns = self.rng.range(1, 600);
            m.expires_at_ns = m.timestamp_ns + m.ttl_ns;
        }
        self.published.push(m.id);
        m
    }

    fn topic_message(&mut self) -> Message {
        let topic = self.rng.pick(&TOPICS).to_string();
        self.base_message(&topic)
    }
}
