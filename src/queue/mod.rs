//! The queue plane: BoltQ v1's work queues, pub/sub topics and exchanges over the binary TCP
//! protocol.
//!
//! - `protocol/` — pure codecs: frames, request parsing, reply encoding (no I/O).

pub mod broker;
pub mod message;
pub mod protocol;
pub mod server;
