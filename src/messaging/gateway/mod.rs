//! The WebSocket gateway (spec/messaging-edge.md §2).

pub mod frame;
