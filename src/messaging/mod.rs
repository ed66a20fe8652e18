//! The messaging plane (off by default): a partitioned, replayable log of stream topics
//! behind a WebSocket gateway for end-user devices (spec/messaging-engine.md,
//! spec/messaging-edge.md).
//!
//! Folder = layer, file = concept:
//! - `topic`: topic names, their on-disk encoding, namespaces, key → partition.
//! - `identity/`: tokens (HS256 JWT), principals, the topic ACL.
//! - `membership`: the operator's membership service (client and cache).
//! - `dedup`, `cursor`: the sans-IO idempotency window and read positions.
//! - `slot/`: what a slot's Raft group replicates of the partitions in the slot (sans-IO).
//! - `headers`: the caps on client-set headers (sends, publishes, signals).
//! - `gateway/`: the WebSocket edge: frame codec, sessions, connections.
//! - `presence`, `signals`: the ephemeral path (presence directory, typing hub), sans-IO.
//! - `tcp/`: the stream commands backends send over the queue plane's TCP protocol.

pub mod cursor;
pub mod dedup;
pub mod engine;
pub mod fanout;
pub mod gateway;
pub mod headers;
pub mod identity;
pub mod membership;
pub mod plane;
pub mod presence;
pub mod push;
pub mod signals;
pub mod slot;
pub mod tcp;
pub mod topic;
