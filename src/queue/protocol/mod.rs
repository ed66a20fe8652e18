//! The v1 binary protocol as pure functions over byte buffers (fuzzable on their own).

pub mod frame;
pub mod reply;
pub mod request;
