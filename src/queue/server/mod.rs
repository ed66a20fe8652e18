//! The queue plane's server side: connections, dispatch of v1 commands, the per-shard
//! plane that owns slot brokers, their command logs, timers and exchange metadata.

pub mod affinity;
mod apply;
pub mod connection;
pub mod delivery;
pub mod dispatch;
pub mod exchanges;
pub mod extra;
mod gather;
mod long_poll;
pub mod mesh;
pub mod outbound;
pub mod pacer;
pub mod packed_ready;
pub mod plane;
pub mod push_acks;
pub mod replicated;
pub mod room;
mod slot;
pub mod snapshot;
mod timer;
pub mod unsynced;
pub mod waiters;
pub mod wal;
