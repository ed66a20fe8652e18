//! The queue plane's server side: connections, dispatch of v1 commands, the per-shard
//! plane that owns slot brokers, their command logs, timers and exchange metadata.

pub mod connection;
pub mod dispatch;
pub mod exchanges;
pub mod mesh;
pub mod outbound;
pub mod plane;
pub mod snapshot;
pub mod stream;
pub mod unsynced;
pub mod waiters;
pub mod wal;
