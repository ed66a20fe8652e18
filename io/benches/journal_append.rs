//! Group-commit append throughput through `Store`, as one shard sees it.
//!
//! `cargo bench -p boltq-io --bench journal_append [filter]`
//!
//! Load shape: one task appends records in batches of `BATCH` (one `now_ns` per batch, as a
//! shard does per loop iteration) and keeps `WINDOW` batches outstanding: before appending
//! batch i it awaits `wait_durable` of batch i - WINDOW. So up to BATCH × WINDOW appends are
//! unacknowledged at once, like that many clients each waiting for its reply, and commit
//! rounds coalesce whatever arrived while the previous fdatasync ran. The appender yields to
//! the executor after every batch (`BOLTQ_BENCH_YIELD=0` turns that off for `always`, so it
//! yields only when the window is full). With `never` acknowledgement does not wait, so only
//! the yield paces it; it retries on `Backlogged` after `wait_for_room`, and the run ends
//! once the journal has written everything.
//!
//! Each run appends for `BOLTQ_BENCH_APPEND_SECS` (default 3) or `BOLTQ_BENCH_APPEND_RECORDS`
//! (default 3,000,000), whichever comes first, after a 20,000-record warm-up, into a fresh
//! data dir, with `journal_file_bytes` = 64 MiB. "no-ckpt" runs set checkpoint_bytes to
//! 64 GiB and the interval to an hour, so only the journal is written; "default-ckpt" runs
//! keep `StoreConfig::new`'s checkpoint settings (64 MiB / 2 s) so segment writes compete.
//!
//! Reported: records/s (ops), payload MB/s, journal MB/s (bytes the journal wrote, frames
//! and entry headers), commit rounds, records per round, and mean round time
//! (elapsed / rounds: rounds run back to back under this load).

mod common;

use boltq_io::recovery::recover;
use boltq_io::{AppendError, Durability, LogRef, Record, Store, StoreConfig};
use bytes::Bytes;
use common::{bench_dir, env_u64, on_executor, print_header, report, selected, Sample};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Config {
    durability: Durability,
    payload: usize,
    logs: usize,
    default_checkpoint: bool,
}

impl Config {
    fn name(&self) -> String {
        format!(
            "{} {} {} {}",
            match self.durability {
                Durability::Always => "always",
                Durability::Never => "never",
                Durability::Interval { .. } => "interval",
            },
            if self.payload == 100 { "100B" } else { "1KiB" },
            if self.logs == 1 {
                "1log".to_string()
            } else {
                format!("{}logs", self.logs)
            },
            if self.default_checkpoint {
                "default-ckpt"
            } else {
                "no-ckpt"
            }
        )
    }
}

struct Load {
    batch: usize,
    window: usize,
    secs: f64,
    max_records: u64,
    /// Yield to the executor after every batch, as a shard does between loop iterations,
    /// so the commit task can start a round while appends go on. Without it an `always`
    /// appender yields only when its window is full, and CPU and I/O take turns.
    yield_per_batch: bool,
}

async fn run_once(cfg: Config, load: &Load, dir: PathBuf) -> Sample {
    let mut c = StoreConfig::new(&dir);
    c.durability = cfg.durability;
    c.journal_file_bytes = 64 * 1024 * 1024;
    if !cfg.default_checkpoint {
        c.checkpoint_bytes = 64 << 30;
        c.checkpoint_interval_ms = 3_600_000;
    }
    boltq_io::probe::warm_iopoll(&dir).await.expect("probe");
    recover(&dir, &c.log).await.expect("recover");
    let store = Store::open(c, 0).await.expect("open");
    let mut logs: Vec<LogRef> = Vec::with_capacity(cfg.logs);
    for i in 0..cfg.logs {
        logs.push(
            store
                .open_log(&format!("bench/l{i:04}"))
                .await
                .expect("open_log"),
        );
    }
    let payload = Bytes::from(vec![0xA5u8; cfg.payload]);
    let mut next_log = 0usize;
    // Appends one batch round-robin over the logs; returns (records appended, LSN of the
    // last, whether the journal refused more). Only `never` can be refused: the window
    // bounds the backlog of `always`.
    let mut append_batch = |store: &Store| -> (u64, u64, bool) {
        let now = boltq_io::store::now_ns();
        let mut lsn = 0;
        for n in 0..load.batch {
            let mut rec = Record {
                payload: payload.clone(),
                ..Default::default()
            };
            match store.append(&logs[next_log], &mut rec, now) {
                Ok(a) => lsn = a.lsn,
                Err(AppendError::Backlogged { .. }) => return (n as u64, lsn, true),
                Err(e) => panic!("append: {e}"),
            }
            next_log = (next_log + 1) % logs.len();
        }
        (load.batch as u64, lsn, false)
    };

    // Warm-up: first writes into the journal file, log handles declared, allocator warm.
    let mut warmup = 0;
    let mut last = 0;
    while warmup < 20_000 {
        let (n, lsn, full) = append_batch(&store);
        warmup += n;
        if n > 0 {
            last = lsn;
        }
        if full {
            store.wait_for_room().await.expect("room");
        }
    }
    store.wait_durable(last).await.expect("warm-up durable");
    wait_written(&store).await;

    let rounds0 = store.journal().commit_rounds();
    let journal0 = store.journal().appended();
    let deadline = Duration::from_secs_f64(load.secs);
    let mut window: VecDeque<u64> = VecDeque::with_capacity(load.window + 1);
    let mut records = 0u64;
    let t0 = Instant::now();
    while records < load.max_records && t0.elapsed() < deadline {
        let (n, lsn, full) = append_batch(&store);
        records += n;
        if full {
            store.wait_for_room().await.expect("room");
            continue;
        }
        if cfg.durability.waits_for_sync() {
            window.push_back(lsn);
            if window.len() > load.window {
                let oldest = window.pop_front().expect("non-empty");
                store.wait_durable(oldest).await.expect("durable");
            }
        }
        if load.yield_per_batch || !cfg.durability.waits_for_sync() {
            futures_lite::future::yield_now().await;
        }
    }
    if let Some(&lsn) = window.back() {
        store.wait_durable(lsn).await.expect("durable");
    }
    wait_written(&store).await;
    let elapsed = t0.elapsed();
    let rounds = store.journal().commit_rounds() - rounds0;
    let journal_bytes = store.journal().appended() - journal0;
    store.halt().await; // the run is over; a clean close would only add checkpoint time
    drop(logs);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Sample {
        elapsed,
        ops: records,
        bytes: records * cfg.payload as u64,
        extra: vec![
            (
                "journal MB/s",
                journal_bytes as f64 / elapsed.as_secs_f64() / 1e6,
            ),
            ("rounds", rounds as f64),
            ("rec/round", records as f64 / rounds.max(1) as f64),
            (
                "µs/round",
                elapsed.as_secs_f64() * 1e6 / rounds.max(1) as f64,
            ),
        ],
    }
}

/// Waits until the journal has written everything appended (for `never`, whose appends are
/// acknowledged before that).
async fn wait_written(store: &Store) {
    while store.journal().durable() < store.journal().appended() {
        glommio::timer::sleep(Duration::from_micros(100)).await;
    }
}

fn main() {
    let reps = env_u64("BOLTQ_BENCH_REPS", 3) as usize;
    let load = Load {
        batch: env_u64("BOLTQ_BENCH_BATCH", 128) as usize,
        window: env_u64("BOLTQ_BENCH_WINDOW", 64) as usize,
        secs: env_u64("BOLTQ_BENCH_APPEND_SECS", 3) as f64,
        max_records: env_u64("BOLTQ_BENCH_APPEND_RECORDS", 3_000_000),
        yield_per_batch: env_u64("BOLTQ_BENCH_YIELD", 1) == 1,
    };
    let logs_many = env_u64("BOLTQ_BENCH_LOGS", 1000) as usize;
    println!(
        "journal_append: batch {} × window {} = {} appends outstanding; yield per batch: {}; \
         up to {} s or {} records per rep; {reps} reps",
        load.batch,
        load.window,
        load.batch * load.window,
        load.yield_per_batch,
        load.secs,
        load.max_records
    );
    print_header(&["journal MB/s", "rounds", "rec/round", "µs/round"]);
    let mut configs = Vec::new();
    for durability in [Durability::Always, Durability::Never] {
        for payload in [100usize, 1024] {
            for logs in [1usize, logs_many] {
                configs.push(Config {
                    durability,
                    payload,
                    logs,
                    default_checkpoint: false,
                });
            }
        }
    }
    for logs in [1usize, logs_many] {
        configs.push(Config {
            durability: Durability::Always,
            payload: 100,
            logs,
            default_checkpoint: true,
        });
    }
    let load = std::sync::Arc::new(load);
    for cfg in configs {
        let name = cfg.name();
        if !selected(&name) {
            continue;
        }
        let mut samples = Vec::new();
        for rep in 0..reps {
            let dir = bench_dir(&format!("append-{rep}"));
            let load = std::sync::Arc::clone(&load);
            samples.push(on_executor(move || async move {
                run_once(cfg, &load, dir).await
            }));
        }
        report(&name, &samples);
    }
}
