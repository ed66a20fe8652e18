//! Presence and typing end to end (spec/messaging-edge.md §2.5.7–§2.5.10, §9, §19 decisions
//! 1 and 19): the real binary with two shards, real WebSockets through
//! `boltq::client::gateway::GatewayClient`, and a membership service inside each test.
//!
//! The policy is the default one with rule 6 gated by membership as §4.6 describes: a user
//! may watch `bob` only if the membership service says they are a member of the group
//! named `bob`. Membership answers are not cached (`membership_cache_ttl = "-1s"`).

use crate::support::gateway::{connect, SECRET};

use crate::support::stub::StubServer;
use crate::support::Server;
use boltq::client::gateway::GatewayClient;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bound on waiting for frames that must come.
const WAIT: Duration = Duration::from_secs(5);
/// How long a frame that must not come is given to show up anyway.
const QUIET: Duration = Duration::from_millis(500);

// ---- the membership service ------------------------------------------------------------

/// The operator's membership service, played by the test: `/is-member` and `/members`
/// answered from a fixed table of group → members.
struct MembershipService {
    stub: StubServer,
}

impl MembershipService {
    fn start(groups: &[(&str, &[&str])]) -> MembershipService {
        let table: HashMap<String, Vec<String>> = groups
            .iter()
            .map(|(g, m)| (g.to_string(), m.iter().map(|s| s.to_string()).collect()))
            .collect();
        let table = Mutex::new(table);
        MembershipService {
            stub: StubServer::start("membership service", move |conn| serve(conn, &table)),
        }
    }
}

/// Answers one GET and closes.
fn serve(mut conn: TcpStream, table: &Mutex<HashMap<String, Vec<String>>>) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        assert!(head.len() < 64 * 1024, "request head too large");
    }
    let head = String::from_utf8_lossy(&head);
    let target = head.split_whitespace().nth(1).unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // Ids in these tests are plain ASCII words: no percent-decoding needed.
    let params: HashMap<&str, &str> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let members = table
        .lock()
        .unwrap()
        .get(params.get("group").copied().unwrap_or(""))
        .cloned()
        .unwrap_or_default();
    let (status, body) = match path {
        "/is-member" => {
            let user = params.get("user").copied().unwrap_or("");
            (200, json!({ "member": members.iter().any(|m| m == user) }))
        }
        "/members" => (200, json!({ "members": members })),
        _ => (404, json!({})),
    };
    let body = body.to_string();
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes());
}

// ---- the server and its clients --------------------------------------------------------

/// The default policy (spec §4.4) with rule 6 restricted by membership (§4.6).
const POLICY: &str = r#"
[[messaging.identity.policy]]
pattern = "chat.inbox.${user}.#"
effect = "allow"
actions = ["read", "write"]
[[messaging.identity.policy]]
pattern = "chat.group.*.#"
effect = "allow"
actions = ["read", "write"]
require_membership = true
membership_segment = 2
[[messaging.identity.policy]]
pattern = "presence.${user}.#"
effect = "allow"
actions = ["write"]
require_scope = ["presence"]
[[messaging.identity.policy]]
pattern = "presence.#"
effect = "allow"
actions = ["read"]
require_membership = true
membership_segment = 1
[[messaging.identity.policy]]
pattern = "typing.*.#"
effect = "allow"
actions = ["read", "write"]
require_membership = true
membership_segment = 1
"#;

/// A server with the gateway on, the given membership service, no membership cache, the
/// restricted-presence policy and `extra` configuration appended.
fn start(service: &MembershipService, extra: &str) -> (Server, TempDir) {
    let tmp = TempDir::new("presence");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n\
             [messaging.gateway]\nenabled = true\n\
             [messaging.chat]\nmembership_url = \"http://127.0.0.1:{}\"\n\
             {extra}\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             membership_cache_ttl = \"-1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             {POLICY}",
            service.stub.port
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    (server, tmp)
}

/// The error code of a reply, or "" when it is not an error.
fn error_code(reply: &Value) -> String {
    match reply["op"].as_str() {
        Some("error") => reply["error"]["code"].as_str().unwrap_or("?").to_string(),
        _ => String::new(),
    }
}

/// Waits for a server-initiated frame that `pick` selects. Each turn sends a `ping`, whose
/// reply comes after everything queued before it, so what was in flight is read; with a
/// zero timeout it is one such turn. Other frames stay buffered.
fn wait_for(
    c: &mut GatewayClient,
    pick: impl Fn(&Value) -> bool,
    timeout: Duration,
) -> Option<Value> {
    let deadline = Instant::now() + timeout;
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

/// Every `presence_event` about `user` that arrived so far (reads what is in flight).
fn presence_events(c: &mut GatewayClient, user: &str) -> Vec<Value> {
    let pong = c.request(json!({"op": "ping"})).unwrap();
    assert_eq!(pong["op"], "pong");
    c.take_pending(|f| f["op"] == "presence_event" && f["presence"]["user_id"] == user)
}

fn is_presence(user: &'static str, online: bool) -> impl Fn(&Value) -> bool {
    move |f: &Value| {
        f["op"] == "presence_event"
            && f["presence"]["user_id"] == user
            && f["presence"]["online"] == online
    }
}

fn is_signal(sender: &'static str, kind: &'static str) -> impl Fn(&Value) -> bool {
    move |f: &Value| {
        f["op"] == "signal" && f["signal"]["sender"] == sender && f["signal"]["kind"] == kind
    }
}

fn watch(c: &mut GatewayClient, users: &[&str]) -> Value {
    c.request(json!({"op": "watch_presence", "users": users}))
        .unwrap()
}

fn typing(c: &mut GatewayClient, conversation: &str, on: bool) -> Value {
    c.request(json!({"op": "typing", "conversation": conversation, "typing": on}))
        .unwrap()
}

/// Files under `dir` whose path mentions `needle`.
fn paths_mentioning(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.to_string_lossy().contains(needle) {
            found.push(p.to_string_lossy().into_owned());
        }
        if p.is_dir() {
            found.extend(paths_mentioning(&p, needle));
        }
    }
    found
}

// ---- tests -----------------------------------------------------------------------------

/// A watcher gets a snapshot after the ack, `online` when the user connects (well within
/// one heartbeat), and `offline` within 1 s of a clean close and of a dropped socket.
#[test]
fn watchers_see_online_at_connect_and_offline_within_a_second_of_disconnect() {
    let service = MembershipService::start(&[("bob", &["alice"])]);
    let (s, _tmp) = start(&service, "");
    let mut alice = connect(&s, "alice", "a-phone");
    let ack = watch(&mut alice, &["bob"]);
    assert_eq!(ack["op"], "ack", "{ack}");
    let snap = wait_for(&mut alice, is_presence("bob", false), WAIT);
    assert!(
        snap.is_some(),
        "snapshot of bob (offline) after the watch ack"
    );

    for round in 0..2 {
        let t0 = Instant::now();
        let bob = connect(&s, "bob", "b-phone");
        let online = wait_for(&mut alice, is_presence("bob", true), WAIT);
        assert!(online.is_some(), "round {round}: bob online\n{}", s.log());
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "online took {:?}",
            t0.elapsed()
        );
        let t1 = Instant::now();
        if round == 0 {
            // A client-initiated close frame. Whether the close handshake completes
            // cleanly is not this test's subject: the socket is gone either way.
            let _ = bob.close();
        } else {
            drop(bob); // the socket just goes away
        }
        let offline = wait_for(&mut alice, is_presence("bob", false), WAIT);
        let took = t1.elapsed();
        assert!(offline.is_some(), "round {round}: bob offline\n{}", s.log());
        assert!(
            took <= Duration::from_secs(1),
            "round {round}: offline took {took:?}"
        );
    }
}

/// The aggregate stays online while another device is bound, and `presence` state changes
/// reach watchers as the device's state.
#[test]
fn aggregate_online_and_state_changes() {
    let service = MembershipService::start(&[("bob", &["alice"])]);
    let (s, _tmp) = start(&service, "");
    let mut alice = connect(&s, "alice", "a-phone");
    assert_eq!(watch(&mut alice, &["bob"])["op"], "ack");
    let mut phone = connect(&s, "bob", "b-phone");
    let laptop = connect(&s, "bob", "b-laptop");
    let mut online = 0;
    let deadline = Instant::now() + WAIT;
    while online < 2 && Instant::now() < deadline {
        online += presence_events(&mut alice, "bob")
            .iter()
            .filter(|f| {
                f["presence"]["online"] == true && f["presence"]["device_id"] != Value::Null
            })
            .count();
    }
    assert_eq!(online, 2, "both devices bound");
    let ack = phone
        .request(json!({"op": "presence", "state": "away"}))
        .unwrap();
    assert_eq!(ack["op"], "ack");
    let away = wait_for(
        &mut alice,
        |f| f["op"] == "presence_event" && f["presence"]["state"] == "away",
        WAIT,
    )
    .expect("state change reaches the watcher");
    assert_eq!(away["presence"]["online"], true, "{away}");
    let _ = laptop.close();
    let ev = wait_for(
        &mut alice,
        |f| f["op"] == "presence_event" && f["presence"]["device_id"] == "b-laptop",
        WAIT,
    )
    .expect("laptop unbound");
    assert_eq!(
        ev["presence"]["online"], true,
        "the phone is still bound: {ev}"
    );
    assert_eq!(ev["presence"]["state"], "offline", "{ev}");
}

/// A user the watcher may not see: the watch is refused, the previous watch set stays, and
/// no event about that user ever reaches the watcher.
#[test]
fn presence_of_a_user_the_watcher_may_not_see_is_never_revealed() {
    // carol may see alice but not bob.
    let service = MembershipService::start(&[("alice", &["carol"]), ("bob", &["dave"])]);
    let (s, _tmp) = start(&service, "");
    let mut carol = connect(&s, "carol", "c-phone");
    assert_eq!(error_code(&watch(&mut carol, &["bob"])), "forbidden");
    assert_eq!(watch(&mut carol, &["alice"])["op"], "ack");
    assert_eq!(
        error_code(&watch(&mut carol, &["alice", "bob"])),
        "forbidden",
        "the first denial refuses the whole set"
    );
    let _bob = connect(&s, "bob", "b-phone");
    let _alice = connect(&s, "alice", "a-phone");
    assert!(
        wait_for(&mut carol, is_presence("alice", true), WAIT).is_some(),
        "the previous set (alice) is still watched"
    );
    std::thread::sleep(QUIET);
    assert!(
        presence_events(&mut carol, "bob").is_empty(),
        "nothing about bob"
    );
    drop(_bob);
    std::thread::sleep(QUIET);
    assert!(
        presence_events(&mut carol, "bob").is_empty(),
        "nothing about bob"
    );
}

/// Typing reaches the other members' connections, never any device of the sender, is
/// refused to non-members, and is never stored.
#[test]
fn typing_reaches_other_members_not_the_sender_and_is_never_stored() {
    let service = MembershipService::start(&[("team", &["alice", "bob", "carol"])]);
    let (s, _tmp) = start(&service, "");
    let mut a1 = connect(&s, "alice", "a-phone");
    let mut a2 = connect(&s, "alice", "a-laptop");
    let mut bob = connect(&s, "bob", "b-phone");
    let mut carol = connect(&s, "carol", "c-phone");
    let mut dave = connect(&s, "dave", "d-phone");
    let before = bob
        .request(json!({"op": "history", "topic": "chat.group.team"}))
        .unwrap();
    // Listen without claiming to type (§2.5.7).
    for c in [&mut a2, &mut bob, &mut carol] {
        assert_eq!(typing(c, "team", false)["op"], "ack");
    }
    assert_eq!(error_code(&typing(&mut dave, "team", true)), "forbidden");
    assert_eq!(typing(&mut a1, "team", true)["op"], "ack");
    for (name, c) in [("bob", &mut bob), ("carol", &mut carol)] {
        let sig = wait_for(c, is_signal("alice", "typing"), WAIT)
            .unwrap_or_else(|| panic!("{name} sees alice typing\n{}", s.log()));
        assert_eq!(sig["signal"]["topic"], "typing.team", "{sig}");
        assert!(sig["signal"]["at"].as_i64().unwrap() > 0, "{sig}");
    }
    std::thread::sleep(QUIET);
    for (name, c) in [("a-phone", &mut a1), ("a-laptop", &mut a2)] {
        let own = wait_for(c, is_signal("alice", "typing"), Duration::ZERO);
        assert!(
            own.is_none(),
            "{name} never sees alice's own signal: {own:?}"
        );
    }
    let any = wait_for(&mut dave, |f| f["op"] == "signal", Duration::ZERO);
    assert!(any.is_none(), "a non-member hears nothing: {any:?}");
    // Bob's stop reaches alice's listening laptop (and not bob).
    assert_eq!(typing(&mut bob, "team", false)["op"], "ack");
    assert!(wait_for(&mut a2, is_signal("bob", "stop_typing"), WAIT).is_some());
    let after = bob
        .request(json!({"op": "history", "topic": "chat.group.team"}))
        .unwrap();
    assert_eq!(
        before["records"], after["records"],
        "the conversation is unchanged"
    );
    assert!(
        paths_mentioning(s.data_dir(), "typing").is_empty(),
        "no log of a typing topic: {:?}",
        paths_mentioning(s.data_dir(), "typing")
    );
}

/// The per-user budget (`signals.rate_per_second`, `signals.burst`) is shared by a user's
/// devices; past it `typing` answers `rate_limited` with retryable true; other users keep
/// their own budget.
#[test]
fn typing_rate_limit_is_per_user_and_retryable() {
    let service = MembershipService::start(&[("team", &["alice", "bob"])]);
    let (s, _tmp) = start(
        &service,
        "[messaging.signals]\nrate_per_second = 1\nburst = 3\n",
    );
    let mut a1 = connect(&s, "alice", "a-phone");
    let mut a2 = connect(&s, "alice", "a-laptop");
    let mut bob = connect(&s, "bob", "b-phone");
    assert_eq!(typing(&mut a1, "team", true)["op"], "ack");
    assert_eq!(typing(&mut a1, "team", true)["op"], "ack");
    assert_eq!(typing(&mut a2, "team", true)["op"], "ack");
    for c in [&mut a2, &mut a1] {
        let r = typing(c, "team", true);
        assert_eq!(error_code(&r), "rate_limited", "{r}");
        assert_eq!(r["error"]["retryable"], true, "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("rate limited"),
            "{r}"
        );
    }
    assert_eq!(
        typing(&mut bob, "team", true)["op"],
        "ack",
        "bob has his own budget"
    );
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(
        typing(&mut a1, "team", true)["op"],
        "ack",
        "refilled after 1 s"
    );
}
