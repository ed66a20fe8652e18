//! Typing signals (spec/messaging-edge.md §2.5.7, §9.3, §18.4 G48/G49): the hub that knows
//! who listens to each `typing.<conversation>` topic, and the per-user rate limiter.
//!
//! Sans-IO: plain structs taking the current time; the gateway moves their results.
//!
//! Routing (a choice): each typing topic has an owner shard, [`owner_of_topic`], holding its
//! complete listener list. A signal goes to that owner once and leaves it as one batched
//! message per shard that has listeners. Broadcasting every signal to every shard would
//! cost shards − 1 messages per signal whether anyone listens or not (typing runs at about
//! ten times the message rate); with an owner, echo suppression and the per-topic bound
//! are applied in one place, and the same pure function can later name a node instead of
//! a shard (G48: "route signals through the node serving the conversation").
//!
//! A sender's token bucket lives on one shard, `presence::owner_of_user` of its
//! [`limiter_key`], so one user's budget is shared by all their devices whichever shards
//! hold their sockets (a `typing` op on another shard asks it with a request: one mesh
//! round trip, the price of a budget that is really per user).
//!
//! Lossy by design, never unbounded: every table has a limit, and a signal that meets a
//! full outbound queue is dropped for that connection only (and counted).

use std::collections::{BTreeMap, HashMap};

/// Typing topics one hub (one shard) tracks.
pub const TOPICS_MAX: usize = 65_536;
/// Listening connections per typing topic.
pub const LISTENERS_PER_TOPIC_MAX: usize = 4_096;
/// (topic, connection) pairs one hub holds.
pub const LISTENS_MAX: usize = 1_048_576;
/// Typing topics one connection listens to (they do not count toward `max_subscriptions`).
pub const TOPICS_PER_CONNECTION_MAX: usize = 256;
/// Token buckets one limiter holds; past it idle buckets are collected, and if none is
/// idle the new sender is limited (memory wins over a signal).
pub const BUCKETS_MAX: usize = 262_144;
/// A bucket unused this long is forgotten (it would be full again anyway).
pub const BUCKET_IDLE_NS: i64 = 5 * 60 * 1_000_000_000;
/// Headers of one signal: pairs and total bytes (as for sends).
pub use crate::messaging::headers::{HEADERS_BYTES_MAX, HEADERS_PAIRS_MAX};

/// Signal kinds the gateway emits.
pub const KIND_TYPING: &str = "typing";
pub const KIND_STOP_TYPING: &str = "stop_typing";

const NANO: u64 = 1_000_000_000;

/// The shard owning a typing topic's listener list.
pub fn owner_of_topic(topic: &str, shard_count: usize) -> usize {
    boltq_shards::ownership::owner_of_slot(boltq_shards::ownership::slot_of(topic), shard_count)
}

/// The limiter key of a sender: the user, or the connection for the anonymous principal
/// (which has no user id; G49).
pub fn limiter_key(user: &str, conn: u64) -> String {
    if user.is_empty() {
        format!("conn:{conn}")
    } else {
        format!("user:{user}")
    }
}

/// A listening connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub shard: usize,
    pub conn: u64,
    /// Its user: signals from this user are never delivered to it.
    pub user: String,
}

/// One ephemeral signal (never written to the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub topic: String,
    pub sender: String,
    pub kind: String,
    pub headers: Vec<(String, String)>,
    pub payload: Vec<u8>,
    pub at_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalError {
    TopicsFull,
    ListenersFull,
    ListensFull,
    PayloadTooLarge { bytes: usize, max: usize },
    HeadersTooLarge,
}

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TopicsFull => f.write_str("signal hub is full (topics)"),
            Self::ListenersFull => f.write_str("too many listeners on this topic"),
            Self::ListensFull => f.write_str("signal hub is full (listeners)"),
            Self::PayloadTooLarge { bytes, max } => {
                write!(f, "signal payload is {bytes} bytes; the limit is {max}")
            }
            Self::HeadersTooLarge => write!(
                f,
                "signal headers exceed {HEADERS_PAIRS_MAX} pairs or {HEADERS_BYTES_MAX} bytes"
            ),
        }
    }
}

/// Checks a signal against the caps before it travels.
pub fn validate(s: &Signal, payload_max: usize) -> Result<(), SignalError> {
    if s.payload.len() > payload_max {
        return Err(SignalError::PayloadTooLarge {
            bytes: s.payload.len(),
            max: payload_max,
        });
    }
    let bytes: usize = s.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if s.headers.len() > HEADERS_PAIRS_MAX || bytes > HEADERS_BYTES_MAX {
        return Err(SignalError::HeadersTooLarge);
    }
    Ok(())
}

/// Listener lists of the typing topics this shard owns.
#[derive(Debug, Default)]
pub struct SignalHub {
    /// topic → (shard, conn) → user.
    topics: HashMap<String, BTreeMap<(usize, u64), String>>,
    listens: usize,
}

impl SignalHub {
    pub fn listens(&self) -> usize {
        self.listens
    }

    pub fn topics(&self) -> usize {
        self.topics.len()
    }

    /// Adds a listener (idempotent).
    pub fn listen(&mut self, topic: &str, l: Listener) -> Result<(), SignalError> {
        let key = (l.shard, l.conn);
        match self.topics.get(topic) {
            Some(set) if set.contains_key(&key) => return Ok(()),
            Some(set) if set.len() >= LISTENERS_PER_TOPIC_MAX => {
                return Err(SignalError::ListenersFull)
            }
            None if self.topics.len() >= TOPICS_MAX => return Err(SignalError::TopicsFull),
            _ => {}
        }
        if self.listens >= LISTENS_MAX {
            return Err(SignalError::ListensFull);
        }
        self.topics
            .entry(topic.to_string())
            .or_default()
            .insert(key, l.user);
        self.listens += 1;
        Ok(())
    }

    /// Removes a listener; unknown ones are ignored.
    pub fn unlisten(&mut self, topic: &str, shard: usize, conn: u64) {
        let Some(set) = self.topics.get_mut(topic) else {
            return;
        };
        if set.remove(&(shard, conn)).is_some() {
            self.listens -= 1;
        }
        if set.is_empty() {
            self.topics.remove(topic);
        }
    }

    /// Where a signal goes: per shard, the listening connections, leaving out every
    /// connection of the sender (no echo to any of their devices).
    pub fn route(&self, s: &Signal) -> BTreeMap<usize, Vec<u64>> {
        let mut out: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        if let Some(set) = self.topics.get(&s.topic) {
            for ((shard, conn), user) in set {
                if *user != s.sender {
                    out.entry(*shard).or_default().push(*conn);
                }
            }
        }
        out
    }

    /// Panics if the counters disagree with the tables.
    pub fn check_invariants(&self) {
        let n: usize = self.topics.values().map(|s| s.len()).sum();
        assert_eq!(n, self.listens, "listen count");
        assert!(self.topics.values().all(|s| !s.is_empty()));
        assert!(self.topics.len() <= TOPICS_MAX && self.listens <= LISTENS_MAX);
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Tokens in billionths, so refills are exact integer arithmetic.
    nano_tokens: u64,
    last_ns: i64,
}

/// Token buckets per sender: `rate_per_second` refill, `burst` capacity; lazily refilled.
#[derive(Debug)]
pub struct RateLimiter {
    rate_per_second: u64,
    burst: u64,
    buckets: HashMap<String, Bucket>,
}

impl RateLimiter {
    /// Both at least 1 (the configuration validates this; zero is raised to 1 here).
    pub fn new(rate_per_second: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            rate_per_second: u64::from(rate_per_second.max(1)),
            burst: u64::from(burst.max(1)),
            buckets: HashMap::new(),
        }
    }

    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Takes one token for `key`; false when its budget is spent (or the table is full of
    /// busy senders).
    pub fn take(&mut self, key: &str, now_ns: i64) -> bool {
        let cap = self.burst * NANO;
        if !self.buckets.contains_key(key) {
            if self.buckets.len() >= BUCKETS_MAX {
                self.collect_idle(now_ns);
            }
            if self.buckets.len() >= BUCKETS_MAX {
                return false;
            }
            self.buckets.insert(
                key.to_string(),
                Bucket {
                    nano_tokens: cap,
                    last_ns: now_ns,
                },
            );
        }
        let rate = self.rate_per_second;
        let b = self.buckets.get_mut(key).expect("inserted above");
        let elapsed = now_ns.saturating_sub(b.last_ns).max(0) as u64;
        b.nano_tokens = b
            .nano_tokens
            .saturating_add(elapsed.saturating_mul(rate))
            .min(cap);
        b.last_ns = b.last_ns.max(now_ns);
        if b.nano_tokens < NANO {
            return false;
        }
        b.nano_tokens -= NANO;
        true
    }

    /// Forgets buckets unused for `BUCKET_IDLE_NS`; returns how many.
    pub fn collect_idle(&mut self, now_ns: i64) -> usize {
        let before = self.buckets.len();
        self.buckets
            .retain(|_, b| now_ns.saturating_sub(b.last_ns) < BUCKET_IDLE_NS);
        before - self.buckets.len()
    }
}

/// Signal messages between shards (carried by `GatewayMsg::Signal`).
#[derive(Debug)]
pub enum SignalMsg {
    /// To the topic's owner, one-way.
    Listen {
        topic: String,
        listener: Listener,
    },
    Unlisten {
        topic: String,
        shard: usize,
        conn: u64,
    },
    /// To the topic's owner, one-way: fan it out.
    Publish(Signal),
    /// Owner → a listening shard, one-way.
    Deliver {
        conns: Vec<u64>,
        signal: Signal,
    },
    /// To the sender's presence owner, a request: may `key` send one more signal?
    /// Answered with `Taken`.
    Take {
        key: String,
    },
    Taken(bool),
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    const S: i64 = 1_000_000_000;

    fn l(shard: usize, conn: u64, user: &str) -> Listener {
        Listener {
            shard,
            conn,
            user: user.to_string(),
        }
    }

    fn sig(topic: &str, sender: &str) -> Signal {
        Signal {
            topic: topic.to_string(),
            sender: sender.to_string(),
            kind: KIND_TYPING.to_string(),
            headers: Vec::new(),
            payload: Vec::new(),
            at_ns: 0,
        }
    }

    #[test]
    fn route_skips_every_device_of_the_sender() {
        let mut h = SignalHub::default();
        h.listen("typing.g", l(0, 1, "alice")).unwrap();
        h.listen("typing.g", l(1, 2, "alice")).unwrap(); // alice's second device
        h.listen("typing.g", l(1, 3, "bob")).unwrap();
        h.listen("typing.g", l(0, 4, "carol")).unwrap();
        h.listen("typing.other", l(0, 5, "dave")).unwrap();
        let r = h.route(&sig("typing.g", "alice"));
        assert_eq!(r.len(), 2);
        assert_eq!(r[&0], vec![4]);
        assert_eq!(r[&1], vec![3]);
        assert!(h.route(&sig("typing.none", "alice")).is_empty());
        h.check_invariants();
    }

    #[test]
    fn unlisten_removes_and_empties_topics() {
        let mut h = SignalHub::default();
        h.listen("typing.g", l(0, 1, "a")).unwrap();
        h.listen("typing.g", l(0, 1, "a")).unwrap();
        assert_eq!(h.listens(), 1);
        h.unlisten("typing.g", 0, 1);
        h.unlisten("typing.g", 0, 1);
        assert_eq!(h.listens(), 0);
        assert_eq!(h.topics(), 0);
        assert!(h.route(&sig("typing.g", "b")).is_empty());
        h.check_invariants();
    }

    #[test]
    fn listeners_per_topic_are_bounded() {
        let mut h = SignalHub::default();
        for i in 0..LISTENERS_PER_TOPIC_MAX {
            h.listen("typing.g", l(0, i as u64, "u")).unwrap();
        }
        assert_eq!(
            h.listen("typing.g", l(1, 0, "u")),
            Err(SignalError::ListenersFull)
        );
        h.listen("typing.g", l(0, 0, "u")).unwrap(); // already there
        h.check_invariants();
    }

    #[test]
    fn validate_caps_payload_and_headers() {
        let mut s = sig("typing.g", "a");
        s.payload = vec![0; 11];
        assert!(matches!(
            validate(&s, 10),
            Err(SignalError::PayloadTooLarge { bytes: 11, max: 10 })
        ));
        s.payload.truncate(10);
        assert!(validate(&s, 10).is_ok());
        s.headers = (0..=HEADERS_PAIRS_MAX)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert_eq!(validate(&s, 10), Err(SignalError::HeadersTooLarge));
        s.headers = vec![("k".into(), "x".repeat(HEADERS_BYTES_MAX))];
        assert_eq!(validate(&s, 10), Err(SignalError::HeadersTooLarge));
    }

    #[test]
    fn bucket_allows_burst_then_the_rate() {
        let mut r = RateLimiter::new(5, 20);
        for i in 0..20 {
            assert!(r.take("user:a", 0), "burst token {i}");
        }
        assert!(!r.take("user:a", 0));
        assert!(r.take("user:b", 0), "buckets are per sender");
        // 5 per second: one token every 200 ms.
        assert!(!r.take("user:a", S / 5 - 1));
        assert!(r.take("user:a", S / 5));
        assert!(!r.take("user:a", S / 5));
        // A long pause refills to the burst, not beyond.
        for _ in 0..20 {
            assert!(r.take("user:a", 100 * S));
        }
        assert!(!r.take("user:a", 100 * S));
    }

    #[test]
    fn idle_buckets_are_collected() {
        let mut r = RateLimiter::new(1, 1);
        assert!(r.take("user:a", 0));
        assert!(r.take("user:b", BUCKET_IDLE_NS));
        assert_eq!(r.collect_idle(BUCKET_IDLE_NS), 1);
        assert_eq!(r.buckets(), 1);
    }

    #[test]
    fn anonymous_senders_are_limited_per_connection() {
        assert_eq!(limiter_key("", 7), "conn:7");
        assert_eq!(limiter_key("alice", 7), "user:alice");
        assert_ne!(limiter_key("", 7), limiter_key("", 8));
    }

    /// Over any schedule, a sender never gets more than burst + rate × elapsed seconds.
    #[test]
    fn property_never_exceeds_the_budget() {
        let mut rng = Rng::new(19);
        for _ in 0..50 {
            let rate = 1 + rng.below(10) as u32;
            let burst = 1 + rng.below(30) as u32;
            let mut r = RateLimiter::new(rate, burst);
            let mut now = 0i64;
            let mut granted = 0u64;
            for _ in 0..2_000 {
                now += rng.below((S / 20) as u64) as i64;
                if r.take("user:x", now) {
                    granted += 1;
                }
                let budget = u64::from(burst) + u64::from(rate) * (now as u64) / NANO;
                assert!(granted <= budget, "{granted} > {budget}");
            }
            assert!(granted >= u64::from(burst), "the burst is always available");
        }
    }

    #[test]
    fn owner_of_topic_is_in_range() {
        for n in 1..8 {
            assert!(owner_of_topic("typing.g1", n) < n);
        }
    }
}
