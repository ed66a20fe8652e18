//! Random operations with random time jumps, applied to the store and to a naive model
//! (a `BTreeMap` scanned linearly for everything), compared after every step. Each seed
//! also draws its own limits, so eviction by `max_keys` and by memory is exercised. A
//! failure names the seed and the step; rerun one with `CACHE_MODEL_SEED=<seed>`.

use super::T0_MS;
use crate::cache::{CacheError, CacheLimits, CacheStats, CacheStore, Entry, EntryPage};
use std::collections::BTreeMap;

const SEEDS: u64 = 400;
const STEPS_PER_SEED: usize = 1_500;

/// xorshift64*: no dependency, the same sequence on every platform.
struct Prng(u64);

impl Prng {
    fn new(seed: u64) -> Prng {
        // Any seed, including 0, becomes a non-zero state.
        Prng((seed ^ 0xD1B5_4A32_D192_ED03).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

// ---- the model ----------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ModelItem {
    value_json: String,
    created_at_ms: u64,
    expires_at_ms: Option<u64>,
    /// Write order, for the eviction rule.
    written: u64,
}

impl ModelItem {
    fn live(&self, now_ms: u64) -> bool {
        match self.expires_at_ms {
            Some(at_ms) => now_ms < at_ms,
            None => true,
        }
    }
}

struct Model {
    limits: CacheLimits,
    items: BTreeMap<String, ModelItem>,
    writes: u64,
    stats: CacheStats,
}

/// The error kinds, compared without the parser's wording.
fn kind(err: &CacheError) -> &'static str {
    match err {
        CacheError::KeyRequired => "key required",
        CacheError::KeyTooLong { .. } => "key too long",
        CacheError::ValueTooLarge { .. } => "value too large",
        CacheError::InvalidJson(_) => "invalid json",
        CacheError::NotAnInteger(_) => "not an integer",
        CacheError::Overflow { .. } => "overflow",
    }
}

fn pattern_matches(pattern: &str, key: &str) -> bool {
    if pattern.is_empty() || pattern == "*" {
        return true;
    }
    match (pattern.strip_prefix('*'), pattern.strip_suffix('*')) {
        (Some(rest), Some(_)) => key.contains(rest.strip_suffix('*').unwrap()),
        (None, Some(prefix)) => key.starts_with(prefix),
        (Some(suffix), None) => key.ends_with(suffix),
        (None, None) => key == pattern,
    }
}

fn bytes_of(key: &str, item: &ModelItem) -> u64 {
    (key.len() + item.value_json.len()) as u64
}

impl Model {
    fn new(limits: CacheLimits) -> Model {
        Model {
            limits,
            items: BTreeMap::new(),
            writes: 0,
            stats: CacheStats::default(),
        }
    }

    fn memory_bytes(&self) -> u64 {
        self.items.iter().map(|(k, item)| bytes_of(k, item)).sum()
    }

    fn drop_if_expired(&mut self, key: &str, now_ms: u64) {
        if self.items.get(key).is_some_and(|item| !item.live(now_ms)) {
            self.items.remove(key);
            self.stats.expired += 1;
        }
    }

    fn ttl_for_set(&self, ttl_ms: i64, now_ms: u64) -> Option<u64> {
        if ttl_ms > 0 {
            Some(now_ms.saturating_add(ttl_ms as u64))
        } else if ttl_ms == 0 && self.limits.default_ttl_ms > 0 {
            Some(now_ms.saturating_add(self.limits.default_ttl_ms))
        } else {
            None
        }
    }

    fn check_key(&self, key: &str) -> Result<(), CacheError> {
        if key.is_empty() {
            Err(CacheError::KeyRequired)
        } else if key.len() > self.limits.key_bytes_max {
            Err(CacheError::KeyTooLong {
                key_bytes: key.len(),
                key_bytes_max: self.limits.key_bytes_max,
            })
        } else {
            Ok(())
        }
    }

    /// Inserts a key that is not held, evicting by linear scan until it fits.
    fn put(&mut self, key: &str, item: ModelItem, now_ms: u64) {
        let bytes = bytes_of(key, &item);
        loop {
            let too_many =
                self.limits.max_keys > 0 && self.items.len() as u64 >= self.limits.max_keys;
            let too_big = self.limits.memory_bytes_max > 0
                && self.memory_bytes() + bytes > self.limits.memory_bytes_max;
            if !too_many && !too_big {
                break;
            }
            let with_ttl = self
                .items
                .iter()
                .filter_map(|(k, it)| it.expires_at_ms.map(|at| ((at, it.written), k)))
                .min();
            let victim = match with_ttl {
                Some((_, k)) => k.clone(),
                None => {
                    let oldest = self.items.iter().min_by_key(|(_, it)| it.written);
                    oldest.expect("a full store holds keys").0.clone()
                }
            };
            let gone = self.items.remove(&victim).unwrap();
            if gone.live(now_ms) {
                self.stats.evicted += 1;
            } else {
                self.stats.expired += 1;
            }
        }
        self.items.insert(key.to_string(), item);
    }

    fn set(&mut self, key: &str, value: &str, ttl_ms: i64, now_ms: u64) -> Result<(), CacheError> {
        self.check_key(key)?;
        let value = value.trim();
        if serde_json::from_str::<serde_json::Value>(value).is_err() {
            return Err(CacheError::InvalidJson(String::new()));
        }
        if value.len() > self.limits.value_bytes_max {
            return Err(CacheError::ValueTooLarge {
                value_bytes: value.len(),
                value_bytes_max: self.limits.value_bytes_max,
            });
        }
        let expires_at_ms = self.ttl_for_set(ttl_ms, now_ms);
        if let Some(old) = self.items.remove(key) {
            if !old.live(now_ms) {
                self.stats.expired += 1;
            }
        }
        self.writes += 1;
        let item = ModelItem {
            value_json: value.to_string(),
            created_at_ms: now_ms,
            expires_at_ms,
            written: self.writes,
        };
        self.put(key, item, now_ms);
        self.stats.sets += 1;
        Ok(())
    }

    fn get(&mut self, key: &str, now_ms: u64) -> Option<Entry> {
        self.drop_if_expired(key, now_ms);
        match self.items.get(key) {
            Some(item) => {
                self.stats.hits += 1;
                Some(model_entry(key, item, now_ms))
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    fn del(&mut self, key: &str, now_ms: u64) -> bool {
        self.drop_if_expired(key, now_ms);
        let removed = self.items.remove(key).is_some();
        self.stats.deletes += u64::from(removed);
        removed
    }

    fn exists(&self, key: &str, now_ms: u64) -> bool {
        self.items.get(key).is_some_and(|item| item.live(now_ms))
    }

    fn expire(&mut self, key: &str, ttl_ms: i64, now_ms: u64) -> bool {
        self.drop_if_expired(key, now_ms);
        match self.items.get_mut(key) {
            Some(item) => {
                item.expires_at_ms = (ttl_ms > 0).then(|| now_ms.saturating_add(ttl_ms as u64));
                true
            }
            None => false,
        }
    }

    fn incr(&mut self, key: &str, delta: i64, now_ms: u64) -> Result<i64, CacheError> {
        self.check_key(key)?;
        let delta = if delta == 0 { 1 } else { delta };
        self.drop_if_expired(key, now_ms);
        let item = match self.items.get(key) {
            Some(item) => {
                let current = match serde_json::from_str::<serde_json::Value>(&item.value_json) {
                    Ok(serde_json::Value::Number(n)) => n.as_i64(),
                    Ok(serde_json::Value::String(s)) => s.parse::<i64>().ok(),
                    _ => None,
                };
                let current =
                    current.ok_or_else(|| CacheError::NotAnInteger(item.value_json.clone()))?;
                let next = current.checked_add(delta).ok_or(CacheError::Overflow {
                    value: current,
                    delta,
                })?;
                ModelItem {
                    value_json: next.to_string(),
                    ..item.clone()
                }
            }
            None => {
                self.writes += 1;
                ModelItem {
                    value_json: delta.to_string(),
                    created_at_ms: now_ms,
                    expires_at_ms: self.ttl_for_set(0, now_ms),
                    written: self.writes,
                }
            }
        };
        let value = item.value_json.parse().unwrap();
        self.items.remove(key);
        self.put(key, item, now_ms);
        self.stats.sets += 1;
        Ok(value)
    }

    fn flush(&mut self, now_ms: u64) -> usize {
        let live = self.items.values().filter(|it| it.live(now_ms)).count();
        self.stats.expired += (self.items.len() - live) as u64;
        self.items.clear();
        live
    }

    fn keys(&self, pattern: &str, now_ms: u64) -> Vec<String> {
        self.items
            .iter()
            .filter(|(k, it)| it.live(now_ms) && pattern_matches(pattern, k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn entries(&self, pattern: &str, search: &str, limit: usize, now_ms: u64) -> EntryPage {
        let all: Vec<Entry> = self
            .items
            .iter()
            .filter(|(k, it)| it.live(now_ms) && pattern_matches(pattern, k))
            .filter(|(k, _)| k.to_lowercase().contains(&search.to_lowercase()))
            .map(|(k, it)| model_entry(k, it, now_ms))
            .collect();
        EntryPage {
            total: all.len(),
            entries: all.into_iter().take(limit).collect(),
        }
    }

    fn sweep(&mut self, now_ms: u64) -> usize {
        let before = self.items.len();
        self.items.retain(|_, it| it.live(now_ms));
        let removed = before - self.items.len();
        self.stats.expired += removed as u64;
        removed
    }

    fn next_expiry_ms(&self) -> Option<u64> {
        self.items.values().filter_map(|it| it.expires_at_ms).min()
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            key_count: self.items.len() as u64,
            memory_used_bytes: self.memory_bytes(),
            ..self.stats
        }
    }
}

fn model_entry(key: &str, item: &ModelItem, now_ms: u64) -> Entry {
    Entry {
        key: key.to_string(),
        value_json: item.value_json.clone(),
        created_at_ns: item.created_at_ms * 1_000_000,
        ttl_remaining_ms: match item.expires_at_ms {
            Some(at_ms) => (at_ms - now_ms).min(i64::MAX as u64) as i64,
            None => -1,
        },
    }
}

// ---- the operations -----------------------------------------------------------------

const KEYS: &[&str] = &[
    "a",
    "ab",
    "Abc",
    "b",
    "ba",
    "user:1",
    "user:2",
    "USER:3",
    "x*y",
    "ü",
    "",
    "k-0123456789abcd",
    "k-0123456789abcde",
];
const VALUES: &[&str] = &[
    "\"123\"",
    "123",
    "-5",
    "\"-7\"",
    "1.5",
    "true",
    "null",
    "{\"a\":1}",
    "[1, 2]",
    "\"abc\"",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775806",
    "  42 ",
    "\"0123456789012345678901234567890123456789012345678901234567890\"",
    "\"01234567890123456789012345678901234567890123456789012345678901\"",
    "{",
    "nope",
    "",
];
const TTLS_MS: &[i64] = &[-1, 0, 0, 1, 3, 20, 150, 2_000, i64::MAX, i64::MIN];
const DELTAS: &[i64] = &[0, 1, -1, 7, i64::MAX, i64::MIN, -9_223_372_036_854_775_807];
const PATTERNS: &[&str] = &[
    "", "*", "**", "a*", "*b", "*b*", "user:*", "*:*", "USER*", "ab", "x*y", "x*", "*y", "ü*",
];
const SEARCHES: &[&str] = &["", "a", "AB", "user", "ü", "Ü", "zz"];

#[derive(Debug)]
enum Op {
    Set(&'static str, &'static str, i64),
    Get(&'static str),
    Del(&'static str),
    Exists(&'static str),
    Expire(&'static str, i64),
    Incr(&'static str, i64),
    Flush,
    Keys(&'static str),
    Entries(&'static str, &'static str, usize),
    Sweep,
}

fn random_op(rng: &mut Prng) -> Op {
    let key = rng.pick(KEYS);
    match rng.below(100) {
        0..=29 => Op::Set(key, rng.pick(VALUES), rng.pick(TTLS_MS)),
        30..=44 => Op::Get(key),
        45..=51 => Op::Del(key),
        52..=57 => Op::Exists(key),
        58..=65 => Op::Expire(key, rng.pick(TTLS_MS)),
        66..=80 => Op::Incr(key, rng.pick(DELTAS)),
        81 => Op::Flush,
        82..=86 => Op::Keys(rng.pick(PATTERNS)),
        87..=92 => Op::Entries(
            rng.pick(PATTERNS),
            rng.pick(SEARCHES),
            rng.pick(&[0, 1, 3, 100]),
        ),
        _ => Op::Sweep,
    }
}

fn random_limits(rng: &mut Prng) -> CacheLimits {
    CacheLimits {
        max_keys: rng.pick(&[0, 0, 1, 3, 6]),
        default_ttl_ms: rng.pick(&[0, 0, 100]),
        key_bytes_max: 16,
        value_bytes_max: 64,
        memory_bytes_max: rng.pick(&[0, 0, 80, 150]),
    }
}

fn time_jump_ms(rng: &mut Prng) -> u64 {
    match rng.below(10) {
        0..=3 => 0,
        4..=6 => rng.below(5) as u64,
        7 | 8 => rng.below(200) as u64,
        _ => rng.below(5_000) as u64,
    }
}

fn run_seed(seed: u64) {
    let mut rng = Prng::new(seed);
    let limits = random_limits(&mut rng);
    let mut store = CacheStore::new(limits);
    let mut model = Model::new(limits);
    let mut now_ms = T0_MS;
    for step in 0..STEPS_PER_SEED {
        now_ms += time_jump_ms(&mut rng);
        let op = random_op(&mut rng);
        let at = || format!("seed {seed} step {step} now {now_ms} {op:?} limits {limits:?}");
        match op {
            Op::Set(key, value, ttl_ms) => {
                let got = store.set(key, value, ttl_ms, now_ms).map_err(|e| kind(&e));
                let want = model.set(key, value, ttl_ms, now_ms).map_err(|e| kind(&e));
                assert_eq!(got, want, "{}", at());
            }
            Op::Get(key) => assert_eq!(store.get(key, now_ms), model.get(key, now_ms), "{}", at()),
            Op::Del(key) => assert_eq!(store.del(key, now_ms), model.del(key, now_ms), "{}", at()),
            Op::Exists(key) => {
                assert_eq!(
                    store.exists(key, now_ms),
                    model.exists(key, now_ms),
                    "{}",
                    at()
                )
            }
            Op::Expire(key, ttl_ms) => assert_eq!(
                store.expire(key, ttl_ms, now_ms),
                model.expire(key, ttl_ms, now_ms),
                "{}",
                at()
            ),
            Op::Incr(key, delta) => {
                let got = store.incr(key, delta, now_ms);
                let want = model.incr(key, delta, now_ms);
                match (&got, &want) {
                    (Err(g), Err(w)) => assert_eq!(kind(g), kind(w), "{}", at()),
                    _ => assert_eq!(got, want, "{}", at()),
                }
            }
            Op::Flush => assert_eq!(store.flush(now_ms), model.flush(now_ms), "{}", at()),
            Op::Keys(pattern) => {
                assert_eq!(
                    store.keys(pattern, now_ms),
                    model.keys(pattern, now_ms),
                    "{}",
                    at()
                )
            }
            Op::Entries(pattern, search, limit) => assert_eq!(
                store.entries(pattern, search, limit, now_ms),
                model.entries(pattern, search, limit, now_ms),
                "{}",
                at()
            ),
            Op::Sweep => assert_eq!(store.sweep_expired(now_ms), model.sweep(now_ms), "{}", at()),
        }
        assert_eq!(store.stats(), model.stats(), "{}", at());
        assert_eq!(store.next_expiry_ms(), model.next_expiry_ms(), "{}", at());
        if limits.max_keys > 0 {
            assert!(store.len() as u64 <= limits.max_keys, "{}", at());
        }
        if limits.memory_bytes_max > 0 {
            assert!(
                store.stats().memory_used_bytes <= limits.memory_bytes_max,
                "{}",
                at()
            );
        }
    }
    // Everything still held reads back the same.
    assert_eq!(
        store.entries("*", "", usize::MAX, now_ms),
        model.entries("*", "", usize::MAX, now_ms),
        "seed {seed} at the end"
    );
}

fn seeds() -> Vec<u64> {
    match std::env::var("CACHE_MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("CACHE_MODEL_SEED is a u64")],
        Err(_) => (0..SEEDS).collect(),
    }
}

#[test]
fn store_agrees_with_a_naive_model_over_random_operations_and_time() {
    for seed in seeds() {
        run_seed(seed);
    }
}

/// Without limits (which are per shard), keys spread over shards by the server's ownership
/// function give, once merged, the same answers as one store holding every key.
#[test]
fn sharded_stores_merge_to_the_answers_of_one_store() {
    const SHARDS: usize = 4;
    for seed in seeds() {
        let mut rng = Prng::new(seed ^ 0xA5A5);
        let mut whole = CacheStore::new(CacheLimits::default());
        let mut shards: Vec<CacheStore> = (0..SHARDS)
            .map(|_| CacheStore::new(CacheLimits::default()))
            .collect();
        let mut now_ms = T0_MS;
        for step in 0..300 {
            now_ms += time_jump_ms(&mut rng);
            let op = random_op(&mut rng);
            let at = || format!("seed {seed} step {step} {op:?}");
            match op {
                Op::Set(key, value, ttl_ms) => {
                    let owner = boltq_shards::owner_of_queue(key, SHARDS);
                    let got = shards[owner].set(key, value, ttl_ms, now_ms);
                    assert_eq!(got, whole.set(key, value, ttl_ms, now_ms), "{}", at());
                }
                Op::Incr(key, delta) => {
                    let owner = boltq_shards::owner_of_queue(key, SHARDS);
                    let got = shards[owner].incr(key, delta, now_ms);
                    assert_eq!(got, whole.incr(key, delta, now_ms), "{}", at());
                }
                Op::Flush => {
                    let removed: usize = shards.iter_mut().map(|s| s.flush(now_ms)).sum();
                    assert_eq!(removed, whole.flush(now_ms), "{}", at());
                }
                Op::Sweep => {
                    let removed: usize = shards.iter_mut().map(|s| s.sweep_expired(now_ms)).sum();
                    assert_eq!(removed, whole.sweep_expired(now_ms), "{}", at());
                }
                Op::Keys(pattern) => {
                    let mut merged: Vec<String> = shards
                        .iter()
                        .flat_map(|s| s.keys(pattern, now_ms))
                        .collect();
                    merged.sort();
                    assert_eq!(merged, whole.keys(pattern, now_ms), "{}", at());
                }
                Op::Entries(pattern, search, limit) => {
                    let pages = shards
                        .iter()
                        .map(|s| s.entries(pattern, search, limit, now_ms));
                    assert_eq!(
                        EntryPage::merge(pages, limit),
                        whole.entries(pattern, search, limit, now_ms),
                        "{}",
                        at()
                    );
                }
                _ => {}
            }
            let mut merged = CacheStats::default();
            for shard in &shards {
                merged.merge(&shard.stats());
            }
            assert_eq!(merged, whole.stats(), "{}", at());
        }
    }
}
