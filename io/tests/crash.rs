//! Crash test: a child process appends with `Durability::Always` and prints every
//! acknowledged sequence; the parent SIGKILLs it at random moments, restarts it (which runs
//! recovery), and finally checks that every acknowledged record is present and intact, that
//! sequences are gap-free, and that every record present (acknowledged or not) is whole.
//!
//! Odd seeds run the child with the smallest open-files budget (4 logs, 2 may keep their files
//! open), so kills also land while idle logs close and reopen their segment files.
//!
//! The child is this same test binary, re-run with `BOLTQ_CRASH_CHILD_DIR` set so that only
//! `crash_child_entry` does anything.

use boltq_io::file_budget::OPEN_SEGMENT_FILES_MIN;
use boltq_io::recovery::recover_within;
use boltq_io::testutil::{Rng, TempDir};
use boltq_io::{Durability, Record, Store, StoreConfig};
use bytes::Bytes;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LOGS: [&str; 4] = ["crash/a", "crash/b", "crash/c", "queue/slot-042"];
const KILLS: usize = 24;

fn payload_of(log: usize, seq: u64) -> Bytes {
    let unit = format!("{log}-{seq}-");
    let len = 100 + (seq % 50) as usize;
    Bytes::from(unit.repeat(len / unit.len() + 1)[..len].to_string())
}

fn config(dir: &std::path::Path, seed: u64) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    if !seed.is_multiple_of(2) {
        c.open_segment_files_max = OPEN_SEGMENT_FILES_MIN;
    }
    c.durability = Durability::Always;
    c.journal_file_bytes = 1024 * 1024; // many journal rolls
    c.checkpoint_bytes = 256 * 1024; // many checkpoints and trims
    c.checkpoint_interval_ms = 20;
    c.log.segment_bytes = 256 * 1024; // many segment rolls
    c.log.index_interval_bytes = 1024;
    c
}

async fn open(c: &StoreConfig) -> std::rc::Rc<Store> {
    boltq_io::probe::warm_iopoll(&c.data_dir).await.unwrap();
    recover_within(&c.data_dir, &c.log, c.open_segment_files_max)
        .await
        .expect("recover");
    Store::open(c.clone(), 0).await.expect("open")
}

/// Child: recover, report where each log resumes, then append forever, printing acks.
#[test]
fn crash_child_entry() {
    let Some(dir) = std::env::var_os("BOLTQ_CRASH_CHILD_DIR") else {
        return;
    };
    let seed: u64 = std::env::var("BOLTQ_CRASH_SEED").unwrap().parse().unwrap();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let c = config(std::path::Path::new(&dir), seed);
            let store = open(&c).await;
            let mut out = std::io::stdout().lock();
            let mut logs = Vec::new();
            for name in LOGS {
                let log = store.open_log(name).await.unwrap();
                writeln!(out, "START {name} {}", log.next_seq()).unwrap();
                logs.push(log);
            }
            out.flush().unwrap();
            let mut rng = Rng::new(seed);
            // Bounded work per run keeps the data set (and each restart's recovery) small;
            // the parent kills at random moments within the busy period.
            for _burst in 0..400 {
                // A burst over random logs, then one durable wait for the whole burst.
                let mut acked = Vec::new();
                let mut last = 0;
                for _ in 0..=rng.below(64) {
                    let i = rng.below(LOGS.len() as u64) as usize;
                    let seq = logs[i].next_seq();
                    let mut rec = Record {
                        payload: payload_of(i, seq),
                        ..Default::default()
                    };
                    let a = store.append(&logs[i], &mut rec, 1).unwrap();
                    assert_eq!(a.seq, seq);
                    acked.push((i, a.seq));
                    last = a.lsn;
                }
                store.wait_durable(last).await.unwrap();
                for (i, seq) in acked {
                    writeln!(out, "ACK {} {seq}", LOGS[i]).unwrap();
                }
                out.flush().unwrap();
            }
            std::future::pending::<()>().await;
        })
        .unwrap()
        .join()
        .unwrap();
}

fn spawn_child(dir: &std::path::Path, seed: u64) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BOLTQ_CRASH_CHILD_DIR", dir)
        .env("BOLTQ_CRASH_SEED", seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

#[test]
fn acknowledged_appends_survive_kill_9() {
    if std::env::var_os("BOLTQ_CRASH_CHILD_DIR").is_some() {
        return;
    }
    let tmp = TempDir::new("crash");
    let dir = tmp.path().to_path_buf();
    let mut rng = Rng::new(0xC0FFEE);
    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut total_acks = 0u64;
    for kill in 0..KILLS {
        let mut child = spawn_child(&dir, rng.next_u64());
        let stdout = child.stdout.take().unwrap();
        let run_for = Duration::from_millis(30 + rng.below(300));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(mut line) = line else { break };
                // The test harness prints "test crash_child_entry ... " without a newline
                // before the child's first line: keep only our part.
                if let Some(at) = line.find("START ").or_else(|| line.find("ACK ")) {
                    line = line[at..].to_string();
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut started = 0;
        let mut deadline = None;
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let wait = deadline
                .map(|d: Instant| d.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(30));
            match rx.recv_timeout(wait) {
                Ok(line) => {
                    let parts: Vec<&str> = line.split_whitespace().collect();
                    match parts.as_slice() {
                        ["START", name, next] => {
                            let next: u64 = next.parse().unwrap();
                            let have = acked.get(*name).copied().unwrap_or(0);
                            assert!(
                                next > have,
                                "kill {kill}: {name} resumed at {next} but {have} was acknowledged"
                            );
                            started += 1;
                            if started == LOGS.len() {
                                deadline = Some(Instant::now() + run_for);
                            }
                        }
                        ["ACK", name, seq] => {
                            let seq: u64 = seq.parse().unwrap();
                            let e = acked.entry(name.to_string()).or_insert(0);
                            assert!(seq > *e, "acks are in order per log");
                            *e = seq;
                            total_acks += 1;
                        }
                        _ => {}
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    assert!(deadline.is_some(), "kill {kill}: child never started");
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("kill {kill}: child exited on its own: {:?}", child.wait())
                }
            }
        }
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        assert_eq!(rc, 0);
        child.wait().unwrap();
        // Acks the child printed before dying are durable: drain them too.
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if let ["ACK", name, seq] = parts.as_slice() {
                let seq: u64 = seq.parse().unwrap();
                let e = acked.entry(name.to_string()).or_insert(0);
                *e = (*e).max(seq);
                total_acks += 1;
            }
        }
        reader.join().unwrap();
    }
    assert!(
        total_acks > 1000,
        "the child made real progress ({total_acks} acks)"
    );
    eprintln!("crash test: {KILLS} kills, {total_acks} acknowledged appends");
    verify(&dir, acked);
}

/// Every acknowledged record is present and intact; every record present is whole and
/// carries the payload written for its sequence; nothing follows the last record.
fn verify(dir: &std::path::Path, acked: HashMap<String, u64>) {
    let dir = dir.to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let c = config(&dir, 1);
            let store = open(&c).await;
            for (i, name) in LOGS.iter().enumerate() {
                let log = store.open_log(name).await.unwrap();
                let last = log.next_seq() - 1;
                let want = acked.get(*name).copied().unwrap_or(0);
                assert!(
                    last >= want,
                    "{name}: last record {last} < acknowledged {want}"
                );
                let recs = store.read(&log, 1, usize::MAX, usize::MAX).await.unwrap();
                assert_eq!(recs.len() as u64, last, "{name}: gap-free from 1 to {last}");
                for (k, r) in recs.iter().enumerate() {
                    assert_eq!(r.seq, k as u64 + 1);
                    assert_eq!(r.payload, payload_of(i, r.seq), "{name}#{} intact", r.seq);
                }
            }
            store.close().await.unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}
