//! The limits of one shard's store, and how the configured `max_keys` and
//! `memory_bytes_max` are shared out.

use crate::config::CacheConfig;
use boltq_shards::ownership::{owner_of_slot, SLOTS};

/// Default longest key. Keys travel in URLs (`/cache/get?key=`), where a few KiB is
/// already more than many proxies accept.
pub const KEY_BYTES_MAX_DEFAULT: usize = 1024;
/// Default largest value (JSON text). The HTTP body limit is 1 MiB, so this never refuses
/// a value the HTTP layer could have received.
pub const VALUE_BYTES_MAX_DEFAULT: usize = 1 << 20;
/// The largest entry under the default limits: what a memory cap must at least allow.
pub const ENTRY_BYTES_MAX_DEFAULT: u64 = (KEY_BYTES_MAX_DEFAULT + VALUE_BYTES_MAX_DEFAULT) as u64;
// The config layer, below this one, validates `cache.memory_bytes_max` against its copy.
const _: () = assert!(ENTRY_BYTES_MAX_DEFAULT == crate::config::CACHE_ENTRY_BYTES_MAX);
/// Longest JSON text `incr` can store: `-9223372036854775808`. `value_bytes_max` must be at
/// least this, so an `incr` never fails for lack of room for its own result.
pub const INCR_VALUE_BYTES_MAX: usize = 20;

/// What one [`CacheStore`](super::CacheStore) may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most keys this store holds; 0 = unlimited. A `set` or `incr` of a new key at the
    /// limit evicts one key first.
    pub max_keys: u64,
    /// TTL given to a `set` with TTL 0 and to a key created by `incr`; 0 = none.
    pub default_ttl_ms: u64,
    /// Longest key; longer is refused.
    pub key_bytes_max: usize,
    /// Largest value JSON text; larger is refused.
    pub value_bytes_max: usize,
    /// Most Σ(key bytes + value bytes) (the `memory_used` statistic) this store holds;
    /// 0 = unlimited. Exceeding it evicts like `max_keys`. When set, it must be at least
    /// `key_bytes_max + value_bytes_max`, so that one entry of the largest size fits.
    pub memory_bytes_max: u64,
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits {
            max_keys: 0,
            default_ttl_ms: 0,
            key_bytes_max: KEY_BYTES_MAX_DEFAULT,
            value_bytes_max: VALUE_BYTES_MAX_DEFAULT,
            memory_bytes_max: 0,
        }
    }
}

impl CacheLimits {
    /// The limits of shard `shard` of `shard_count`: `cfg.max_keys` and
    /// `cfg.memory_bytes_max` are split in proportion to the slots each shard owns (see
    /// [`shard_share`]). A memory share never goes below one entry of the largest size, so
    /// every shard can hold any value the API accepts.
    ///
    /// The limits are per shard, not global: a shard whose keys hash unevenly may evict
    /// while another has room. An exact global limit would need a cross-shard round trip on
    /// every insert; with many keys the slot hash spreads them evenly enough.
    pub fn for_shard(cfg: &CacheConfig, shard: usize, shard_count: usize) -> CacheLimits {
        CacheLimits {
            max_keys: shard_share(cfg.max_keys, shard, shard_count),
            memory_bytes_max: match shard_share(cfg.memory_bytes_max, shard, shard_count) {
                0 => 0,
                share => share.max(ENTRY_BYTES_MAX_DEFAULT),
            },
            default_ttl_ms: cfg.default_ttl_ms,
            ..CacheLimits::default()
        }
    }

    /// Why these limits are unusable, if they are.
    pub fn check(&self) -> Result<(), String> {
        if self.key_bytes_max == 0 {
            return Err("key_bytes_max must be at least 1".to_string());
        }
        if self.value_bytes_max < INCR_VALUE_BYTES_MAX {
            return Err(format!(
                "value_bytes_max must be at least {INCR_VALUE_BYTES_MAX} (an incr result)"
            ));
        }
        let entry_bytes_max =
            (self.key_bytes_max as u64).saturating_add(self.value_bytes_max as u64);
        if self.memory_bytes_max != 0 && self.memory_bytes_max < entry_bytes_max {
            return Err(format!(
                "memory_bytes_max ({}) must be 0 or at least key_bytes_max + value_bytes_max ({entry_bytes_max})",
                self.memory_bytes_max
            ));
        }
        Ok(())
    }
}

/// Shard `shard`'s part of a node-wide limit `total` (0 = unlimited stays 0), in proportion
/// to the slots it owns (slot → shard is `slot mod shard_count`, so shards can own one slot
/// more or fewer); the shares add up to exactly `total`. A shard whose share rounds to 0
/// still gets 1, because 0 means unlimited; then the total can exceed `total` by at most
/// `shard_count - 1`.
pub fn shard_share(total: u64, shard: usize, shard_count: usize) -> u64 {
    assert!(shard < shard_count, "shard {shard} out of 0..{shard_count}");
    if total == 0 {
        return 0;
    }
    // Cumulative rounding: shard i gets floor(M·c(i+1)/S) − floor(M·c(i)/S), where c(i)
    // counts the slots of shards before i, so the shares telescope to M.
    let slots_before = |i: usize| -> u128 {
        (0..SLOTS)
            .filter(|&slot| owner_of_slot(slot, shard_count) < i)
            .count() as u128
    };
    let total = u128::from(total);
    let slots = u128::from(SLOTS);
    let share = total * slots_before(shard + 1) / slots - total * slots_before(shard) / slots;
    u64::try_from(share)
        .expect("a share is at most the total")
        .max(1)
}
