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

    /// Every completed entry, oldest first, with its expiry: what a snapshot of a
    /// replicated table keeps (a replicated table never holds in-flight claims: its claim
    /// and completion happen in one applied command).
    pub fn completed_by_age(&self) -> impl Iterator<Item = (&DedupKey, &Coordinates, i64)> + '_ {
        self.completed.iter().map(|(age, key)| {
            let Some(Entry {
                state: State::Completed(c),
                ..
            }) = self.entries.get(key)
            else {
                unreachable!("every key of the completed index is a completed entry")
            };
            (key, c, age.0)
        })
    }

    /// Puts back a completed entry a snapshot kept, expiring at `expires_ns`. Restore in
    /// [`DedupTable::completed_by_age`]'s order: entries of equal expiry keep their order,
    /// so the restored table evicts exactly as the original would. False (nothing changed)
    /// when the key is already held or the table is full.
    pub fn restore_completed(
        &mut self,
        key: DedupKey,
        coordinates: Coordinates,
        expires_ns: i64,
    ) -> bool {
        if self.entries.contains_key(&key) || self.entries.len() >= self.entries_max {
            return false;
        }
        let entry = Entry {
            state: State::Completed(coordinates),
            expires_ns,
            serial: self.next_serial,
        };
        self.next_serial += 1;
        self.completed.insert(entry.age(), key.clone());
        self.entries.insert(key, entry);
        self.check_invariants();
        true
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
mod tests;
