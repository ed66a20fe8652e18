//! The WebSocket gateway (spec/messaging-edge.md §2): end-user devices connect here.
//!
//! - `upgrade`: authentication and origin checks, then the RFC 6455 handshake.
//! - `connection`: one socket's request loop, writer, liveness and token expiry.
//! - `ops/`: one file per client operation.
//! - `subscription`: streaming a partition to a socket.
//! - `session`, `outbound`: state kept across sockets; the bounded outbound queue.
//! - `progress`: what a socket accepted and when, which decides slow consumers.
//! - `frame`: the JSON frame codec.
//!
//! The ephemeral path (presence and typing, docs/presence-and-typing.md) is wired here: the
//! sans-IO cores `messaging::presence` and `messaging::signals` live in each shard's
//! [`Ephemeral`], and their messages travel between shards as `GatewayMsg::Presence` and
//! `GatewayMsg::Signal`.
//!
//! The shard's side: `context` (the gateway on one shard), `settings`, `stats`, `mesh`
//! (messages between the shards' gateways), `ephemeral` with `presence_routing` and
//! `signal_routing`, and `census` (numbers for the admin routes).

mod census;
pub mod connection;
mod context;
mod ephemeral;
pub mod frame;
pub mod listener;
mod mesh;
pub mod ops;
pub mod outbound;
mod presence_routing;
pub mod progress;
pub mod relay;
mod relay_routing;
pub mod session;
mod settings;
mod signal_routing;
mod stats;
pub mod subscription;
pub mod upgrade;

pub use census::{DevicePresence, PresenceCensus, ShardCensus, UserPresence, PRESENCE_STATES};
pub use context::{GatewayCtx, GatewayPort};
pub use ephemeral::Ephemeral;
pub use mesh::{GatewayMsg, ONLINE_QUERY_TIMEOUT_MS};
pub use settings::{EphemeralSettings, GatewaySettings};
pub use stats::GatewayStats;

pub fn now_s() -> i64 {
    boltq_io::store::now_ns() / 1_000_000_000
}

/// Runs an encoder of `frame` into a fresh string.
pub fn text(encode: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    encode(&mut out);
    String::from_utf8(out).expect("the frame encoder writes UTF-8 JSON")
}
