//! The KV cache behind the `/cache/*` admin routes (spec/queue-plane.md §4.6): a sans-IO
//! store holding the keys of **one shard** (design.md §2–§3).
//!
//! [`CacheStore`] is a plain struct. Every method that depends on time takes `now_ms`, the
//! current wall-clock time in **milliseconds since the Unix epoch**: wall clock rather than
//! a monotonic one because `created_at` is reported to clients as a Unix time (in ns). A
//! clock that steps back only delays expiry; nothing breaks. No clocks, sockets, files or
//! runtime inside; the shard task around it owns the timer and the bytes.
//!
//! # Sharding
//!
//! The server routes a key to its owner with `boltq_shards::owner_of_queue(key, shards)`
//! (slot of the key, then slot → shard). Single-key operations go to the owner only.
//! Operations over all keys ask every shard and merge; every per-shard result is built to
//! merge without re-reading a store:
//!
//! | Operation | Per shard | Merge |
//! |---|---|---|
//! | [`CacheStore::keys`] | `Vec<String>` sorted by key | concatenate (sort if wanted) |
//! | [`CacheStore::entries`] | [`EntryPage`]: first `limit` matches by key + match count | [`EntryPage::merge`] |
//! | [`CacheStore::flush`] | removed count | sum |
//! | [`CacheStore::stats`] | [`CacheStats`] | [`CacheStats::merge`] |
//!
//! `max_keys` and `memory_bytes_max` are split into per-shard shares by
//! [`CacheLimits::for_shard`].
//!
//! # Where this differs from v1, and why
//!
//! - **Values are JSON stored verbatim** (spec §12 item 16): `set` takes the JSON text of
//!   the value, checks that it is one JSON value, and `get` returns the same text, so the
//!   string `"123"` stays a string (v1 stored strings unquoted and read back anything that
//!   parsed as JSON as JSON: `"123"` came back as the number `123`). A missing value has no
//!   JSON text; the HTTP layer should store `null`.
//! - **`max_keys` also bounds `incr`** (v1 only checked it on `set`), and eviction is
//!   **deterministic** (v1 evicted an arbitrary key): see [`CacheStore`] for the policy.
//! - **Bounded by default**: keys and values have byte limits ([`CacheLimits`]), and
//!   `max_keys` (default 1,000,000) and `memory_bytes_max` (default 256 MiB) evict as
//!   described in [`CacheStore`] (v1: unlimited, no memory limit). 0 turns either off.
//! - **`incr`** never wraps: an overflow is an error (v1 wrapped). It accepts a stored JSON
//!   integer or a JSON string holding a decimal integer (v1 stored strings unquoted, so a
//!   counter set as `"5"` could be incremented; this keeps that working), and stores the
//!   result as a JSON number. A key it creates gets `default_ttl_ms` like a `set` without a
//!   TTL, so counters do not escape the default expiry.
//! - **Expired keys are invisible at once** to every operation, including `keys`,
//!   `entries`, `flush`'s count and `exists` (v1 could list them until the sweep).
//! - **`entries` does not move the hit/miss counters** (v1 counted every listed entry as a
//!   read, so a dashboard browsing the cache inflated the hit rate).
//! - The sweep is batched ([`SWEEP_BATCH_MAX`]) and driven by [`CacheStore::next_expiry_ms`],
//!   so a shard never stalls on one huge sweep and never polls when nothing expires.

mod limits;
mod pattern;
pub mod service;
mod store;
mod value;

#[cfg(test)]
mod tests;

pub use limits::{
    shard_share, CacheLimits, ENTRY_BYTES_MAX_DEFAULT, INCR_VALUE_BYTES_MAX, KEY_BYTES_MAX_DEFAULT,
    VALUE_BYTES_MAX_DEFAULT,
};
pub use pattern::Pattern;
pub use store::{
    CacheError, CacheStats, CacheStore, Entry, EntryPage, ENTRIES_LIMIT_V1, SWEEP_BATCH_MAX,
};
