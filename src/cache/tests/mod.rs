//! Tests of the cache store: one test per rule (`rules`), and random operation sequences
//! with random time jumps checked against a naive model (`model`).

mod model;
mod rules;

use super::{CacheLimits, CacheStore};

/// A Unix time in ms, far from 0 so that "now - something" underflows would show.
const T0_MS: u64 = 1_700_000_000_000;

fn store() -> CacheStore {
    CacheStore::new(CacheLimits::default())
}

fn store_with(edit: impl FnOnce(&mut CacheLimits)) -> CacheStore {
    let mut limits = CacheLimits::default();
    edit(&mut limits);
    CacheStore::new(limits)
}
