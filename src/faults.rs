//! Crash points for tests: a process started with `BOLTQ_FAULTS=<name>[,<name>…]` aborts
//! (as kill -9 would stop it: nothing more is written, nothing is flushed) when it reaches
//! a point of that name. Crash tests use them to stop the server between two steps whose
//! order a durable promise depends on, which a kill from outside hits only by luck. A
//! few named faults skip a step instead ([`is_named`]): a step a crash would have cut off,
//! where the test needs the process to go on a while before it kills it.
//!
//! With `BOLTQ_FAULTS_ONCE_DIR=<dir>` as well, a point stops only the first process that
//! reaches it: that one creates `<dir>/<name>`, and every process that finds it there goes
//! on. The nodes of a test cluster share the directory, so the node that takes over the
//! work of the one that stopped is not stopped in turn.
//!
//! A fault checked with a detail ([`is_named`]) is named either alone, for every detail,
//! or as `<name>:<detail>` for that one (a topic, say).
//!
//! Points (each named where it is placed):
//! - `after-founding`: the groups hold the single-node data they were founded with,
//!   synced; the single-node logs still hold it too (`server::shard_main`).
//! - `before-fan-out`: a conversation slot's leader applied sends that owe inbox pointers
//!   (committed on a quorum) and is about to write them; it has not answered them yet
//!   (`messaging::engine::outbox`). A node that takes such sends over from the outbox
//!   does not stop here.
//! - `before-fan-out-report`: that leader wrote a send's pointers and has not reported them
//!   written; the send was answered (`messaging::engine::outbox`).
//!
//! Changed limits:
//! - `short-remote-timeout`: a slot command sent to its owner shard gets its answer within
//!   50 ms instead of 30 s, or the timeout error (`queue::server::plane`).
//!
//! Skipped steps:
//! - `skip-push-anchor`, with the inbox topic as detail: a push dispatcher that finds no
//!   cursor for an inbox it starts watching does not commit one (as when its node dies
//!   before that commit; `messaging::push`).

use std::path::PathBuf;
use std::sync::OnceLock;

/// The environment variable naming the points to abort at.
pub const FAULTS_ENV: &str = "BOLTQ_FAULTS";
/// The environment variable naming the directory that makes each point stop one process.
pub const FAULTS_ONCE_DIR_ENV: &str = "BOLTQ_FAULTS_ONCE_DIR";

struct Faults {
    named: Vec<String>,
    once_dir: Option<PathBuf>,
}

fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| Faults {
        named: std::env::var(FAULTS_ENV)
            .map(|v| v.split(',').map(|p| p.trim().to_string()).collect())
            .unwrap_or_default(),
        once_dir: std::env::var_os(FAULTS_ONCE_DIR_ENV).map(PathBuf::from),
    })
}

/// Whether fault `point` is named in `BOLTQ_FAULTS`: as `point`, or as `point:detail`.
pub fn is_named(point: &str, detail: Option<&str>) -> bool {
    faults().named.iter().any(|p| {
        p == point
            || p.strip_prefix(point)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|d| Some(d) == detail)
    })
}

/// Aborts the process if `point` is named in `BOLTQ_FAULTS` (and, with
/// `BOLTQ_FAULTS_ONCE_DIR`, no process stopped there yet).
pub fn crash_point(point: &str) {
    if !is_named(point, None) {
        return;
    }
    if let Some(dir) = &faults().once_dir {
        let first = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(point))
            .is_ok();
        if !first {
            return;
        }
    }
    log::error!("{FAULTS_ENV}: aborting at crash point {point}");
    std::process::abort();
}
