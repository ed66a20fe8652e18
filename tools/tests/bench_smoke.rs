//! Every TCP `boltq-bench` scenario for about a second against a real `boltq` server,
//! checking that the JSON report parses and its counts add up. (The gateway scenarios are in
//! `gateway_bench_smoke.rs`; how the server binary is found is in `support/mod.rs`.) The
//! bench itself is run through `CARGO_BIN_EXE_boltq-bench`, which cargo always builds fresh
//! for these tests.

mod support;

use boltq::client::ClientTls;
use boltq_io::testutil::TempDir;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::{free_port, server_binary, wait_for_ready_ports, wait_until_pings, Pki, BENCH};

/// The runs share two cores and a disk with each other and with the server: one at a time
/// keeps each bench's second of load from starving another's server.
static SERIAL: Mutex<()> = Mutex::new(());

struct Server {
    child: Child,
    addr: String,
    /// Admin HTTP address (`/metrics`).
    http: String,
    /// How the readiness probe connects (TLS servers).
    tls: Option<ClientTls>,
    _dir: TempDir,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[], None)
    }

    /// With `[server.tls]` on both listeners, certificates from `pki`.
    fn start_tls(pki: &Pki) -> Server {
        let config = pki.dir.path().join("boltq.toml");
        let text = format!("[server.tls]\nenabled = true\n{}", pki.config_lines());
        std::fs::write(&config, text).unwrap();
        let tls = ClientTls {
            ca_file: Some(pki.ca_file()),
            ..Default::default()
        };
        Server::start_with(&["--config", config.to_str().unwrap()], Some(tls))
    }

    fn start_with(extra: &[&str], tls: Option<ClientTls>) -> Server {
        let dir = TempDir::new("bench-smoke");
        let data = dir.path().join("data");
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(server_binary())
            .arg("--data-dir")
            .arg(&data)
            .args(["--host", "127.0.0.1", "--shards", "2"])
            .args(["--tcp-port", "0", "--http-port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn the boltq server");
        // Owned by `server` first, so a server that never gets ready is killed on the panic.
        let mut server = Server {
            child,
            addr: String::new(),
            http: String::new(),
            tls,
            _dir: dir,
        };
        let (tcp, http) = wait_for_ready_ports(&log_path);
        server.addr = format!("127.0.0.1:{tcp}");
        server.http = format!("127.0.0.1:{http}");
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        wait_until_pings(&self.addr, self.tls.clone());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the bench with `args` (plus `--addr --json --quiet`) and returns exit code and report.
fn bench(server: &Server, args: &[&str]) -> (i32, Value) {
    let out = Command::new(BENCH)
        .args(args)
        .args(["--addr", &server.addr, "--json", "--quiet"])
        .stdin(Stdio::null())
        .output()
        .expect("run boltq-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "report is not JSON ({e}); exit {:?}\nstdout: {stdout}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// For every request kind: sent = acknowledged + errors; and the report's checks all passed.
fn assert_adds_up(r: &Value) {
    let ops = r["ops"].as_object().expect("ops");
    assert!(!ops.is_empty(), "no requests counted: {r}");
    let mut errors = 0;
    for (name, o) in ops {
        let (sent, acked, errs) = (num(&o["sent"]), num(&o["acknowledged"]), num(&o["errors"]));
        assert_eq!(sent, acked + errs, "{name}: {o}");
        errors += errs;
    }
    assert!(num(&r["errors"]["total"]) >= errors, "{r}");
    for (name, ok) in r["checks"].as_object().unwrap() {
        assert_eq!(ok, &Value::Bool(true), "check {name} failed: {r}");
    }
    assert!(r["window_secs"].as_f64().unwrap() > 0.0, "{r}");
}

fn assert_clean(code: i32, r: &Value) {
    assert_eq!(num(&r["errors"]["total"]), 0, "{r}");
    assert_eq!((code, &r["pass"]), (0, &Value::Bool(true)), "{r}");
    assert_adds_up(r);
}

#[test]
fn publish_counts_add_up_and_match_the_server() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "publish",
            "--duration-secs",
            "1",
            "--connections",
            "3",
            "--depth",
            "8",
            "--queues",
            "2",
            "--priority-mix",
            "0:3,9:1",
            "--prefix",
            "smoke-pub",
        ],
    );
    assert_clean(code, &r);
    let published = num(&r["messages"]["published"]);
    assert!(published > 0, "{r}");
    assert_eq!(published, num(&r["ops"]["publish"]["acknowledged"]));
    assert!(r["latency_us"]["publish"]["p99"].as_f64().unwrap() > 0.0);
    // STATS agreed that every acknowledged message is stored.
    assert_eq!(r["checks"]["server_ready_delta_equals_published"], true);
}

#[test]
fn consume_drains_exactly_what_was_prefilled() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "consume",
            "--prefill",
            "3000",
            "--connections",
            "2",
            "--depth",
            "16",
            "--batch",
            "20",
            "--wait-ms",
            "50",
            "--queues",
            "2",
            "--prefix",
            "smoke-con",
        ],
    );
    assert_clean(code, &r);
    let m = &r["messages"];
    assert_eq!(num(&m["prefilled"]), 3000, "{r}");
    assert_eq!(num(&m["consumed"]), 3000, "{r}");
    assert_eq!(num(&m["acked"]), 3000, "{r}");
}

#[test]
fn queue_consumes_everything_published_with_end_to_end_latency() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "queue",
            "--duration-secs",
            "1",
            "--warmup-secs",
            "0.2",
            "--producers",
            "2",
            "--consumers",
            "2",
            "--depth",
            "16",
            "--prefix",
            "smoke-queue",
        ],
    );
    assert_clean(code, &r);
    let m = &r["messages"];
    assert!(num(&m["published"]) > 0, "{r}");
    assert_eq!(num(&m["consumed"]), num(&m["published"]), "{r}");
    assert_eq!(num(&m["acked"]), num(&m["consumed"]), "{r}");
    assert!(num(&r["latency_us"]["end_to_end"]["count"]) > 0, "{r}");
}

/// `--queue-per-connection`: producer 0 and consumer 0 keep to queue 0, so the second
/// queue is never created (round-robin would publish half the messages to it).
#[test]
fn queue_per_connection_keeps_each_connection_on_its_queue() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "queue",
            "--messages",
            "300",
            "--queues",
            "2",
            "--queue-per-connection",
            "--depth",
            "8",
            "--prefix",
            "smoke-one",
        ],
    );
    assert_clean(code, &r);
    assert_eq!(num(&r["messages"]["consumed"]), 300, "{r}");
    let mut client = boltq::client::Client::connect(&server.addr, Default::default()).unwrap();
    let stats = client.stats().unwrap();
    let queues = stats["Queues"].as_object().unwrap();
    assert!(queues.contains_key("smoke-one.0"), "{stats}");
    assert!(!queues.contains_key("smoke-one.1"), "{stats}");
}

#[test]
fn queue_open_loop_reports_against_the_schedule() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "queue",
            "--messages",
            "500",
            "--rate",
            "1000",
            "--depth",
            "32",
            "--prefix",
            "smoke-open",
        ],
    );
    assert_clean(code, &r);
    assert_eq!(num(&r["messages"]["published"]), 500, "{r}");
    assert_eq!(num(&r["messages"]["consumed"]), 500, "{r}");
    // 500 sends at 1000/s take about half a second, however fast the server is.
    let window = r["window_secs"].as_f64().unwrap();
    assert!(window >= 0.45, "{r}");
}

#[test]
fn pubsub_delivers_every_message_to_every_subscriber() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "pubsub",
            "--duration-secs",
            "1",
            "--subscribers",
            "4",
            "--depth",
            "8",
            "--prefix",
            "smoke-ps",
        ],
    );
    assert_clean(code, &r);
    let m = &r["messages"];
    let published = num(&m["published"]);
    assert!(published > 0, "{r}");
    assert_eq!(num(&m["delivered"]), published * 4, "{r}");
    assert_eq!(num(&m["expected_deliveries"]), published * 4, "{r}");
}

#[test]
fn exchange_routes_every_message_to_one_bound_queue() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let (code, r) = bench(
        &server,
        &[
            "exchange",
            "--duration-secs",
            "1",
            "--bindings",
            "20",
            "--depth",
            "8",
            "--prefix",
            "smoke-x",
        ],
    );
    assert_clean(code, &r);
    assert!(
        num(&r["ops"]["publish_exchange"]["acknowledged"]) > 0,
        "{r}"
    );
    assert_eq!(r["checks"]["routed_equals_published"], true, "{r}");
}

#[test]
fn server_errors_are_counted_by_kind_and_fail_the_run() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    // Names over 1,024 bytes are refused by the server with an ERROR reply per request.
    let long_prefix = "p".repeat(1100);
    let (code, r) = bench(
        &server,
        &[
            "publish",
            "--messages",
            "50",
            "--depth",
            "4",
            "--prefix",
            &long_prefix,
        ],
    );
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["pass"], false);
    assert_eq!(num(&r["ops"]["publish"]["sent"]), 50, "{r}");
    assert_eq!(num(&r["ops"]["publish"]["errors"]), 50, "{r}");
    assert_eq!(num(&r["errors"]["total"]), 50, "{r}");
    let kinds = r["errors"]["by_kind"].as_object().unwrap();
    assert_eq!(kinds.len(), 1, "{r}");
    let (kind, n) = kinds.iter().next().unwrap();
    assert!(kind.starts_with("server: "), "{kind}");
    assert_eq!(num(n), 50);

    // The same run passes when the errors are allowed.
    let (code, r) = bench(
        &server,
        &[
            "publish",
            "--messages",
            "50",
            "--depth",
            "4",
            "--prefix",
            &long_prefix,
            "--max-errors",
            "50",
        ],
    );
    assert_eq!((code, &r["pass"]), (0, &Value::Bool(true)), "{r}");
}

#[test]
fn server_metrics_agree_with_the_bench_counts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let http = server.http.clone();
    let (code, r) = bench(
        &server,
        &[
            "queue",
            "--duration-secs",
            "1",
            "--producers",
            "2",
            "--consumers",
            "2",
            "--depth",
            "8",
            "--prefix",
            "smoke-http",
            "--http",
            &http,
        ],
    );
    assert_clean(code, &r);
    let (m, s) = (&r["messages"], &r["server"]);
    let published = num(&m["published"]);
    assert!(published > 0, "{r}");
    // Scraped before the first request and after the last reply: exactly the run's messages.
    assert_eq!(num(&s["messages_published"]["delta"]), published, "{r}");
    assert_eq!(
        num(&s["messages_consumed"]["delta"]),
        num(&m["consumed"]),
        "{r}"
    );
    assert_eq!(num(&s["messages_acked"]["delta"]), num(&m["acked"]), "{r}");
    assert_eq!(
        r["checks"]["server_published_delta_equals_acknowledged"],
        true
    );
    assert_eq!(r["checks"]["server_consumed_delta_equals_consumed"], true);
    assert!(
        s["messages_published"]["per_sec"].as_f64().unwrap() > 0.0,
        "{r}"
    );
    assert!(num(&s["rss_bytes"]["after"]) > 1_000_000, "{r}");
    // Group commit under fsync = "always": at least one fdatasync, never more than one per
    // record written (every publish, consume and ack is one).
    let fsyncs = num(&s["fsyncs"]["delta"]);
    assert!(fsyncs >= 1, "{r}");
    assert!(fsyncs <= 3 * published, "{r}");
    assert_eq!(num(&s["commit_rounds"]["delta"]), fsyncs, "{r}");
}

#[test]
fn size_distributions_are_drawn_counted_and_stored() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let http = server.http.clone();
    for (size, lo, hi) in [("64-4096", 64.0, 4096.0), ("100:1,4000:1", 100.0, 4000.0)] {
        let (code, r) = bench(
            &server,
            &[
                "publish",
                "--duration-secs",
                "1",
                "--depth",
                "8",
                "--size",
                size,
                "--prefix",
                "smoke-size",
                "--http",
                &http,
            ],
        );
        assert_clean(code, &r);
        assert_eq!(r["config"]["size"], size, "{r}");
        let published = num(&r["messages"]["published"]);
        let mean = r["messages"]["mean_payload_bytes"].as_f64().unwrap();
        // Both distributions have their expected mean in the middle; a few hundred draws
        // land well inside the range.
        assert!(mean > lo + 200.0 && mean < hi - 200.0, "mean {mean}: {r}");
        let rate = r["throughput"]["msgs_per_sec"].as_f64().unwrap();
        let mbps = r["throughput"]["mb_per_sec"].as_f64().unwrap();
        assert!(
            (mbps - rate * mean / 1e6).abs() <= 0.01,
            "MB/s from the mean: {r}"
        );
        assert_eq!(num(&r["server"]["messages_published"]["delta"]), published);
        // The server wrote at least the payload bytes it acknowledged to disk.
        let written = num(&r["server"]["disk_write_bytes"]["delta"]) as f64;
        assert!(written >= mean * published as f64, "{r}");
    }
}

#[test]
fn bad_size_and_http_options_are_setup_errors() {
    let run = |args: &[&str]| {
        let out = Command::new(BENCH)
            .args(["publish", "--duration-secs", "1", "--quiet"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--size", "100-50"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("small to large"), "{err}");
    let (code, err) = run(&["--size", "10"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("outside 34..=4000000"), "{err}");
    // Nothing listens on a port that was just free: refused before any load is sent.
    let nobody = format!("127.0.0.1:{}", free_port());
    let (code, err) = run(&["--http", &nobody]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--http") && err.contains("cannot connect"),
        "{err}"
    );
}

#[test]
fn tls_runs_are_clean_and_plain_clients_fail_setup() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pki = Pki::new();
    let server = Server::start_tls(&pki);
    let ca = pki.ca_file();
    let ca = ca.to_str().unwrap();
    // `[server.tls]` covers the admin listener too.
    let http = format!("https://{}", server.http);
    // Verified against the CA; /metrics over HTTPS (the same certificate); sizes up to 64 KiB
    // so records span many TLS frames.
    let (code, r) = bench(
        &server,
        &[
            "queue",
            "--duration-secs",
            "1",
            "--producers",
            "2",
            "--consumers",
            "2",
            "--depth",
            "16",
            "--size",
            "64-65536",
            "--prefix",
            "smoke-tls",
            "--tls",
            "--tls-ca",
            ca,
            "--http",
            &http,
        ],
    );
    assert_clean(code, &r);
    let published = num(&r["messages"]["published"]);
    assert!(published > 0, "{r}");
    assert_eq!(num(&r["messages"]["consumed"]), published, "{r}");
    assert_eq!(num(&r["server"]["messages_published"]["delta"]), published);

    // Skipping verification accepts a name the certificate does not carry; pushes arrive.
    let (code, r) = bench(
        &server,
        &[
            "pubsub",
            "--duration-secs",
            "1",
            "--subscribers",
            "2",
            "--depth",
            "8",
            "--prefix",
            "smoke-tls-ps",
            "--tls",
            "--tls-insecure",
            "--tls-server-name",
            "elsewhere.example",
        ],
    );
    assert_clean(code, &r);
    let published = num(&r["messages"]["published"]);
    assert_eq!(num(&r["messages"]["delivered"]), published * 2, "{r}");

    let setup_error = |args: &[&str]| {
        let out = Command::new(BENCH)
            .args(["publish", "--duration-secs", "1", "--quiet", "--no-verify"])
            .args(["--addr", &server.addr])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A plain client against the TLS port: its setup PING gets no protocol answer.
    let err = setup_error(&[]);
    assert!(err.contains("PING on"), "{err}");
    // Verification on, and the name is not on the certificate.
    let err = setup_error(&[
        "--tls",
        "--tls-ca",
        ca,
        "--tls-server-name",
        "elsewhere.example",
    ]);
    assert!(err.contains("TLS handshake"), "{err}");
    // The system's CAs do not know the test CA.
    let err = setup_error(&["--tls"]);
    assert!(err.contains("TLS"), "{err}");
}

#[test]
fn setup_failure_exits_2() {
    // Nothing listens on a port that was just free.
    let port = free_port();
    let out = Command::new(BENCH)
        .args(["publish", "--duration-secs", "1", "--quiet"])
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect"), "{err}");
}

#[test]
fn a_server_that_stops_answering_ends_the_run_with_timeouts() {
    // Answers the setup PING, then reads and never replies: what a shard that hangs
    // mid-run looks like from outside.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut s = stream;
                let mut ping = [0u8; 7]; // 0x06, length 2, "{}"
                if s.read_exact(&mut ping).is_err() || ping[0] != 0x06 {
                    return;
                }
                let _ = s.write_all(&[0x00, 2, 0, 0, 0, b'{', b'}']);
                let mut sink = [0u8; 4096];
                while matches!(std::io::Read::read(&mut s, &mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    let started = Instant::now();
    let out = Command::new(BENCH)
        .args([
            "publish",
            "--messages",
            "100",
            "--depth",
            "4",
            "--no-verify",
        ])
        .args([
            "--request-timeout-secs",
            "1",
            "--json",
            "--quiet",
            "--addr",
            &addr,
        ])
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let publish = &r["ops"]["publish"];
    assert_eq!(num(&publish["sent"]), 4, "{r}");
    assert_eq!(num(&publish["acknowledged"]), 0, "{r}");
    assert_eq!(num(&publish["errors"]), 4, "{r}");
    assert_eq!(num(&r["errors"]["total"]), 4, "{r}");
}
