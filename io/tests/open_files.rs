//! A store that writes many more logs than its open-files budget keeps the process's open
//! descriptors bounded (counted in `/proc/self/fd` all along by a sampling task), through
//! appends, checkpoints, reads from disk, segment rolls, a clean reopen and a simulated crash
//! with its recovery, and every record reads back intact.
//!
//! One test in this file on purpose: the descriptor count is per process, and other tests
//! running in parallel threads would disturb it.

use boltq_io::file_budget::OPEN_SEGMENT_FILES_MIN;
use boltq_io::recovery::recover_within;
use boltq_io::testutil::{Rng, TempDir};
use boltq_io::{Durability, LogRef, Record, Store, StoreConfig};
use bytes::Bytes;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// Descriptors the segment files may hold.
const LIMIT_FILES: usize = 16;
/// Logs written: 3× the limit, i.e. 6× as many logs as the limit lets keep their files open.
const LOG_COUNT: usize = 3 * LIMIT_FILES;
/// Descriptors beyond the limit tolerated: the log being flushed when the count passes the
/// limit (up to 4 while it rolls), one per read in progress, files glommio closes on its next
/// cycle, and journal spares.
const SLACK_FILES: usize = 8;

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn config(dir: &std::path::Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.durability = Durability::Always;
    c.journal_file_bytes = 1024 * 1024;
    // Only the test's own checkpoints run.
    c.checkpoint_bytes = 1 << 40;
    c.checkpoint_interval_ms = 3_600_000;
    c.open_segment_files_max = LIMIT_FILES;
    c.log.segment_bytes = 8 * 1024; // rolls in the second round
    c.log.index_interval_bytes = 512;
    c.log.tail_cache_bytes = 0; // reads go to the files
    c
}

async fn open(c: &StoreConfig) -> Rc<Store> {
    recover_within(&c.data_dir, &c.log, c.open_segment_files_max)
        .await
        .expect("recover");
    Store::open(c.clone(), 0).await.expect("open store")
}

fn name(i: usize) -> String {
    format!("fd/inbox-{i:03}")
}

fn payload(i: usize, seq: u64) -> Bytes {
    let unit = format!("{i}:{seq}:");
    let len = 60 + (seq as usize * 37 + i) % 400;
    Bytes::from(unit.repeat(len / unit.len() + 1)[..len].to_string())
}

/// Appends `count` records to every log, checkpointing every few logs so that files open
/// while others are still dirty.
async fn append_round(store: &Store, counts: &mut [u64], rng: &mut Rng) {
    for (i, count) in counts.iter_mut().enumerate() {
        let log = store.open_log(&name(i)).await.unwrap();
        let mut last = 0;
        for _ in 0..1 + rng.below(12) {
            let seq = log.next_seq();
            let mut rec = Record {
                payload: payload(i, seq),
                ..Default::default()
            };
            let a = store.append(&log, &mut rec, 1).unwrap();
            assert_eq!(a.seq, *count + 1);
            *count = a.seq;
            last = a.lsn;
        }
        store.wait_durable(last).await.unwrap();
        if i % 5 == 4 {
            store.checkpoint().await.unwrap();
        }
    }
    store.checkpoint().await.unwrap();
}

async fn read_all(store: &Store, counts: &[u64], step: &str) {
    for (i, &count) in counts.iter().enumerate() {
        let log: LogRef = store.open_log(&name(i)).await.unwrap();
        assert_eq!(log.next_seq(), count + 1, "{step}: next_seq of {}", name(i));
        let recs = store.read(&log, 1, usize::MAX, usize::MAX).await.unwrap();
        assert_eq!(recs.len() as u64, count, "{step}: records of {}", name(i));
        for (k, r) in recs.iter().enumerate() {
            assert_eq!(r.seq, k as u64 + 1, "{step}: seq");
            assert_eq!(
                r.payload,
                payload(i, r.seq),
                "{step}: {}#{}",
                name(i),
                r.seq
            );
        }
    }
}

/// Lets glommio run the closes of dropped files, then returns the count.
async fn settled_fd_count() -> usize {
    glommio::timer::sleep(Duration::from_millis(20)).await;
    fd_count()
}

#[test]
fn descriptors_stay_bounded_with_many_more_logs_than_the_budget() {
    const { assert!(LIMIT_FILES >= OPEN_SEGMENT_FILES_MIN) };
    let tmp = TempDir::new("open-files");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let c = config(&dir);
            boltq_io::probe::warm_iopoll(&c.data_dir).await.unwrap();
            let mut store = open(&c).await;
            let baseline = settled_fd_count().await;
            let bound = baseline + LIMIT_FILES + SLACK_FILES;

            // Samples the descriptor count while everything below runs.
            let peak = Rc::new(Cell::new(0usize));
            let stop = Rc::new(Cell::new(false));
            let sampler = glommio::spawn_local({
                let (peak, stop) = (Rc::clone(&peak), Rc::clone(&stop));
                async move {
                    while !stop.get() {
                        peak.set(peak.get().max(fd_count()));
                        glommio::timer::sleep(Duration::from_micros(200)).await;
                    }
                }
            });

            let mut rng = Rng::new(7);
            let mut counts = vec![0u64; LOG_COUNT];
            append_round(&store, &mut counts, &mut rng).await;
            assert!(
                store.open_segment_files() <= LIMIT_FILES,
                "after a checkpoint the store is within its budget: {}",
                store.open_segment_files()
            );
            read_all(&store, &counts, "first round").await;
            append_round(&store, &mut counts, &mut rng).await;
            append_round(&store, &mut counts, &mut rng).await;
            read_all(&store, &counts, "third round").await;
            let after_rounds = settled_fd_count().await;

            store.close().await.unwrap();
            drop(store);
            store = open(&c).await;
            read_all(&store, &counts, "clean reopen").await;

            // Appends only in the journal (no checkpoint), then a crash: recovery replays
            // them into every log, within the budget.
            let mut last = 0;
            for (i, count) in counts.iter_mut().enumerate() {
                let log = store.open_log(&name(i)).await.unwrap();
                let mut rec = Record {
                    payload: payload(i, *count + 1),
                    ..Default::default()
                };
                let a = store.append(&log, &mut rec, 1).unwrap();
                *count = a.seq;
                last = a.lsn;
            }
            store.wait_durable(last).await.unwrap();
            store.halt().await;
            drop(store);
            store = open(&c).await;
            read_all(&store, &counts, "crash and recovery").await;
            append_round(&store, &mut counts, &mut rng).await;
            read_all(&store, &counts, "after recovery").await;
            let at_end = settled_fd_count().await;

            stop.set(true);
            sampler.await;
            store.close().await.unwrap();
            eprintln!(
                "fds: baseline {baseline}, after rounds {after_rounds}, at end {at_end}, \
                 peak {}, bound {bound}",
                peak.get()
            );
            assert!(after_rounds <= bound, "{after_rounds} fds > {bound}");
            assert!(at_end <= bound, "{at_end} fds > {bound}");
            assert!(
                peak.get() <= bound,
                "peak {} fds > {bound} ({LOG_COUNT} logs, limit {LIMIT_FILES})",
                peak.get()
            );
        })
        .expect("executor")
        .join()
        .expect("join");
}
