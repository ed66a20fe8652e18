//! Time to reopen a large log: after a clean shutdown, and after a crash that left the last
//! ~64 MiB only in the journal.
//!
//! `BOLTQ_BENCH_REOPEN_MIB=1024 cargo bench -p boltq-io --bench reopen [filter]`
//!
//! Setup (reported, not part of the target): one log, `BOLTQ_BENCH_REOPEN_MIB` (default
//! 1024) MiB of 1 KiB-payload records, `segment_bytes` 64 MiB, written through `Store` with
//! `never` and the default checkpointing, then closed cleanly (segments hold everything and
//! the journal is gone).
//!
//! - `clean reopen`: on a fresh executor (a restarted shard), time warm_iopoll → recover()
//!   → Store::open → open_log → read of the last record. Phases are reported separately.
//! - `crash reopen`: before each repetition, append `BOLTQ_BENCH_CRASH_MIB` (default 60) MiB
//!   more with checkpoints disabled, wait until the journal wrote it, and `halt()`; then
//!   time the same sequence, where recover() replays that journal into the segment.
//!
//! `BOLTQ_BENCH_DROP_CACHES=1` drops the page cache before each timed reopen (root only).
//! Segment reads use O_DIRECT and never hit the page cache; recovery reads journals with
//! std::fs, which does.

mod common;

use boltq_io::log::LogConfig;
use boltq_io::recovery::recover;
use boltq_io::{Durability, Record, Store, StoreConfig};
use bytes::Bytes;
use common::{bench_dir, env_u64, on_executor, print_header, report, selected, Sample};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LOG: &str = "bench/reopen";
const PAYLOAD: usize = 1024;

fn config(dir: &Path, checkpoints: bool) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.durability = Durability::Never;
    c.log = LogConfig {
        segment_bytes: 64 * 1024 * 1024,
        ..LogConfig::default()
    };
    if !checkpoints {
        c.checkpoint_bytes = 64 << 30;
        c.checkpoint_interval_ms = 3_600_000;
    }
    c
}

/// Appends `bytes` of payload in 1 KiB records; returns the number of records.
async fn append_bytes(store: &Store, bytes: u64) -> u64 {
    let log = store.open_log(LOG).await.expect("open_log");
    let payload = Bytes::from(vec![0x3Cu8; PAYLOAD]);
    let records = bytes / PAYLOAD as u64;
    let mut done = 0;
    while done < records {
        let now = boltq_io::store::now_ns();
        for _ in 0..256.min(records - done) {
            let mut rec = Record {
                payload: payload.clone(),
                ..Default::default()
            };
            match store.append(&log, &mut rec, now) {
                Ok(_) => done += 1,
                Err(boltq_io::AppendError::Backlogged { .. }) => break,
                Err(e) => panic!("append: {e}"),
            }
        }
        store.wait_for_room().await.expect("room");
        futures_lite::future::yield_now().await;
    }
    while store.journal().durable() < store.journal().appended() {
        glommio::timer::sleep(Duration::from_micros(200)).await;
    }
    records
}

fn drop_caches() {
    if std::env::var("BOLTQ_BENCH_DROP_CACHES").as_deref() == Ok("1") {
        // SAFETY: sync(2) has no preconditions.
        unsafe { libc::sync() };
        std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (needs root)");
    }
}

/// The timed startup sequence of one shard. Returns the sample and the last sequence read.
async fn timed_reopen(dir: PathBuf, log_bytes: u64) -> (Sample, u64) {
    let c = config(&dir, true);
    let t0 = Instant::now();
    boltq_io::probe::warm_iopoll(&dir).await.expect("probe");
    let t1 = Instant::now();
    let report = recover(&dir, &c.log).await.expect("recover");
    let t2 = Instant::now();
    let store = Store::open(c, 0).await.expect("open");
    let t3 = Instant::now();
    let log = store.open_log(LOG).await.expect("open_log");
    let t4 = Instant::now();
    let last = log.next_seq() - 1;
    let recs = store
        .read(&log, last, 1, usize::MAX)
        .await
        .expect("read last");
    let t5 = Instant::now();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].seq, last);
    assert_eq!(recs[0].payload.len(), PAYLOAD);
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    let sample = Sample {
        elapsed: t5 - t0,
        ops: 1,
        bytes: log_bytes,
        extra: vec![
            ("total ms", ms(t0, t5)),
            ("probe ms", ms(t0, t1)),
            ("recover ms", ms(t1, t2)),
            ("Store::open ms", ms(t2, t3)),
            ("open_log ms", ms(t3, t4)),
            ("read last ms", ms(t4, t5)),
            ("replayed", report.records_replayed as f64),
            ("segments", log.segment_count() as f64),
        ],
    };
    store.close().await.expect("close");
    (sample, last)
}

fn main() {
    let reps = env_u64("BOLTQ_BENCH_REPS", 5) as usize;
    let mib = env_u64("BOLTQ_BENCH_REOPEN_MIB", 1024);
    let crash_mib = env_u64("BOLTQ_BENCH_CRASH_MIB", 60);
    let dir = bench_dir("reopen");

    let d = dir.clone();
    let (records, setup) = on_executor(move || async move {
        let c = config(&d, true);
        boltq_io::probe::warm_iopoll(&d).await.expect("probe");
        recover(&d, &c.log).await.expect("recover");
        let store = Store::open(c, 0).await.expect("open");
        let t = Instant::now();
        let records = append_bytes(&store, mib << 20).await;
        store.close().await.expect("close");
        (records, t.elapsed())
    });
    let log_dir = boltq_io::store::logs_root(&dir).join(LOG);
    let on_disk: u64 = std::fs::read_dir(&log_dir)
        .expect("log dir")
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "reopen: setup wrote {records} records of {PAYLOAD} B ({:.0} MiB on disk incl. indexes) in {:.2} s \
         (never, default checkpoints, closed cleanly: {:.0} MB/s payload)",
        on_disk as f64 / (1 << 20) as f64,
        setup.as_secs_f64(),
        (records * PAYLOAD as u64) as f64 / setup.as_secs_f64() / 1e6
    );
    print_header(&[
        "total ms",
        "probe ms",
        "recover ms",
        "Store::open ms",
        "open_log ms",
        "read last ms",
        "replayed",
        "segments",
    ]);

    if selected("clean reopen") {
        let mut samples = Vec::new();
        for _ in 0..reps {
            drop_caches();
            let d = dir.clone();
            let (s, last) = on_executor(move || timed_reopen(d, on_disk));
            assert_eq!(last, records, "clean reopen lost records");
            samples.push(s);
        }
        report(&format!("clean reopen {mib} MiB"), &samples);
    }

    if selected("crash reopen") {
        let mut samples = Vec::new();
        let mut expect_last = records;
        for _ in 0..reps.min(3) {
            let d = dir.clone();
            expect_last += on_executor(move || async move {
                let c = config(&d, false);
                boltq_io::probe::warm_iopoll(&d).await.expect("probe");
                recover(&d, &c.log).await.expect("recover");
                let store = Store::open(c, 0).await.expect("open");
                let n = append_bytes(&store, crash_mib << 20).await;
                store.halt().await;
                n
            });
            drop_caches();
            let d = dir.clone();
            let (s, last) = on_executor(move || timed_reopen(d, on_disk));
            assert_eq!(last, expect_last, "crash reopen lost acknowledged records");
            samples.push(s);
        }
        report(
            &format!("crash reopen {mib} MiB + {crash_mib} MiB journal"),
            &samples,
        );
    }

    if std::env::var("BOLTQ_BENCH_KEEP").as_deref() != Ok("1") {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
