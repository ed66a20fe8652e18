//! SIGTERM reaches every shard. In its own test binary because it signals
//! the whole process.

mod common;

use std::sync::mpsc;

use boltq_shards::{run_shards, RuntimeConfig, Shard, ShutdownHandle};
use common::{run_within, TEST_LIMIT};

#[test]
fn sigterm_resolves_shutdown_on_every_shard() {
    let shutdown = ShutdownHandle::new();
    let listener = shutdown.listen_for_signals().unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let handle = shutdown.clone();
    let runner = std::thread::spawn(move || {
        run_shards(RuntimeConfig::new(2), handle, move |shard: Shard<()>| {
            let started_tx = started_tx.clone();
            async move {
                started_tx.send(()).unwrap();
                shard.shutdown_requested().await;
                shard.id()
            }
        })
    });
    for _ in 0..2 {
        started_rx.recv_timeout(TEST_LIMIT).expect("shard started");
    }
    // SAFETY: kill with our own pid and a valid signal number; signal-hook
    // has replaced SIGTERM's default action, so the process survives.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGTERM) }, 0);
    let outputs = run_within(TEST_LIMIT, move || runner.join().unwrap());
    assert_eq!(outputs, Ok(vec![0, 1]));
    assert!(shutdown.is_triggered());
    drop(listener);
}
