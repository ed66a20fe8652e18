//! Helpers shared by the runtime tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use boltq_shards::Shard;

/// Upper bound for one runtime test; a hang fails the test instead of the
/// whole run.
pub const TEST_LIMIT: Duration = Duration::from_secs(20);

/// Runs `f` on its own thread and fails if it takes longer than `limit`.
pub fn run_within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test exceeded {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("test body panicked (see above)"),
    }
}

/// Marks this shard finished; the last one triggers shutdown so that every
/// shard stays alive (and receiving) until all are done.
pub async fn finish<M: Send + 'static>(shard: &Shard<M>, finished: &AtomicUsize) {
    if finished.fetch_add(1, Ordering::SeqCst) + 1 == shard.count() {
        shard.shutdown_handle().trigger();
    }
    shard.shutdown_requested().await;
}
