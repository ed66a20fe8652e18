//! What a run counts and measures, shared between the event-loop threads and the reporter.
//!
//! Counters are atomics updated as replies arrive: they are also what the loops coordinate on
//! (consumers stop when everything published was consumed), so they must be current.
//! Latencies go to thread-local histograms that are merged into the shared ones every
//! [`MERGE_EVERY_NS`] and at the end: a lock per recorded value would cost more than the
//! value is worth, and the per-second progress line does not need them fresher.

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// How often a loop thread merges its histograms into the shared ones.
pub const MERGE_EVERY_NS: u64 = 100_000_000;
/// Largest latency a histogram holds (longer ones are recorded as this): 10 minutes.
const LATENCY_NS_MAX: u64 = 600_000_000_000;

/// Request kinds the generator sends, for per-kind counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Publish = 0,
    PublishTopic = 1,
    PublishExchange = 2,
    Consume = 3,
    Ack = 4,
    /// Gateway: WebSocket connect, upgrade and `hello` → `welcome`.
    Hello = 5,
    /// Gateway: `subscribe` → `ack`.
    Subscribe = 6,
    /// Gateway: `send` → `sent`.
    Send = 7,
    /// Gateway: `commit` → `ack`.
    Commit = 8,
}

/// Number of [`Op`] kinds (the size of the per-kind counter arrays).
pub const OP_COUNT: usize = 9;

pub const OPS: [Op; OP_COUNT] = [
    Op::Publish,
    Op::PublishTopic,
    Op::PublishExchange,
    Op::Consume,
    Op::Ack,
    Op::Hello,
    Op::Subscribe,
    Op::Send,
    Op::Commit,
];

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Publish => "publish",
            Op::PublishTopic => "publish_topic",
            Op::PublishExchange => "publish_exchange",
            Op::Consume => "consume",
            Op::Ack => "ack",
            Op::Hello => "hello",
            Op::Subscribe => "subscribe",
            Op::Send => "send",
            Op::Commit => "commit",
        }
    }

    /// Requests that store a message (the gateway's `send` included).
    pub fn is_publish(self) -> bool {
        matches!(
            self,
            Op::Publish | Op::PublishTopic | Op::PublishExchange | Op::Send
        )
    }
}

/// Latency series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// Publish request → reply (any of the three publish commands).
    Publish = 0,
    /// CONSUME request → reply carrying at least one message.
    Consume = 1,
    /// ACK request → reply.
    Ack = 2,
    /// Send time in the payload → the consumer holds the message.
    EndToEnd = 3,
    /// Send time in the payload → the subscriber holds the push (gateway: another member
    /// of the conversation holds the `record`).
    Delivery = 4,
    /// Gateway: `send` (its intended time in open loop) → `sent`.
    Send = 5,
    /// Gateway: start of a (re)connect → `welcome`.
    Hello = 6,
    /// Gateway `reconnect`: start of the mass reconnect → this device holds every record
    /// sent while it was away.
    CatchUp = 7,
    /// Gateway, open loop: how late the generator wrote each send against its schedule
    /// (its own delay, included in every other series; near zero when it keeps up).
    SendLag = 8,
}

pub const SERIES: [Series; 9] = [
    Series::Publish,
    Series::Consume,
    Series::Ack,
    Series::EndToEnd,
    Series::Delivery,
    Series::Send,
    Series::Hello,
    Series::CatchUp,
    Series::SendLag,
];

impl Series {
    pub fn name(self) -> &'static str {
        match self {
            Series::Publish => "publish",
            Series::Consume => "consume",
            Series::Ack => "ack",
            Series::EndToEnd => "end_to_end",
            Series::Delivery => "delivery",
            Series::Send => "send",
            Series::Hello => "hello",
            Series::CatchUp => "catch_up",
            Series::SendLag => "send_lag",
        }
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("static histogram bounds")
}

/// One histogram per [`Series`], in nanoseconds.
pub struct Hists(pub Vec<Histogram<u64>>);

impl Default for Hists {
    fn default() -> Hists {
        Hists(SERIES.iter().map(|_| new_histogram()).collect())
    }
}

impl Hists {
    pub fn record(&mut self, s: Series, ns: u64) {
        self.0[s as usize].saturating_record(ns.max(1));
    }

    pub fn get(&self, s: Series) -> &Histogram<u64> {
        &self.0[s as usize]
    }

    /// Adds `other` into `self` and clears `other`.
    pub fn drain_into(&mut self, other: &mut Hists) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter_mut()) {
            if !theirs.is_empty() {
                // Same bounds on both sides, so adding cannot fail.
                let _ = mine.add(&*theirs);
                theirs.reset();
            }
        }
    }
}

#[derive(Default)]
pub struct Counters {
    pub sent: [AtomicU64; OP_COUNT],
    /// Replies that are not errors (OK, and EMPTY for CONSUME).
    pub acknowledged: [AtomicU64; OP_COUNT],
    pub errors: [AtomicU64; OP_COUNT],
    /// CONSUME replies that were EMPTY.
    pub empty: AtomicU64,
    /// Messages received in CONSUME replies.
    pub consumed: AtomicU64,
    /// Messages the ACK replies said were acknowledged (one per v1 ACK; `count` of an ACK
    /// with `ids`).
    pub acked_messages: AtomicU64,
    /// Pushes received by subscribers.
    pub delivered: AtomicU64,
    /// Pushes whose sequence number was not above the previous one on that subscriber.
    pub out_of_order: AtomicU64,
    /// Messages sent with a payload drawn from `--size`, and their payload bytes: the run's
    /// actual mean payload size (what MB/s is computed with).
    pub payload_messages: AtomicU64,
    pub payload_bytes: AtomicU64,
    /// Scheduled (open-loop) sends that never went out because the run ended first.
    pub unsent_scheduled: AtomicU64,
    /// Errors that belong to no request: lost connections, stray frames, failed checks.
    pub other_errors: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// OK replies to publish requests of any kind.
    pub fn published(&self) -> u64 {
        OPS.iter()
            .filter(|o| o.is_publish())
            .map(|&o| Counters::get(&self.acknowledged[o as usize]))
            .sum()
    }

    /// Error replies to publish requests of any kind. Against a cluster some are "outcome
    /// unknown": the message may have been stored and delivered all the same.
    pub fn publish_errors(&self) -> u64 {
        OPS.iter()
            .filter(|o| o.is_publish())
            .map(|&o| Counters::get(&self.errors[o as usize]))
            .sum()
    }

    pub fn errors_total(&self) -> u64 {
        self.errors.iter().map(Counters::get).sum::<u64>() + Counters::get(&self.other_errors)
    }
}

/// State shared by the loops and the reporter for one run.
pub struct Shared {
    pub counters: Counters,
    pub error_kinds: Mutex<BTreeMap<String, u64>>,
    pub hists: Mutex<Hists>,
    /// Senders send nothing new once set (duration over, or setup failed).
    pub stop: AtomicBool,
    /// When `stop` was set ([`super::poll::now_ns`] clock).
    pub stop_ns: AtomicU64,
    /// Outstanding requests still unanswered at this instant are counted as timeouts, and
    /// consumers and subscribers stop waiting. `u64::MAX` until the run starts to wind down.
    pub drain_deadline_ns: AtomicU64,
    /// Sends left when the run is bounded by a message count.
    pub budget: Option<AtomicU64>,
    /// Sending connections that have not finished (sent everything and had every reply).
    pub senders_live: AtomicUsize,
    /// Samples before this instant are not recorded (warm-up). Set before the loops start.
    pub warmup_end_ns: AtomicU64,
    /// A request unanswered for this long fails its connection.
    pub request_timeout_ns: u64,
}

impl Shared {
    pub fn new(budget: Option<u64>, senders: usize, request_timeout_ns: u64) -> Shared {
        Shared {
            counters: Counters::default(),
            error_kinds: Mutex::new(BTreeMap::new()),
            hists: Mutex::new(Hists::default()),
            stop: AtomicBool::new(false),
            stop_ns: AtomicU64::new(u64::MAX),
            drain_deadline_ns: AtomicU64::new(u64::MAX),
            budget: budget.map(AtomicU64::new),
            senders_live: AtomicUsize::new(senders),
            warmup_end_ns: AtomicU64::new(0),
            request_timeout_ns,
        }
    }

    /// Counts `n` errors of `kind`, against request kind `op` when they are failed requests.
    pub fn error(&self, op: Option<Op>, kind: &str, n: u64) {
        if n == 0 {
            return;
        }
        match op {
            Some(op) => Counters::add(&self.counters.errors[op as usize], n),
            None => Counters::add(&self.counters.other_errors, n),
        }
        let mut kinds = self.error_kinds.lock().unwrap();
        *kinds.entry(kind.to_string()).or_default() += n;
    }

    /// Takes one send from the message budget; false when it is used up.
    pub fn claim_send(&self) -> bool {
        match &self.budget {
            None => true,
            Some(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Senders send nothing new from now on.
    pub fn set_stop(&self, now_ns: u64) {
        let _ =
            self.stop_ns
                .compare_exchange(u64::MAX, now_ns, Ordering::Relaxed, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Starts the wind-down: replies still missing at `now + timeout` are errors.
    pub fn start_drain(&self, now_ns: u64, timeout_ns: u64) {
        let _ = self.drain_deadline_ns.compare_exchange(
            u64::MAX,
            now_ns.saturating_add(timeout_ns),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    pub fn drain_deadline(&self) -> u64 {
        self.drain_deadline_ns.load(Ordering::Relaxed)
    }

    pub fn warmup_end(&self) -> u64 {
        self.warmup_end_ns.load(Ordering::Relaxed)
    }
}

/// Percentiles of one series, in microseconds.
pub fn summary_us(h: &Histogram<u64>) -> serde_json::Value {
    let us = |ns: u64| (ns as f64 / 1000.0 * 10.0).round() / 10.0;
    serde_json::json!({
        "count": h.len(),
        "p50": us(h.value_at_quantile(0.50)),
        "p90": us(h.value_at_quantile(0.90)),
        "p99": us(h.value_at_quantile(0.99)),
        "p99_9": us(h.value_at_quantile(0.999)),
        "max": us(h.max()),
        "mean": (h.mean() / 1000.0 * 10.0).round() / 10.0,
    })
}
