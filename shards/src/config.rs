//! Runtime configuration, with a bound on every knob.

use crate::error::RuntimeError;
use crate::memlock::{IO_MEMORY_CONFIG_MAX_BYTES, IO_MEMORY_MIN_BYTES};
use crate::ownership::SLOTS;
use crate::ticker::TICK_MS_MIN;

/// Most shards: with more shards than [`SLOTS`], `slot mod N` would leave
/// shards owning no queue, and the full mesh grows as N².
pub const SHARDS_MAX: usize = SLOTS as usize;

/// Smallest channel capacity, in batches: below ~1024 the two ends of a
/// channel keep parking and waking each other (13 M/s at 1024 vs 0.7 M/s at
/// 128, platform.md §2).
pub const CHANNEL_CAPACITY_MIN: usize = 1024;

/// Largest channel capacity, in batches, to bound memory per channel pair.
pub const CHANNEL_CAPACITY_MAX: usize = 1 << 20;

/// Largest per-destination outbox and the largest request table.
pub const QUEUE_LIMIT_MAX: usize = 1 << 24;

/// Longest startup wait for the channels to connect.
pub const MESH_CONNECT_TIMEOUT_MS_MAX: u64 = 600_000;

/// Longest spin before parking: spinning is a latency trade for dedicated
/// cores, and anything longer than this is a misconfiguration.
pub const SPIN_BEFORE_PARK_US_MAX: u64 = 10_000;

/// Longest tick.
pub const TICK_MS_MAX: u64 = 60_000;

/// Submission-queue entries of each io_uring ring an executor opens (the completion queue
/// gets twice as many). Besides bounding the I/O submitted at once, the depth sizes the
/// kernel's cancel hash table (2^(log2(completion entries) − 5) buckets, at most 256): every
/// socket waiting for input is an armed poll in that table, and every park with a timer
/// armed cancels a timeout, which first searches a poll bucket. At glommio's default (128:
/// 8 buckets) 10,000 connections make each cancel walk ~1,250 polls, which measured 22 % of
/// a busy gateway shard; at 4,096 (256 buckets) it fell to 1.5 %. The cost is ring memory:
/// about 400 KiB per ring, three rings per shard.
pub const RING_DEPTH_DEFAULT: usize = 4_096;
/// How long a shard runs tasks before it looks at its rings again when no task waits, in
/// microseconds (glommio's preempt timer; its default is 100 ms). A connection whose socket
/// always has input never waits (`boltq_io::listener::Conn` then gives way), and a journal
/// commit's write and fdatasync complete only when the shard looks: each can be held up to
/// this long behind busy tasks. At glommio's 100 ms a PING flood held other clients'
/// durable publishes for seconds; at 5 ms they take 11–56 ms during such a flood (at 10 ms
/// up to 112). Shorter costs throughput: at 1 or 2 ms the durable queue path lost ~10 %,
/// at 5 and 10 ms nothing measurable (docs/benchmarks.md, "A client that never waits").
/// The timer is only armed while tasks run, so an idle shard never wakes for it. The
/// shorter it is, the more often glommio 0.9 mistakes a timer that fired early for an
/// empty run queue and parks with tasks woken; `rescue` bounds how long they then wait.
pub const PREEMPT_TIMER_US: u64 = 5_000;
/// Smallest ring depth accepted.
pub const RING_DEPTH_MIN: usize = 16;
/// Largest ring depth accepted (the kernel's own cap on submission entries).
pub const RING_DEPTH_MAX: usize = 32_768;

/// How the shards are started. Plain data, so the server can build it from
/// its own config and tests can tweak single fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Number of shards (executor threads), `1..=SHARDS_MAX`. More shards
    /// than usable CPUs is allowed, with a warning, for tests.
    pub shard_count: usize,
    /// Busy-poll this long before parking an idle executor. `None` (the
    /// default) costs 0% CPU idle; spinning only pays off with one dedicated
    /// core per shard and is ignored when shards outnumber CPUs.
    pub spin_before_park_us: Option<u64>,
    /// io_uring registered buffer arena per executor. `None` derives it from
    /// the memlock limit (see [`crate::memlock`]).
    pub io_memory_bytes: Option<usize>,
    /// Entries of each io_uring ring, `RING_DEPTH_MIN..=RING_DEPTH_MAX` (see
    /// [`RING_DEPTH_DEFAULT`] for why it is not glommio's 128).
    pub ring_depth: usize,
    /// Bound on connecting all cross-shard channels at startup; a pending
    /// connect spins, so startup must finish or fail.
    pub mesh_connect_timeout_ms: u64,
    /// Capacity of each cross-shard channel, in batches. glommio allocates
    /// each ring up front: the mesh reserves
    /// `shard_count × (shard_count − 1) × channel_capacity × 24` bytes
    /// (a `Vec` per slot), e.g. 5.8 MiB for 16 shards at 1024.
    pub channel_capacity: usize,
    /// Cap on messages queued per destination outbox (replies excepted);
    /// beyond it `send` gives the message back.
    pub outbox_messages_max: usize,
    /// Cap on requests awaiting a reply, per shard.
    pub requests_max: usize,
    /// The shard ticker's granularity, at least [`TICK_MS_MIN`].
    pub tick_ms: u64,
    /// Cap on distinct metric series per shard.
    pub metrics_series_max: usize,
}

impl RuntimeConfig {
    /// Defaults for `shard_count` shards.
    pub fn new(shard_count: usize) -> Self {
        Self {
            shard_count,
            spin_before_park_us: None,
            io_memory_bytes: None,
            ring_depth: RING_DEPTH_DEFAULT,
            mesh_connect_timeout_ms: 5_000,
            channel_capacity: CHANNEL_CAPACITY_MIN,
            outbox_messages_max: 65_536,
            requests_max: 65_536,
            tick_ms: TICK_MS_MIN,
            metrics_series_max: crate::metrics::SERIES_MAX_DEFAULT,
        }
    }

    /// Checks every bound, naming the first field that is out of range.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        check("shard_count", self.shard_count as u64, 1, SHARDS_MAX as u64)?;
        check(
            "ring_depth",
            self.ring_depth as u64,
            RING_DEPTH_MIN as u64,
            RING_DEPTH_MAX as u64,
        )?;
        if let Some(spin_us) = self.spin_before_park_us {
            check("spin_before_park_us", spin_us, 0, SPIN_BEFORE_PARK_US_MAX)?;
        }
        if let Some(bytes) = self.io_memory_bytes {
            check(
                "io_memory_bytes",
                bytes as u64,
                IO_MEMORY_MIN_BYTES as u64,
                IO_MEMORY_CONFIG_MAX_BYTES as u64,
            )?;
        }
        check(
            "mesh_connect_timeout_ms",
            self.mesh_connect_timeout_ms,
            1,
            MESH_CONNECT_TIMEOUT_MS_MAX,
        )?;
        check(
            "channel_capacity",
            self.channel_capacity as u64,
            CHANNEL_CAPACITY_MIN as u64,
            CHANNEL_CAPACITY_MAX as u64,
        )?;
        let queue_max = QUEUE_LIMIT_MAX as u64;
        check(
            "outbox_messages_max",
            self.outbox_messages_max as u64,
            1,
            queue_max,
        )?;
        check("requests_max", self.requests_max as u64, 1, queue_max)?;
        check("tick_ms", self.tick_ms, TICK_MS_MIN, TICK_MS_MAX)?;
        check(
            "metrics_series_max",
            self.metrics_series_max as u64,
            1,
            queue_max,
        )?;
        Ok(())
    }
}

fn check(field: &str, value: u64, min: u64, max: u64) -> Result<(), RuntimeError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(RuntimeError::InvalidConfig(format!(
            "{field} = {value} is outside {min}..={max}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        for n in [1, 2, SHARDS_MAX] {
            RuntimeConfig::new(n).validate().unwrap();
        }
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let cases: Vec<(&str, RuntimeConfig)> = vec![
            ("shard_count", RuntimeConfig::new(0)),
            ("shard_count", RuntimeConfig::new(SHARDS_MAX + 1)),
            (
                "channel_capacity",
                RuntimeConfig {
                    channel_capacity: 1023,
                    ..RuntimeConfig::new(2)
                },
            ),
            (
                "tick_ms",
                RuntimeConfig {
                    tick_ms: 9,
                    ..RuntimeConfig::new(2)
                },
            ),
            (
                "io_memory_bytes",
                RuntimeConfig {
                    io_memory_bytes: Some(1024),
                    ..RuntimeConfig::new(2)
                },
            ),
            (
                "ring_depth",
                RuntimeConfig {
                    ring_depth: RING_DEPTH_MIN - 1,
                    ..RuntimeConfig::new(2)
                },
            ),
            (
                "ring_depth",
                RuntimeConfig {
                    ring_depth: RING_DEPTH_MAX + 1,
                    ..RuntimeConfig::new(2)
                },
            ),
            (
                "mesh_connect_timeout_ms",
                RuntimeConfig {
                    mesh_connect_timeout_ms: 0,
                    ..RuntimeConfig::new(2)
                },
            ),
        ];
        for (field, config) in cases {
            match config.validate() {
                Err(RuntimeError::InvalidConfig(reason)) => {
                    assert!(reason.starts_with(field), "{field}: {reason}")
                }
                other => panic!("{field}: expected InvalidConfig, got {other:?}"),
            }
        }
    }
}
