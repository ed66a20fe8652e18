//! [`CacheStore`]: one shard's keys, their TTLs, eviction and statistics.

use super::limits::CacheLimits;
use super::pattern::Pattern;
use super::value::{integer_of, json_value_text, v1_text};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

/// How many entries `/cache/entries` returned in v1; the HTTP layer passes it as `limit`.
pub const ENTRIES_LIMIT_V1: usize = 100;
/// Most expired keys one [`CacheStore::sweep_expired`] removes, so that a mass expiry
/// cannot hold the shard for long. When a sweep stops here, `next_expiry_ms() <= now_ms`
/// and the server sweeps again after serving other work.
pub const SWEEP_BATCH_MAX: usize = 4096;

/// A live key as read: what `/cache/get` and `/cache/entries` report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    /// The JSON text stored by `set` (or the integer written by `incr`), verbatim.
    pub value_json: String,
    /// When the value was last `set` (or the key created by `incr`), Unix ns.
    pub created_at_ns: u64,
    /// Time left before expiry, > 0; -1 = no expiry (v1's `ttl`).
    pub ttl_remaining_ms: i64,
}

impl Entry {
    /// The `size` of `/cache/entries`: bytes of the value as v1 held it (a string without
    /// its quotes).
    pub fn size_bytes(&self) -> usize {
        v1_text(&self.value_json).len()
    }
}

/// One shard's answer to `entries`, or the merge of several.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryPage {
    /// The first `limit` matches in key order.
    pub entries: Vec<Entry>,
    /// How many keys matched, before the `limit` cut (v1's `total`).
    pub total: usize,
}

impl EntryPage {
    /// Merges the pages of several shards into the page one store holding all their keys
    /// would have returned: each shard's page holds its first `limit` keys, so the first
    /// `limit` of their union are all among them.
    pub fn merge(pages: impl IntoIterator<Item = EntryPage>, limit: usize) -> EntryPage {
        let mut merged = EntryPage::default();
        for page in pages {
            merged.total = merged.total.saturating_add(page.total);
            merged.entries.extend(page.entries);
        }
        merged.entries.sort_by(|a, b| a.key.cmp(&b.key));
        merged.entries.truncate(limit);
        merged
    }
}

/// `/cache/stats` of one store, or the sum over shards ([`CacheStats::merge`]). Serializes
/// with v1's key names plus `evicted`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Keys held, including expired ones the sweep has not removed yet (as v1).
    pub key_count: u64,
    /// Σ(key bytes + value bytes) over the keys counted in `key_count` (v1's definition).
    #[serde(rename = "memory_used")]
    pub memory_used_bytes: u64,
    /// `get` that found a live key.
    pub hits: u64,
    /// `get` that found none.
    pub misses: u64,
    /// Successful `set` and `incr`.
    pub sets: u64,
    /// `del` that removed a live key.
    pub deletes: u64,
    /// Keys removed because their TTL had passed (by the sweep or when touched).
    pub expired: u64,
    /// Live keys removed to respect `max_keys` or `memory_bytes_max`.
    pub evicted: u64,
}

impl CacheStats {
    pub fn merge(&mut self, other: &CacheStats) {
        self.key_count = self.key_count.saturating_add(other.key_count);
        self.memory_used_bytes = self
            .memory_used_bytes
            .saturating_add(other.memory_used_bytes);
        self.hits = self.hits.saturating_add(other.hits);
        self.misses = self.misses.saturating_add(other.misses);
        self.sets = self.sets.saturating_add(other.sets);
        self.deletes = self.deletes.saturating_add(other.deletes);
        self.expired = self.expired.saturating_add(other.expired);
        self.evicted = self.evicted.saturating_add(other.evicted);
    }
}

/// Why a `set` or `incr` was refused; the store is unchanged. All are client errors (400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheError {
    KeyRequired,
    KeyTooLong {
        key_bytes: usize,
        key_bytes_max: usize,
    },
    ValueTooLarge {
        value_bytes: usize,
        value_bytes_max: usize,
    },
    /// The value text is not exactly one JSON value; carries the parser's message.
    InvalidJson(String),
    /// `incr` on a value that is not an integer; carries the value as v1 printed it (a
    /// string without its quotes).
    NotAnInteger(String),
    /// `incr` whose result does not fit in i64.
    Overflow {
        value: i64,
        delta: i64,
    },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::KeyRequired => write!(f, "key is required"),
            CacheError::KeyTooLong {
                key_bytes,
                key_bytes_max,
            } => write!(
                f,
                "key is {key_bytes} bytes, over the limit of {key_bytes_max}"
            ),
            CacheError::ValueTooLarge {
                value_bytes,
                value_bytes_max,
            } => write!(
                f,
                "value is {value_bytes} bytes of JSON, over the limit of {value_bytes_max}"
            ),
            CacheError::InvalidJson(why) => write!(f, "value is not valid JSON: {why}"),
            CacheError::NotAnInteger(value) => write!(f, "value is not an integer: {value}"),
            CacheError::Overflow { value, delta } => {
                write!(
                    f,
                    "increment overflows: {value} + {delta} is out of the 64-bit range"
                )
            }
        }
    }
}

impl std::error::Error for CacheError {}

/// One stored key.
#[derive(Debug)]
struct Item {
    value_json: Box<str>,
    created_at_ms: u64,
    /// Expired when `now_ms >= expires_at_ms`.
    expires_at_ms: Option<u64>,
    /// Write order: set anew by every `set`, kept by `incr` and `expire`. Unique, so it
    /// names the item in the eviction indexes.
    seq: u64,
}

impl Item {
    fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|at_ms| now_ms < at_ms)
    }

    fn bytes(key: &str, value_json: &str) -> u64 {
        (key.len() + value_json.len()) as u64
    }
}

/// The keys of one shard.
///
/// # Eviction
///
/// When a `set` or `incr` of a **new** key finds the store at `max_keys` (or the entry
/// would take `memory_used` over `memory_bytes_max`), keys are evicted one at a time until
/// it fits, choosing:
///
/// 1. among keys with a TTL, the one **expiring soonest** (ties: the older write);
/// 2. if no key has a TTL, the **oldest write** (the least recent `set`; `incr` and
///    `expire` do not renew it).
///
/// Why: a key with a TTL was declared disposable by its writer, and the one expiring
/// soonest loses the least remaining lifetime; expired keys not yet swept come first of
/// all, so they are reclaimed before any live key is touched. A key without TTL was meant
/// to stay, so it goes only when nothing else can, oldest first (FIFO). The choice
/// depends only on the operations applied, never on hashing or memory layout, so every
/// replica and every test run evicts the same key (v1 evicted whichever key Go's map
/// iteration produced first). It costs O(log n): two ordered indexes, no scan. LRU would
/// make every `get` a write to the indexes, for a cache that is mostly an admin KV store.
#[derive(Debug)]
pub struct CacheStore {
    limits: CacheLimits,
    items: BTreeMap<Box<str>, Item>,
    /// Keys by write order: the "oldest write" choice, and the key of an expiry entry.
    by_seq: BTreeMap<u64, Box<str>>,
    /// `(expires_at_ms, seq)` of every item with a TTL: the sweep and the "expiring
    /// soonest" choice.
    by_expiry: BTreeSet<(u64, u64)>,
    next_seq: u64,
    memory_used_bytes: u64,
    stats: CacheStats,
}

impl CacheStore {
    /// # Panics
    ///
    /// If `limits` fail [`CacheLimits::check`]; they come from code and validated config.
    pub fn new(limits: CacheLimits) -> CacheStore {
        if let Err(why) = limits.check() {
            panic!("invalid cache limits: {why}");
        }
        CacheStore {
            limits,
            items: BTreeMap::new(),
            by_seq: BTreeMap::new(),
            by_expiry: BTreeSet::new(),
            next_seq: 0,
            memory_used_bytes: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn limits(&self) -> &CacheLimits {
        &self.limits
    }

    /// Keys held, including expired ones not yet swept.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The live value of `key`. Counts a hit or a miss; removes the key if it has expired.
    pub fn get(&mut self, key: &str, now_ms: u64) -> Option<Entry> {
        self.remove_if_expired(key, now_ms);
        match self.items.get_key_value(key) {
            Some((key, item)) => {
                self.stats.hits += 1;
                Some(entry_of(key, item, now_ms))
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Stores `value_json` (one JSON value; its text is kept verbatim) under `key`,
    /// replacing any value and TTL. `ttl_ms`: > 0 expires after that long, 0 takes
    /// `default_ttl_ms` (none when that is 0), < 0 never expires. May evict (see
    /// [`CacheStore`]).
    pub fn set(
        &mut self,
        key: &str,
        value_json: &str,
        ttl_ms: i64,
        now_ms: u64,
    ) -> Result<(), CacheError> {
        self.check_key(key)?;
        let value_json = json_value_text(value_json).map_err(CacheError::InvalidJson)?;
        if value_json.len() > self.limits.value_bytes_max {
            return Err(CacheError::ValueTooLarge {
                value_bytes: value_json.len(),
                value_bytes_max: self.limits.value_bytes_max,
            });
        }
        let expires_at_ms = self.expiry_for_set(ttl_ms, now_ms);
        // A previous value, live or expired, is replaced; an expired one counts as expired.
        if let Some((_, old)) = self.remove(key) {
            if !old.is_live(now_ms) {
                self.stats.expired += 1;
            }
        }
        let seq = self.take_seq();
        self.insert(
            key.into(),
            Item {
                value_json: value_json.into(),
                created_at_ms: now_ms,
                expires_at_ms,
                seq,
            },
            now_ms,
        );
        self.stats.sets += 1;
        Ok(())
    }

    /// Removes `key`; true if it was live. Counts a delete only then.
    pub fn del(&mut self, key: &str, now_ms: u64) -> bool {
        self.remove_if_expired(key, now_ms);
        let removed = self.remove(key).is_some();
        if removed {
            self.stats.deletes += 1;
        }
        removed
    }

    pub fn exists(&self, key: &str, now_ms: u64) -> bool {
        self.items.get(key).is_some_and(|item| item.is_live(now_ms))
    }

    /// Sets the TTL of a live key: `ttl_ms > 0` expires it `ttl_ms` from now, `<= 0` removes
    /// its expiry. False (and nothing changes) if the key is not live.
    pub fn expire(&mut self, key: &str, ttl_ms: i64, now_ms: u64) -> bool {
        self.remove_if_expired(key, now_ms);
        let Some(item) = self.items.get_mut(key) else {
            return false;
        };
        let expires_at_ms = u64::try_from(ttl_ms)
            .ok()
            .filter(|&ttl_ms| ttl_ms > 0)
            .map(|ttl_ms| now_ms.saturating_add(ttl_ms));
        if let Some(old_ms) = item.expires_at_ms {
            self.by_expiry.remove(&(old_ms, item.seq));
        }
        if let Some(new_ms) = expires_at_ms {
            self.by_expiry.insert((new_ms, item.seq));
        }
        item.expires_at_ms = expires_at_ms;
        true
    }

    /// Adds `delta` (0 counts as 1, as v1) to the integer at `key` and returns the result.
    /// A missing key starts at 0, with `default_ttl_ms`; an existing one keeps its expiry
    /// instant and its creation time. Errors leave the store unchanged. Creating a key may
    /// evict (see [`CacheStore`]).
    pub fn incr(&mut self, key: &str, delta: i64, now_ms: u64) -> Result<i64, CacheError> {
        self.check_key(key)?;
        let delta = if delta == 0 { 1 } else { delta };
        self.remove_if_expired(key, now_ms);
        let (value, created_at_ms, expires_at_ms, seq) = match self.items.get(key) {
            Some(item) => {
                let current = integer_of(&item.value_json).ok_or_else(|| {
                    CacheError::NotAnInteger(v1_text(&item.value_json).into_owned())
                })?;
                let value = current.checked_add(delta).ok_or(CacheError::Overflow {
                    value: current,
                    delta,
                })?;
                (value, item.created_at_ms, item.expires_at_ms, item.seq)
            }
            None => (
                delta,
                now_ms,
                self.expiry_for_set(0, now_ms),
                self.take_seq(),
            ),
        };
        // Re-inserting (rather than editing in place) lets `insert` account the new length
        // and evict if it no longer fits; the key itself is out of the store meanwhile, so
        // it is never its own victim.
        let key: Box<str> = match self.remove(key) {
            Some((key, _)) => key,
            None => key.into(),
        };
        let item = Item {
            value_json: value.to_string().into(),
            created_at_ms,
            expires_at_ms,
            seq,
        };
        self.insert(key, item, now_ms);
        self.stats.sets += 1;
        Ok(value)
    }

    /// Removes every key; returns how many were live (expired ones count as expired).
    pub fn flush(&mut self, now_ms: u64) -> usize {
        let live = self
            .items
            .values()
            .filter(|item| item.is_live(now_ms))
            .count();
        self.stats.expired += (self.items.len() - live) as u64;
        self.items.clear();
        self.by_seq.clear();
        self.by_expiry.clear();
        self.memory_used_bytes = 0;
        live
    }

    /// Live keys matching `pattern`, in key order.
    pub fn keys(&self, pattern: &str, now_ms: u64) -> Vec<String> {
        let pattern = Pattern::parse(pattern);
        self.matching(&pattern, now_ms)
            .map(|(key, _)| key.to_string())
            .collect()
    }

    /// Live keys matching `pattern` whose key contains `search` ignoring case (`""` = no
    /// filter): the first `limit` in key order, and how many matched in all.
    ///
    /// `search` filters keys, like the pattern it refines (spec §4.6: "a case-insensitive
    /// substring filter applied after the pattern"). Does not move `hits`/`misses`.
    pub fn entries(&self, pattern: &str, search: &str, limit: usize, now_ms: u64) -> EntryPage {
        let pattern = Pattern::parse(pattern);
        let search = search.to_lowercase();
        let mut page = EntryPage::default();
        let found = self
            .matching(&pattern, now_ms)
            .filter(|(key, _)| search.is_empty() || key.to_lowercase().contains(&search));
        for (key, item) in found {
            if page.entries.len() < limit {
                page.entries.push(entry_of(key, item, now_ms));
            }
            page.total += 1;
        }
        page
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            key_count: self.items.len() as u64,
            memory_used_bytes: self.memory_used_bytes,
            ..self.stats
        }
    }

    /// Removes keys whose TTL has passed, soonest first, at most [`SWEEP_BATCH_MAX`];
    /// returns how many.
    pub fn sweep_expired(&mut self, now_ms: u64) -> usize {
        let mut removed = 0;
        while removed < SWEEP_BATCH_MAX {
            let Some(&(at_ms, seq)) = self.by_expiry.first() else {
                break;
            };
            if at_ms > now_ms {
                break;
            }
            let key = self
                .by_seq
                .get(&seq)
                .expect("expiry index names a held key")
                .clone();
            self.remove(&key);
            self.stats.expired += 1;
            removed += 1;
        }
        removed
    }

    /// The earliest expiry instant among held keys (Unix ms), for the server's timer; at or
    /// before `now_ms` after a sweep that stopped at [`SWEEP_BATCH_MAX`].
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.by_expiry.first().map(|&(at_ms, _)| at_ms)
    }

    fn check_key(&self, key: &str) -> Result<(), CacheError> {
        if key.is_empty() {
            return Err(CacheError::KeyRequired);
        }
        if key.len() > self.limits.key_bytes_max {
            return Err(CacheError::KeyTooLong {
                key_bytes: key.len(),
                key_bytes_max: self.limits.key_bytes_max,
            });
        }
        Ok(())
    }

    fn expiry_for_set(&self, ttl_ms: i64, now_ms: u64) -> Option<u64> {
        let ttl_ms = match ttl_ms {
            0 if self.limits.default_ttl_ms > 0 => self.limits.default_ttl_ms,
            ..=0 => return None,
            positive => positive.unsigned_abs(),
        };
        Some(now_ms.saturating_add(ttl_ms))
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Removes `key` if it is held but expired, counting it as expired.
    fn remove_if_expired(&mut self, key: &str, now_ms: u64) {
        if self
            .items
            .get(key)
            .is_some_and(|item| !item.is_live(now_ms))
        {
            self.remove(key);
            self.stats.expired += 1;
        }
    }

    /// Takes `key` out of the map and both indexes.
    fn remove(&mut self, key: &str) -> Option<(Box<str>, Item)> {
        let (key, item) = self.items.remove_entry(key)?;
        self.by_seq.remove(&item.seq);
        if let Some(at_ms) = item.expires_at_ms {
            self.by_expiry.remove(&(at_ms, item.seq));
        }
        self.memory_used_bytes -= Item::bytes(&key, &item.value_json);
        Some((key, item))
    }

    /// Puts an item whose key is not held, evicting first until it fits the limits.
    fn insert(&mut self, key: Box<str>, item: Item, now_ms: u64) {
        debug_assert!(!self.items.contains_key(&key));
        let bytes = Item::bytes(&key, &item.value_json);
        while self.over_limits_with(bytes) {
            self.evict_one(now_ms);
        }
        self.by_seq.insert(item.seq, key.clone());
        if let Some(at_ms) = item.expires_at_ms {
            self.by_expiry.insert((at_ms, item.seq));
        }
        self.memory_used_bytes += bytes;
        self.items.insert(key, item);
    }

    /// Whether one more entry of `bytes` would break `max_keys` or `memory_bytes_max`.
    /// Always false on an empty store: the limits guarantee one entry fits.
    fn over_limits_with(&self, bytes: u64) -> bool {
        let max_keys = self.limits.max_keys;
        let memory_bytes_max = self.limits.memory_bytes_max;
        (max_keys > 0 && self.items.len() as u64 >= max_keys)
            || (memory_bytes_max > 0 && self.memory_used_bytes + bytes > memory_bytes_max)
    }

    /// Removes the victim of the eviction policy (see [`CacheStore`]).
    fn evict_one(&mut self, now_ms: u64) {
        let seq = match self.by_expiry.first() {
            Some(&(_, seq)) => seq,
            None => *self
                .by_seq
                .keys()
                .next()
                .expect("eviction is only asked of a non-empty store"),
        };
        let key = self.by_seq[&seq].clone();
        let (_, item) = self.remove(&key).expect("indexed key is held");
        if item.is_live(now_ms) {
            self.stats.evicted += 1;
        } else {
            self.stats.expired += 1;
        }
    }

    /// Live items matching `pattern`, in key order. A prefix walks only its key range and
    /// an exact pattern is one lookup; the other patterns scan.
    fn matching<'a>(
        &'a self,
        pattern: &'a Pattern,
        now_ms: u64,
    ) -> Box<dyn Iterator<Item = (&'a str, &'a Item)> + 'a> {
        let candidates: Box<dyn Iterator<Item = (&'a Box<str>, &'a Item)> + 'a> = match pattern {
            Pattern::Exact(exact) => Box::new(self.items.get_key_value(exact.as_str()).into_iter()),
            Pattern::Prefix(prefix) => Box::new(
                self.items
                    .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                    .take_while(move |(key, _)| key.starts_with(prefix.as_str())),
            ),
            _ => Box::new(
                self.items
                    .iter()
                    .filter(move |(key, _)| pattern.matches(key)),
            ),
        };
        Box::new(
            candidates
                .filter(move |(_, item)| item.is_live(now_ms))
                .map(|(key, item)| (&**key, item)),
        )
    }
}

fn entry_of(key: &str, item: &Item, now_ms: u64) -> Entry {
    let ttl_remaining_ms = match item.expires_at_ms {
        None => -1,
        Some(at_ms) => i64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(i64::MAX),
    };
    Entry {
        key: key.to_string(),
        value_json: item.value_json.to_string(),
        created_at_ns: item.created_at_ms.saturating_mul(1_000_000),
        ttl_remaining_ms,
    }
}
