//! BoltQ server library: configuration, the server's startup and shard life, and the
//! admin HTTP server. Storage lives in `boltq-io`, the runtime in `boltq-shards`.

pub mod admin;
pub mod cache;
pub mod client;
pub mod config;
pub mod http;
pub mod logger;
pub mod messaging;
pub mod queue;
pub mod server;
