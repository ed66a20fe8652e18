//! The idempotency window of `send` (spec/messaging-engine.md §8, messaging-edge.md §7.3):
//! a retried send with the same `client_msg_id` gets the coordinates of the first copy
//! instead of storing a second one.
//!
//! Sans-IO: the caller passes the time, and owns sweeping (every minute in v1). In memory,
//! per node, lost on restart — as in v1; persisting claims in the conversation log is a
//! later step (edge G40).
//!
//! Two changes from v1: the key includes the conversation (D22, §19 #18), so reusing a
//! `client_msg_id` in another conversation is a new message; and the entry cap is hard
//! (D32, G39): at the cap the oldest completed entry is evicted, and when every entry is an
//! in-flight claim the new claim is refused ([`Claim::Full`]) rather than growing.

use super::topic::{ID_BYTES_MAX, TOPIC_ENCODED_BYTES_MAX};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Entry cap used when the configuration says 0 (`dedup.max_entries`). About 150 B of
/// bookkeeping plus the key and coordinates per entry: tens of MB at most.
pub const DEDUP_ENTRIES_DEFAULT_MAX: usize = 100_000;
/// Largest cap accepted; larger configured values are lowered to it.
pub const DEDUP_ENTRIES_LIMIT_MAX: usize = 10_000_000;
/// Window used when the configuration gives none (`dedup.ttl`, 10 min).
pub const DEDUP_TTL_DEFAULT_NS: i64 = 10 * 60 * 1_000_000_000;
/// Longest `client_msg_id` (as the gateway frame parser allows); bounds an entry's memory.
pub const CLIENT_MSG_ID_BYTES_MAX: usize = 256;
/// Longest conversation id: a conversation topic is at most this long, so its id is too.
pub const CONVERSATION_BYTES_MAX: usize = TOPIC_ENCODED_BYTES_MAX;
/// Longest sender id (a user id, §19 #11).
pub const SENDER_BYTES_MAX: usize = ID_BYTES_MAX;
/// Most entries one [`DedupTable::sweep`] removes, so a mass expiry cannot hold the shard;
/// when it stops there, `next_expiry_ns() <= now` and the caller sweeps again later.
pub const DEDUP_SWEEP_BATCH_MAX: usize = 4096;

/// What makes two sends "the same send" (§19 #18). The table bounds the number of entries,
/// not their size: build keys with [`DedupKey::new`], which enforces the field limits
/// (the fields are public so that a caller holding already-validated values — a principal's
/// user id, a checked topic, a frame field bounded by its parser — can build one without a
/// second check; [`DedupKey::within_limits`] says whether such a key is bounded).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DedupKey {
    pub sender: String,
    pub conversation: String,
    pub client_msg_id: String,
}

/// Why a [`DedupKey`] could not be built. A client error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DedupKeyError {
    /// An empty `client_msg_id` means "do not deduplicate"; the caller must skip the table.
    EmptyClientMsgId,
    TooLong {
        field: &'static str,
        bytes: usize,
        bytes_max: usize,
    },
}

impl fmt::Display for DedupKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupKeyError::EmptyClientMsgId => write!(f, "client_msg_id is empty"),
            DedupKeyError::TooLong {
                field,
                bytes,
                bytes_max,
            } => write!(f, "{field} is {bytes} bytes, over the limit of {bytes_max}"),
        }
    }
}

impl std::error::Error for DedupKeyError {}

impl DedupKey {
    pub fn new(
        sender: &str,
        conversation: &str,
        client_msg_id: &str,
    ) -> Result<DedupKey, DedupKeyError> {
        check_fields(sender, conversation, client_msg_id)?;
        Ok(DedupKey {
            sender: sender.to_string(),
            conversation: conversation.to_string(),
            client_msg_id: client_msg_id.to_string(),
        })
    }

    /// Whether every field is within the limits [`DedupKey::new`] enforces.
    pub fn within_limits(&self) -> bool {
        check_fields(&self.sender, &self.conversation, &self.client_msg_id).is_ok()
    }
}

fn check_fields(
    sender: &str,
    conversation: &str,
    client_msg_id: &str,
) -> Result<(), DedupKeyError> {
    if client_msg_id.is_empty() {
        return Err(DedupKeyError::EmptyClientMsgId);
    }
    check_len("sender", sender, SENDER_BYTES_MAX)?;
    check_len("conversation", conversation, CONVERSATION_BYTES_MAX)?;
    check_len("client_msg_id", client_msg_id, CLIENT_MSG_ID_BYTES_MAX)
}

fn check_len(field: &'static str, value: &str, bytes_max: usize) -> Result<(), DedupKeyError> {
    if value.len() > bytes_max {
        return Err(DedupKeyError::TooLong {
            field,
            bytes: value.len(),
            bytes_max,
        });
    }
    Ok(())
}

/// Where the first copy of a message was stored: what a duplicate send is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinates {
    pub message_id: String,
    pub topic: String,
    pub partition: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
}

/// The outcome of [`DedupTable::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Claim {
    /// No live entry: the caller now holds the claim and must end it with
    /// [`DedupTable::complete`] or [`DedupTable::release`].
    Fresh,
    /// The send completed earlier: reply `sent` with these coordinates, `duplicate: true`.
    Duplicate(Coordinates),
    /// Another send with this key is still running: reply `conflict`, retryable.
    InFlight,
    /// The table is at its cap and every entry is an in-flight claim: nothing may be
    /// evicted without losing a running send's protection. Reply retryable; nothing held.
    Full,
}

#[derive(Debug, Clone)]
enum State {
    InFlight,
    Completed(Coordinates),
}

#[derive(Debug, Clone)]
struct Entry {
    state: State,
    /// When the entry stops counting: claim + TTL, refreshed to completion + TTL.
    expires_ns: i64,
    /// Tie-breaker of equal expiry times in the age indexes; unique per entry.
    serial: u64,
}

impl Entry {
    fn age(&self) -> Age {
        (self.expires_ns, self.serial)
    }

    fn is_live(&self, now_ns: i64) -> bool {
        self.expires_ns > now_ns
    }
}

/// Position in an age index: (expiry, serial). With one TTL for all entries, expiry order
/// is claim/completion order, so the first entry of an index is its oldest.
type Age = (i64, u64);

/// The dedup window of one node (or shard).
///
/// Every entry is in the map and in exactly one age index (in-flight or completed), so the
/// sweep and the eviction each take the first entry of an index in O(log n). The trade-off
/// is that each key is stored twice.
#[derive(Debug)]
pub struct DedupTable {
    ttl_ns: i64,
    entries_max: usize,
    entries: HashMap<DedupKey, Entry>,
    in_flight: BTreeMap<Age, DedupKey>,
    completed: BTreeMap<Age, DedupKey>,
    next_serial: u64,
    evicted_total: u64,
}

impl DedupTable {
    /// A table whose entries live `ttl_ns` (≤ 0 → [`DEDUP_TTL_DEFAULT_NS`]) and which holds
    /// at most `entries_max` entries (0 → [`DEDUP_ENTRIES_DEFAULT_MAX`], capped at
    /// [`DEDUP_ENTRIES_LIMIT_MAX`]).
    pub fn new(ttl_ns: i64, entries_max: usize) -> DedupTable {
        let ttl_ns = if ttl_ns > 0 {
            ttl_ns
        } else {
            DEDUP_TTL_DEFAULT_NS
        };
        let entries_max = match entries_max {
            0 => DEDUP_ENTRIES_DEFAULT_MAX,
            n => n.min(DEDUP_ENTRIES_LIMIT_MAX),
        };
        DedupTable {
            ttl_ns,
            entries_max,
            entries: HashMap::new(),
            in_flight: BTreeMap::new(),
            completed: BTreeMap::new(),
            next_serial: 0,
            evicted_total: 0,
        }
    }

    pub fn ttl_ns(&self) -> i64 {
        self.ttl_ns
    }

    pub fn entries_max(&self) -> usize {
        self.entries_max
    }

    /// Entries held, including expired ones not swept yet.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Completed entries evicted to respect the cap, since creation.
    pub fn evicted_total(&self) -> u64 {
        self.evicted_total
    }

    /// Step 1 of a send: claims `key`, or reports why the send must not proceed.
    pub fn claim(&mut self, key: &DedupKey, now_ns: i64) -> Claim {
        if let Some(entry) = self.entries.get(key) {
            if entry.is_live(now_ns) {
                return match &entry.state {
                    State::InFlight => Claim::InFlight,
                    State::Completed(c) => Claim::Duplicate(c.clone()),
                };
            }
            self.remove(key);
        }
        if !self.make_room(now_ns) {
            return Claim::Full;
        }
        self.insert(key.clone(), State::InFlight, now_ns);
        self.check_invariants();
        Claim::Fresh
    }

    /// The send of `key` was stored at `coordinates`: later claims within the TTL get them.
    /// Completing a claim that was swept (the send outlived the TTL) or released re-creates
    /// it as completed. Returns false only if the entry had to be re-created and the table
    /// is full of in-flight claims: then the message is stored but a retry may duplicate it.
    pub fn complete(&mut self, key: &DedupKey, coordinates: Coordinates, now_ns: i64) -> bool {
        let existed = self.remove(key);
        if !existed && !self.make_room(now_ns) {
            return false;
        }
        self.insert(key.clone(), State::Completed(coordinates), now_ns);
        self.check_invariants();
        true
    }

    /// The send of `key` failed before it was stored: drop the claim so a retry starts
    /// afresh. A completed entry is never dropped (the message exists). Returns whether an
    /// in-flight claim was removed.
    pub fn release(&mut self, key: &DedupKey) -> bool {
        let in_flight = matches!(
            self.entries.get(key),
            Some(Entry {
                state: State::InFlight,
                ..
            })
        );
        if in_flight {
            self.remove(key);
        }
        in_flight
    }

    /// The coordinates of a completed, live entry; in-flight claims are not results.
    pub fn lookup(&self, key: &DedupKey, now_ns: i64) -> Option<&Coordinates> {
        match self.entries.get(key) {
            Some(Entry {
                state: State::Completed(c),
                expires_ns,
                ..
            }) if *expires_ns > now_ns => Some(c),
            _ => None,
        }
    }

    /// Removes up to [`DEDUP_SWEEP_BATCH_MAX`] expired entries, oldest first; returns how
    /// many.
    pub fn sweep(&mut self, now_ns: i64) -> usize {
        let mut removed = 0;
        while removed < DEDUP_SWEEP_BATCH_MAX {
            let Some(key) = self.oldest_expired(now_ns) else {
                break;
            };
            self.remove(&key);
            removed += 1;
        }
        self.check_invariants();
        removed
    }

    /// When the next entry expires, if any: the caller's hint for scheduling a sweep.
    pub fn next_expiry_ns(&self) -> Option<i64> {
        let first = |index: &BTreeMap<Age, DedupKey>| index.keys().next().map(|a| a.0);
        match (first(&self.in_flight), first(&self.completed)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The oldest expired entry of either index.
    fn oldest_expired(&self, now_ns: i64) -> Option<DedupKey> {
        match (
            first_expired(&self.in_flight, now_ns),
            first_expired(&self.completed, now_ns),
        ) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a.1 } else { b.1 }.clone()),
            (a, b) => a.or(b).map(|(_, key)| key.clone()),
        }
    }

    /// Frees one slot if the table is at its cap: an expired in-flight claim if there is one
    /// (its send is long gone or will re-create it on completion), else the oldest completed
    /// entry (live or not). False when everything is a live in-flight claim.
    fn make_room(&mut self, now_ns: i64) -> bool {
        if self.entries.len() < self.entries_max {
            return true;
        }
        let expired_claim = first_expired(&self.in_flight, now_ns).map(|(_, key)| key.clone());
        if let Some(key) = expired_claim {
            self.remove(&key);
            return true;
        }
        let Some((_, key)) = self.completed.first_key_value() else {
            return false;
        };
        let key = key.clone();
        self.remove(&key);
        self.evicted_total += 1;
        true
    }

    fn insert(&mut self, key: DedupKey, state: State, now_ns: i64) {
        assert!(self.entries.len() < self.entries_max, "insert over the cap");
        let entry = Entry {
            expires_ns: now_ns.saturating_add(self.ttl_ns),
            serial: self.next_serial,
            state,
        };
        self.next_serial += 1;
        let index = match entry.state {
            State::InFlight => &mut self.in_flight,
            State::Completed(_) => &mut self.completed,
        };
        index.insert(entry.age(), key.clone());
        self.entries.insert(key, entry);
    }

    /// Removes `key` from the map and its index; returns whether it was there.
    fn remove(&mut self, key: &DedupKey) -> bool {
        let Some(entry) = self.entries.remove(key) else {
            return false;
        };
        let index = match entry.state {
            State::InFlight => &mut self.in_flight,
            State::Completed(_) => &mut self.completed,
        };
        let removed = index.remove(&entry.age());
        assert!(removed.is_some(), "entry missing from its age index");
        true
    }

    fn check_invariants(&self) {
        debug_assert_eq!(
            self.entries.len(),
            self.in_flight.len() + self.completed.len()
        );
        debug_assert!(self.entries.len() <= self.entries_max);
    }
}

/// The first entry of an age index if it has expired at `now_ns`.
fn first_expired(index: &BTreeMap<Age, DedupKey>, now_ns: i64) -> Option<(Age, &DedupKey)> {
    index
        .first_key_value()
        .filter(|(age, _)| age.0 <= now_ns)
        .map(|(age, key)| (*age, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    const TTL: i64 = 600_000_000_000;

    fn key(sender: &str, conv: &str, id: &str) -> DedupKey {
        DedupKey::new(sender, conv, id).unwrap()
    }

    fn coords(seq: u64) -> Coordinates {
        Coordinates {
            message_id: format!("{seq:032x}"),
            topic: "chat.direct.alice:bob".into(),
            partition: 6,
            seq,
            timestamp_ns: 1_000 + seq as i64,
        }
    }

    #[test]
    fn first_claim_succeeds() {
        let mut t = DedupTable::new(TTL, 10);
        assert_eq!(t.claim(&key("alice", "a:b", "m1"), 0), Claim::Fresh);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn retry_returns_original_result() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&k, 0), Claim::Fresh);
        assert!(t.complete(&k, coords(42), 5));
        assert_eq!(t.claim(&k, 10), Claim::Duplicate(coords(42)));
        assert_eq!(t.claim(&k, 11), Claim::Duplicate(coords(42)));
    }

    #[test]
    fn in_flight_retry_is_distinguishable() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&k, 0), Claim::Fresh);
        assert_eq!(t.claim(&k, 1), Claim::InFlight);
    }

    #[test]
    fn abandon_releases_claim() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&k, 0), Claim::Fresh);
        assert!(t.release(&k));
        assert!(t.is_empty());
        assert_eq!(t.claim(&k, 1), Claim::Fresh);
    }

    #[test]
    fn abandon_does_not_drop_completed_entry() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&k, 0), Claim::Fresh);
        t.complete(&k, coords(1), 1);
        assert!(!t.release(&k));
        assert_eq!(t.claim(&k, 2), Claim::Duplicate(coords(1)));
        assert!(!t.release(&key("nobody", "x", "y")));
    }

    #[test]
    fn sender_scoping() {
        let mut t = DedupTable::new(TTL, 10);
        let a = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&a, 0), Claim::Fresh);
        t.complete(&a, coords(1), 0);
        assert_eq!(t.claim(&key("bob", "a:b", "m1"), 1), Claim::Fresh);
    }

    #[test]
    fn conversation_scoping_d22() {
        let mut t = DedupTable::new(TTL, 10);
        let a = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&a, 0), Claim::Fresh);
        t.complete(&a, coords(1), 0);
        // Same sender, same client id, another conversation: a new message.
        assert_eq!(t.claim(&key("alice", "a:c", "m1"), 1), Claim::Fresh);
    }

    #[test]
    fn expiry() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&k, 0), Claim::Fresh);
        t.complete(&k, coords(1), 100);
        // Completion refreshed the window to 100 + TTL.
        assert_eq!(t.claim(&k, TTL + 99), Claim::Duplicate(coords(1)));
        assert_eq!(t.lookup(&k, TTL + 99), Some(&coords(1)));
        assert_eq!(t.lookup(&k, TTL + 100), None);
        assert_eq!(t.claim(&k, TTL + 100), Claim::Fresh);
        // An in-flight claim expires TTL after the claim.
        let j = key("alice", "a:b", "m2");
        assert_eq!(t.claim(&j, 0), Claim::Fresh);
        assert_eq!(t.claim(&j, TTL - 1), Claim::InFlight);
        assert_eq!(t.claim(&j, TTL), Claim::Fresh);
    }

    #[test]
    fn sweep_removes_only_expired_entries() {
        let mut t = DedupTable::new(TTL, 10);
        let (a, b, c) = (key("u", "c", "a"), key("u", "c", "b"), key("u", "c", "c"));
        let _ = t.claim(&a, 0);
        let _ = t.claim(&b, 10);
        t.complete(&b, coords(2), 20);
        let _ = t.claim(&c, 30);
        assert_eq!(t.next_expiry_ns(), Some(TTL));
        assert_eq!(t.sweep(TTL + 19), 1); // a
        assert_eq!(t.next_expiry_ns(), Some(TTL + 20));
        assert_eq!(t.sweep(TTL + 20), 1); // b
        assert_eq!(t.len(), 1);
        assert_eq!(t.claim(&c, TTL + 20), Claim::InFlight);
        assert_eq!(t.sweep(TTL + 30), 1);
        assert!(t.is_empty());
        assert_eq!(t.next_expiry_ns(), None);
    }

    #[test]
    fn sweep_is_batched() {
        let mut t = DedupTable::new(TTL, DEDUP_SWEEP_BATCH_MAX + 10);
        for i in 0..DEDUP_SWEEP_BATCH_MAX + 10 {
            let _ = t.claim(&key("u", "c", &i.to_string()), 0);
        }
        assert_eq!(t.sweep(TTL), DEDUP_SWEEP_BATCH_MAX);
        assert!(t.next_expiry_ns().unwrap() <= TTL);
        assert_eq!(t.sweep(TTL), 10);
        assert!(t.is_empty());
    }

    #[test]
    fn complete_after_sweep_still_deduplicates() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.claim(&k, 0), Claim::Fresh);
        assert_eq!(t.sweep(TTL), 1);
        assert!(t.is_empty());
        assert!(t.complete(&k, coords(7), TTL + 1));
        assert_eq!(t.claim(&k, TTL + 2), Claim::Duplicate(coords(7)));
    }

    #[test]
    fn concurrent_claims_elect_exactly_one_winner() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        let outcomes: Vec<Claim> = (0..200).map(|i| t.claim(&k, i)).collect();
        assert_eq!(outcomes.iter().filter(|c| **c == Claim::Fresh).count(), 1);
        assert_eq!(outcomes[0], Claim::Fresh);
        assert!(outcomes[1..].iter().all(|c| *c == Claim::InFlight));
    }

    #[test]
    fn concurrent_distinct_keys() {
        let mut t = DedupTable::new(TTL, 1000);
        for i in 0..200 {
            assert_eq!(t.claim(&key("u", "c", &i.to_string()), 0), Claim::Fresh);
        }
        assert_eq!(t.len(), 200);
    }

    #[test]
    fn lookup_only_returns_completed() {
        let mut t = DedupTable::new(TTL, 10);
        let k = key("alice", "a:b", "m1");
        assert_eq!(t.lookup(&k, 0), None);
        let _ = t.claim(&k, 0);
        assert_eq!(t.lookup(&k, 1), None);
        t.complete(&k, coords(3), 2);
        assert_eq!(t.lookup(&k, 3), Some(&coords(3)));
    }

    #[test]
    fn cap_is_hard_and_evicts_oldest_completed_d32() {
        let mut t = DedupTable::new(TTL, 3);
        let ks: Vec<DedupKey> = (0..5).map(|i| key("u", "c", &i.to_string())).collect();
        for (i, k) in ks[..3].iter().enumerate() {
            assert_eq!(t.claim(k, i as i64), Claim::Fresh);
        }
        // All in flight: nothing may be evicted.
        assert_eq!(t.claim(&ks[3], 3), Claim::Full);
        assert_eq!(t.len(), 3);
        // Complete 1 then 0: 1 is the oldest completed.
        t.complete(&ks[1], coords(1), 4);
        t.complete(&ks[0], coords(0), 5);
        assert_eq!(t.claim(&ks[3], 6), Claim::Fresh);
        assert_eq!(t.len(), 3);
        assert_eq!(t.evicted_total(), 1);
        assert_eq!(t.lookup(&ks[1], 6), None);
        assert_eq!(t.lookup(&ks[0], 6), Some(&coords(0)));
        assert_eq!(t.claim(&ks[4], 7), Claim::Fresh);
        assert_eq!(t.lookup(&ks[0], 7), None);
        assert_eq!(t.claim(&ks[1], 8), Claim::Full);
        assert_eq!(t.evicted_total(), 2);
    }

    #[test]
    fn expired_claims_make_room_before_completed_entries() {
        let mut t = DedupTable::new(100, 2);
        let (a, b, c) = (key("u", "c", "a"), key("u", "c", "b"), key("u", "c", "c"));
        let _ = t.claim(&a, 0);
        let _ = t.claim(&b, 50);
        t.complete(&b, coords(2), 60);
        assert_eq!(t.claim(&c, 100), Claim::Fresh);
        assert_eq!(
            t.evicted_total(),
            0,
            "the expired claim went, not a completed entry"
        );
        assert_eq!(t.lookup(&b, 100), Some(&coords(2)));
    }

    #[test]
    fn complete_of_a_swept_claim_respects_the_cap() {
        let mut t = DedupTable::new(100, 1);
        let (a, b) = (key("u", "c", "a"), key("u", "c", "b"));
        let _ = t.claim(&a, 0);
        let _ = t.sweep(100);
        let _ = t.claim(&b, 100);
        assert!(!t.complete(&a, coords(1), 101), "table full of live claims");
        assert_eq!(t.len(), 1);
        assert!(t.complete(&b, coords(2), 102));
        assert!(
            t.complete(&a, coords(1), 103),
            "evicts b, the oldest completed"
        );
        assert_eq!(t.lookup(&a, 104), Some(&coords(1)));
        assert_eq!(t.lookup(&b, 104), None);
    }

    #[test]
    fn defaults_and_limits() {
        let t = DedupTable::new(0, 0);
        assert_eq!(t.ttl_ns(), DEDUP_TTL_DEFAULT_NS);
        assert_eq!(t.entries_max(), DEDUP_ENTRIES_DEFAULT_MAX);
        assert_eq!(
            DedupTable::new(-5, usize::MAX).entries_max(),
            DEDUP_ENTRIES_LIMIT_MAX
        );
        // The window never wraps at the end of time.
        let mut t = DedupTable::new(TTL, 1);
        let k = key("u", "c", "m");
        assert_eq!(t.claim(&k, i64::MAX - 1), Claim::Fresh);
        assert_eq!(t.claim(&k, i64::MAX - 1), Claim::InFlight);
    }

    #[test]
    fn key_validation() {
        assert_eq!(
            DedupKey::new("u", "c", ""),
            Err(DedupKeyError::EmptyClientMsgId)
        );
        let long = "x".repeat(CLIENT_MSG_ID_BYTES_MAX + 1);
        let e = DedupKey::new("u", "c", &long).unwrap_err();
        assert!(e.to_string().contains("client_msg_id is 257 bytes"), "{e}");
        assert!(DedupKey::new(&"s".repeat(SENDER_BYTES_MAX + 1), "c", "m").is_err());
        assert!(DedupKey::new("u", &"c".repeat(CONVERSATION_BYTES_MAX + 1), "m").is_err());
        let k = DedupKey::new(&"s".repeat(128), &"c".repeat(200), &"m".repeat(256)).unwrap();
        assert!(k.within_limits());
        let unbounded = DedupKey {
            client_msg_id: long,
            ..k
        };
        assert!(!unbounded.within_limits());
    }

    /// A naive model: a list of (key, completed coordinates or None, expiry, serial) with
    /// linear scans, following the rules in the module docs.
    #[derive(Default)]
    struct Model {
        entries: Vec<(DedupKey, Option<Coordinates>, i64, u64)>,
        serial: u64,
        cap: usize,
        ttl: i64,
    }

    impl Model {
        fn position(&self, k: &DedupKey) -> Option<usize> {
            self.entries.iter().position(|e| &e.0 == k)
        }

        fn push(&mut self, k: &DedupKey, c: Option<Coordinates>, now: i64) {
            self.entries
                .push((k.clone(), c, now + self.ttl, self.serial));
            self.serial += 1;
        }

        fn make_room(&mut self, now: i64) -> bool {
            if self.entries.len() < self.cap {
                return true;
            }
            let oldest =
                |completed: bool, entries: &[(DedupKey, Option<Coordinates>, i64, u64)]| {
                    entries
                        .iter()
                        .enumerate()
                        .filter(|(_, e)| e.1.is_some() == completed)
                        .min_by_key(|(_, e)| (e.2, e.3))
                        .map(|(i, e)| (i, e.2))
                };
            if let Some((i, exp)) = oldest(false, &self.entries) {
                if exp <= now {
                    self.entries.remove(i);
                    return true;
                }
            }
            if let Some((i, _)) = oldest(true, &self.entries) {
                self.entries.remove(i);
                return true;
            }
            false
        }

        fn claim(&mut self, k: &DedupKey, now: i64) -> Claim {
            if let Some(i) = self.position(k) {
                let e = &self.entries[i];
                if e.2 > now {
                    return match &e.1 {
                        None => Claim::InFlight,
                        Some(c) => Claim::Duplicate(c.clone()),
                    };
                }
                self.entries.remove(i);
            }
            if !self.make_room(now) {
                return Claim::Full;
            }
            self.push(k, None, now);
            Claim::Fresh
        }

        fn complete(&mut self, k: &DedupKey, c: Coordinates, now: i64) -> bool {
            match self.position(k) {
                Some(i) => {
                    self.entries.remove(i);
                }
                None => {
                    if !self.make_room(now) {
                        return false;
                    }
                }
            }
            self.push(k, Some(c), now);
            true
        }

        fn release(&mut self, k: &DedupKey) -> bool {
            match self.position(k) {
                Some(i) if self.entries[i].1.is_none() => {
                    self.entries.remove(i);
                    true
                }
                _ => false,
            }
        }

        fn sweep(&mut self, now: i64) -> usize {
            let before = self.entries.len();
            self.entries.retain(|e| e.2 > now);
            before - self.entries.len()
        }
    }

    #[test]
    fn model_based() {
        for seed in 1..=40u64 {
            let mut rng = Rng::new(seed);
            let cap = 1 + rng.below(8) as usize;
            let ttl = 1 + rng.below(50) as i64;
            let mut t = DedupTable::new(ttl, cap);
            let mut m = Model {
                cap,
                ttl,
                ..Default::default()
            };
            let keys: Vec<DedupKey> = (0..12)
                .map(|i| {
                    key(
                        ["a", "b"][i % 2],
                        ["c", "d"][i / 2 % 2],
                        &(i / 4).to_string(),
                    )
                })
                .collect();
            let mut now = 0i64;
            for step in 0..2000 {
                let k = &keys[rng.below(keys.len() as u64) as usize];
                let ctx = format!("seed {seed} step {step}");
                match rng.below(10) {
                    0..=3 => assert_eq!(t.claim(k, now), m.claim(k, now), "{ctx}"),
                    4..=5 => {
                        let c = coords(step);
                        assert_eq!(
                            t.complete(k, c.clone(), now),
                            m.complete(k, c, now),
                            "{ctx}"
                        );
                    }
                    6 => assert_eq!(t.release(k), m.release(k), "{ctx}"),
                    7 => assert_eq!(t.sweep(now), m.sweep(now), "{ctx}"),
                    _ => now += rng.below(ttl as u64 / 2 + 2) as i64,
                }
                assert_eq!(t.len(), m.entries.len(), "{ctx}");
                assert!(t.len() <= cap, "{ctx}");
                for k in &keys {
                    let expect = m
                        .position(k)
                        .and_then(|i| {
                            let e = &m.entries[i];
                            (e.2 > now).then_some(e.1.as_ref()).flatten()
                        })
                        .cloned();
                    assert_eq!(t.lookup(k, now).cloned(), expect, "{ctx}");
                }
            }
        }
    }
}
