//! Monotonic milliseconds shared by all shards.

use std::time::Instant;

/// Milliseconds since the runtime started, from one epoch shared by every
/// shard so that deadlines computed on one shard mean the same on another.
/// Monotonic (never jumps with wall-clock changes), which is what timeouts
/// need; persisted expiry times must use wall-clock time instead.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    /// Milliseconds elapsed since the epoch.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).expect("uptime fits in u64 ms")
    }
}
