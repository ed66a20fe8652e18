//! The gateway scenarios of `boltq-bench` (chat, channel, reconnect) for about a second
//! each against a real `boltq` with the messaging plane on, checking that the JSON report
//! parses and its counts add up: sent = acknowledged + errors for every request kind, and
//! delivered = acknowledged sends × recipients once the run has drained.

mod support;

use boltq_io::testutil::TempDir;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use support::{free_port, server_binary, wait_for_ready_ports, wait_until_pings, Pki, BENCH};

const SECRET: &str = "smoke-secret-0123456789abcdef-0123456789";

/// One run at a time: two cores are shared by the server, the generator and the tests.
static SERIAL: Mutex<()> = Mutex::new(());

/// A server with stream, identity and gateway on, and a membership URL pointing at a port
/// where the bench's own membership service will listen.
struct Server {
    child: Child,
    tcp: String,
    /// Admin HTTP address (`/metrics`; the gateway shares the port).
    http: String,
    url: String,
    membership: String,
    _dir: TempDir,
}

impl Server {
    fn start() -> Server {
        Server::start_with(None)
    }

    /// The gateway on its own TLS listener (`[messaging.gateway.tls]`); `url` is wss://.
    fn start_tls(pki: &Pki) -> Server {
        Server::start_with(Some(pki))
    }

    fn start_with(tls: Option<&Pki>) -> Server {
        let dir = TempDir::new("gateway-bench-smoke");
        let members = free_port();
        // The gateway's own TLS listener needs a real port (its 0 means "on the HTTP
        // listener"); the TCP and HTTP ports are the kernel's choice, read back when ready.
        let (gateway, tls_port) = match tls {
            None => (String::new(), None),
            Some(pki) => {
                let port = free_port();
                let section = format!(
                    "port = {port}\n[messaging.gateway.tls]\nenabled = true\n{}\n",
                    pki.config_lines()
                );
                (section, Some(port))
            }
        };
        let config = dir.path().join("boltq.toml");
        std::fs::write(
            &config,
            format!(
                "[messaging.stream]\nenabled = true\n\n\
                 [messaging.identity]\nenabled = true\n\
                 keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\n\
                 [messaging.chat]\nmembership_url = \"http://127.0.0.1:{members}\"\n\n\
                 [messaging.gateway]\nenabled = true\n{gateway}"
            ),
        )
        .unwrap();
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(server_binary())
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--host", "127.0.0.1", "--shards", "2"])
            .args(["--tcp-port", "0", "--http-port", "0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn the boltq server");
        // Owned by `server` first, so a server that never gets ready is killed on the panic.
        let mut server = Server {
            child,
            tcp: String::new(),
            http: String::new(),
            url: String::new(),
            membership: format!("127.0.0.1:{members}"),
            _dir: dir,
        };
        let (tcp, http) = wait_for_ready_ports(&log_path);
        server.tcp = format!("127.0.0.1:{tcp}");
        server.http = format!("127.0.0.1:{http}");
        server.url = match tls_port {
            None => format!("ws://127.0.0.1:{http}/ws"),
            Some(port) => format!("wss://127.0.0.1:{port}/ws"),
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        wait_until_pings(&self.tcp, None);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the bench with `args` plus `--url --secret --json --quiet`; exit code and report.
fn bench(server: &Server, args: &[&str]) -> (i32, Value) {
    bench_at(&server.url, args)
}

/// [`bench`] against the gateway at `url`.
fn bench_at(url: &str, args: &[&str]) -> (i32, Value) {
    let out = Command::new(BENCH)
        .args(args)
        .args(["--url", url, "--secret", SECRET])
        .args(["--json", "--quiet"])
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

/// No errors, exit 0, every request kind adds up, every check of the report passed.
fn assert_clean(code: i32, r: &Value) {
    assert_eq!(num(&r["errors"]["total"]), 0, "{r}");
    assert_eq!((code, &r["pass"]), (0, &Value::Bool(true)), "{r}");
    let ops = r["ops"].as_object().expect("ops");
    for (name, o) in ops {
        let (sent, acked, errs) = (num(&o["sent"]), num(&o["acknowledged"]), num(&o["errors"]));
        assert_eq!(sent, acked + errs, "{name}: {o}");
    }
    for (name, ok) in r["checks"].as_object().unwrap() {
        assert_eq!(ok, &Value::Bool(true), "check {name} failed: {r}");
    }
    assert!(r["window_secs"].as_f64().unwrap() > 0.0, "{r}");
}

fn acked_sends(r: &Value) -> u64 {
    let send = &r["ops"]["send"];
    assert_eq!(
        num(&send["sent"]),
        num(&send["acknowledged"]) + num(&send["errors"])
    );
    num(&send["acknowledged"])
}

#[test]
fn chat_direct_delivers_every_send_to_the_other_member() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let args = [
        "chat",
        "--duration-secs",
        "1",
        "--devices",
        "20",
        "--depth",
        "2",
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let sends = acked_sends(&r);
    assert!(sends > 0, "{r}");
    let m = &r["messages"];
    assert_eq!(num(&m["published"]), sends, "{r}");
    assert_eq!(
        num(&m["delivered"]),
        sends,
        "one recipient per direct send: {r}"
    );
    assert_eq!(num(&m["echoes"]), sends, "{r}");
    // Setup: 20 devices connected, each subscribed to its one conversation, 10 primed.
    assert_eq!(num(&r["ops"]["hello"]["acknowledged"]), 20, "{r}");
    assert_eq!(num(&r["ops"]["subscribe"]["acknowledged"]), 20, "{r}");
    assert_eq!(num(&m["prime_acked"]), 10, "{r}");
    let lat = &r["latency_us"];
    assert_eq!(num(&lat["delivery"]["count"]), sends, "{r}");
    assert_eq!(num(&lat["send"]["count"]), sends, "{r}");
    assert!(lat["delivery"]["p99"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn chat_groups_through_the_builtin_membership_service_with_inbox_pointers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let args = [
        "chat",
        "--duration-secs",
        "1",
        "--devices",
        "12",
        "--kind",
        "group",
        "--group-size",
        "4",
        "--inbox",
        "--membership-listen",
        &server.membership,
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let sends = acked_sends(&r);
    assert!(sends > 0, "{r}");
    let m = &r["messages"];
    assert_eq!(num(&m["delivered"]), sends * 3, "three other members: {r}");
    assert_eq!(num(&m["expected_deliveries"]), sends * 3, "{r}");
    // Every send (the 3 primes too) puts a pointer in each of the 4 members' inboxes.
    assert_eq!(num(&m["prime_acked"]), 3, "{r}");
    assert_eq!(num(&m["inbox_pointers"]), (sends + 3) * 4, "{r}");
    // The server asked the bench's service (is-member on subscribe, members on each send).
    assert!(num(&m["membership_calls"]) >= sends, "{r}");
}

#[test]
fn chat_open_loop_sends_exactly_the_budget_on_schedule() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let args = [
        "chat",
        "--messages",
        "300",
        "--rate",
        "500",
        "--devices",
        "10",
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    assert_eq!(acked_sends(&r), 300, "{r}");
    assert_eq!(num(&r["messages"]["delivered"]), 300, "{r}");
    // 300 sends at 500/s take about 0.6 s however fast the server is.
    assert!(r["window_secs"].as_f64().unwrap() >= 0.55, "{r}");
    assert_eq!(r["config"]["depth"], 16, "open-loop default window: {r}");
    // The generator's own lateness is measured for every scheduled send.
    assert_eq!(num(&r["latency_us"]["send_lag"]["count"]), 300, "{r}");
}

#[test]
fn channel_fans_every_send_out_to_every_listener() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let args = [
        "channel",
        "--duration-secs",
        "1",
        "--listeners",
        "25",
        "--senders",
        "2",
        "--membership-listen",
        &server.membership,
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let sends = acked_sends(&r);
    assert!(sends > 0, "{r}");
    assert_eq!(num(&r["messages"]["delivered"]), sends * 25, "{r}");
    assert_eq!(
        num(&r["latency_us"]["delivery"]["count"]),
        sends * 25,
        "{r}"
    );
    assert!(
        r["messages"].get("echoes").is_none(),
        "senders do not subscribe: {r}"
    );
}

#[test]
fn reconnect_resumes_every_device_with_nothing_lost_or_repeated() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let args = [
        "reconnect",
        "--devices",
        "30",
        "--away-messages",
        "3",
        "--writers",
        "2",
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let m = &r["messages"];
    assert_eq!(acked_sends(&r), 90, "{r}");
    assert_eq!(num(&m["disconnected"]), 30, "{r}");
    assert_eq!(num(&m["resumed"]), 30, "{r}");
    assert_eq!(num(&m["not_resumed"]), 0, "{r}");
    assert_eq!(num(&m["caught_up"]), 30, "{r}");
    assert_eq!(num(&m["delivered"]), 90, "{r}");
    // 30 devices plus 2 writers at setup, 30 again on resume.
    assert_eq!(num(&r["ops"]["hello"]["acknowledged"]), 62, "{r}");
    assert_eq!(num(&r["ops"]["commit"]["acknowledged"]), 30, "{r}");
    assert_eq!(num(&r["latency_us"]["catch_up"]["count"]), 30, "{r}");
    assert_eq!(num(&r["latency_us"]["hello"]["count"]), 30, "{r}");
    assert!(m["all_caught_up_secs"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn reconnect_in_groups_resumes_every_member() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let args = [
        "reconnect",
        "--devices",
        "24",
        "--group-size",
        "5",
        "--away-messages",
        "2",
        "--membership-listen",
        &server.membership,
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let m = &r["messages"];
    // 24 devices in 5 groups (the last has 4): 2 writes to each group while away.
    assert_eq!(r["config"]["conversations"], 5, "{r}");
    assert_eq!(acked_sends(&r), 10, "{r}");
    assert_eq!(num(&m["resumed"]), 24, "{r}");
    assert_eq!(num(&m["caught_up"]), 24, "{r}");
    assert_eq!(
        num(&m["delivered"]),
        48,
        "every device got both writes: {r}"
    );
    assert_eq!(num(&m["prime_acked"]), 5, "{r}");
}

#[test]
fn chat_with_a_size_range_matches_the_server_counts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let http = server.http.clone();
    let args = [
        "chat",
        "--duration-secs",
        "1",
        "--devices",
        "20",
        "--depth",
        "2",
        "--size",
        "64-4096",
        "--http",
        &http,
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let sends = acked_sends(&r);
    assert!(sends > 0, "{r}");
    assert_eq!(r["config"]["size"], "64-4096", "{r}");
    let mean = r["messages"]["mean_payload_bytes"].as_f64().unwrap();
    assert!(mean > 264.0 && mean < 3896.0, "mean {mean}: {r}");
    // Every measured send, and nothing else, went through the gateway and into a stream.
    let s = &r["server"];
    assert_eq!(num(&s["gateway_sends"]["delta"]), sends, "{r}");
    assert_eq!(num(&s["stream_appends"]["delta"]), sends, "{r}");
    assert_eq!(r["checks"]["server_sends_delta_equals_acknowledged"], true);
    // The server wrote at least the payload bytes it acknowledged to disk.
    let written = num(&s["disk_write_bytes"]["delta"]) as f64;
    assert!(written >= mean * sends as f64, "{r}");
}

#[test]
fn chat_over_wss_is_clean_and_an_untrusted_certificate_fails_setup() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pki = Pki::new();
    let server = Server::start_tls(&pki);
    let ca = pki.ca_file();
    let ca = ca.to_str().unwrap();
    let args = [
        "chat",
        "--duration-secs",
        "1",
        "--devices",
        "20",
        "--depth",
        "2",
        "--size",
        "24-8192",
        "--tls-ca",
        ca,
    ];
    let (code, r) = bench(&server, &args);
    assert_clean(code, &r);
    let sends = acked_sends(&r);
    assert!(sends > 0, "{r}");
    assert_eq!(num(&r["messages"]["delivered"]), sends, "{r}");
    assert_eq!(num(&r["ops"]["hello"]["acknowledged"]), 20, "{r}");

    // Without the CA the system's store does not trust the test certificate.
    let out = Command::new(BENCH)
        .args(["chat", "--duration-secs", "1", "--devices", "2", "--quiet"])
        .args(["--url", &server.url, "--secret", SECRET])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tls"), "{err}");
}

#[test]
fn tls_options_are_checked_before_anything_connects() {
    let run = |args: &[&str]| {
        let out = Command::new(BENCH)
            .args([
                "chat",
                "--duration-secs",
                "1",
                "--quiet",
                "--secret",
                SECRET,
            ])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(run(&["--tls"]).contains("wss://"));
    assert!(run(&["--tls-insecure"]).contains("need --tls, a wss:// --url"));
}

#[test]
fn a_wrong_secret_is_a_setup_failure() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let out = Command::new(BENCH)
        .args(["chat", "--duration-secs", "1", "--devices", "2", "--quiet"])
        .args(["--url", &server.url])
        .args(["--secret", "not-the-server-secret-0123456789abcdef"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTTP 401"), "{err}");
}

/// Three clustered servers (one shard each) with the messaging plane on; `nodes[i]` is
/// node i's process and admin HTTP port (the gateway shares it).
struct Cluster {
    nodes: Vec<(Child, u16)>,
    _dir: TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (child, _) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The status of `GET path` on 127.0.0.1:`port`, if it answered.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn start_cluster() -> Cluster {
    let dir = TempDir::new("gateway-bench-cluster");
    let ports: Vec<(u16, u16, u16)> = (0..3)
        .map(|_| (free_port(), free_port(), free_port()))
        .collect();
    let mut cluster = Cluster {
        nodes: Vec::new(),
        _dir: dir,
    };
    for (i, &(tcp, http, raft)) in ports.iter().enumerate() {
        let peers: Vec<String> = (0..3)
            .filter(|&j| j != i)
            .map(|j| format!("\"n{j}@127.0.0.1:{}\"", ports[j].2))
            .collect();
        let base = cluster._dir.path();
        let config = base.join(format!("n{i}.toml"));
        std::fs::write(
            &config,
            format!(
                "[server]\nhost = \"127.0.0.1\"\ntcp_port = {tcp}\nhttp_port = {http}\nshards = 1\n\
                 [storage]\ndata_dir = \"{}\"\n\
                 [messaging.stream]\nenabled = true\n\
                 [messaging.identity]\nenabled = true\nkeys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
                 [messaging.gateway]\nenabled = true\n\
                 [cluster]\nenabled = true\nnode_id = \"n{i}\"\nraft_addr = \"127.0.0.1:{raft}\"\npeers = [{}]\n",
                base.join(format!("data-n{i}")).display(),
                peers.join(", ")
            ),
        )
        .unwrap();
        let log = std::fs::File::create(base.join(format!("n{i}.log"))).unwrap();
        let child = Command::new(server_binary())
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn a boltq node");
        cluster.nodes.push((child, http));
    }
    // Ready: every node knows a leader for every slot.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for &(_, http, _) in &ports {
        while http_status(http, "/readyz") != Some(200) {
            assert!(std::time::Instant::now() < deadline, "cluster not ready");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    cluster
}

/// Issue 15's promise for devices whose node dies: they come back on another node with a
/// fresh session (sessions live on their node), subscribe from their committed cursors,
/// and receive everything written while they were away exactly once — the writes going
/// through a third node while the dead node's slots elect new leaders.
#[test]
fn reconnect_on_another_node_after_its_node_dies_loses_and_repeats_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = start_cluster();
    let url = |i: usize| format!("ws://127.0.0.1:{}/ws", cluster.nodes[i].1);
    let kill = format!("kill -9 {}", cluster.nodes[0].0.id());
    let (writer, back) = (url(1), url(2));
    let args = [
        "reconnect",
        "--devices",
        "40",
        "--away-messages",
        "3",
        "--writers",
        "2",
        "--writer-url",
        &writer,
        "--resume-url",
        &back,
        "--while-away-cmd",
        &kill,
    ];
    let (code, r) = bench_at(&url(0), &args);
    assert_clean(code, &r);
    let m = &r["messages"];
    assert_eq!(acked_sends(&r), 120, "{r}");
    assert_eq!(num(&m["disconnected"]), 40, "{r}");
    assert_eq!(num(&m["not_resumed"]), 40, "fresh sessions on n2: {r}");
    assert_eq!(num(&m["caught_up"]), 40, "{r}");
    assert_eq!(num(&m["delivered"]), 120, "each write once: {r}");
    assert!(
        http_status(cluster.nodes[0].1, "/readyz").is_none(),
        "n0 was killed"
    );
}
