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
    /// The next attempt is due at this time (ns).
    RetryAt(i64),
    /// Given up after this many attempts; the batch's notifications are lost.
    Dropped {
        count: usize,
        attempts: u32,
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
    /// Notifications given up on.
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
    items: Vec<Candidate>,
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

/// The JSON body of one attempt (spec §10.2).
pub fn body(items: &[&Notification], attempt: u32, sent_at_ns: i64) -> Vec<u8> {
    let b = Body {
        notifications: items.iter().map(|n| Item { n, attempt }).collect(),
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
        self.inflight = Some(Batch {
            id: format!("{}-{}", self.settings.delivery_prefix, self.batches),
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
        let items: Vec<&Notification> = b.items.iter().map(|c| &c.notification).collect();
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

    /// The answer to the attempt [`Dispatcher::next_attempt`] returned: `ok` = 2xx.
    pub fn outcome(&mut self, ok: bool, now_ns: i64) -> Outcome {
        let mut b = self.inflight.take().expect("an attempt is in flight");
        assert!(b.attempts >= 1);
        let count = b.items.len();
        if ok {
            self.stats.sent += count as u64;
        } else {
            self.stats.failed += 1;
            if b.attempts < self.settings.max_attempts {
                b.next_at_ns = now_ns.saturating_add(backoff_ns(b.attempts));
                let at = b.next_at_ns;
                self.inflight = Some(b);
                return Outcome::RetryAt(at);
            }
            self.stats.dropped += count as u64;
        }
        for c in &b.items {
            self.resolve(c);
        }
        if ok {
            Outcome::Sent(count)
        } else {
            Outcome::Dropped {
                count,
                attempts: b.attempts,
            }
        }
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
        let inflight = self.inflight.iter().flat_map(|b| b.items.iter());
        for c in self
            .waiting
            .values()
            .chain(self.ready.iter())
            .chain(inflight)
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

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;
    use bytes::Bytes;

    const S: i64 = 1_000_000_000;

    fn settings(grace_ns: i64, max_attempts: u32) -> Settings {
        Settings {
            grace_ns,
            max_attempts,
            signing_secret: vec![7u8; 32],
            delivery_prefix: "t".into(),
        }
    }

    fn key(user: &str) -> PartitionKey {
        (format!("chat.inbox.{user}"), 0)
    }

    fn pointer(user: &str, seq: u64, sender: &str, at: i64) -> Record {
        let h = |k: &str, v: &str| (Bytes::from(k.to_string()), Bytes::from(v.to_string()));
        Record {
            seq,
            timestamp_ns: at,
            flags: 0,
            epoch: 0,
            key: Bytes::from(user.to_string()),
            headers: vec![
                h("conv_partition", "6"),
                h("conv_seq", &seq.to_string()),
                h("conversation", "alice:bob"),
                h("kind", "direct"),
                h("message_id", &format!("m{seq}")),
                h("pointer", "1"),
                h("sender", sender),
            ],
            payload: Bytes::new(),
        }
    }

    /// Drives every due candidate with `verdict` and returns the attempt made, if any.
    fn step(d: &mut Dispatcher, now: i64, verdict: Verdict) -> Option<Attempt> {
        for c in d.take_due(now) {
            d.settle(c, verdict, now);
        }
        d.check_invariants();
        d.next_attempt(now)
    }

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_two_minutes() {
        let got: Vec<i64> = (1..=9).map(|f| backoff_ns(f) / S).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 64, 120, 120]);
        assert_eq!(backoff_ns(u32::MAX), BACKOFF_CAP_NS);
    }

    #[test]
    fn signature_is_hmac_of_timestamp_dot_body() {
        // Known answer computed independently: HMAC-SHA256(key = 32 × 0x07, "1700000000.{}").
        let key = hmac::Key::new(hmac::HMAC_SHA256, &[7u8; 32]);
        let sig = sign(&key, 1_700_000_000, b"{}");
        let tag = hmac::sign(&key, b"1700000000.{}");
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sig, format!("v1={hex}"));
        assert_eq!(sig.len(), 3 + 64);
        assert_ne!(sig, sign(&key, 1_700_000_001, b"{}"), "timestamp is signed");
        assert_ne!(sig, sign(&key, 1_700_000_000, b"{ }"), "body is signed");
    }

    #[test]
    fn short_secrets_and_bad_attempt_counts_are_refused() {
        let mut s = settings(0, 5);
        s.signing_secret = vec![1; 31];
        assert!(Dispatcher::new(s).is_err());
        assert!(Dispatcher::new(settings(0, 0)).is_err());
        assert!(Dispatcher::new(settings(-1, 5)).is_err());
        assert!(Dispatcher::new(settings(0, 5)).is_ok());
    }

    #[test]
    fn notification_has_the_spec_fields_and_skips_own_messages() {
        let n = notification_of(&pointer("bob", 3, "alice", 42)).unwrap();
        assert_eq!(n.user_id, "bob");
        assert_eq!(n.sender_id, "alice");
        assert_eq!(n.message_id, "m3");
        assert_eq!(n.conv_topic.as_deref(), Some("chat.direct.alice:bob"));
        assert_eq!((n.conv_partition, n.conv_seq, n.at), (6, 3, 42));
        assert_eq!(n.headers.get("pointer").map(String::as_str), Some("1"));
        assert!(
            notification_of(&pointer("alice", 3, "alice", 42)).is_none(),
            "D14"
        );
        assert!(
            notification_of(&pointer("", 3, "alice", 42)).is_none(),
            "no key"
        );
        let mut group = pointer("bob", 1, "alice", 0);
        group.headers.retain(|(k, _)| k.as_ref() != b"kind");
        group
            .headers
            .push((Bytes::from("kind"), Bytes::from("group")));
        let n = notification_of(&group).unwrap();
        assert_eq!(n.conv_topic.as_deref(), Some("chat.group.alice:bob"));
        let mut bare = pointer("bob", 1, "alice", 0);
        bare.headers.retain(|(k, _)| k.as_ref() == b"sender");
        let n = notification_of(&bare).unwrap();
        assert_eq!((n.conv_topic, n.conv_partition, n.conv_seq), (None, 0, 0));
    }

    #[test]
    fn body_carries_attempt_count_and_sent_at() {
        let n = notification_of(&pointer("bob", 3, "alice", 42)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body(&[&n], 2, 99)).unwrap();
        assert_eq!(v["count"], 1);
        assert_eq!(v["sent_at"], 99);
        let item = &v["notifications"][0];
        assert_eq!(item["attempt"], 2);
        assert_eq!(item["user_id"], "bob");
        assert_eq!(item["conv_topic"], "chat.direct.alice:bob");
        assert_eq!(item["headers"]["message_id"], "m3");
        assert_eq!(item["at"], 42);
    }

    #[test]
    fn grace_delay_holds_a_pointer_until_it_is_old_enough() {
        let mut d = Dispatcher::new(settings(3 * S, 5)).unwrap();
        d.track(key("bob"), 1);
        d.offer(&key("bob"), &[pointer("bob", 1, "alice", 10 * S)], 1, 2);
        assert!(d.take_due(13 * S - 1).is_empty());
        assert_eq!(d.next_wake_ns(), Some(13 * S));
        assert_eq!(d.take_due(13 * S).len(), 1);
    }

    #[test]
    fn batches_cross_users_and_cursor_moves_only_after_2xx() {
        let mut d = Dispatcher::new(settings(0, 5)).unwrap();
        for (i, u) in ["bob", "carol", "dave"].iter().enumerate() {
            d.track(key(u), 1);
            d.offer(&key(u), &[pointer(u, 1, "alice", i as i64)], 1, 2);
        }
        assert!(step(&mut d, S, Verdict::Push).is_none(), "window not over");
        let a = step(&mut d, S + BATCH_WINDOW_NS, Verdict::Push).expect("batch");
        assert_eq!(a.count, 3);
        assert_eq!(a.attempt, 1);
        assert!(
            d.take_commits().is_empty(),
            "nothing committed before the answer"
        );
        assert_eq!(d.outcome(true, 2 * S), Outcome::Sent(3));
        let commits = d.take_commits();
        assert_eq!(commits.len(), 3);
        assert!(commits.iter().all(|(_, s)| *s == 2));
        assert_eq!(d.stats().sent, 3);
    }

    #[test]
    fn retries_back_off_keep_the_delivery_id_then_drop() {
        let mut d = Dispatcher::new(settings(0, 3)).unwrap();
        d.track(key("bob"), 5);
        d.offer(&key("bob"), &[pointer("bob", 5, "alice", 0)], 1, 6);
        assert!(step(&mut d, 0, Verdict::Push).is_none(), "window not over");
        let a1 = d.next_attempt(BATCH_WINDOW_NS).unwrap();
        let t1 = BATCH_WINDOW_NS;
        assert_eq!(d.outcome(false, t1), Outcome::RetryAt(t1 + S));
        assert!(d.next_attempt(t1 + S - 1).is_none());
        let a2 = d.next_attempt(t1 + S).unwrap();
        assert_eq!((a2.attempt, &a2.delivery_id), (2, &a1.delivery_id));
        assert_ne!(a1.body, a2.body, "attempt and sent_at change");
        assert_eq!(d.outcome(false, t1 + S), Outcome::RetryAt(t1 + 3 * S));
        assert!(d.take_commits().is_empty());
        let a3 = d.next_attempt(t1 + 3 * S).unwrap();
        assert_eq!(a3.attempt, 3);
        assert_eq!(
            d.outcome(false, t1 + 3 * S),
            Outcome::Dropped {
                count: 1,
                attempts: 3
            }
        );
        assert_eq!(
            d.take_commits(),
            vec![(key("bob"), 6)],
            "dropped: advance past"
        );
        let st = d.stats();
        assert_eq!((st.failed, st.dropped, st.sent), (3, 1, 0));
    }

    #[test]
    fn online_and_read_users_are_skipped_but_committed() {
        let mut d = Dispatcher::new(settings(0, 5)).unwrap();
        d.track(key("bob"), 1);
        d.offer(
            &key("bob"),
            &[pointer("bob", 1, "alice", 0), pointer("bob", 2, "alice", 0)],
            1,
            3,
        );
        let due = d.take_due(0);
        let mut it = due.into_iter();
        d.settle(it.next().unwrap(), Verdict::Online, 0);
        d.settle(it.next().unwrap(), Verdict::Read, 0);
        assert!(d.next_attempt(S).is_none(), "nothing to push");
        assert_eq!(d.take_commits(), vec![(key("bob"), 3)]);
        assert_eq!((d.stats().suppressed, d.stats().read), (1, 1));
    }

    #[test]
    fn own_messages_and_unkeyed_records_never_reach_the_webhook() {
        let mut d = Dispatcher::new(settings(0, 5)).unwrap();
        d.track(key("alice"), 1);
        d.offer(
            &key("alice"),
            &[pointer("alice", 1, "alice", 0), pointer("", 2, "x", 0)],
            1,
            3,
        );
        assert!(d.take_due(i64::MAX).is_empty());
        assert_eq!(d.take_commits(), vec![(key("alice"), 3)]);
        assert_eq!(d.stats().skipped, 2);
    }

    #[test]
    fn a_retention_gap_jumps_to_first_seq() {
        let mut d = Dispatcher::new(settings(0, 5)).unwrap();
        d.track(key("bob"), 2);
        d.offer(&key("bob"), &[pointer("bob", 10, "alice", 0)], 10, 11);
        assert_eq!(d.take_due(0).len(), 1);
        assert_eq!(d.to_read(10), vec![], "read up to next_seq");
    }

    #[test]
    fn an_append_marks_a_tracked_partition_for_reading() {
        let mut d = Dispatcher::new(settings(0, 5)).unwrap();
        assert!(!d.appended(&key("bob"), 1), "untracked: driver must track");
        d.track(key("bob"), 1);
        d.offer(&key("bob"), &[], 1, 1);
        assert!(d.to_read(10).is_empty());
        assert!(d.appended(&key("bob"), 1));
        assert_eq!(d.to_read(10), vec![(key("bob"), 1)]);
    }

    #[test]
    fn batch_size_is_capped() {
        let mut d = Dispatcher::new(settings(0, 5)).unwrap();
        let users: Vec<String> = (0..BATCH_NOTIFICATIONS_MAX + 5)
            .map(|i| format!("u{i}"))
            .collect();
        for u in &users {
            d.track(key(u), 1);
            d.offer(&key(u), &[pointer(u, 1, "alice", 0)], 1, 2);
        }
        let a = step(&mut d, 0, Verdict::Push).expect("full batch goes at once");
        assert_eq!(a.count, BATCH_NOTIFICATIONS_MAX);
        d.outcome(true, 0);
        let b = d
            .next_attempt(BATCH_WINDOW_NS)
            .expect("rest after the window");
        assert_eq!(b.count, 5);
        assert_ne!(a.delivery_id, b.delivery_id);
    }

    /// Random offers, verdicts and answers: the cursor never passes an unsettled pointer,
    /// every pushable pointer is attempted, and all are settled in the end.
    #[test]
    fn property_cursor_never_passes_unsettled_pointers() {
        for seed in 0..40 {
            let mut rng = Rng::new(seed);
            let mut d = Dispatcher::new(settings((rng.below(3) as i64) * S, 3)).unwrap();
            let mut next: HashMap<String, u64> = HashMap::new();
            let mut committed: HashMap<PartitionKey, u64> = HashMap::new();
            let mut now = 0i64;
            let mut pushable = 0u64;
            for _ in 0..400 {
                now += (rng.below(500) as i64) * 1_000_000;
                match rng.below(4) {
                    0 => {
                        let u = format!("u{}", rng.below(6));
                        let s = *next.entry(u.clone()).or_insert(1);
                        d.track(key(&u), s);
                        let n = 1 + rng.below(3);
                        let recs: Vec<Record> = (s..s + n)
                            .map(|q| {
                                let own = rng.below(5) == 0;
                                pushable += u64::from(!own);
                                pointer(&u, q, if own { &u } else { "zed" }, now)
                            })
                            .collect();
                        d.offer(&key(&u), &recs, 1, s + n);
                        next.insert(u, s + n);
                    }
                    1 => {
                        for c in d.take_due(now) {
                            let v = [Verdict::Push, Verdict::Online, Verdict::Read]
                                [rng.below(3) as usize];
                            d.settle(c, v, now);
                        }
                    }
                    _ => {
                        if d.next_attempt(now).is_some() {
                            d.outcome(rng.below(2) == 0, now);
                        }
                    }
                }
                for (k, s) in d.take_commits() {
                    let before = committed.insert(k, s).unwrap_or(0);
                    assert!(s > before, "commits only move forward");
                }
                d.check_invariants();
            }
            // Drain: everything settles and every cursor reaches the end.
            for _ in 0..100_000 {
                now += BACKOFF_CAP_NS;
                for c in d.take_due(now) {
                    d.settle(c, Verdict::Push, now);
                }
                if let Some(_a) = d.next_attempt(now) {
                    d.outcome(true, now);
                }
                for (k, s) in d.take_commits() {
                    committed.insert(k, s);
                }
                if d.held() == 0 {
                    break;
                }
            }
            assert_eq!(d.held(), 0, "seed {seed}");
            let st = d.stats();
            assert_eq!(st.sent + st.dropped + st.suppressed + st.read, pushable);
            for (u, n) in next {
                assert_eq!(committed.get(&key(&u)).copied(), Some(n), "seed {seed}");
            }
        }
    }
}
