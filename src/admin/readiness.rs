//! Process-wide readiness every shard may read (the admin API answers `/readyz` from it; the
//! server marks shards started and shutdown begun).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub struct ServerState {
    pub shard_count: usize,
    shards_started: AtomicUsize,
    ready: AtomicBool,
}

impl ServerState {
    pub fn new(shard_count: usize) -> ServerState {
        ServerState {
            shard_count,
            shards_started: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
        }
    }

    /// Records one shard as serving; returns true for the last one, which marks the server
    /// ready.
    pub fn shard_started(&self) -> bool {
        let started = self.shards_started.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(started <= self.shard_count);
        if started == self.shard_count {
            self.ready.store(true, Ordering::Release);
            return true;
        }
        false
    }

    /// Ready until shutdown begins: load balancers stop sending before the listeners close.
    pub fn set_not_ready(&self) {
        self.ready.store(false, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}
