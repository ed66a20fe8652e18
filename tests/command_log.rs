//! Issue 13 ("the command log is the single source of truth"), end to end against the real
//! binary: a start right after a kill -9 waits for the data directory's lock instead of
//! failing (item 7).

mod support;

use boltq::client::{Client, ClientOptions, PublishOptions};
use boltq_io::dirlock::DirLock;
use boltq_io::testutil::TempDir;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{free_port, ReadyBy, Server};

/// The log line a start writes while it waits for the lock.
const WAITING: &str = "waiting up to";

/// A lock held by another process (here: this test) makes the start wait, saying why, and
/// the server becomes ready once the lock is released.
#[test]
fn a_start_waits_for_the_data_dir_lock_and_serves_once_it_is_free() {
    let tmp = TempDir::new("lockwait");
    let data = tmp.path().join("data");
    let held = DirLock::acquire(&data).unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let releaser = {
        let released = Arc::clone(&released);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            released.store(true, Ordering::SeqCst);
            drop(held);
        })
    };
    let (tcp, http) = (free_port(), free_port());
    let args = [
        "--data-dir",
        data.to_str().unwrap(),
        "--tcp-port",
        &tcp.to_string(),
        "--http-port",
        &http.to_string(),
        "--shards",
        "2",
    ];
    let server = Server::start_raw(&args, tcp, http, &data);
    assert!(
        released.load(Ordering::SeqCst),
        "ready only after the lock was released"
    );
    releaser.join().unwrap();
    let log = server.log();
    assert!(
        log.contains(WAITING) && log.contains("locked by another boltq process"),
        "the start says why it waits: {log}"
    );
    let (code, _) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(0));
}

/// The bound holds: still locked after `storage.lock_wait_ms`, the start exits 1 with the
/// message it always gave.
#[test]
fn a_start_gives_up_after_lock_wait_ms() {
    let tmp = TempDir::new("lockbound");
    let data = tmp.path().join("data");
    let _held = DirLock::acquire(&data).unwrap();
    let cfg = tmp.path().join("boltq.toml");
    std::fs::write(&cfg, "[storage]\nlock_wait_ms = 500\n").unwrap();
    let started = Instant::now();
    let out = support::run_to_exit(&[
        "--config",
        cfg.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--tcp-port",
        &free_port().to_string(),
        "--http-port",
        &free_port().to_string(),
    ]);
    assert_eq!(out.0, Some(1), "{}", out.1);
    assert!(out.1.contains("waiting up to 500 ms"), "{}", out.1);
    assert!(
        out.1.contains("locked by another running boltq process"),
        "{}",
        out.1
    );
    assert!(started.elapsed() >= Duration::from_millis(500));
}

/// Issue 13 item 7: a start right after a SIGKILL under load failed with "data directory …
/// is locked by another running boltq process" while the killed process was still exiting.
/// Here each new process starts the moment the old one is sent SIGKILL, and every one must
/// come up (a failed start exits 1, and `Server` panics waiting for its ready line).
#[test]
fn restarts_right_after_sigkill_under_load_all_succeed() {
    const KILLS: usize = 10;
    const PUBLISHERS: usize = 3;
    let tmp = TempDir::new("killrestart");
    let data = tmp.path().join("data");
    let ports = support::free_ports_below_ephemeral(2);
    let (tcp, http) = (ports[1], ports[0]);
    let (tcp_arg, http_arg) = (tcp.to_string(), http.to_string());
    let args = [
        "--data-dir",
        data.to_str().unwrap(),
        "--tcp-port",
        &tcp_arg,
        "--http-port",
        &http_arg,
        "--shards",
        "2",
    ];
    let start = || Server::start_raw_until(&args, tcp, http, &data, ReadyBy::LogLine);
    let mut server = start();
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let (stop, published) = (Arc::clone(&stop), Arc::clone(&published));
            std::thread::spawn(move || publish_until(p, tcp, &stop, &published))
        })
        .collect();
    let started = Instant::now();
    let mut waited = 0;
    for round in 0..KILLS {
        let before = published.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Load between kills: a few hundred publishes through this process.
        while published.load(Ordering::SeqCst) < before + 200 {
            assert!(Instant::now() < deadline, "round {round}: no load");
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: kill(2) on our own child, not yet reaped (`server` still owns it).
        unsafe { libc::kill(server.pid() as i32, libc::SIGKILL) };
        let next = start();
        drop(server); // reaps the killed process
        server = next;
        if server.log().contains(WAITING) {
            waited += 1;
        }
    }
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().unwrap();
    }
    eprintln!(
        "{KILLS} restarts in {:?}, {waited} waited for the lock, {} publishes",
        started.elapsed(),
        published.load(Ordering::SeqCst)
    );
    let (code, _) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(0));
}

/// Publishes ~1 KiB messages, reconnecting whenever the server goes away.
fn publish_until(p: usize, port: u16, stop: &AtomicBool, published: &AtomicU64) {
    let payload = format!("\"{}\"", "x".repeat(1024));
    let queue = format!("kill-q{p}");
    while !stop.load(Ordering::SeqCst) {
        let addr = format!("127.0.0.1:{port}");
        let options = ClientOptions {
            timeout_ms: 2_000,
            ..Default::default()
        };
        let Ok(mut c) = Client::connect(&addr, options) else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        while !stop.load(Ordering::SeqCst) {
            if c.publish(&queue, &payload, None, PublishOptions::default())
                .is_err()
            {
                break;
            }
            published.fetch_add(1, Ordering::SeqCst);
        }
    }
}
