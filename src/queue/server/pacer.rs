//! Paces a shard's queue-slot snapshot writes (`storage.snapshot_write_bytes_per_sec`).
//!
//! Why: a snapshot's chunks go through the shard journal, and a large one written at the
//! disk's full speed leaves the device's cache full of it, so the next client commit's
//! fdatasync waits for all of it to be flushed. Measured on this machine's disk with a
//! queue growing at 40,000 publishes/s (docs/benchmarks.md "Pacing snapshot writes"):
//! unpaced, publish p99 was 124–139 ms (max 226–238 ms); paced at 16 MiB/s, 15–18 ms (max
//! 39–62 ms). The cost: a snapshot takes longer (1 GiB in about a minute at the default),
//! and the command log it replaces is kept that much longer.
//!
//! One pacer per shard, shared by its slots' snapshots: the rate bounds what the shard
//! writes, however many slots snapshot at once.

use std::cell::Cell;
use std::time::{Duration, Instant};

pub struct Pacer {
    /// 0 = not paced.
    bytes_per_sec: u64,
    /// When the bytes reserved so far will have been written at the rate.
    next_free: Cell<Option<Instant>>,
}

impl Pacer {
    pub fn new(bytes_per_sec: u64) -> Pacer {
        Pacer {
            bytes_per_sec,
            next_free: Cell::new(None),
        }
    }

    /// Reserves `bytes` at `now`: how long to wait before writing them. Reservations queue
    /// one after another at the rate; time left idle is not saved up (a burst after a
    /// pause starts at once, then goes at the rate).
    pub fn reserve(&self, now: Instant, bytes: u64) -> Duration {
        if self.bytes_per_sec == 0 {
            return Duration::ZERO;
        }
        let start = self.next_free.get().map_or(now, |free| free.max(now));
        let takes = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
        self.next_free.set(Some(start + takes));
        start - now
    }

    /// Waits for the turn of `bytes`.
    pub async fn take(&self, bytes: u64) {
        let wait = self.reserve(Instant::now(), bytes);
        if !wait.is_zero() {
            boltq_shards::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn reservations_queue_at_the_rate_and_idle_time_is_not_saved_up() {
        let p = Pacer::new(MIB);
        let t0 = Instant::now();
        assert_eq!(p.reserve(t0, MIB), Duration::ZERO);
        assert_eq!(p.reserve(t0, MIB), Duration::from_secs(1));
        assert_eq!(p.reserve(t0, MIB / 2), Duration::from_secs(2));
        // 0.5 s later the queue ends at 2.5 s: 2 s to wait.
        let later = t0 + Duration::from_millis(500);
        assert_eq!(p.reserve(later, MIB), Duration::from_secs(2));
        // Long idle: the next starts at once, not with credit for the pause.
        let idle = t0 + Duration::from_secs(60);
        assert_eq!(p.reserve(idle, MIB), Duration::ZERO);
        assert_eq!(p.reserve(idle, MIB), Duration::from_secs(1));
    }

    #[test]
    fn a_rate_of_zero_never_waits() {
        let p = Pacer::new(0);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(p.reserve(t0, 1 << 30), Duration::ZERO);
        }
    }
}
