//! BoltQ server library: the two planes, their admin API and the server that wires them.
//! Storage lives in `boltq-io`, the runtime in `boltq-shards`. The modules form layers that
//! only point down (`layers.rs` has the table and the test; ARCHITECTURE.md the map).

pub mod admin;
pub mod cache;
pub mod client;
pub mod cluster;
pub mod config;
pub mod faults;
pub mod http;
mod layers;
pub mod logger;
pub mod messaging;
pub mod queue;
pub mod server;
