//! BoltQ's thread-per-core runtime.
//!
//! One glommio executor per shard, pinned to a CPU and given its shard index
//! explicitly; a pure ownership function that maps queues and partitions to
//! shards; batched cross-shard messaging with per-sender order and a
//! request/reply helper; a sans-IO timer structure and one ticker per shard
//! that sleeps while nothing is armed; per-shard metrics merged on demand;
//! and shutdown on SIGINT/SIGTERM without any polling.
//!
//! Only this crate and `boltq-io` import glommio; the server talks to the
//! small API re-exported here.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod clock;
mod config;
mod envelope;
mod error;
mod links;
pub mod memlock;
mod mesh;
pub mod metrics;
mod notify;
mod outbox;
pub mod ownership;
mod pending;
mod port;
mod rescue;
mod runtime;
mod shard;
mod shutdown;
mod task;
mod ticker;
pub mod timer;

pub use clock::Clock;
pub use config::{
    RuntimeConfig, CHANNEL_CAPACITY_MAX, CHANNEL_CAPACITY_MIN, MESH_CONNECT_TIMEOUT_MS_MAX,
    PREEMPT_TIMER_US, QUEUE_LIMIT_MAX, RING_DEPTH_DEFAULT, RING_DEPTH_MAX, RING_DEPTH_MIN,
    SHARDS_MAX, SPIN_BEFORE_PARK_US_MAX, TICK_MS_MAX,
};
pub use envelope::{Incoming, ReplyToken};
pub use error::{MeshError, OutboxFull, RuntimeError};
pub use mesh::Handler;
pub use metrics::{Counter, Gauge, Histogram, MetricKey, MetricsSnapshot, Registry};
pub use ownership::{
    fnv1a_64, owner_of_partition, owner_of_queue, owner_of_slot, partition_slot, slot_of, ShardId,
    SLOTS,
};
pub use port::{Port, PortReply};
pub use runtime::{run_shards, usable_cpus, FINAL_FLUSH_TIMEOUT_MS};
pub use shard::Shard;
pub use shutdown::{ShutdownHandle, SignalListener};
pub use task::{block_on, sleep, spawn, spawn_blocking, timeout, Task};
pub use ticker::{TickCallback, Ticker, TICKER_TIMERS_MAX, TICK_MS_MIN};
pub use timer::{TimerId, Timers, TimersFull};
