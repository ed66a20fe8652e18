//! BoltQ's bundled command-line tools. `boltq-cli` (the v1-compatible client) lives in
//! [`cli`]; its binary is a thin wrapper so the behaviour is testable in-process.

pub mod cli;
