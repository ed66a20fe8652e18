//! BoltQ's bundled command-line tools. `boltq-cli` (the v1-compatible client) lives in
//! [`cli`], the load generator `boltq-bench` in [`bench`]; their binaries are thin wrappers
//! so the behaviour is testable in-process.

pub mod bench;
pub mod cli;
