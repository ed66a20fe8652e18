//! Model test of the segment log: random appends, reads, rolls, retention, restarts at a
//! later sequence, checkpoints, clean reopen and crash reopen against a trivial in-memory
//! model (a Vec per log).
//!
//! Even seeds give the store (and recovery) the smallest open-files budget, below what the
//! model's logs hold open, so idle logs close their files and reopen them on the next flush
//! all along: the model then checks that closing and reopening loses and corrupts nothing.
//!
//! Seeds: `BOLTQ_MODEL_SEEDS` (default 12) starting at `BOLTQ_MODEL_SEED` (default 1). A
//! failure prints its seed; rerun with `BOLTQ_MODEL_SEED=<seed> BOLTQ_MODEL_SEEDS=1`.

use boltq_io::file_budget::OPEN_SEGMENT_FILES_MIN;
use boltq_io::log::LogConfig;
use boltq_io::recovery::recover_within;
use boltq_io::testutil::{Rng, TempDir};
use boltq_io::{Durability, ReadError, Record, Store, StoreConfig};
use bytes::Bytes;
use std::collections::HashMap;
use std::rc::Rc;

const LOGS: [&str; 3] = ["model/a", "model/b", "queue/slot-007"];

fn run_local<F: std::future::Future<Output = ()> + 'static>(
    f: impl FnOnce() -> F + Send + 'static,
) {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(f)
        .expect("executor")
        .join()
        .expect("join");
}

fn payload(rng: &mut Rng, log: usize, n: u64) -> Bytes {
    let len = match rng.below(10) {
        0 => rng.below(3000) as usize,
        _ => rng.below(120) as usize,
    };
    let mut v = format!("{log}:{n}:").into_bytes();
    v.resize(v.len() + len, (n % 251) as u8);
    Bytes::from(v)
}

fn cfg(dir: &std::path::Path, rng: &mut Rng, seed: u64) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    if seed.is_multiple_of(2) {
        c.open_segment_files_max = OPEN_SEGMENT_FILES_MIN;
    }
    c.journal_file_bytes = 1024 * 1024;
    c.checkpoint_bytes = 64 * 1024 + rng.below(256 * 1024);
    c.checkpoint_interval_ms = 50;
    c.log = LogConfig {
        segment_bytes: 4096 + rng.below(16 * 1024),
        index_interval_bytes: 256 + rng.below(2048),
        tail_cache_bytes: rng.below(8192) as usize,
        retention_bytes: if rng.below(2) == 0 { 0 } else { 32 * 1024 },
        retention_ms: 0,
    };
    c.durability = Durability::Always;
    c
}

async fn open(c: &StoreConfig) -> Rc<Store> {
    boltq_io::probe::warm_iopoll(&c.data_dir).await.unwrap();
    recover_within(&c.data_dir, &c.log, c.open_segment_files_max)
        .await
        .expect("recover");
    Store::open(c.clone(), 0).await.expect("open store")
}

async fn check_read(store: &Store, name: &str, model: &[Bytes], from: u64, max: usize, seed: u64) {
    let log = store.open_log(name).await.unwrap();
    assert_eq!(
        log.next_seq(),
        model.len() as u64 + 1,
        "seed {seed}: next_seq of {name}"
    );
    match store.read(&log, from, max, usize::MAX).await {
        Ok(recs) => {
            let start = if from == 0 { log.first_seq() } else { from };
            let expect: Vec<&Bytes> = model.iter().skip(start as usize - 1).take(max).collect();
            assert_eq!(
                recs.len(),
                expect.len(),
                "seed {seed}: read {name} from {from} max {max}"
            );
            for (i, r) in recs.iter().enumerate() {
                assert_eq!(r.seq, start + i as u64, "seed {seed}: seq");
                assert_eq!(
                    &r.payload, expect[i],
                    "seed {seed}: payload of {name}#{}",
                    r.seq
                );
            }
        }
        Err(ReadError::Truncated {
            requested_seq,
            first_seq,
        }) => {
            assert_eq!(requested_seq, from);
            assert!(
                from < first_seq,
                "seed {seed}: truncated only below the first retained"
            );
        }
        Err(e) => panic!("seed {seed}: read {name} from {from}: {e}"),
    }
}

async fn run_seed(seed: u64, dir: std::path::PathBuf) {
    let mut rng = Rng::new(seed);
    let c = cfg(&dir, &mut rng, seed);
    let mut store = open(&c).await;
    let mut model: HashMap<&str, Vec<Bytes>> = LOGS.iter().map(|n| (*n, Vec::new())).collect();
    let mut first_seen: HashMap<&str, u64> = LOGS.iter().map(|n| (*n, 1)).collect();
    for _step in 0..400 {
        let which = rng.below(LOGS.len() as u64) as usize;
        let name = LOGS[which];
        match rng.below(100) {
            0..=59 => {
                let log = store.open_log(name).await.unwrap();
                let mut last = 0;
                for _ in 0..=rng.below(20) {
                    let n = model[name].len() as u64 + 1;
                    let mut rec = Record {
                        payload: payload(&mut rng, which, n),
                        key: Bytes::from(format!("k{}", n % 7)),
                        ..Default::default()
                    };
                    let a = store.append(&log, &mut rec, 1_000 + n as i64).unwrap();
                    assert_eq!(a.seq, n, "seed {seed}: seq assignment");
                    model.get_mut(name).unwrap().push(rec.payload.clone());
                    last = a.lsn;
                }
                store.wait_durable(last).await.unwrap();
            }
            60..=79 => {
                let len = model[name].len() as u64;
                let from = rng.below(len + 2);
                let max = 1 + rng.below(50) as usize;
                check_read(&store, name, &model[name], from, max, seed).await;
            }
            80..=86 => {
                store.checkpoint().await.unwrap();
                assert!(
                    store.open_segment_files() <= c.open_segment_files_max,
                    "seed {seed}: {} segment files open after a checkpoint, limit {}",
                    store.open_segment_files(),
                    c.open_segment_files_max
                );
            }
            87..=88 => store.run_retention().await.unwrap(),
            89 => {
                // A restart past the end: what was there is gone, the log goes on later.
                let log = store.open_log(name).await.unwrap();
                let next = log.next_seq();
                let at = next + 1 + rng.below(50);
                store.restart_log_at(&log, at).await.unwrap();
                assert_eq!(
                    (log.first_seq(), log.next_seq()),
                    (at, at),
                    "seed {seed}: restart"
                );
                // Placeholders below the new start, never read back (reads there are
                // refused as truncated).
                let m = model.get_mut(name).unwrap();
                m.resize(at as usize - 1, Bytes::new());
            }
            90..=94 => {
                store.close().await.unwrap();
                drop(store);
                store = open(&c).await;
            }
            _ => {
                // Crash: stop everything without writing more; only the durable journal and
                // whatever segment bytes happened to be written remain.
                store.halt().await;
                drop(store);
                store = open(&c).await;
                // Segments that retention had dropped but not yet unlinked may come back
                // (never anything that was not written): first_seq may only move back here.
                for name in LOGS {
                    let log = store.open_log(name).await.unwrap();
                    first_seen.insert(name, log.first_seq());
                }
            }
        }
        let log = store.open_log(name).await.unwrap();
        let first = log.first_seq();
        assert!(
            first >= first_seen[name],
            "seed {seed}: first_seq went backwards without a crash"
        );
        first_seen.insert(name, first);
    }
    for name in LOGS {
        let len = model[name].len();
        check_read(&store, name, &model[name], 0, len + 1, seed).await;
    }
    store.close().await.unwrap();
}

#[test]
fn store_agrees_with_model_across_reopen_and_crash() {
    let seeds: u64 = std::env::var("BOLTQ_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let first: u64 = std::env::var("BOLTQ_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for seed in first..first + seeds {
        let tmp = TempDir::new(&format!("model-{seed}"));
        let dir = tmp.path().to_path_buf();
        eprintln!("model seed {seed}");
        run_local(move || run_seed(seed, dir));
    }
}
