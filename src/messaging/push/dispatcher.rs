//! The push dispatcher's decisions, sans-IO (spec/messaging-engine.md §11,
//! spec/messaging-edge.md §10, §18.5, §19 decisions 13–15).
//!
//! One [`Dispatcher`] serves the inbox partitions one shard owns. The driver
//! (`push::run`) reads pointers from the log and hands them in; the dispatcher decides
//! which become notifications, when (grace delay), in which batch (across users, capped
//! in count and bytes), how each attempt is signed, when to retry (1 s doubling, capped at
//! 2 min) and how far each partition's `push-dispatcher` cursor may move.
//!
//! Cursor rule (at-least-once): a partition's cursor moves to the lowest sequence still
//! outstanding (waiting out its grace delay, being checked, ready, or in a batch not yet
//! answered 2xx nor dropped), or past everything read when nothing is. A crash therefore
//! re-reads, and possibly re-sends, whatever was not settled — never skips it.
//!
//! Trade-off: one batch is in flight per shard. While the webhook fails, notifications
//! queue behind the retried batch (bounded by [`CANDIDATES_MAX`], after which the driver
//! stops reading and the log holds the rest); a webhook that fails for one batch almost
//! always fails for all, and one batch at a time keeps the order and the load simple.

use crate::messaging::engine::mirror::PartitionKey;
use boltq_io::record::Record;
use ring::hmac;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Notifications one webhook call carries at most.
pub const BATCH_NOTIFICATIONS_MAX: usize = 100;
/// Body bytes one call aims to stay under (a single larger notification still goes alone).
pub const BATCH_BODY_BYTES_MAX: usize = 1024 * 1024;
/// How long the first ready notification waits for others to share its call.
pub const BATCH_WINDOW_NS: i64 = 100_000_000;
/// Wait after the first failed attempt; doubles after each further failure.
pub const BACKOFF_FIRST_NS: i64 = 1_000_000_000;
/// Longest wait between two attempts of a batch.
pub const BACKOFF_CAP_NS: i64 = 120_000_000_000;
/// Notifications held in memory between the cursor and the webhook; beyond it the driver
/// stops reading (the log keeps the rest).
pub const CANDIDATES_MAX: usize = 65_536;
/// Records per read of one inbox partition.
pub const READ_RECORDS_MAX: usize = 256;
/// Shortest accepted `messaging.push.signing_secret`.
pub const SIGNING_SECRET_BYTES_MIN: usize = 32;
/// Attempts per batch allowed by the configuration.
pub const ATTEMPTS_MAX: u32 = 100;
/// Idle partitions the dispatcher keeps tracking; beyond it idle ones are forgotten (their
/// position is in the cursor store).
pub const TRACKED_PARTITIONS_MAX: usize = 100_000;
/// Where notifications go after their last failed attempt (partition 0): a custom-namespace
/// topic, which the built-in device policy does not let any device read; backends read it
/// with the stream commands, operators with `GET /push/dead-letters`.
pub const DEAD_LETTER_TOPIC: &str = "push.dead_letters";

/// What the dispatcher needs from `[messaging.push]`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A pointer is evaluated only once it is this old (a device may still read it).
    pub grace_ns: i64,
    /// Attempts per batch, then the batch is dropped; 1..=[`ATTEMPTS_MAX`].
    pub max_attempts: u32,
    /// HMAC-SHA256 key of `X-BoltQ-Signature`; at least [`SIGNING_SECRET_BYTES_MIN`].
    pub signing_secret: Vec<u8>,
    /// Makes delivery ids unique across shards and restarts (e.g. `<start ns hex>-<shard>`).
    pub delivery_prefix: String,
}

/// One notification, exactly as it appears in the webhook body (without `attempt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    pub user_id: String,
    pub message_id: String,
    pub conversation_id: String,
    pub kind: String,
    pub sender_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv_topic: Option<String>,
    pub conv_partition: u32,
    pub conv_seq: u64,
    pub headers: BTreeMap<String, String>,
    /// Pointer append time, ns.
    pub at: i64,
}

/// A pointer that may become a notification, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub inbox: PartitionKey,
    pub seq: u64,
    pub notification: Notification,
    /// Serialized size, for the batch byte cap.
    bytes: usize,
}

/// The driver's finding about a candidate whose grace delay is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Push,
    /// The user has a live session: no push (spec §10.4).
    Online,
    /// A device of the user already read past it (inbox or conversation cursor).
    Read,
}

/// A notification given up on after its last attempt, on its way to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub candidate: Candidate,
    pub notification_id: String,
    pub attempts: u32,
    /// When the last attempt failed, ns.
    pub dropped_at: i64,
}

impl DeadLetter {
    /// The record payload in the dead-letter topic: the notification as the webhook saw it,
    /// with its id, the attempts made and when it was given up.
    pub fn payload(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Dead<'a> {
            #[serde(flatten)]
            n: &'a Notification,
            id: &'a str,
            attempts: u32,
            dropped_at: i64,
        }
        serde_json::to_vec(&Dead {
            n: &self.candidate.notification,
            id: &self.notification_id,
            attempts: self.attempts,
            dropped_at: self.dropped_at,
        })
        .expect("plain structs serialize")
    }
}

/// One webhook call to make now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// `X-BoltQ-Delivery`: the same for every attempt of a batch.
    pub delivery_id: String,
    /// 1-based.
    pub attempt: u32,
    /// `X-BoltQ-Timestamp`, Unix seconds.
    pub timestamp_s: i64,
    /// `X-BoltQ-Signature`: `v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
    pub signature: String,
    pub body: Vec<u8>,
    pub count: usize,
}

/// What an attempt's answer led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Sent(usize),
    /// The next attempt is due at this time (ns); `sent` of the batch's notifications were
    /// accepted by this answer (the receiver named the others as failed).
    RetryAt {
        at: i64,
        sent: usize,
    },
    /// Given up after this many attempts: `count` notifications wait for the driver to put
    /// them in the dead-letter topic ([`Dispatcher::take_dead`]); `sent` were accepted.
    Dropped {
        count: usize,
        attempts: u32,
        sent: usize,
    },
}

/// Counters (spec §10.3 plus the skips this build adds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Pointers read.
    pub scanned: u64,
    /// Notifications acknowledged by a 2xx.
    pub sent: u64,
    /// Failed attempts.
    pub failed: u64,
    /// Notifications given up on and appended to the dead-letter topic.
    pub dropped: u64,
    /// Skipped: the user had a live session.
    pub suppressed: u64,
    /// Skipped: read on a device during the grace delay.
    pub read: u64,
    /// Skipped: no key, or the inbox owner sent the message (D14).
    pub skipped: u64,
    /// Inbox partitions tracked now.
    pub watching: u64,
}

#[derive(Debug, Default)]
struct Part {
    /// Next sequence to read.
    read_next: u64,
    /// Last position committed (or being committed).
    committed: u64,
    /// Sequences read but not settled.
    outstanding: BTreeSet<u64>,
    /// Records may exist at or after `read_next`.
    dirty: bool,
}

#[derive(Debug)]
struct Batch {
    id: String,
    /// `(notification id, candidate)`: the id is `<batch id>.<position in the first
    /// attempt>`, the same in every attempt, so a receiver can name the ones that failed.
    items: Vec<(String, Candidate)>,
    /// Attempts made so far.
    attempts: u32,
    next_at_ns: i64,
}

pub struct Dispatcher {
    settings: Settings,
    key: hmac::Key,
    parts: HashMap<PartitionKey, Part>,
    /// Waiting out the grace delay, by (due time, arrival number).
    waiting: BTreeMap<(i64, u64), Candidate>,
    /// Handed to the driver by [`Dispatcher::take_due`], not yet settled.
    checking: usize,
    ready: VecDeque<Candidate>,
    ready_since_ns: Option<i64>,
    inflight: Option<Batch>,
    /// Given up on, waiting for the driver to append them to [`DEAD_LETTER_TOPIC`]
    /// ([`Dispatcher::take_dead`]); still outstanding until it says they are there.
    dead: Vec<DeadLetter>,
    /// Taken by the driver and not yet confirmed appended.
    dead_appending: usize,
    arrivals: u64,
    batches: u64,
    stats: PushStats,
}

/// Wait before attempt `failed + 1` after `failed` failures: 1 s, 2 s, 4 s, … ≤ 2 min.
pub fn backoff_ns(failed: u32) -> i64 {
    assert!(failed >= 1, "backoff follows a failure");
    let shift = (failed - 1).min(20);
    (BACKOFF_FIRST_NS << shift).min(BACKOFF_CAP_NS)
}

/// `v1=<lower-case hex of HMAC-SHA256(key, "<timestamp_s>.<body>")>`.
pub fn sign(key: &hmac::Key, timestamp_s: i64, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(timestamp_s.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    let tag = ctx.sign();
    let mut out = String::with_capacity(3 + 64);
    out.push_str("v1=");
    for b in tag.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The notification a pointer record stands for, or `None` when it must not be pushed:
/// no key (no recipient) or the recipient sent the message themselves (D14).
pub fn notification_of(rec: &Record) -> Option<Notification> {
    if rec.key.is_empty() {
        return None;
    }
    let user_id = String::from_utf8_lossy(&rec.key).into_owned();
    let headers: BTreeMap<String, String> = rec
        .headers
        .iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect();
    let h = |name: &str| headers.get(name).cloned().unwrap_or_default();
    let sender_id = h("sender");
    if sender_id == user_id {
        return None;
    }
    let conversation_id = h("conversation");
    let kind = h("kind");
    let conv_topic = (!conversation_id.is_empty()).then(|| {
        let ns = if kind == "group" { "group" } else { "direct" };
        format!("chat.{ns}.{conversation_id}")
    });
    Some(Notification {
        message_id: h("message_id"),
        conv_partition: h("conv_partition").parse().unwrap_or(0),
        conv_seq: h("conv_seq").parse().unwrap_or(0),
        user_id,
        conversation_id,
        kind,
        sender_id,
        conv_topic,
        headers,
        at: rec.timestamp_ns,
    })
}

#[derive(Serialize)]
struct Item<'a> {
    id: &'a str,
    #[serde(flatten)]
    n: &'a Notification,
    attempt: u32,
}

#[derive(Serialize)]
struct Body<'a> {
    notifications: Vec<Item<'a>>,
    count: usize,
    sent_at: i64,
}

/// The JSON body of one attempt (spec §10.2): `items` are (notification id, notification).
pub fn body(items: &[(&str, &Notification)], attempt: u32, sent_at_ns: i64) -> Vec<u8> {
    let b = Body {
        notifications: items
            .iter()
            .map(|(id, n)| Item { id, n, attempt })
            .collect(),
        count: items.len(),
        sent_at: sent_at_ns,
    };
    serde_json::to_vec(&b).expect("plain structs serialize")
}

impl Dispatcher {
    pub fn new(settings: Settings) -> Result<Dispatcher, String> {
        if settings.signing_secret.len() < SIGNING_SECRET_BYTES_MIN {
            return Err(format!(
                "signing secret must be at least {SIGNING_SECRET_BYTES_MIN} bytes"
            ));
        }
        if settings.max_attempts == 0 || settings.max_attempts > ATTEMPTS_MAX {
            return Err(format!("max_attempts must be 1..={ATTEMPTS_MAX}"));
        }
        if settings.grace_ns < 0 {
            return Err("grace delay must not be negative".into());
        }
        Ok(Dispatcher {
            key: hmac::Key::new(hmac::HMAC_SHA256, &settings.signing_secret),
            settings,
            parts: HashMap::new(),
            waiting: BTreeMap::new(),
            checking: 0,
            ready: VecDeque::new(),
            ready_since_ns: None,
            inflight: None,
            dead: Vec::new(),
            dead_appending: 0,
            arrivals: 0,
            batches: 0,
            stats: PushStats::default(),
        })
    }

    pub fn stats(&self) -> PushStats {
        PushStats {
            watching: self.parts.len() as u64,
            ..self.stats.clone()
        }
    }

    pub fn is_tracked(&self, key: &PartitionKey) -> bool {
        self.parts.contains_key(key)
    }

    /// Starts watching a partition at `from_seq` (its committed cursor, or the first
    /// pointer seen when it has none). No-op when already tracked.
    pub fn track(&mut self, key: PartitionKey, from_seq: u64) {
        self.parts.entry(key).or_insert(Part {
            read_next: from_seq,
            committed: from_seq,
            outstanding: BTreeSet::new(),
            dirty: true,
        });
    }

    /// Stops watching a partition (with `cluster.enabled`: this node no longer leads its
    /// slot, and the new leader's dispatcher goes on from the committed cursor). Its
    /// notifications waiting out their grace delay or ready for a batch are dropped; one
    /// already in the batch in flight may still be sent, and one being checked is dropped
    /// when settled: the new leader sends them again from the cursor, so a leader change
    /// repeats at most those.
    pub fn untrack(&mut self, key: &PartitionKey) {
        if self.parts.remove(key).is_none() {
            return;
        }
        self.waiting.retain(|_, c| &c.inbox != key);
        self.ready.retain(|c| &c.inbox != key);
        if self.ready.is_empty() {
            self.ready_since_ns = None;
        }
    }

    /// The partitions watched now.
    pub fn tracked(&self) -> impl Iterator<Item = &PartitionKey> {
        self.parts.keys()
    }

    /// A pointer was appended at `seq`. False when the partition is not tracked (the driver
    /// looks its cursor up and calls [`Dispatcher::track`]).
    pub fn appended(&mut self, key: &PartitionKey, seq: u64) -> bool {
        match self.parts.get_mut(key) {
            Some(p) => {
                if seq >= p.read_next {
                    p.dirty = true;
                }
                true
            }
            None => false,
        }
    }

    fn held(&self) -> usize {
        self.waiting.len()
            + self.checking
            + self.ready.len()
            + self.inflight.as_ref().map_or(0, |b| b.items.len())
            + self.dead.len()
            + self.dead_appending
    }

    /// Partitions to read now, with the position to read from (none while memory is full).
    pub fn to_read(&self, max: usize) -> Vec<(PartitionKey, u64)> {
        if self.held() >= CANDIDATES_MAX {
            return Vec::new();
        }
        let mut out: Vec<(PartitionKey, u64)> = self
            .parts
            .iter()
            .filter(|(_, p)| p.dirty)
            .map(|(k, p)| (k.clone(), p.read_next))
            .collect();
        out.sort();
        out.truncate(max);
        out
    }

    /// A page read from `key`: `records` in sequence order, and the partition's bounds.
    pub fn offer(&mut self, key: &PartitionKey, records: &[Record], first_seq: u64, next_seq: u64) {
        let Some(mut part) = self.parts.remove(key) else {
            return; // forgotten meanwhile: nothing was outstanding, it will be re-tracked
        };
        if part.read_next < first_seq {
            // Retention removed unread pointers; nothing below was ever offered.
            part.read_next = first_seq;
        }
        for rec in records {
            if rec.seq < part.read_next {
                continue; // read twice (a page raced an earlier one)
            }
            self.stats.scanned += 1;
            part.read_next = rec.seq + 1;
            let Some(notification) = notification_of(rec) else {
                self.stats.skipped += 1;
                continue;
            };
            part.outstanding.insert(rec.seq);
            let bytes = serde_json::to_vec(&notification).map_or(0, |v| v.len()) + 16;
            let due = notification.at.saturating_add(self.settings.grace_ns);
            self.arrivals += 1;
            self.waiting.insert(
                (due, self.arrivals),
                Candidate {
                    inbox: key.clone(),
                    seq: rec.seq,
                    notification,
                    bytes,
                },
            );
        }
        part.dirty = part.read_next < next_seq;
        self.parts.insert(key.clone(), part);
    }

    /// Candidates whose grace delay is over; the driver checks each (presence, device
    /// cursors) and answers with [`Dispatcher::settle`].
    pub fn take_due(&mut self, now_ns: i64) -> Vec<Candidate> {
        let mut out = Vec::new();
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now_ns {
                break;
            }
            out.push(entry.remove());
        }
        self.checking += out.len();
        out
    }

    pub fn settle(&mut self, c: Candidate, verdict: Verdict, now_ns: i64) {
        assert!(self.checking > 0, "settle follows take_due");
        self.checking -= 1;
        if !self.parts.contains_key(&c.inbox) {
            return; // untracked while it was checked: its new owner sends it
        }
        match verdict {
            Verdict::Push => {
                if self.ready.is_empty() {
                    self.ready_since_ns = Some(now_ns);
                }
                self.ready.push_back(c);
            }
            Verdict::Online => {
                self.stats.suppressed += 1;
                self.resolve(&c);
            }
            Verdict::Read => {
                self.stats.read += 1;
                self.resolve(&c);
            }
        }
    }

    fn resolve(&mut self, c: &Candidate) {
        if let Some(p) = self.parts.get_mut(&c.inbox) {
            p.outstanding.remove(&c.seq);
        }
    }

    fn batch_due(&self, now_ns: i64) -> bool {
        let full = self.ready.len() >= BATCH_NOTIFICATIONS_MAX
            || self.ready.iter().map(|c| c.bytes).sum::<usize>() >= BATCH_BODY_BYTES_MAX;
        let waited = self
            .ready_since_ns
            .is_some_and(|t| now_ns >= t.saturating_add(BATCH_WINDOW_NS));
        !self.ready.is_empty() && (full || waited)
    }

    fn form_batch(&mut self, now_ns: i64) {
        let mut items = Vec::new();
        let mut bytes = 0;
        while let Some(c) = self.ready.front() {
            let full = items.len() >= BATCH_NOTIFICATIONS_MAX
                || (!items.is_empty() && bytes + c.bytes > BATCH_BODY_BYTES_MAX);
            if full {
                break;
            }
            bytes += c.bytes;
            items.push(self.ready.pop_front().expect("non-empty"));
        }
        self.ready_since_ns = (!self.ready.is_empty()).then_some(now_ns);
        self.batches += 1;
        let id = format!("{}-{}", self.settings.delivery_prefix, self.batches);
        let items = items
            .into_iter()
            .enumerate()
            .map(|(i, c)| (format!("{id}.{i}"), c))
            .collect();
        self.inflight = Some(Batch {
            id,
            items,
            attempts: 0,
            next_at_ns: now_ns,
        });
    }

    /// The call to make now, if any: the in-flight batch's next attempt once its backoff
    /// is over, or a new batch once the window passed or it is full.
    pub fn next_attempt(&mut self, now_ns: i64) -> Option<Attempt> {
        if self.inflight.is_none() && self.batch_due(now_ns) {
            self.form_batch(now_ns);
        }
        let b = self.inflight.as_mut()?;
        if now_ns < b.next_at_ns {
            return None;
        }
        b.attempts += 1;
        let items: Vec<(&str, &Notification)> = b
            .items
            .iter()
            .map(|(id, c)| (id.as_str(), &c.notification))
            .collect();
        let body = body(&items, b.attempts, now_ns);
        let timestamp_s = now_ns.div_euclid(1_000_000_000);
        Some(Attempt {
            delivery_id: b.id.clone(),
            attempt: b.attempts,
            timestamp_s,
            signature: sign(&self.key, timestamp_s, &body),
            body,
            count: b.items.len(),
        })
    }

    /// The answer to the attempt [`Dispatcher::next_attempt`] returned: `ok` = 2xx, with
    /// its body. A 2xx accepts every notification except those its body names as failed
    /// ([`failed_in_answer`]); those, or all of them after a failure, are tried again after
    /// the backoff, and after the last attempt wait in [`Dispatcher::take_dead`].
    pub fn outcome(&mut self, ok: bool, answer: &[u8], now_ns: i64) -> Outcome {
        let mut b = self.inflight.take().expect("an attempt is in flight");
        assert!(b.attempts >= 1);
        let before = b.items.len();
        if ok {
            let failed = failed_in_answer(answer, &b.items);
            let (kept, accepted): (Vec<_>, Vec<_>) = std::mem::take(&mut b.items)
                .into_iter()
                .enumerate()
                .partition(|(i, _)| failed.contains(i));
            for (_, (_, c)) in &accepted {
                self.resolve(c);
            }
            b.items = kept.into_iter().map(|(_, item)| item).collect();
            self.stats.sent += accepted.len() as u64;
        }
        let sent = before - b.items.len();
        if b.items.is_empty() {
            return Outcome::Sent(sent);
        }
        self.stats.failed += 1;
        if b.attempts < self.settings.max_attempts {
            b.next_at_ns = now_ns.saturating_add(backoff_ns(b.attempts));
            let at = b.next_at_ns;
            self.inflight = Some(b);
            return Outcome::RetryAt { at, sent };
        }
        let count = b.items.len();
        let attempts = b.attempts;
        self.dead.extend(
            b.items
                .into_iter()
                .map(|(notification_id, candidate)| DeadLetter {
                    candidate,
                    notification_id,
                    attempts,
                    dropped_at: now_ns,
                }),
        );
        Outcome::Dropped {
            count,
            attempts,
            sent,
        }
    }

    /// Notifications given up on, for the driver to append to [`DEAD_LETTER_TOPIC`]; it
    /// answers with [`Dispatcher::dead_lettered`] once they are there, or gives them back
    /// with [`Dispatcher::dead_letters_failed`]. Until then they hold their partitions'
    /// cursors back.
    pub fn take_dead(&mut self) -> Vec<DeadLetter> {
        let out = std::mem::take(&mut self.dead);
        self.dead_appending += out.len();
        out
    }

    /// `dead` (from [`Dispatcher::take_dead`]) are durably in the dead-letter topic.
    pub fn dead_lettered(&mut self, dead: &[DeadLetter]) {
        assert!(
            self.dead_appending >= dead.len(),
            "dead_lettered follows take_dead"
        );
        self.dead_appending -= dead.len();
        self.stats.dropped += dead.len() as u64;
        for d in dead {
            self.resolve(&d.candidate);
        }
    }

    /// Appending `dead` failed: they are taken again at the next turn.
    pub fn dead_letters_failed(&mut self, dead: Vec<DeadLetter>) {
        assert!(
            self.dead_appending >= dead.len(),
            "dead_letters_failed follows take_dead"
        );
        self.dead_appending -= dead.len();
        self.dead.extend(dead);
    }

    /// Cursor moves now allowed: `(partition, next seq)`, each above the last one returned.
    /// Idle partitions beyond [`TRACKED_PARTITIONS_MAX`] are forgotten afterwards.
    pub fn take_commits(&mut self) -> Vec<(PartitionKey, u64)> {
        let mut out = Vec::new();
        for (k, p) in self.parts.iter_mut() {
            let to = p.outstanding.first().copied().unwrap_or(p.read_next);
            if to > p.committed {
                p.committed = to;
                out.push((k.clone(), to));
            }
        }
        out.sort();
        if self.parts.len() > TRACKED_PARTITIONS_MAX {
            self.parts
                .retain(|_, p| p.dirty || !p.outstanding.is_empty() || p.committed < p.read_next);
        }
        out
    }

    /// When the dispatcher next has something to do without new input (ns).
    pub fn next_wake_ns(&self) -> Option<i64> {
        let grace = self.waiting.keys().next().map(|(t, _)| *t);
        let retry = self.inflight.as_ref().map(|b| b.next_at_ns);
        let window = match (&self.inflight, self.ready_since_ns) {
            (None, Some(t)) if !self.ready.is_empty() => Some(t.saturating_add(BATCH_WINDOW_NS)),
            _ => None,
        };
        [grace, retry, window].into_iter().flatten().min()
    }

    /// Invariants the tests check after every step.
    pub fn check_invariants(&self) {
        let mut held: HashMap<&PartitionKey, BTreeSet<u64>> = HashMap::new();
        let inflight = self
            .inflight
            .iter()
            .flat_map(|b| b.items.iter().map(|(_, c)| c));
        let dead = self.dead.iter().map(|d| &d.candidate);
        for c in self
            .waiting
            .values()
            .chain(self.ready.iter())
            .chain(inflight)
            .chain(dead)
        {
            held.entry(&c.inbox).or_default().insert(c.seq);
        }
        if let Some(b) = &self.inflight {
            assert!(b.attempts <= self.settings.max_attempts);
        }
        for (k, p) in &self.parts {
            assert!(
                p.committed <= p.read_next,
                "never commit past what was read"
            );
            if let Some(first) = p.outstanding.first() {
                assert!(
                    p.committed <= *first,
                    "never commit past an unsettled pointer"
                );
                assert!(*p.outstanding.last().unwrap() < p.read_next);
            }
            for s in held.get(k).into_iter().flatten() {
                assert!(
                    p.outstanding.contains(s),
                    "held {s} of {k:?} is outstanding"
                );
            }
        }
        assert_eq!(self.ready.is_empty(), self.ready_since_ns.is_none());
    }
}

/// Positions (in `items`, this attempt's order) a 2xx answer names as failed. The body may
/// be `{"failed": [...]}` with notification ids (strings) or positions in this attempt's
/// `notifications` (numbers); anything else — another shape, unknown ids, positions out
/// of range — names nothing, so a receiver that answers 2xx with any other body accepts
/// the whole batch, as before this was added.
pub fn failed_in_answer(answer: &[u8], items: &[(String, Candidate)]) -> BTreeSet<usize> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return BTreeSet::new();
    };
    let Some(failed) = value.get("failed").and_then(|f| f.as_array()) else {
        return BTreeSet::new();
    };
    failed
        .iter()
        .filter_map(|f| match f {
            serde_json::Value::String(id) => items.iter().position(|(i, _)| i == id),
            serde_json::Value::Number(n) => n
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n < items.len()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
