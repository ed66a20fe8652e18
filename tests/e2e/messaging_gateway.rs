//! End to end over real WebSockets against the real binary, driven by a foreign client
//! (tests/clients/chat_client.py, Python `websockets`; it mints its own tokens and shares no
//! code with the server). Each test starts its own server with the messaging plane on.
//! The slow-consumer tests drive their devices from Rust instead: they must decide
//! byte by byte when a device reads.

use crate::support;

use crate::support::Server;
use async_tungstenite::tungstenite;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    config_with(dir, "")
}

/// The messaging plane on, one HS256 key, the gateway on; `gateway_extra` is appended to
/// the `[messaging.gateway]` table.
fn config_with(dir: &std::path::Path, gateway_extra: &str) -> std::path::PathBuf {
    config_full(dir, "", gateway_extra)
}

fn config_full(
    dir: &std::path::Path,
    stream_extra: &str,
    gateway_extra: &str,
) -> std::path::PathBuf {
    let path = dir.join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n{stream_extra}\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\n{gateway_extra}\n"
        ),
    )
    .unwrap();
    path
}

fn start(tmp: &TempDir) -> Server {
    let cfg = config(tmp.path());
    Server::start(&["--config", cfg.to_str().unwrap()])
}

fn python(args: &[&str]) -> (bool, String) {
    python_env(args, &[])
}

fn python_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/chat_client.py"
        ))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("python3 runs (CI installs the websockets package)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn scenario(name: &str) {
    let tmp = TempDir::new("gateway");
    let s = start(&tmp);
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    let (ok, out) = python(&[name, &url, SECRET]);
    assert!(
        ok,
        "scenario {name} failed:\n{out}\nserver log:\n{}",
        s.log()
    );
}

#[test]
fn two_users_chat_with_gap_free_ordered_sequences() {
    scenario("chat");
}

#[test]
fn a_retried_send_yields_one_message() {
    scenario("dedup");
}

#[test]
fn users_cannot_read_or_write_what_is_not_theirs() {
    scenario("acl");
}

#[test]
fn four_devices_keep_independent_cursors_across_reconnects() {
    scenario("cursors");
}

#[test]
fn resume_after_an_abrupt_disconnect_loses_and_duplicates_nothing() {
    scenario("resume");
}

#[test]
fn a_resume_takes_over_a_live_socket_and_bad_frames_keep_the_connection() {
    scenario("takeover");
}

/// How long the slow-consumer tests let a socket take nothing (short, so they are quick).
const STALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Payload of each message in the slow-consumer tests: large, so socket buffers fill fast.
const BIG_PAYLOAD_BYTES: usize = 32 * 1024;

/// A server for the slow-consumer tests: a 1 s stall timeout, the smallest outbound queue
/// (64 KiB) so little hides in it, and no fsync so sends are quick.
fn slow_consumer_server() -> (Server, TempDir) {
    support::gateway::start_with_toml(&format!(
        "[messaging]\nfsync = \"never\"\n{}\
         slow_consumer_timeout = \"{}ms\"\nsend_buffer_bytes = 65536\n",
        support::gateway::messaging_toml(),
        STALL_TIMEOUT.as_millis()
    ))
}

/// A device on a bare WebSocket whose reading the test controls: past `hello` and
/// subscribed to `topic` (its `ack` read), and then it reads only when told.
fn raw_device(s: &Server, user: &str, device: &str, topic: &str) -> WebSocket<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("ws://127.0.0.1:{}/ws", s.http_port)
        .into_client_request()
        .unwrap();
    let bearer = format!("Bearer {}", support::gateway::token(user));
    request
        .headers_mut()
        .insert("Authorization", bearer.parse().unwrap());
    let limits = WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let (mut ws, _) = tungstenite::client::client_with_config(request, stream, Some(limits))
        .unwrap_or_else(|e| panic!("upgrade: {e}\nserver log:\n{}", s.log()));
    let hello = json!({"op": "hello", "id": "h", "version": 1, "device_id": device});
    ws.send(Message::Text(hello.to_string().into())).unwrap();
    let subscribe = json!({"op": "subscribe", "id": "s", "topic": topic});
    ws.send(Message::Text(subscribe.to_string().into()))
        .unwrap();
    loop {
        let Message::Text(t) = ws.read().unwrap() else {
            continue;
        };
        let f: Value = serde_json::from_str(t.as_str()).unwrap();
        assert_ne!(f["op"], "error", "{f}");
        if f["op"] == "ack" && f["id"] == "s" {
            return ws;
        }
    }
}

fn slow_client_drops(s: &Server) -> u64 {
    support::admin::admin_json(s, "/gateway/stats")["slow_client_drops"]
        .as_u64()
        .unwrap()
}

fn big_text(i: usize) -> String {
    let mut t = format!("{i}:");
    t.push_str(&"x".repeat(BIG_PAYLOAD_BYTES - t.len()));
    t
}

/// Issue 17: a device that stops reading is closed once its socket has accepted nothing for
/// `slow_consumer_timeout` while frames waited (1008 `slow consumer`, which it sees when it
/// reads again within the close drain), and another device of the same user and
/// conversation keeps getting every message promptly, before and after.
#[test]
fn a_client_that_never_reads_is_disconnected_and_others_are_unaffected() {
    let (s, _tmp) = slow_consumer_server();
    let topic = "chat.direct.alice:bob";
    let mut alice = support::gateway::connect(&s, "alice", "phone");
    let mut good = support::gateway::connect(&s, "bob", "laptop");
    assert_eq!(
        good.request(json!({"op": "subscribe", "topic": topic}))
            .unwrap()["op"],
        "ack"
    );
    let mut slow = raw_device(&s, "bob", "tablet", topic);
    // From here on the slow device reads nothing. Alice sends until the server gives up on
    // it; the reading device must get each message within the prompt bound meanwhile.
    let prompt = Duration::from_secs(5);
    let started = Instant::now();
    // Filling the socket buffers takes a few MiB; the stall then takes STALL_TIMEOUT.
    let bound = Duration::from_secs(30);
    let mut sent = 0;
    // Alice sends message `n`; the reading device gets it at once.
    let mut send_and_check = |n: usize| {
        let r = alice
            .send_text("alice:bob", "direct", "", &big_text(n))
            .unwrap();
        assert_eq!(r["op"], "sent", "{r}");
        let got = good.records(topic, 1, prompt).unwrap();
        assert_eq!(
            got[0]["seq"], n as u64,
            "the reading device gets every message"
        );
    };
    while slow_client_drops(&s) == 0 {
        assert!(
            started.elapsed() < bound,
            "the stalled device was not closed within {bound:?} ({sent} messages sent)\n\
             server log:\n{}",
            s.log()
        );
        sent += 1;
        send_and_check(sent);
    }
    let closed_after = started.elapsed();
    // The device reads again: what the kernel held, the rest of the server's last batch,
    // then the close frame, which the server tries for 2 s before dropping the socket.
    let mut received_records = 0;
    let close = loop {
        match slow.read() {
            Ok(Message::Text(t)) => {
                let f: Value = serde_json::from_str(t.as_str()).unwrap();
                received_records += f["records"].as_array().map_or(0, Vec::len);
            }
            Ok(Message::Close(c)) => break c,
            Ok(_) => {}
            Err(e) => panic!(
                "no close frame: {e} after {received_records} records\nserver log:\n{}",
                s.log()
            ),
        }
    };
    let close = close.expect("the close frame has a code");
    assert_eq!(u16::from(close.code), 1008, "{close:?}");
    assert_eq!(close.reason.as_str(), "slow consumer");
    assert!(
        received_records < sent,
        "the stalled device was sent everything ({received_records} of {sent})"
    );
    // The reading device is untouched by the close.
    for _ in 0..3 {
        sent += 1;
        send_and_check(sent);
    }
    assert_eq!(slow_client_drops(&s), 1);
    println!(
        "closed after {closed_after:?}, {sent} messages sent, the slow device got \
         {received_records} records"
    );
}

/// The other side of issue 17: a device that reads slowly but steadily (far slower than the
/// server could send, so its queue stays full and every write waits on it) is never closed,
/// however long the transfer takes next to `slow_consumer_timeout`, and gets everything in
/// order.
#[test]
fn a_client_that_reads_slowly_but_steadily_is_not_disconnected() {
    let (s, _tmp) = slow_consumer_server();
    let topic = "chat.direct.alice:bob";
    let mut steady = raw_device(&s, "bob", "tablet", topic);
    // 200 messages of 32 KiB (about 9 MiB of frames with base64), read at no more than
    // 4 MiB/s: seconds, several stall timeouts, with the server always ahead of the device.
    let count = 200;
    let rate_bytes_per_s = 4.0 * 1024.0 * 1024.0;
    let mut alice = support::gateway::connect(&s, "alice", "phone");
    let sender = std::thread::spawn(move || {
        for i in 1..=count {
            let r = alice
                .send_text("alice:bob", "direct", "", &big_text(i))
                .unwrap();
            assert_eq!(r["op"], "sent", "{r}");
        }
        alice
    });
    let started = Instant::now();
    let mut seqs = Vec::new();
    while seqs.len() < count {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} of {count} records within 60 s",
            seqs.len()
        );
        let msg = steady.read().unwrap_or_else(|e| {
            panic!(
                "the steady device was cut off after {} records: {e}\nserver log:\n{}",
                seqs.len(),
                s.log()
            )
        });
        let Message::Text(t) = msg else {
            assert!(!matches!(msg, Message::Close(_)), "closed: {msg:?}");
            continue;
        };
        let f: Value = serde_json::from_str(t.as_str()).unwrap();
        if f["op"] == "record" {
            seqs.extend(
                f["records"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["seq"].as_u64().unwrap()),
            );
        }
        std::thread::sleep(Duration::from_secs_f64(t.len() as f64 / rate_bytes_per_s));
    }
    let took = started.elapsed();
    drop(sender.join().unwrap());
    assert_eq!(seqs, (1..=count as u64).collect::<Vec<_>>());
    assert!(
        took > 2 * STALL_TIMEOUT,
        "the transfer ({took:?}) must outlast the stall timeout for the test to mean anything"
    );
    assert_eq!(slow_client_drops(&s), 0);
    println!("{count} records read steadily in {took:?}");
}

#[test]
fn an_expired_token_cuts_a_listening_connection() {
    scenario("expiry");
}

/// Sends with `fsync = "always"` (the default) while the server is SIGKILLed at random
/// moments: every acknowledged send is present exactly once, in order, after restarts.
#[test]
fn acknowledged_sends_survive_kill_9() {
    let tmp = TempDir::new("gateway-crash");
    let cfg = config(tmp.path());
    let acked = tmp.path().join("acked.txt");
    let mut s = Server::start_restartable(&["--config", cfg.to_str().unwrap()]);
    let mut rng = boltq_io::testutil::Rng::new(0x5eed);
    for round in 0..10 {
        let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
        let mut child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/clients/chat_client.py"
            ))
            .args([
                "send_until_killed",
                &url,
                SECRET,
                acked.to_str().unwrap(),
                &round.to_string(),
            ])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300 + rng.below(700)));
        let (next, _) = s.restart_when_ports_free(libc::SIGKILL);
        s = next;
        // The sender ends when its connection dies, or within 5 s if it only connected
        // after the kill; never wait on it longer than that.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    let (ok, out) = python(&["verify_acked", &url, SECRET, acked.to_str().unwrap()]);
    assert!(ok, "{out}\nserver log:\n{}", s.log());
    let acked_count = std::fs::read_to_string(&acked).unwrap().lines().count();
    assert!(
        acked_count > 10,
        "the test must have acknowledged sends to check: {out}"
    );
}

/// `messaging.gateway.port` ≠ 0: the gateway and `/healthz` on their own listener, and no
/// WebSocket on the admin listener.
#[test]
fn a_dedicated_listener_serves_the_gateway_and_healthz() {
    let tmp = TempDir::new("gateway-port");
    let port = support::free_port();
    let cfg = config_with(tmp.path(), &format!("port = {port}"));
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        support::http_get(port, "/healthz").unwrap(),
        (200, "ok".to_string())
    );
    assert_eq!(support::http_get(port, "/overview").unwrap().0, 404);
    assert_eq!(support::http_get(s.http_port, "/ws").unwrap().0, 404);
    let url = format!("ws://127.0.0.1:{port}/ws");
    let (ok, out) = python(&["chat", &url, SECRET]);
    assert!(ok, "{out}\nserver log:\n{}", s.log());
}

/// Opens `n` connections to the gateway listener on `port`, all at once; returns them (still
/// open) and how many answered `GET /healthz` (the others were closed by a cap).
fn open_and_count_answered(port: u16, n: usize) -> (Vec<std::net::TcpStream>, usize) {
    let mut conns: Vec<std::net::TcpStream> = (0..n)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let answered = conns
        .iter_mut()
        .map(|c| support::answers_get(c, "/healthz"))
        .filter(|ok| *ok)
        .count();
    (conns, answered)
}

/// `messaging.gateway.connections_max`: devices past the cap of the dedicated listener are
/// closed at once and counted; those within it are served.
#[test]
fn device_connections_past_the_cap_are_closed_and_counted() {
    let tmp = TempDir::new("gateway-cap");
    let port = support::free_port();
    // Two shards (the test server's default): two connections each.
    let cfg = config_with(tmp.path(), &format!("port = {port}\nconnections_max = 4"));
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let (_conns, answered) = open_and_count_answered(port, 10);
    assert!(
        (2..=4).contains(&answered),
        "{answered} of 10 device connections answered with a cap of 4"
    );
    let metrics = support::http(s.http_port, "GET", "/metrics", &[], b"").body;
    let refused = support::refused_connections(&metrics, "gateway");
    assert_eq!(refused, 10 - answered as u64);
}

/// `messaging.gateway.connections_per_ip_max`: one address cannot take more than its
/// share, although the listener's total has room; the refusals are counted apart from the
/// total's, and places come back as that address's connections close.
#[test]
fn device_connections_from_one_address_past_its_cap_are_closed_and_counted() {
    let tmp = TempDir::new("gateway-ip-cap");
    let port = support::free_port();
    // Two shards (the test server's default): one connection per address each.
    let cfg = config_with(
        tmp.path(),
        &format!("port = {port}\nconnections_max = 100\nconnections_per_ip_max = 2"),
    );
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let (conns, answered) = open_and_count_answered(port, 8);
    assert!(
        (1..=2).contains(&answered),
        "{answered} of 8 connections from one address answered with a per-address cap of 2"
    );
    let metrics = support::http(s.http_port, "GET", "/metrics", &[], b"").body;
    let per_ip = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("boltq_connections_refused_per_ip_total{listener=\"gateway\"} ")
        })
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no per-address refusals in /metrics:\n{metrics}"));
    assert_eq!(per_ip, 8 - answered as u64);
    assert_eq!(
        support::refused_connections(&metrics, "gateway"),
        0,
        "the total had room"
    );
    drop(conns);
    // The closes reach the server asynchronously: the places come back soon after.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_conns, answered) = open_and_count_answered(port, 1);
        if answered == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no place came back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `messaging.gateway.tls`: devices connect with wss:// and a certificate they trust.
#[test]
fn the_dedicated_listener_speaks_tls() {
    let tmp = TempDir::new("gateway-tls");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_file = tmp.path().join("gw.pem");
    let key_file = tmp.path().join("gw.key");
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let port = support::free_port();
    let cfg = config_with(
        tmp.path(),
        &format!(
            "port = {port}\n[messaging.gateway.tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}",
            cert_file.to_str().unwrap(),
            key_file.to_str().unwrap()
        ),
    );
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let url = format!("wss://localhost:{port}/ws");
    let (ok, out) = python_env(
        &["chat", &url, SECRET],
        &[("BOLTQ_TEST_CAFILE", cert_file.to_str().unwrap())],
    );
    assert!(ok, "{out}\nserver log:\n{}", s.log());
}

/// Cursors are durable before the ack and survive a kill -9 (1,100 commits of one key pass
/// the cursor log's compaction threshold, so replay starts from a compacted log);
/// subscribing to conversations that do not exist creates no topic.
#[test]
fn cursors_survive_kill_9_and_subscribing_creates_nothing() {
    let tmp = TempDir::new("gateway-cursors");
    let cfg = config(tmp.path());
    let s = Server::start_restartable(&["--config", cfg.to_str().unwrap()]);
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    let (ok, out) = python(&["commit_many", &url, SECRET]);
    assert!(ok, "{out}\nserver log:\n{}", s.log());
    let mut topics: Vec<_> = std::fs::read_dir(s.data_dir().join("logs/streams"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    topics.sort();
    // The conversation and its members' inboxes (fan-out on write); none of the 50
    // conversations only subscribed to.
    assert_eq!(
        topics,
        [
            "chat.direct.alice%3Abob",
            "chat.inbox.alice",
            "chat.inbox.bob"
        ]
    );
    let (s, _) = s.restart_when_ports_free(libc::SIGKILL);
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    let (ok, out) = python(&["cursor_after_restart", &url, SECRET]);
    assert!(ok, "{out}\nserver log:\n{}", s.log());
}

/// Retention removes whole old segments; reading below the horizon says `gap` with the
/// real first sequence and continues from there.
#[test]
fn reading_below_the_retention_horizon_reports_a_gap() {
    let tmp = TempDir::new("gateway-retention");
    let cfg = config_full(
        tmp.path(),
        "segment_bytes = 1048576\nretention_bytes = 1",
        "",
    );
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    let (ok, out) = python(&["retention", &url, SECRET]);
    assert!(ok, "{out}\nserver log:\n{}", s.log());
}
