//! Issue 13 ("the command log is the single source of truth"), end to end against the real
//! binary: a start right after a kill -9 waits for the data directory's lock instead of
//! failing (item 7); a snapshot cut short by a crash never shares its number with the next
//! one (item 3).

mod support;

use boltq::client::{Client, ClientOptions, PublishOptions};
use boltq::queue::protocol::frame::{op, status};
use boltq_io::dirlock::DirLock;
use boltq_io::testutil::TempDir;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{ReadyBy, Server};

/// The log line a start writes while it waits for the lock.
const WAITING: &str = "waiting up to";

/// A lock held by another process (here: this test) makes the start wait, saying why, and
/// the server becomes ready once the lock is released.
#[test]
fn a_start_waits_for_the_data_dir_lock_and_serves_once_it_is_free() {
    let spec = Spec::new("lockwait", &[]);
    let held = DirLock::acquire(&spec.data).unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let releaser = {
        let released = Arc::clone(&released);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            released.store(true, Ordering::SeqCst);
            drop(held);
        })
    };
    let server = spec.start();
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
    let spec = Spec::new("lockbound", &["[storage]", "lock_wait_ms = 500"]);
    let _held = DirLock::acquire(&spec.data).unwrap();
    let started = Instant::now();
    let args: Vec<&str> = spec.args.iter().map(String::as_str).collect();
    let out = support::run_to_exit(&args);
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
    let spec = Spec::new("killrestart", &[]);
    let tcp = spec.tcp;
    let start = || spec.start();
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

/// Issue 13 item 3: the snapshot after a restart was numbered "newest complete + 1", the
/// number a snapshot cut short by a crash already had; the reader then merged the two (or
/// fell back to an older snapshot whose commands were already truncated). Here the cut-short
/// snapshot is planted as the previous version wrote its first chunk, the server takes one
/// more snapshot and truncates behind it, is killed, and must come back with every message.
#[test]
fn a_snapshot_cut_short_by_a_crash_does_not_spoil_the_next_one() {
    const QUEUE: &str = "snapq";
    const BATCH: usize = 250;
    let spec = Spec::new(
        "snapnum",
        // 1 MiB segments and the smallest per-slot compaction threshold (1 MiB).
        &[
            "[storage]",
            "segment_bytes = 1048576",
            "compaction_threshold = 1",
        ],
    );
    let mut server = spec.start();
    let mut published = 0;
    // Enough for one snapshot and segments past it.
    while published < 5_000 {
        publish_batch(&server, QUEUE, BATCH);
        published += BATCH;
    }
    assert!(snapshots_taken(&server) >= 1, "a first snapshot");
    let (code, _) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(0));
    let planted = plant_cut_short_snapshot(&spec.data, QUEUE);
    server = spec.start();
    // One more snapshot, which truncates the command log behind it.
    published += publish_until_a_snapshot_is_written(&server, QUEUE, BATCH);
    let (next, _) = server.restart(libc::SIGKILL);
    server = next;
    let mut c = Client::connect(
        &format!("127.0.0.1:{}", server.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(
        c.stats().unwrap()["Queues"][QUEUE],
        published as u64,
        "every publish exactly once after the restart (planted snapshot {planted})"
    );
    let (code, _) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(0));
}

/// A work queue's command log holds binary records and JSON ones side by side: a message
/// past the binary layout's limits (one header more than `HEADERS_MAX`) is written as JSON.
/// Replayed from a real data dir after a kill -9, and again from a snapshot that keeps that
/// message unpacked beside the packed ones, every message comes back once, in order, with
/// its headers.
#[test]
fn binary_and_json_records_replay_in_order_after_a_kill_and_from_a_snapshot() {
    const QUEUE: &str = "mixq";
    const HEADERS: usize = 65_536 + 1; // `wal::record::HEADERS_MAX` + 1
    const FILLER: usize = 250;
    let spec = Spec::new(
        "mixedlog",
        &[
            "[storage]",
            "segment_bytes = 1048576",
            "compaction_threshold = 1",
        ],
    );
    let mut server = spec.start();
    let connect = |server: &Server| {
        Client::connect(
            &format!("127.0.0.1:{}", server.tcp_port),
            ClientOptions::default(),
        )
        .unwrap()
    };
    let many: boltq::client::Headers = (0..HEADERS)
        .map(|i| (format!("h{i:05}"), String::new()))
        .collect();
    let mut c = connect(&server);
    for (text, headers) in [("m0", None), ("m1", Some(&many)), ("m2", None)] {
        c.publish(
            QUEUE,
            &format!("\"{text}\""),
            headers,
            PublishOptions::default(),
        )
        .unwrap();
    }
    drop(c);
    // Replayed from the command log alone.
    let (next, _) = server.restart(libc::SIGKILL);
    server = next;
    assert_eq!(connect(&server).stats().unwrap()["Queues"][QUEUE], 3);
    // A snapshot of the slot (the filler goes to the same queue, after the three), written
    // and the command log behind it dropped, then a restart from it.
    let published = 3 + publish_until_a_snapshot_is_written(&server, QUEUE, FILLER);
    let (next, _) = server.restart(libc::SIGKILL);
    server = next;
    let mut c = connect(&server);
    for (text, headers) in [("m0", 0), ("m1", HEADERS), ("m2", 0)] {
        let m = c.consume(QUEUE).unwrap().expect("a message");
        assert_eq!(
            (m.payload_json.as_str(), m.headers.len()),
            (format!("\"{text}\"").as_str(), headers)
        );
    }
    assert_eq!(
        c.stats().unwrap()["Queues"][QUEUE],
        (published - 3) as u64,
        "the filler, each once"
    );
    let (code, _) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(0));
}

/// A server's data dir, ports and config, to start it again after it stopped.
struct Spec {
    _tmp: TempDir,
    data: std::path::PathBuf,
    tcp: u16,
    args: Vec<String>,
    http: u16,
}

impl Spec {
    /// 2 shards, ports below the ephemeral range; `config` lines become its TOML file.
    fn new(tag: &str, config: &[&str]) -> Spec {
        let tmp = TempDir::new(tag);
        let data = tmp.path().join("data");
        let cfg = tmp.path().join("boltq.toml");
        std::fs::write(&cfg, config.join("\n")).unwrap();
        let ports = support::free_ports_below_ephemeral(2);
        let (tcp, http) = (ports[1], ports[0]);
        let mut args = support::config_args(&cfg, &data, tcp, http);
        args.extend(["--shards".to_string(), "2".to_string()]);
        Spec {
            _tmp: tmp,
            data,
            tcp,
            args,
            http,
        }
    }

    /// Ready once its own process wrote the ready line (an old process may still be dying).
    fn start(&self) -> Server {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        Server::start_raw_until(&args, self.tcp, self.http, &self.data, ReadyBy::LogLine)
    }
}

fn publish_batch(server: &Server, queue: &str, n: usize) {
    let mut c = Client::connect(
        &format!("127.0.0.1:{}", server.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    let body = format!(r#"{{"topic":"{queue}","payload":"{}"}}"#, "x".repeat(400));
    let frames: Vec<(u8, &[u8])> = vec![(op::PUBLISH, body.as_bytes()); n];
    for (code, _) in c.pipeline(&frames).unwrap() {
        assert_eq!(code, status::OK);
    }
}

/// Snapshots this process took (v1's `snapshot_count`; it starts at zero on every start).
fn snapshots_taken(server: &Server) -> u64 {
    counter_sum(server, "snapshot_count")
}

/// Snapshots this process wrote and compacted behind (`boltq_snapshots_written_total`).
fn snapshots_written(server: &Server) -> u64 {
    counter_sum(server, "boltq_snapshots_written_total")
}

/// Publishes batches of `batch` to `queue` until this process took a snapshot, then waits
/// until it is written; how many it published.
fn publish_until_a_snapshot_is_written(server: &Server, queue: &str, batch: usize) -> usize {
    let mut published = 0;
    while snapshots_taken(server) == 0 {
        assert!(
            published < 40_000,
            "no snapshot after {published} publishes"
        );
        publish_batch(server, queue, batch);
        published += batch;
    }
    until_a_snapshot_is_written(server);
    published
}

/// Waits until this process wrote a snapshot and compacted behind it (a snapshot taken is
/// written in the background: a kill before then restarts from the command log).
fn until_a_snapshot_is_written(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshots_written(server) == 0 {
        assert!(
            Instant::now() < deadline,
            "the snapshot taken is never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The samples of `/metrics` whose line names `series`, added up.
fn counter_sum(server: &Server, series: &str) -> u64 {
    let (_, body) = support::http_get(server.http_port, "/metrics").unwrap();
    body.lines()
        .filter(|l| !l.starts_with('#') && l.contains(series))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

/// Appends, with the server down, the first chunk of two of a snapshot numbered one above
/// the newest in the queue's slot, as a crash mid-snapshot of the previous version left it
/// (no `first_seq` header). Returns its number.
fn plant_cut_short_snapshot(data: &std::path::Path, queue: &str) -> u64 {
    let slot = boltq::queue::server::dispatch::slot_of_name(queue);
    let data = data.to_path_buf();
    boltq_shards::block_on("plant", move || {
        Box::pin(async move {
            let c = boltq_io::StoreConfig::new(&data);
            boltq_io::probe::warm_iopoll(&data).await.unwrap();
            boltq_io::recovery::recover(&data, &c.log).await.unwrap();
            let store = boltq_io::Store::open(c, 0).await.unwrap();
            let snap = store
                .open_log(&format!("queue/slot-{slot:03}/snap"))
                .await
                .unwrap();
            let records = store.read(&snap, 0, usize::MAX, usize::MAX).await.unwrap();
            let newest = records
                .iter()
                .filter_map(|r| std::str::from_utf8(&r.key).ok()?.parse::<u64>().ok())
                .max()
                .expect("the first snapshot is in the log");
            let header = |k: &'static str, v: u64| {
                (
                    bytes::Bytes::from_static(k.as_bytes()),
                    bytes::Bytes::from(v.to_string()),
                )
            };
            let mut chunk = boltq_io::Record {
                key: bytes::Bytes::from((newest + 1).to_string()),
                headers: vec![header("part", 0), header("parts", 2), header("wal_seq", 1)],
                payload: bytes::Bytes::from_static(b"{"),
                ..Default::default()
            };
            let lsn = store.append(&snap, &mut chunk, 1).unwrap().lsn;
            store.wait_durable(lsn).await.unwrap();
            store.close().await.unwrap();
            newest + 1
        })
    })
    .unwrap()
}
