//! `/presence`, the overview's presence, signals and push sections, and their `/metrics`
//! series, end to end: the real binary (two shards), a scripted session over real
//! WebSockets (`boltq::client::gateway::GatewayClient`) and the operator's webhook played
//! by the test (a std thread answering every call with 200).
//!
//! The script: alice and bob connect, alice watches bob, bob goes `away`, bob listens to
//! typing in `alice:bob` and alice types (then types again, past her budget), alice writes
//! to carol (offline: pushed once) and to bob (online: suppressed). Every number the
//! routes and metrics show is then the script's exactly.

use crate::support::gateway::{connect, SECRET};

use crate::support::admin::{admin, admin_json, wait_for, API_KEY};
use crate::support::stub::StubServer;
use crate::support::{http, Server};
use boltq::client::gateway::GatewayClient;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIGNING_SECRET: &str = "push-signing-secret-of-at-least-32-bytes";
const REGION: &str = "eu-test";
/// Bound on waiting for numbers that must come.
const WAIT: Duration = Duration::from_secs(15);

// ---- the webhook receiver --------------------------------------------------------------

/// Counts calls and answers each with 200 `{}` on a keep-alive connection.
struct Webhook {
    calls: Arc<AtomicU64>,
    stub: StubServer,
}

impl Webhook {
    fn start() -> Webhook {
        let calls = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&calls);
        Webhook {
            calls,
            stub: StubServer::start("webhook", move |conn| serve(conn, &c)),
        }
    }
}

fn serve(conn: TcpStream, calls: &AtomicU64) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        calls.fetch_add(1, Ordering::SeqCst);
        let reply =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

// ---- the server and its clients --------------------------------------------------------

/// Gateway on the admin listener, an admin key, a region, a typing budget of one signal
/// per user, push to the test's webhook with a 100 ms grace delay.
fn start(tmp: &TempDir, hook: &Webhook) -> Server {
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[security]\napi_key = \"{API_KEY}\"\n\
             [messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\n\
             [messaging.presence]\nregion = \"{REGION}\"\n\
             [messaging.signals]\nrate_per_second = 1\nburst = 1\n\
             [messaging.push]\nenabled = true\n\
             webhook_url = \"http://127.0.0.1:{}/hook\"\n\
             signing_secret = \"{SIGNING_SECRET}\"\ngrace_delay = \"100ms\"\n",
            hook.stub.port
        ),
    )
    .unwrap();
    Server::start(&["--config", path.to_str().unwrap()])
}

/// The value of the `node="standalone"` sample of `name` in a text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{node=\"standalone\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
}

fn typing(c: &mut GatewayClient, on: bool) -> Value {
    c.request(json!({"op": "typing", "conversation": "alice:bob", "typing": on}))
        .unwrap()
}

/// Waits for a server-initiated frame `pick` selects (a `ping` per turn reads what is in
/// flight).
fn wait_frame(c: &mut GatewayClient, pick: impl Fn(&Value) -> bool) -> Option<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let pong = c.request(json!({"op": "ping"})).unwrap();
        assert_eq!(pong["op"], "pong", "{pong}");
        let mut found = c.take_pending(&pick);
        if !found.is_empty() {
            return Some(found.remove(0));
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- the test --------------------------------------------------------------------------

#[test]
fn presence_signals_and_push_numbers_follow_a_scripted_session() {
    let hook = Webhook::start();
    let tmp = TempDir::new("msgadminpresence");
    let s = start(&tmp, &hook);

    // Before anyone connects: empty, with every state and the region listed.
    let p = admin_json(&s, "/presence");
    assert_eq!(p["sessions"], 0, "{p}");
    assert_eq!(p["by_state"], json!({"online": 0, "away": 0, "offline": 0}));

    let mut alice = connect(&s, "alice", "a-phone");
    let mut bob = connect(&s, "bob", "b-phone");
    let ack = alice
        .request(json!({"op": "watch_presence", "users": ["bob"]}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "{ack}");
    let ack = bob
        .request(json!({"op": "presence", "state": "away"}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "{ack}");
    let away = wait_frame(&mut alice, |f| {
        f["op"] == "presence_event" && f["presence"]["state"] == "away"
    });
    assert!(away.is_some(), "alice sees bob away\n{}", s.log());

    // Typing: bob listens (a `typing: false` is also a signal), alice types, then again
    // past her budget of one.
    assert_eq!(typing(&mut bob, false)["op"], "ack");
    std::thread::sleep(Duration::from_millis(200)); // bob's listen reaches the topic owner
    assert_eq!(typing(&mut alice, true)["op"], "ack");
    let sig = wait_frame(&mut bob, |f| {
        f["op"] == "signal" && f["signal"]["sender"] == "alice"
    });
    assert!(sig.is_some(), "bob sees alice typing\n{}", s.log());
    let limited = typing(&mut alice, true);
    assert_eq!(limited["error"]["code"], "rate_limited", "{limited}");

    // carol is offline: pushed; bob is online: suppressed; alice is the sender: skipped.
    for conv in ["alice:carol", "alice:bob"] {
        let r = alice.send_text(conv, "direct", "", "hi").unwrap();
        assert_eq!(r["op"], "sent", "{r}");
    }

    // /presence: two users, one device each, bob away, one watch.
    let p = admin_json(&s, "/presence");
    assert_eq!(p["users"], 2, "{p}");
    assert_eq!(p["sessions"], 2, "{p}");
    assert_eq!(p["by_state"], json!({"online": 1, "away": 1, "offline": 0}));
    assert_eq!(p["by_node"], json!({"standalone": 2}));
    assert_eq!(p["by_region"], json!({REGION: 2}));
    assert_eq!(p["watchers"], 1, "{p}");
    assert!(p.get("shards_missing").is_none(), "{p}");

    // One user, asked of its owner shard.
    let b = admin_json(&s, "/presence?user=bob");
    assert_eq!(b["user_id"], "bob");
    assert_eq!(b["online"], true);
    assert_eq!(b["state"], "away");
    let devices = b["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{b}");
    assert_eq!(devices[0]["device_id"], "b-phone");
    assert_eq!(devices[0]["state"], "away");
    assert!(devices[0]["since_ns"].as_i64().unwrap() > 0, "{b}");
    let c = admin_json(&s, "/presence?user=carol");
    assert_eq!(
        c,
        json!({"user_id": "carol", "online": false, "state": "offline", "devices": []})
    );
    assert_eq!(admin(&s, "/presence?user=").status, 400);
    let long = "u".repeat(257);
    assert_eq!(admin(&s, &format!("/presence?user={long}")).status, 400);
    let post = http(
        s.http_port,
        "POST",
        "/presence",
        &[("X-API-Key", API_KEY)],
        b"",
    );
    assert_eq!(post.status, 405);
    assert_eq!(http(s.http_port, "GET", "/presence", &[], b"").status, 401);

    // The overview: presence as /presence; signals; push once settled.
    let o = wait_for(&s, "/messaging/overview", |o| {
        o["push"]["sent"] == 1 && o["push"]["suppressed"] == 1 && o["push"]["lag"] == 0
    });
    assert_eq!(o["presence"], p, "{o}");
    let sig = &o["signals"];
    assert_eq!(sig["published"], 2, "{o}");
    assert_eq!(sig["delivered"], 1, "{o}");
    assert_eq!(sig["rate_limited"], 1, "{o}");
    assert_eq!(sig["dropped"], 0, "{o}");
    assert!(sig["topics"].as_u64().unwrap() >= 1, "{o}");
    assert_eq!(sig["subscribers"], 2, "alice and bob listen: {o}");
    let push = &o["push"];
    assert_eq!(push["sent"], 1, "carol only: {o}");
    assert_eq!(push["suppressed"], 1, "bob is online: {o}");
    assert_eq!(push["scanned"], 4, "two pointers per send: {o}");
    assert_eq!(push["skipped"], 2, "alice's own pointers: {o}");
    assert_eq!(push["failed"], 0, "{o}");
    assert_eq!(push["dropped"], 0, "{o}");
    assert_eq!(push["lag"], 0, "{o}");
    assert_eq!(push["watching"], 3, "the inboxes of alice, bob, carol: {o}");
    assert_eq!(hook.calls.load(Ordering::SeqCst), 1, "one webhook call");

    // /metrics: the same numbers as series.
    let m = admin(&s, "/metrics");
    assert_eq!(m.status, 200);
    let text = &m.body;
    for (name, want) in [
        ("boltq_presence_sessions_local", 2.0),
        ("boltq_presence_online_users", 2.0),
        ("boltq_presence_watches", 1.0),
        ("boltq_signals_published_total", 2.0),
        ("boltq_signals_delivered_total", 1.0),
        ("boltq_signals_dropped_total", 0.0),
        ("boltq_signals_rate_limited_total", 1.0),
        ("boltq_push_scanned_total", 4.0),
        ("boltq_push_sent_total", 1.0),
        ("boltq_push_failed_total", 0.0),
        ("boltq_push_dropped_total", 0.0),
        ("boltq_push_suppressed_total", 1.0),
        ("boltq_push_lag_records", 0.0),
    ] {
        assert_eq!(sample(text, name), Some(want), "{name}:\n{text}");
    }
    assert!(text.contains("# TYPE boltq_presence_sessions_local gauge\n"));
    assert!(text.contains("# TYPE boltq_push_sent_total counter\n"));
    let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let n = types.len();
    types.sort();
    types.dedup();
    assert_eq!(types.len(), n, "one TYPE line per metric name");

    // bob leaves: his session goes at once, and alice's watch stays.
    drop(bob);
    let p = wait_for(&s, "/presence", |p| p["sessions"] == 1);
    assert_eq!(p["sessions"], 1, "{p}");
    assert_eq!(p["users"], 1, "{p}");
    assert_eq!(p["by_state"], json!({"online": 1, "away": 0, "offline": 0}));
    assert_eq!(p["watchers"], 1, "{p}");
    assert_eq!(admin_json(&s, "/presence?user=bob")["online"], false);
}

/// Without the gateway there is no presence: `/presence` says why, and the overview's
/// presence, signals and push sections are `null` (push numbers travel with the gateway).
#[test]
fn presence_is_absent_without_the_gateway() {
    let tmp = TempDir::new("msgadminnogw");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!("[security]\napi_key = \"{API_KEY}\"\n[messaging.stream]\nenabled = true\n"),
    )
    .unwrap();
    let s = Server::start(&["--config", path.to_str().unwrap()]);
    let r = admin(&s, "/presence");
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("gateway is off"),
        "{}",
        r.body
    );
    let o = admin_json(&s, "/messaging/overview");
    for section in ["presence", "signals", "push", "gateway"] {
        assert!(o[section].is_null(), "{section}: {o}");
    }
    let m = admin(&s, "/metrics");
    assert_eq!(m.status, 200);
    assert!(!m.body.contains("boltq_presence_"), "no presence series");
    assert!(!m.body.contains("boltq_push_"), "no push series");
}
