//! The messaging plane's admin routes and metrics, end to end: the real binary, a scripted
//! chat session over real WebSockets (`boltq::client::gateway::GatewayClient`), then the
//! routes and `/metrics` must show exactly what the script did.

use crate::support::gateway::{token, SECRET};

use crate::support::admin::{admin, admin_json, wait_for, API_KEY};
use crate::support::{http, Server};
use boltq::client::gateway::GatewayClient;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::time::Duration;

const CONVERSATION: &str = "alice:bob";
const TOPIC: &str = "chat.direct.alice:bob";
/// Bound on waiting for numbers that must come (inbox pointers are written after the send
/// is answered).
const WAIT: Duration = Duration::from_secs(10);
/// Messages alice sends in the script.
const SENDS: u64 = 3;

/// Messaging plane on, gateway on the admin listener, an admin API key.
fn start(tmp: &TempDir) -> Server {
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[security]\napi_key = \"{API_KEY}\"\n\
             [messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\n"
        ),
    )
    .unwrap();
    Server::start(&["--config", path.to_str().unwrap()])
}

fn url(s: &Server) -> String {
    format!("ws://127.0.0.1:{}/ws", s.http_port)
}

fn connect(s: &Server, user: &str, device: &str, resume: Option<&str>) -> GatewayClient {
    GatewayClient::connect(&url(s), &token(user), device, resume)
        .unwrap_or_else(|e| panic!("{user}/{device} connects: {e}\nserver log:\n{}", s.log()))
}

fn records_of(topic: &Value) -> u64 {
    topic["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["records"].as_u64().unwrap())
        .sum()
}

fn topic_in<'a>(streams: &'a Value, name: &str) -> Option<&'a Value> {
    streams["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
}

/// The value of one sample line (`name{labels} value`) of a text exposition, or of the sum
/// of the samples whose line starts with `prefix`.
fn sample_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// The partition the conversation landed in, the last seq of the script's sends, and the
/// connections, kept open for the checks.
struct Script {
    partition: u64,
    last_seq: u64,
    _clients: Vec<GatewayClient>,
}

/// alice and bob chat: a rejected token, bob subscribes, alice is refused bob's inbox,
/// alice sends [`SENDS`] messages, bob receives them, commits the second and unsubscribes
/// (so the resume below redelivers nothing), then bob's socket drops and he resumes.
fn chat(s: &Server) -> Script {
    let refused = GatewayClient::connect(&url(s), "not-a-token", "x", None);
    assert!(refused.is_err(), "a bad token must be refused");

    let mut alice = connect(s, "alice", "phone", None);
    let mut bob = connect(s, "bob", "laptop", None);
    let ack = bob
        .request(json!({"op": "subscribe", "topic": TOPIC}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "{ack}");
    let denied = alice
        .request(json!({"op": "subscribe", "topic": "chat.inbox.bob"}))
        .unwrap();
    assert_eq!(denied["error"]["code"], "forbidden", "{denied}");

    let mut last = Value::Null;
    for i in 0..SENDS {
        last = alice
            .send_text(
                CONVERSATION,
                "direct",
                &format!("m{i}"),
                &format!("hello {i}"),
            )
            .unwrap();
        assert_eq!(last["op"], "sent", "{last}");
    }
    let partition = last["sent"]["partition"].as_u64().unwrap();
    let last_seq = last["sent"]["seq"].as_u64().unwrap();
    let got = bob.records(TOPIC, SENDS as usize, WAIT).unwrap();
    assert_eq!(got.len() as u64, SENDS);
    let second = got[1]["seq"].as_u64().unwrap();
    let ack = bob
        .request(json!({"op": "commit", "topic": TOPIC, "partition": partition, "seq": second}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "{ack}");
    let ack = bob
        .request(json!({"op": "unsubscribe", "topic": TOPIC, "partition": partition}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "{ack}");

    // bob's socket drops; he comes back with his resume token.
    let resume = bob.welcome()["token"].as_str().unwrap().to_string();
    drop(bob);
    // The server may not have noticed the drop yet; the resume then takes the old socket
    // over. Either way it resumes.
    let bob = connect(s, "bob", "laptop", Some(&resume));
    assert_eq!(bob.welcome()["resumed"], true, "{}", bob.welcome());
    Script {
        partition,
        last_seq,
        _clients: vec![alice, bob],
    }
}

#[test]
fn routes_and_metrics_show_what_a_chat_session_did() {
    let tmp = TempDir::new("msgadmin");
    let s = start(&tmp);
    let script = chat(&s);

    // /gateway/stats: exact counts of the script (the resumed socket replaced bob's).
    let g = wait_for(&s, "/gateway/stats", |g| g["attached"] == 2);
    assert_eq!(g["connections"], 3, "{g}");
    assert_eq!(g["resumed"], 1, "{g}");
    assert_eq!(g["auth_failures"], 1, "{g}");
    assert_eq!(g["forbidden"], 1, "{g}");
    assert_eq!(g["sends"], SENDS, "{g}");
    assert_eq!(g["records_out"], SENDS, "{g}");
    assert_eq!(g["sessions"], 2, "{g}");
    assert_eq!(g["attached"], 2, "{g}");
    assert_eq!(g["slow_client_drops"], 0, "{g}");
    // subscribe ×2, sends, commit, unsubscribe (hello is not counted).
    assert!(g["frames_in"].as_u64().unwrap() >= 2 + SENDS + 2, "{g}");
    assert!(g["frames_out"].as_u64().unwrap() >= SENDS, "{g}");

    // /streams: the conversation holds the sends; each member's inbox one pointer each.
    let streams = wait_for(&s, "/streams", |v| {
        ["chat.inbox.alice", "chat.inbox.bob"]
            .iter()
            .all(|t| topic_in(v, t).is_some_and(|t| records_of(t) == SENDS))
    });
    let conv = topic_in(&streams, TOPIC).unwrap_or_else(|| panic!("{streams}"));
    assert_eq!(records_of(conv), SENDS, "{streams}");
    for inbox in ["chat.inbox.alice", "chat.inbox.bob"] {
        let t = topic_in(&streams, inbox).unwrap_or_else(|| panic!("{streams}"));
        assert_eq!(records_of(t), SENDS, "{inbox}: {streams}");
    }
    let p = &conv["partitions"][script.partition as usize];
    assert_eq!(p["id"], script.partition);
    assert_eq!(p["first_seq"], 1);
    assert_eq!(p["next_seq"], script.last_seq + 1);
    assert!(p["bytes"].as_u64().unwrap() > 0, "{p}");
    assert_eq!(conv["total_bytes"], p["bytes"], "one partition written");
    assert!(streams["cursors"]["tracked"].as_u64().unwrap() >= 1);

    // /streams/topic: the same numbers; its errors.
    let one = admin_json(&s, &format!("/streams/topic?name={TOPIC}"));
    assert_eq!(&one, conv);
    assert_eq!(admin(&s, "/streams/topic").status, 400);
    let unknown = admin(&s, "/streams/topic?name=chat.direct.x:y");
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"], "topic not found");

    // /streams/cursors: bob's laptop at the second record; lag to the head.
    let c = admin_json(
        &s,
        &format!(
            "/streams/cursors?topic={TOPIC}&partition={}&group=user:bob",
            script.partition
        ),
    );
    assert_eq!(c["members"], json!({"laptop": 2}), "{c}");
    assert_eq!(c["watermark"], 2);
    assert_eq!(c["next_seq"], script.last_seq + 1);
    assert_eq!(c["lag"], script.last_seq + 1 - 2);
    let none = admin_json(&s, &format!("/streams/cursors?topic={TOPIC}"));
    assert_eq!(none["group"], "push-dispatcher");
    assert!(none.get("lag").is_none(), "{none}");
    assert_eq!(admin(&s, "/streams/cursors").status, 400);
    assert_eq!(
        admin(&s, &format!("/streams/cursors?topic={TOPIC}&partition=x")).status,
        400
    );

    // /replication and the overview.
    let r = admin_json(&s, "/replication");
    assert_eq!(r["role"], "standalone");
    assert!(r["warning"].as_str().unwrap().contains("not replicated"));
    let o = admin_json(&s, "/messaging/overview");
    assert_eq!(o["replication"], r);
    assert_eq!(o["gateway"]["sends"], SENDS);
    assert!(topic_in(&o["streams"], TOPIC).is_some());
    assert!(o["push"].is_null());

    // Read-only: other methods are refused.
    let post = http(
        s.http_port,
        "POST",
        "/streams",
        &[("X-API-Key", API_KEY)],
        b"",
    );
    assert_eq!(post.status, 405);

    // /metrics (behind the key, as every route but health): the same counts, and both
    // latency histograms.
    let m = admin(&s, "/metrics");
    assert_eq!(m.status, 200);
    let text = &m.body;
    let node = "{node=\"standalone\"}";
    for (name, want) in [
        ("boltq_gateway_connections_total", 3.0),
        ("boltq_gateway_resumed_total", 1.0),
        ("boltq_gateway_auth_failures_total", 1.0),
        ("boltq_gateway_forbidden_total", 1.0),
        ("boltq_gateway_records_out_total", SENDS as f64),
        ("boltq_gateway_sends_total", SENDS as f64),
        ("boltq_gateway_attached", 2.0),
        ("boltq_gateway_sessions", 2.0),
        ("boltq_gateway_slow_client_drops_total", 0.0),
    ] {
        let line = format!("{name}{node} ");
        assert!(text.contains(&line), "{name} missing:\n{text}");
        assert_eq!(sample_sum(text, &line), want, "{name}");
    }
    assert_eq!(
        sample_sum(text, "boltq_stream_appends_total{shard="),
        SENDS as f64
    );
    assert_eq!(
        sample_sum(text, "boltq_stream_pointer_appends_total{shard="),
        2.0 * SENDS as f64
    );
    assert_eq!(
        sample_sum(text, "boltq_messaging_send_durable_seconds_count"),
        SENDS as f64
    );
    assert_eq!(
        sample_sum(
            text,
            "boltq_messaging_send_durable_seconds_bucket{le=\"+Inf\"}"
        ),
        SENDS as f64
    );
    assert_eq!(
        sample_sum(text, "boltq_messaging_send_delivered_seconds_count"),
        SENDS as f64
    );
    assert!(text.contains("# TYPE boltq_messaging_send_delivered_seconds histogram"));
    let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let n = types.len();
    types.sort();
    types.dedup();
    assert_eq!(types.len(), n, "one TYPE line per metric name");
}

#[test]
fn routes_need_the_api_key() {
    let tmp = TempDir::new("msgadminkey");
    let s = start(&tmp);
    for path in [
        "/streams",
        "/streams/topic?name=t",
        "/streams/cursors?topic=t",
        "/messaging/overview",
        "/presence",
        "/gateway/stats",
        "/replication",
    ] {
        let r = http(s.http_port, "GET", path, &[], b"");
        assert_eq!(r.status, 401, "{path} without a key");
        let r = http(s.http_port, "GET", path, &[("X-API-Key", "wrong")], b"");
        assert_eq!(r.status, 401, "{path} with a wrong key");
    }
    assert_eq!(admin(&s, "/replication").status, 200);
}

#[test]
fn routes_are_absent_when_the_plane_is_off() {
    let s = Server::start(&[]);
    for path in [
        "/streams",
        "/streams/topic?name=t",
        "/streams/cursors?topic=t",
        "/messaging/overview",
        "/presence",
        "/gateway/stats",
        "/replication",
    ] {
        let r = http(s.http_port, "GET", path, &[], b"");
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap()
                .contains("messaging plane is off"),
            "{path}: {}",
            r.body
        );
    }
    let m = http(s.http_port, "GET", "/metrics", &[], b"");
    assert!(!m.body.contains("boltq_gateway_"), "no gateway series");
}
