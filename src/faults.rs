//! Crash points for tests: a process started with `BOLTQ_FAULTS=<name>[,<name>…]` aborts
//! (as kill -9 would stop it: nothing more is written, nothing is flushed) when it reaches
//! a point of that name. Crash tests use them to stop the server between two steps whose
//! order a durable promise depends on, which a kill from outside hits only by luck.
//!
//! Points (each named where it is placed):
//! - `after-founding`: the groups hold the single-node data they were founded with,
//!   synced; the single-node logs still hold it too (`server::shard_main`).

use std::sync::OnceLock;

/// The environment variable naming the points to abort at.
pub const FAULTS_ENV: &str = "BOLTQ_FAULTS";

/// Aborts the process if `point` is named in `BOLTQ_FAULTS`.
pub fn crash_point(point: &str) {
    static NAMED: OnceLock<Vec<String>> = OnceLock::new();
    let named = NAMED.get_or_init(|| {
        std::env::var(FAULTS_ENV)
            .map(|v| v.split(',').map(|p| p.trim().to_string()).collect())
            .unwrap_or_default()
    });
    if named.iter().any(|p| p == point) {
        log::error!("{FAULTS_ENV}: aborting at crash point {point}");
        std::process::abort();
    }
}
