//! v1 wire compatibility (issue 3, spec queue-plane.md §2, §9, §10, §13): the exact byte
//! sequences the Go SDK, the Node SDK and the v1 CLI send, over a raw TCP socket, against
//! the real binary, and every reply the spec fixes — status byte and, where the spec gives
//! it, the exact JSON text including key order.
//!
//! Request bodies are spelled out literally as each client serialises them: the Go SDK and
//! the CLI marshal Go maps (keys in alphabetical order, `null` for a nil map); the Node SDK
//! `JSON.stringify`s object literals (keys in source order, payload sent as a JSON string,
//! `{}` for absent headers).
//!
//! Every frame read as a reply goes through [`Conn::reply`], which checks the status byte
//! is one of v1's four, that the payload is UTF-8 JSON (or empty), that the Node SDK's
//! push-detection rule does not fire and that there is no top-level `subscriber_id`.

use crate::support;

use crate::support::Server;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// Command bytes, as the v1 clients put them on the wire.
const PUBLISH: u8 = 0x01;
const PUBLISH_TOPIC: u8 = 0x02;
const CONSUME: u8 = 0x03;
const ACK: u8 = 0x04;
const NACK: u8 = 0x05;
const PING: u8 = 0x06;
const STATS: u8 = 0x07;
const AUTH: u8 = 0x08;
const PREFETCH: u8 = 0x09;
const CLUSTER_JOIN: u8 = 0x10;
const CLUSTER_LEAVE: u8 = 0x11;
const CLUSTER_STATUS: u8 = 0x12;
const CONFIRM_SELECT: u8 = 0x13;
const EXCHANGE_DECLARE: u8 = 0x14;
const EXCHANGE_DELETE: u8 = 0x15;
const BIND_QUEUE: u8 = 0x16;
const UNBIND_QUEUE: u8 = 0x17;
const PUBLISH_EXCHANGE: u8 = 0x18;

// Status bytes.
const OK: u8 = 0x00;
const ERROR: u8 = 0x01;
const EMPTY: u8 = 0x02;
const NOT_LEADER: u8 = 0x03;

const FRAME_PAYLOAD_MAX: usize = 4 * 1024 * 1024;
/// Bound on waiting for something the server must do soon (a timer, a disconnect).
const WAIT: Duration = Duration::from_secs(10);

const EMPTY_STATS: &str =
    r#"{"Queues":{},"Topics":{},"DeadLetters":{},"PendingCount":0,"DelayedCount":0}"#;

/// v1 retry semantics (NACK requeues at once), default ack timeout.
fn server() -> (Server, boltq_io::testutil::TempDir) {
    server_with("")
}

fn server_with(extra_toml: &str) -> (Server, boltq_io::testutil::TempDir) {
    let dir = boltq_io::testutil::TempDir::new("compat-cfg");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(
        &cfg,
        format!("[queue]\nretry_backoff_base_ms = 0\n{extra_toml}"),
    )
    .unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    (s, dir)
}

// ---- raw connection ----------------------------------------------------------------------

/// One raw TCP connection speaking frames `[code][u32 LE len][payload]`.
struct Conn {
    s: TcpStream,
}

impl Conn {
    fn open(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        Conn { s }
    }

    fn frame_bytes(code: u8, body: &str) -> Vec<u8> {
        let mut out = vec![code];
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body.as_bytes());
        out
    }

    fn send(&mut self, code: u8, body: &str) {
        self.send_raw(&Conn::frame_bytes(code, body));
    }

    /// Several frames in one write, as a pipelining client (Node) may send them.
    fn send_pipelined(&mut self, frames: &[(u8, &str)]) {
        let bytes: Vec<u8> = frames
            .iter()
            .flat_map(|(c, b)| Conn::frame_bytes(*c, b))
            .collect();
        self.send_raw(&bytes);
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// The next frame off the wire, push or reply; `None` when the server closed the
    /// connection (before a frame's first byte).
    fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut header = [0u8; 5];
        match self.s.read(&mut header[..1]) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading a frame: {e}"),
        }
        self.s.read_exact(&mut header[1..]).unwrap();
        let len = u32::from_le_bytes(header[1..].try_into().unwrap()) as usize;
        assert!(
            len <= FRAME_PAYLOAD_MAX,
            "server sent a {len}-byte frame (v1 clients drop those)"
        );
        let mut payload = vec![0u8; len];
        self.s.read_exact(&mut payload).unwrap();
        Some((header[0], payload))
    }

    /// The next frame, which must be a reply (see the module docs).
    fn reply(&mut self) -> (u8, String) {
        let (code, payload) = self.frame().expect("server closed the connection");
        check_reply(code, payload)
    }

    fn call(&mut self, code: u8, body: &str) -> (u8, String) {
        self.send(code, body);
        self.reply()
    }

    /// The next frame, which must be a push by both SDKs' rules.
    fn push(&mut self) -> Value {
        let (code, payload) = self.frame().expect("server closed the connection");
        let text = String::from_utf8(payload).unwrap();
        assert!(node_is_push(code, &text), "not a push: {code:#04x} {text}");
        assert!(go_route_key(&text).is_some(), "Go SDK cannot route: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// True when the server closed the connection without sending anything more.
    fn closed_without_reply(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.s.read_to_end(&mut rest) {
            Ok(_) => rest.is_empty(),
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

fn check_reply(code: u8, payload: Vec<u8>) -> (u8, String) {
    assert!(
        code <= NOT_LEADER,
        "status byte {code:#04x} is not one of v1's 0x00–0x03"
    );
    let text = String::from_utf8(payload).expect("reply is UTF-8");
    if code == EMPTY {
        assert_eq!(text, "", "EMPTY carries no payload");
        return (code, text);
    }
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(
        !node_is_push(code, &text),
        "the Node SDK would take this reply for a push: {text}"
    );
    assert!(
        v.get("subscriber_id").is_none(),
        "reply with a top-level subscriber_id: {text}"
    );
    (code, text)
}

/// The Node SDK's push detection (spec §2.6): status 0x00, the text contains
/// `subscriber_id`, and the parsed object has a truthy `topic` and `subscriber_id`.
fn node_is_push(code: u8, text: &str) -> bool {
    if code != OK || !text.contains("subscriber_id") {
        return false;
    }
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    js_truthy(&v["topic"]) && js_truthy(&v["subscriber_id"])
}

fn js_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The key the Go SDK's reader routes a push by: `topic + ":" + subscriber_id`, for a
/// frame whose decoded `subscriber_id` is non-empty.
fn go_route_key(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    let sub = v.get("subscriber_id")?.as_str()?;
    let topic = v.get("topic").and_then(Value::as_str).unwrap_or("");
    (!sub.is_empty()).then(|| format!("{topic}:{sub}"))
}

// ---- reply checks ------------------------------------------------------------------------

fn is_message_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A publish OK reply is exactly `{"id":"<32 hex>","topic":"<topic>"}`; returns the id.
fn publish_ok(reply: (u8, String), topic: &str) -> String {
    publish_ok_confirm(reply, topic, None)
}

/// As [`publish_ok`], with `,"seq_no":n,"ack":true` in confirm mode.
fn publish_ok_confirm(reply: (u8, String), topic: &str, seq_no: Option<u64>) -> String {
    let (code, text) = reply;
    assert_eq!(code, OK, "publish failed: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let id = v["id"].as_str().unwrap_or_default().to_string();
    assert!(is_message_id(&id), "id is 32 lowercase hex: {text}");
    let confirm = seq_no.map_or(String::new(), |n| format!(r#","seq_no":{n},"ack":true"#));
    assert_eq!(
        text,
        format!(r#"{{"id":"{id}","topic":{}{confirm}}}"#, json_str(topic))
    );
    id
}

/// A CONSUME OK reply is exactly
/// `{"id","topic","payload"[,"headers"],"timestamp","retry"}`; `headers` is the expected
/// JSON text or `None` when the key must be absent. Returns the timestamp, checked to be a
/// Unix time in nanoseconds no later than now.
fn message(
    reply: (u8, String),
    id: &str,
    topic: &str,
    payload: &str,
    headers: Option<&str>,
    retry: u32,
) -> i64 {
    let (code, text) = reply;
    assert_eq!(code, OK, "consume: {text}");
    let ts = timestamp_of(&text);
    let headers = headers.map_or(String::new(), |h| format!(r#","headers":{h}"#));
    assert_eq!(
        text,
        format!(
            r#"{{"id":"{id}","topic":{},"payload":{payload}{headers},"timestamp":{ts},"retry":{retry}}}"#,
            json_str(topic)
        )
    );
    ts
}

/// A push is exactly `{"id","topic","payload"[,"headers"],"timestamp","subscriber_id"}`.
fn push_text(
    id: &str,
    topic: &str,
    payload: &str,
    headers: Option<&str>,
    ts: i64,
    sub: &str,
) -> String {
    let headers = headers.map_or(String::new(), |h| format!(r#","headers":{h}"#));
    format!(
        r#"{{"id":"{id}","topic":{},"payload":{payload}{headers},"timestamp":{ts},"subscriber_id":{}}}"#,
        json_str(topic),
        json_str(sub)
    )
}

fn timestamp_of(text: &str) -> i64 {
    let v: Value = serde_json::from_str(text).unwrap();
    let ts = v["timestamp"]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer timestamp: {text}"));
    // Unix nanoseconds: after 2020 and not in the future.
    assert!(
        ts > 1_577_836_800_000_000_000 && ts <= now_ns(),
        "timestamp {ts} is not Unix ns"
    );
    ts
}

fn id_of(text: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap();
    v["id"].as_str().unwrap().to_string()
}

fn ok_status(s: &str) -> (u8, String) {
    (OK, format!(r#"{{"status":"{s}"}}"#))
}

fn error(text: &str) -> (u8, String) {
    (ERROR, format!(r#"{{"error":{}}}"#, json_str(text)))
}

fn empty() -> (u8, String) {
    (EMPTY, String::new())
}

/// Publishes then polls CONSUME until the message is ready; returns the reply and how long
/// it took from the publish reply.
fn poll_consume(c: &mut Conn, body: &str) -> ((u8, String), Duration) {
    let start = Instant::now();
    loop {
        let r = c.call(CONSUME, body);
        if r.0 != EMPTY {
            return (r, start.elapsed());
        }
        assert!(start.elapsed() < WAIT, "nothing arrived: {body}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---- Go SDK ------------------------------------------------------------------------------

/// The Go SDK (`client/golang`, spec §10.1): bodies are Go maps, so keys come alphabetically
/// and a nil headers map is `null`; durations are `time.Duration` nanoseconds.
#[test]
fn go_sdk_wire_bytes_get_v1_replies() {
    let (s, _cfg) = server();
    let start_ns = now_ns();
    let mut c = Conn::open(s.tcp_port);

    // Ping(), Health(), Stats(), ClusterStatusInfo() send `{}`.
    assert_eq!(c.call(PING, "{}"), ok_status("pong"));
    assert_eq!(c.call(STATS, "{}"), (OK, EMPTY_STATS.to_string()));
    assert_eq!(
        c.call(CLUSTER_STATUS, "{}"),
        (OK, r#"{"enabled":false}"#.to_string())
    );

    // Publish(topic, map{"n":1}, nil, nil): the spec's example body.
    let id1 = publish_ok(
        c.call(
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}"#,
        ),
        "jobs",
    );
    // Publish with headers and PublishOptions{Priority: 5}: delivered first.
    let id2 = publish_ok(
        c.call(
            PUBLISH,
            r#"{"delay":0,"headers":{"k":"v","trace":"a-1"},"payload":"text","priority":5,"topic":"jobs","ttl":0}"#,
        ),
        "jobs",
    );
    assert_ne!(id1, id2);
    // Consume(topic): `{"topic"}`.
    let ts2 = message(
        c.call(CONSUME, r#"{"topic":"jobs"}"#),
        &id2,
        "jobs",
        r#""text""#,
        Some(r#"{"k":"v","trace":"a-1"}"#),
        0,
    );
    let ts1 = message(
        c.call(CONSUME, r#"{"topic":"jobs"}"#),
        &id1,
        "jobs",
        r#"{"n":1}"#,
        None,
        0,
    );
    assert!(
        ts1 >= start_ns && ts2 >= ts1,
        "timestamps are publish times"
    );
    assert_eq!(c.call(CONSUME, r#"{"topic":"jobs"}"#), empty());
    // Ack(id) / Nack(id): `{"id"}`. A NACKed message comes back with retry 1.
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{id2}"}}"#)),
        ok_status("acked")
    );
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{id2}"}}"#)),
        error(&format!("message {id2} not found in pending"))
    );
    assert_eq!(
        c.call(NACK, &format!(r#"{{"id":"{id1}"}}"#)),
        ok_status("nacked")
    );
    let (again, _) = poll_consume(&mut c, r#"{"topic":"jobs"}"#);
    assert_eq!(
        message(again, &id1, "jobs", r#"{"n":1}"#, None, 1),
        ts1,
        "a retry keeps the publish timestamp"
    );
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{id1}"}}"#)),
        ok_status("acked")
    );

    // Delay and TTL are time.Duration nanoseconds: 500 ms of delay (and a 60 s TTL).
    let before_publish = Instant::now();
    let delayed = publish_ok(
        c.call(
            PUBLISH,
            r#"{"delay":500000000,"headers":null,"payload":1,"priority":0,"topic":"go-delay","ttl":60000000000}"#,
        ),
        "go-delay",
    );
    assert_eq!(c.call(CONSUME, r#"{"topic":"go-delay"}"#), empty());
    let stats: Value = serde_json::from_str(&c.call(STATS, "{}").1).unwrap();
    assert_eq!(stats["DelayedCount"], 1, "{stats}");
    let (r, _) = poll_consume(&mut c, r#"{"topic":"go-delay"}"#);
    let waited = before_publish.elapsed();
    message(r, &delayed, "go-delay", "1", None, 0);
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{delayed}"}}"#)),
        ok_status("acked")
    );
    // Ready no earlier than publish time + 500 ms (a little slack for wall vs monotonic
    // clocks), and not 500000000 of any longer unit.
    assert!(
        waited >= Duration::from_millis(495) && waited < Duration::from_secs(5),
        "a 500000000 ns delay took {waited:?}"
    );

    // SetPrefetch(n): `{"count":n}`.
    assert_eq!(c.call(PREFETCH, r#"{"count":1}"#), ok_status("ok"));
    publish_ok(
        c.call(
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":[1,2],"priority":0,"topic":"go-pf","ttl":0}"#,
        ),
        "go-pf",
    );
    publish_ok(
        c.call(
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":[3],"priority":0,"topic":"go-pf","ttl":0}"#,
        ),
        "go-pf",
    );
    let first = c.call(CONSUME, r#"{"topic":"go-pf"}"#);
    assert_eq!(first.0, OK);
    assert_eq!(
        c.call(CONSUME, r#"{"topic":"go-pf"}"#),
        error("prefetch limit reached")
    );
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{}"}}"#, id_of(&first.1))),
        ok_status("acked")
    );
    assert_eq!(c.call(CONSUME, r#"{"topic":"go-pf"}"#).0, OK);
    assert_eq!(c.call(PREFETCH, r#"{"count":0}"#), ok_status("ok"));

    // Exchanges: ExchangeDeclare, BindQueue, PublishToExchange, UnbindQueue, ExchangeDelete.
    assert_eq!(
        c.call(
            EXCHANGE_DECLARE,
            r#"{"durable":true,"name":"orders","type":"direct"}"#
        ),
        ok_status("ok")
    );
    assert_eq!(
        c.call(
            BIND_QUEUE,
            r#"{"binding_key":"eu","exchange":"orders","headers":null,"match_all":false,"queue":"orders-eu"}"#
        ),
        ok_status("ok")
    );
    // A named exchange answers the template id with topic "" (copies get fresh ids).
    let (code, text) = c.call(
        PUBLISH_EXCHANGE,
        r#"{"exchange":"orders","headers":{"src":"go"},"payload":{"n":2},"priority":0,"routing_key":"eu"}"#,
    );
    let template = publish_ok((code, text), "");
    let r = c.call(CONSUME, r#"{"topic":"orders-eu"}"#);
    let copy = id_of(&r.1);
    message(
        r,
        &copy,
        "orders-eu",
        r#"{"n":2}"#,
        Some(r#"{"src":"go"}"#),
        0,
    );
    assert_ne!(copy, template);
    // The default exchange routes to the queue named by the routing key, keeping the id.
    let (code, text) = c.call(
        PUBLISH_EXCHANGE,
        r#"{"exchange":"","headers":null,"payload":3,"priority":0,"routing_key":"go-direct"}"#,
    );
    let direct = publish_ok((code, text), "go-direct");
    message(
        c.call(CONSUME, r#"{"topic":"go-direct"}"#),
        &direct,
        "go-direct",
        "3",
        None,
        0,
    );
    assert_eq!(
        c.call(
            UNBIND_QUEUE,
            r#"{"binding_key":"eu","exchange":"orders","queue":"orders-eu"}"#
        ),
        ok_status("ok")
    );
    publish_ok(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"orders","headers":null,"payload":4,"priority":0,"routing_key":"eu"}"#,
        ),
        "",
    );
    assert_eq!(c.call(CONSUME, r#"{"topic":"orders-eu"}"#), empty());
    assert_eq!(
        c.call(EXCHANGE_DELETE, r#"{"name":"orders"}"#),
        ok_status("ok")
    );
    assert_eq!(
        c.call(EXCHANGE_DELETE, r#"{"name":"orders"}"#),
        error(r#"exchange "orders" not found"#)
    );

    // Subscribe(topic, id, durable): `{"durable","id","topic"}`; pushes are routed by
    // topic + ":" + subscriber_id.
    let mut sub = Conn::open(s.tcp_port);
    assert_eq!(
        sub.call(
            CONSUME,
            r#"{"durable":false,"id":"go-sub","topic":"events"}"#
        ),
        ok_status("subscribed")
    );
    // PublishTopic(topic, payload, headers, opts): `{"headers","payload","priority","topic"}`.
    let eid = publish_ok(
        c.call(
            PUBLISH_TOPIC,
            r#"{"headers":null,"payload":{"e":1},"priority":0,"topic":"events"}"#,
        ),
        "events",
    );
    let (code, payload) = sub.frame().unwrap();
    let text = String::from_utf8(payload).unwrap();
    assert_eq!(code, OK);
    assert_eq!(
        text,
        push_text(
            &eid,
            "events",
            r#"{"e":1}"#,
            None,
            timestamp_of(&text),
            "go-sub"
        )
    );
    assert_eq!(go_route_key(&text).as_deref(), Some("events:go-sub"));
    assert!(node_is_push(code, &text));

    // EnableConfirm(): `{}`; publish replies then carry seq_no (shared by 0x01/0x02/0x18).
    assert_eq!(c.call(CONFIRM_SELECT, "{}"), ok_status("ok"));
    publish_ok_confirm(
        c.call(
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":5,"priority":0,"topic":"jobs","ttl":0}"#,
        ),
        "jobs",
        Some(1),
    );
    publish_ok_confirm(
        c.call(
            PUBLISH_TOPIC,
            r#"{"headers":null,"payload":6,"priority":0,"topic":"events"}"#,
        ),
        "events",
        Some(2),
    );
    publish_ok_confirm(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"","headers":null,"payload":7,"priority":0,"routing_key":"jobs"}"#,
        ),
        "jobs",
        Some(3),
    );
    assert_eq!(sub.push()["payload"], 6);
}

/// The Go SDK's durable subscription: the `subscribed` reply comes before any catch-up
/// push (the Go SDK would take a push for the reply), and the backlog holds what was
/// published while the subscriber was offline, in order.
#[test]
fn go_sdk_durable_subscribe_reply_precedes_catch_up() {
    let (s, _cfg) = server();
    let body = r#"{"durable":true,"id":"go-dur","topic":"feed"}"#;
    let mut sub = Conn::open(s.tcp_port);
    assert_eq!(sub.call(CONSUME, body), ok_status("subscribed"));
    drop(sub);
    let mut c = Conn::open(s.tcp_port);
    // The server notices the disconnect asynchronously; until then a publish goes to the
    // dead connection. Publish until one lands in the `<topic>:<id>` backlog queue (which
    // Stats lists), i.e. the subscriber is offline.
    let deadline = Instant::now() + WAIT;
    let mut published = Vec::new();
    loop {
        let n = published.len();
        let body = format!(r#"{{"headers":null,"payload":{n},"priority":0,"topic":"feed"}}"#);
        published.push(publish_ok(c.call(PUBLISH_TOPIC, &body), "feed"));
        let stats: Value = serde_json::from_str(&c.call(STATS, "{}").1).unwrap();
        if stats["Queues"]["feed:go-dur"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no backlog while offline: {stats}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The probe's last publish is the first one backlogged; two more follow.
    let first_backlogged = published.len() - 1;
    for n in published.len()..published.len() + 2 {
        let body = format!(r#"{{"headers":null,"payload":{n},"priority":0,"topic":"feed"}}"#);
        published.push(publish_ok(c.call(PUBLISH_TOPIC, &body), "feed"));
    }
    let mut sub = Conn::open(s.tcp_port);
    sub.send(CONSUME, body);
    let (code, payload) = sub.frame().unwrap();
    assert_eq!(
        check_reply(code, payload),
        ok_status("subscribed"),
        "the reply is the first frame"
    );
    for (n, id) in published.iter().enumerate().skip(first_backlogged) {
        let push = sub.push();
        assert_eq!(
            (push["id"].as_str(), push["payload"].as_u64()),
            (Some(id.as_str()), Some(n as u64)),
            "catch-up in publish order: {push}"
        );
        assert_eq!(push["subscriber_id"], "go-dur");
    }
}

// ---- Node SDK ----------------------------------------------------------------------------

/// The Node SDK (`client/nodejs`, spec §10.2): `JSON.stringify` of object literals, keys in
/// source order; payloads are sent as JSON strings; `{}` for absent headers; delay and ttl
/// in what Node calls milliseconds but the wire treats as nanoseconds.
#[test]
fn node_sdk_wire_bytes_get_v1_replies() {
    let (s, _cfg) = server();
    let mut c = Conn::open(s.tcp_port);

    // publish('jobs', {n:1}): the payload is JSON.stringify-ed into a string and stays a
    // string; headers `{}` come back omitted.
    let id = publish_ok(
        c.call(
            PUBLISH,
            r#"{"topic":"jobs","payload":"{\"n\":1}","headers":{},"delay":0,"ttl":0,"priority":0}"#,
        ),
        "jobs",
    );
    message(
        c.call(CONSUME, r#"{"topic":"jobs"}"#),
        &id,
        "jobs",
        r#""{\"n\":1}""#,
        None,
        0,
    );
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{id}"}}"#)),
        ok_status("acked")
    );
    // The older (last loadable) Node SDK has no `priority` field.
    let old = publish_ok(
        c.call(
            PUBLISH,
            r#"{"topic":"jobs","payload":"plain","headers":{"h":"1"},"delay":0,"ttl":0}"#,
        ),
        "jobs",
    );
    message(
        c.call(CONSUME, r#"{"topic":"jobs"}"#),
        &old,
        "jobs",
        r#""plain""#,
        Some(r#"{"h":"1"}"#),
        0,
    );
    assert_eq!(
        c.call(NACK, &format!(r#"{{"id":"{old}"}}"#)),
        ok_status("nacked")
    );
    let (r, _) = poll_consume(&mut c, r#"{"topic":"jobs"}"#);
    message(r, &old, "jobs", r#""plain""#, Some(r#"{"h":"1"}"#), 1);

    // Node's `delay: 5000` ("ms") is 5 µs on the wire: ready at once, not in 5 s.
    let quick = publish_ok(
        c.call(
            PUBLISH,
            r#"{"topic":"node-delay","payload":"d","headers":{},"delay":5000,"ttl":0,"priority":0}"#,
        ),
        "node-delay",
    );
    let (r, waited) = poll_consume(&mut c, r#"{"topic":"node-delay"}"#);
    message(r, &quick, "node-delay", r#""d""#, None, 0);
    assert!(
        waited < Duration::from_secs(2),
        "delay 5000 is nanoseconds, took {waited:?}"
    );
    // Node's `ttl: 5000` is 5 µs: expired by the next request.
    publish_ok(
        c.call(
            PUBLISH,
            r#"{"topic":"node-ttl","payload":"t","headers":{},"delay":0,"ttl":5000,"priority":0}"#,
        ),
        "node-ttl",
    );
    assert_eq!(
        c.call(CONSUME, r#"{"topic":"node-ttl"}"#),
        empty(),
        "ttl 5000 is nanoseconds"
    );

    // ping(), stats(), setPrefetch(n), enableConfirm().
    assert_eq!(c.call(PING, "{}"), ok_status("pong"));
    let (code, stats) = c.call(STATS, "{}");
    assert_eq!(code, OK);
    assert_stats_shape(&stats);
    assert_eq!(c.call(PREFETCH, r#"{"count":10}"#), ok_status("ok"));

    // Exchanges as Node spells them.
    assert_eq!(
        c.call(
            EXCHANGE_DECLARE,
            r#"{"name":"logs","type":"topic","durable":false}"#
        ),
        ok_status("ok")
    );
    assert_eq!(
        c.call(
            BIND_QUEUE,
            r#"{"exchange":"logs","queue":"logs-err","binding_key":"*.error","headers":null,"match_all":false}"#
        ),
        ok_status("ok")
    );
    assert_eq!(
        c.call(
            EXCHANGE_DECLARE,
            r#"{"name":"hdr","type":"headers","durable":false}"#
        ),
        ok_status("ok")
    );
    assert_eq!(
        c.call(
            BIND_QUEUE,
            r#"{"exchange":"hdr","queue":"hdr-a","binding_key":"","headers":{"x-type":"a","x-v":"1"},"match_all":true}"#
        ),
        ok_status("ok")
    );
    publish_ok(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"logs","routing_key":"db.error","payload":"boom","headers":{},"priority":0}"#,
        ),
        "",
    );
    publish_ok(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"logs","routing_key":"db.info","payload":"fine","headers":{},"priority":0}"#,
        ),
        "",
    );
    publish_ok(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"hdr","routing_key":"","payload":"one","headers":{"x-type":"a"},"priority":0}"#,
        ),
        "",
    );
    publish_ok(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"hdr","routing_key":"","payload":"both","headers":{"x-type":"a","x-v":"1"},"priority":0}"#,
        ),
        "",
    );
    let r = c.call(CONSUME, r#"{"topic":"logs-err"}"#);
    let copy = id_of(&r.1);
    message(r, &copy, "logs-err", r#""boom""#, None, 0);
    assert_eq!(c.call(CONSUME, r#"{"topic":"logs-err"}"#), empty());
    let r = c.call(CONSUME, r#"{"topic":"hdr-a"}"#);
    let copy = id_of(&r.1);
    message(
        r,
        &copy,
        "hdr-a",
        r#""both""#,
        Some(r#"{"x-type":"a","x-v":"1"}"#),
        0,
    );
    assert_eq!(c.call(CONSUME, r#"{"topic":"hdr-a"}"#), empty());
    assert_eq!(
        c.call(
            UNBIND_QUEUE,
            r#"{"exchange":"logs","queue":"logs-err","binding_key":"*.error"}"#
        ),
        ok_status("ok")
    );
    assert_eq!(
        c.call(EXCHANGE_DELETE, r#"{"name":"logs"}"#),
        ok_status("ok")
    );

    assert_eq!(c.call(CONFIRM_SELECT, "{}"), ok_status("ok"));
    publish_ok_confirm(
        c.call(
            PUBLISH,
            r#"{"topic":"jobs","payload":"c","headers":{},"delay":0,"ttl":0,"priority":0}"#,
        ),
        "jobs",
        Some(1),
    );
    publish_ok_confirm(
        c.call(
            PUBLISH_EXCHANGE,
            r#"{"exchange":"","routing_key":"jobs","payload":"d","headers":{},"priority":0}"#,
        ),
        "jobs",
        Some(2),
    );
}

/// Node pipelines requests and demultiplexes: pushes (by its detection rule) go to the
/// subscription, every other frame answers the oldest outstanding request. With pushes
/// flowing on the subscriber's own connection, its pipelined requests still get their
/// replies, in order, each recognisable as a reply.
#[test]
fn node_sdk_pipelining_and_push_demultiplexing() {
    let (s, _cfg) = server();
    let mut sub = Conn::open(s.tcp_port);
    assert_eq!(
        sub.call(CONSUME, r#"{"topic":"news","id":"node-1","durable":false}"#),
        ok_status("subscribed")
    );
    let port = s.tcp_port;
    let publisher = std::thread::spawn(move || {
        let mut p = Conn::open(port);
        (0..20)
            .map(|i| {
                let body = format!(
                    r#"{{"topic":"news","payload":"{i}","headers":{{}},"delay":0,"ttl":0,"priority":0}}"#
                );
                publish_ok(p.call(PUBLISH_TOPIC, &body), "news")
            })
            .collect::<Vec<String>>()
    });
    let requests: [(u8, &str); 7] = [
        (PING, "{}"),
        (
            PUBLISH_TOPIC,
            r#"{"topic":"news","payload":"self","headers":{},"delay":0,"ttl":0,"priority":0}"#,
        ),
        (CONSUME, r#"{"topic":"node-empty"}"#),
        (STATS, "{}"),
        (
            PUBLISH,
            r#"{"topic":"node-q","payload":"{\"a\":[1,2]}","headers":{},"delay":0,"ttl":0,"priority":0}"#,
        ),
        (CONSUME, r#"{"topic":"node-q"}"#),
        (PING, "{}"),
    ];
    sub.send_pipelined(&requests);
    let mut replies = Vec::new();
    let mut pushes = Vec::new();
    while replies.len() < requests.len() || pushes.len() < 21 {
        let (code, payload) = sub.frame().expect("connection open");
        let text = String::from_utf8(payload).unwrap();
        if node_is_push(code, &text) {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                (v["topic"].as_str(), v["subscriber_id"].as_str()),
                (Some("news"), Some("node-1")),
                "the event `message:news:node-1`: {text}"
            );
            assert_eq!(go_route_key(&text).as_deref(), Some("news:node-1"));
            pushes.push(v);
        } else {
            replies.push(check_reply(code, text.into_bytes()));
        }
    }
    let published = publisher.join().unwrap();
    assert_eq!(replies[0], ok_status("pong"));
    let self_id = publish_ok(replies[1].clone(), "news");
    assert_eq!(replies[2], empty());
    assert_eq!(replies[3].0, OK);
    assert_stats_shape(&replies[3].1);
    let qid = publish_ok(replies[4].clone(), "node-q");
    message(
        replies[5].clone(),
        &qid,
        "node-q",
        r#""{\"a\":[1,2]}""#,
        None,
        0,
    );
    assert_eq!(replies[6], ok_status("pong"));
    // Every publish reached the subscriber once; the other connection's in order.
    let from_publisher: Vec<&str> = pushes
        .iter()
        .filter(|p| p["id"] != self_id.as_str())
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(from_publisher, published);
    let own: Vec<&Value> = pushes
        .iter()
        .filter(|p| p["id"] == self_id.as_str())
        .collect();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0]["payload"], "self", "a string payload stays a string");
}

/// Node's stress test: 5 concurrent polling consumers on one queue, 100 messages, each
/// delivered once.
#[test]
fn node_sdk_concurrent_polling_consumers_get_each_message_once() {
    let (s, _cfg) = server();
    let mut c = Conn::open(s.tcp_port);
    let mut published: Vec<String> = (0..100)
        .map(|i| {
            let body = format!(
                r#"{{"topic":"stress","payload":"{{\"i\":{i}}}","headers":{{}},"delay":0,"ttl":0,"priority":0}}"#
            );
            publish_ok(c.call(PUBLISH, &body), "stress")
        })
        .collect();
    let port = s.tcp_port;
    let consumers: Vec<_> = (0..5)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                let mut got = Vec::new();
                loop {
                    let (code, text) = c.call(CONSUME, r#"{"topic":"stress"}"#);
                    if code == EMPTY {
                        return got;
                    }
                    assert_eq!(code, OK, "{text}");
                    let id = id_of(&text);
                    assert_eq!(
                        c.call(ACK, &format!(r#"{{"id":"{id}"}}"#)),
                        ok_status("acked")
                    );
                    got.push(id);
                }
            })
        })
        .collect();
    let mut consumed: Vec<String> = consumers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    consumed.sort();
    published.sort();
    assert_eq!(consumed, published, "each message exactly once");
}

// ---- v1 CLI ------------------------------------------------------------------------------

/// One CLI invocation: a fresh connection, AUTH first when `BOLTQ_API_KEY` is set, one
/// command, close (spec §9; every CLI command connects before running).
fn cli(port: u16, api_key: &str, code: u8, body: &str) -> (u8, String) {
    let mut c = Conn::open(port);
    assert_eq!(
        c.call(AUTH, &format!(r#"{{"api_key":{}}}"#, json_str(api_key))),
        ok_status("ok")
    );
    c.call(code, body)
}

/// The v1 CLI (`boltq`, spec §9) against a server with an API key: `health`, `publish`,
/// `consume`, `ack`, `nack`, `stats`, each its own connection — so consume and ack come
/// from different connections, as the CLI's users script them.
#[test]
fn cli_wire_bytes_get_v1_replies() {
    let (s, _cfg) = server_with("[security]\napi_key = \"cli-key\"\n");
    let (port, key) = (s.tcp_port, "cli-key");

    // `boltq health`: PING `{}` → prints "healthy".
    assert_eq!(cli(port, key, PING, "{}"), ok_status("pong"));
    // `boltq consume -topic cli-jobs` on an empty queue → "no messages available".
    assert_eq!(cli(port, key, CONSUME, r#"{"topic":"cli-jobs"}"#), empty());
    // `boltq publish -topic cli-jobs -payload '{"task": "resize", "size": [1, 2]}'`: the
    // CLI checks the JSON and Go's marshalling of the json.RawMessage compacts it.
    let id = publish_ok(
        cli(
            port,
            key,
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":{"task":"resize","size":[1,2]},"priority":0,"topic":"cli-jobs","ttl":0}"#,
        ),
        "cli-jobs",
    );
    let s2 = publish_ok(
        cli(
            port,
            key,
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":"hello","priority":0,"topic":"cli-jobs","ttl":0}"#,
        ),
        "cli-jobs",
    );
    // `boltq consume` then `boltq ack -id …` from another process.
    message(
        cli(port, key, CONSUME, r#"{"topic":"cli-jobs"}"#),
        &id,
        "cli-jobs",
        r#"{"task":"resize","size":[1,2]}"#,
        None,
        0,
    );
    assert_eq!(
        cli(port, key, ACK, &format!(r#"{{"id":"{id}"}}"#)),
        ok_status("acked")
    );
    assert_eq!(
        cli(port, key, ACK, &format!(r#"{{"id":"{id}"}}"#)),
        error(&format!("message {id} not found in pending"))
    );
    // `boltq nack -id …`, then the message is back with retry 1.
    message(
        cli(port, key, CONSUME, r#"{"topic":"cli-jobs"}"#),
        &s2,
        "cli-jobs",
        r#""hello""#,
        None,
        0,
    );
    assert_eq!(
        cli(port, key, NACK, &format!(r#"{{"id":"{s2}"}}"#)),
        ok_status("nacked")
    );
    let deadline = Instant::now() + WAIT;
    let again = loop {
        let r = cli(port, key, CONSUME, r#"{"topic":"cli-jobs"}"#);
        if r.0 != EMPTY {
            break r;
        }
        assert!(Instant::now() < deadline, "nacked message never came back");
        std::thread::sleep(Duration::from_millis(5));
    };
    message(again, &s2, "cli-jobs", r#""hello""#, None, 1);
    // Pending while nobody acks, across connections.
    assert_eq!(
        cli(port, key, STATS, "{}"),
        (
            OK,
            r#"{"Queues":{"cli-jobs":0},"Topics":{},"DeadLetters":{},"PendingCount":1,"DelayedCount":0}"#
                .to_string()
        )
    );
    assert_eq!(
        cli(port, key, ACK, &format!(r#"{{"id":"{s2}"}}"#)),
        ok_status("acked")
    );
    // `boltq stats` prints the Stats object.
    assert_eq!(
        cli(port, key, STATS, "{}"),
        (
            OK,
            r#"{"Queues":{"cli-jobs":0},"Topics":{},"DeadLetters":{},"PendingCount":0,"DelayedCount":0}"#
                .to_string()
        )
    );
    // Without the key (BOLTQ_API_KEY unset) the first command is refused and the
    // connection closed.
    let mut c = Conn::open(port);
    assert_eq!(
        c.call(PING, "{}"),
        error("authentication required, send AUTH first")
    );
    assert!(c.closed_without_reply());
}

// ---- §13 checklist -----------------------------------------------------------------------

fn assert_stats_shape(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let mut want = vec![
        "DeadLetters",
        "DelayedCount",
        "PendingCount",
        "Queues",
        "Topics",
    ];
    want.sort();
    assert_eq!(keys, want, "capitalised Stats keys: {text}");
    for k in ["Queues", "Topics", "DeadLetters"] {
        assert!(v[k].is_object(), "{k} is an object, never null: {text}");
    }
    for k in ["PendingCount", "DelayedCount"] {
        assert!(v[k].is_u64(), "{k} is an integer: {text}");
    }
    assert!(
        text.starts_with(r#"{"Queues":"#),
        "v1's field order Queues, Topics, DeadLetters, PendingCount, DelayedCount: {text}"
    );
}

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// Spec §2.8, byte for byte.
#[test]
fn checklist_worked_example_and_framing() {
    let (s, _cfg) = server();
    let mut c = Conn::open(s.tcp_port);
    let request = hex(
        "01 22 00 00 00 7b 22 74 6f 70 69 63 22 3a 22 6a 6f 62 73 22 2c 22 70 61 79 6c \
         6f 61 64 22 3a 7b 22 6e 22 3a 31 7d 7d",
    );
    assert_eq!(
        request,
        Conn::frame_bytes(PUBLISH, r#"{"topic":"jobs","payload":{"n":1}}"#)
    );
    c.send_raw(&request);
    let (code, payload) = c.frame().unwrap();
    let text = String::from_utf8(payload.clone()).unwrap();
    let id = id_of(&text);
    let mut want = hex("00 38 00 00 00");
    want.extend_from_slice(format!(r#"{{"id":"{id}","topic":"jobs"}}"#).as_bytes());
    let mut got = vec![code];
    got.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    got.extend_from_slice(&payload);
    assert_eq!(got, want, "reply {text}");
    assert!(is_message_id(&id));

    // Error example: 29 = 0x1d bytes.
    c.send(PUBLISH, r#"{"payload":{"n":1}}"#);
    let (code, payload) = c.frame().unwrap();
    let mut got = vec![code];
    got.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    got.extend_from_slice(&payload);
    let mut want = hex("01 1d 00 00 00 7b 22 65 72");
    want.extend_from_slice(&br#"{"error":"topic is required"}"#[4..]);
    assert_eq!(got, want);
    // Empty consume: exactly 02 00 00 00 00 (after taking the one message).
    assert_eq!(c.call(CONSUME, r#"{"topic":"jobs"}"#).0, OK);
    c.send(CONSUME, r#"{"topic":"jobs"}"#);
    let (code, payload) = c.frame().unwrap();
    let mut got = vec![code];
    got.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    assert_eq!((got, payload), (hex("02 00 00 00 00"), Vec::new()));

    // Exactly 4 MiB is allowed (PING ignores its payload) ...
    let big = " ".repeat(FRAME_PAYLOAD_MAX);
    assert_eq!(c.call(PING, &big), ok_status("pong"));
    // ... one byte more closes the connection without a reply.
    let mut header = vec![PUBLISH];
    header.extend_from_slice(&(FRAME_PAYLOAD_MAX as u32 + 1).to_le_bytes());
    c.send_raw(&header);
    assert!(
        c.closed_without_reply(),
        "oversized frame: no reply, closed"
    );
    // A truncated frame (the client stops mid-frame) gets no reply either.
    let mut t = Conn::open(s.tcp_port);
    t.send_raw(&Conn::frame_bytes(PUBLISH, r#"{"topic":"jobs","payload":1}"#)[..12]);
    t.s.shutdown(Shutdown::Write).unwrap();
    assert!(
        t.closed_without_reply(),
        "truncated frame: no reply, closed"
    );
    // Other connections are unaffected; nothing was published by the truncated frame.
    let mut c = Conn::open(s.tcp_port);
    assert_eq!(c.call(CONSUME, r#"{"topic":"jobs"}"#), empty());
}

/// Checklist items 1–2 and 7: in-order replies with no correlation id; every v1 command
/// byte is known, every other byte in v1's range answers `unknown command: 0x%02x`; error
/// texts and reply shapes the spec fixes.
#[test]
fn checklist_command_bytes_error_texts_and_reply_order() {
    let (s, _cfg) = server();
    let mut c = Conn::open(s.tcp_port);
    // The sweep turns confirm mode on (0x13) and sets prefetch: its own connection.
    let mut sweep = Conn::open(s.tcp_port);
    for code in (0x01..=0x09).chain(0x10..=0x18) {
        let (status, text) = sweep.call(code, "{}");
        assert!(
            !text.contains("unknown command"),
            "{code:#04x} is a v1 command: {status:#04x} {text}"
        );
    }
    for code in [0x00u8, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x7f, 0xfe, 0xff] {
        assert_eq!(
            sweep.call(code, "{}"),
            error(&format!("unknown command: 0x{code:02x}"))
        );
    }
    // Error texts clients see (Node throws them, the CLI prints them).
    let cases: [(u8, &str, &str); 14] = [
        (PUBLISH, r#"{"payload":1}"#, "topic is required"),
        (PUBLISH_TOPIC, r#"{"topic":""}"#, "topic is required"),
        (CONSUME, r#"{"topic":""}"#, "topic is required"),
        (ACK, r#"{"id":""}"#, "id is required"),
        (NACK, "{}", "id is required"),
        (ACK, "not json", "invalid json"),
        (PREFETCH, r#"{"count":"x"}"#, "invalid prefetch payload"),
        (EXCHANGE_DECLARE, r#"{"type":"direct"}"#, "name is required"),
        (EXCHANGE_DELETE, r#"{"name":""}"#, "name is required"),
        (
            EXCHANGE_DELETE,
            r#"{"name":"nope"}"#,
            r#"exchange "nope" not found"#,
        ),
        (
            BIND_QUEUE,
            r#"{"exchange":"","queue":""}"#,
            "exchange and queue are required",
        ),
        (
            PUBLISH_EXCHANGE,
            r#"{"exchange":"nope","routing_key":"k","payload":1}"#,
            r#"exchange "nope" not found"#,
        ),
        (
            CLUSTER_JOIN,
            r#"{"node_id":"n2","addr":"127.0.0.1:9101"}"#,
            "clustering is not enabled",
        ),
        (
            CLUSTER_LEAVE,
            r#"{"node_id":"n2"}"#,
            "clustering is not enabled",
        ),
    ];
    for (code, body, text) in cases {
        assert_eq!(c.call(code, body), error(text), "{code:#04x} {body}");
    }
    let unknown = "0123456789abcdef0123456789abcdef";
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{unknown}"}}"#)),
        error(&format!("message {unknown} not found in pending"))
    );
    let (code, text) = c.call(PUBLISH, "");
    assert_eq!(
        (code, text.as_str()),
        (
            ERROR,
            r#"{"error":"invalid json: unexpected end of JSON input"}"#
        )
    );
    let (code, text) = c.call(PUBLISH, r#"{"topic":"q","delay":1.5}"#);
    assert!(
        code == ERROR && text.starts_with(r#"{"error":"invalid json: "#),
        "{text}"
    );
    assert_eq!(
        c.call(
            EXCHANGE_DECLARE,
            r#"{"name":"d","type":"direct","durable":false}"#
        ),
        ok_status("ok")
    );
    assert_eq!(
        c.call(
            EXCHANGE_DECLARE,
            r#"{"name":"d","type":"direct","durable":true}"#
        ),
        ok_status("ok"),
        "idempotent"
    );
    assert_eq!(
        c.call(
            EXCHANGE_DECLARE,
            r#"{"name":"d","type":"fanout","durable":false}"#
        ),
        error(r#"exchange "d" already exists with type direct"#)
    );

    // 64 pipelined requests of every kind over queues on both shards, one write: one reply
    // each, in request order.
    let mut frames: Vec<(u8, String)> = Vec::new();
    for i in 0..16 {
        frames.push((
            PUBLISH,
            format!(r#"{{"delay":0,"headers":null,"payload":{i},"priority":0,"topic":"ord{i}","ttl":0}}"#),
        ));
        frames.push((CONSUME, format!(r#"{{"topic":"ord{i}"}}"#)));
        frames.push((CONSUME, format!(r#"{{"topic":"ord{i}"}}"#)));
        frames.push((PING, "{}".to_string()));
    }
    let refs: Vec<(u8, &str)> = frames.iter().map(|(c, b)| (*c, b.as_str())).collect();
    c.send_pipelined(&refs);
    for i in 0..16 {
        let topic = format!("ord{i}");
        let id = publish_ok(c.reply(), &topic);
        message(c.reply(), &id, &topic, &i.to_string(), None, 0);
        assert_eq!(c.reply(), empty());
        assert_eq!(c.reply(), ok_status("pong"));
    }
}

/// Checklist items 5, 6 and 8: priority 0–9 high-first (FIFO within a level, out-of-range
/// clamped), payloads echoed as the same JSON (a string stays a string), ACK from any
/// connection, pending kept across a disconnect.
#[test]
fn checklist_priorities_payload_echo_and_ack_from_any_connection() {
    let (s, _cfg) = server();
    let mut c = Conn::open(s.tcp_port);
    let prios: [(i64, &str); 7] = [
        (0, "a"),
        (9, "b"),
        (5, "c"),
        (12, "d"),
        (-3, "e"),
        (5, "f"),
        (9, "g"),
    ];
    for (p, name) in prios {
        let body = format!(
            r#"{{"delay":0,"headers":null,"payload":"{name}","priority":{p},"topic":"prio","ttl":0}}"#
        );
        publish_ok(c.call(PUBLISH, &body), "prio");
    }
    let order: Vec<String> = (0..prios.len())
        .map(|_| {
            let (code, text) = c.call(CONSUME, r#"{"topic":"prio"}"#);
            assert_eq!(code, OK);
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(
                v.get("priority").is_none(),
                "no priority in a consume reply"
            );
            let id = v["id"].as_str().unwrap();
            assert_eq!(
                c.call(ACK, &format!(r#"{{"id":"{id}"}}"#)),
                ok_status("acked")
            );
            v["payload"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(order, ["b", "d", "g", "c", "f", "a", "e"]);

    // Payload echo: any JSON value, compacted, object key order and string escapes kept.
    let payloads: [(&str, &str); 10] = [
        (r#""hello""#, r#""hello""#),
        (r#""{\"n\":1}""#, r#""{\"n\":1}""#),
        ("42", "42"),
        ("-1.5e3", "-1.5e3"),
        ("true", "true"),
        ("null", "null"),
        ("[ 1 , [2] , {} ]", "[1,[2],{}]"),
        (
            r#"{ "b" : 1 , "a" : { "z" : [ ] } }"#,
            r#"{"b":1,"a":{"z":[]}}"#,
        ),
        (r#""a\u003cb \"q\" \\ é""#, r#""a\u003cb \"q\" \\ é""#),
        (r#"{"s":"x y"}"#, r#"{"s":"x y"}"#),
    ];
    for (sent, back) in payloads {
        let body = format!(
            r#"{{"delay":0,"headers":null,"payload":{sent},"priority":0,"topic":"echo","ttl":0}}"#
        );
        let id = publish_ok(c.call(PUBLISH, &body), "echo");
        message(
            c.call(CONSUME, r#"{"topic":"echo"}"#),
            &id,
            "echo",
            back,
            None,
            0,
        );
        assert_eq!(
            c.call(ACK, &format!(r#"{{"id":"{id}"}}"#)),
            ok_status("acked")
        );
    }
    // A publish without a payload carries `null`.
    let id = publish_ok(c.call(PUBLISH, r#"{"topic":"echo"}"#), "echo");
    message(
        c.call(CONSUME, r#"{"topic":"echo"}"#),
        &id,
        "echo",
        "null",
        None,
        0,
    );
    assert_eq!(
        c.call(ACK, &format!(r#"{{"id":"{id}"}}"#)),
        ok_status("acked")
    );

    // Consume on A, which also holds a live subscription; close A. Once the server has
    // processed the close (the subscription is gone), the message is still pending, not
    // requeued, and B can ack it.
    let mut a = Conn::open(s.tcp_port);
    assert_eq!(
        a.call(CONSUME, r#"{"topic":"probe","id":"a"}"#),
        ok_status("subscribed")
    );
    let id = publish_ok(
        a.call(
            PUBLISH,
            r#"{"delay":0,"headers":null,"payload":1,"priority":0,"topic":"handoff","ttl":0}"#,
        ),
        "handoff",
    );
    message(
        a.call(CONSUME, r#"{"topic":"handoff"}"#),
        &id,
        "handoff",
        "1",
        None,
        0,
    );
    drop(a);
    let mut b = Conn::open(s.tcp_port);
    let deadline = Instant::now() + WAIT;
    let stats = loop {
        let (_, text) = b.call(STATS, "{}");
        let v: Value = serde_json::from_str(&text).unwrap();
        if v["Topics"] == serde_json::json!({}) {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "disconnect not processed: {text}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        (&stats["PendingCount"], &stats["Queues"]["handoff"]),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "closing a connection does not requeue its messages: {stats}"
    );
    assert_eq!(b.call(CONSUME, r#"{"topic":"handoff"}"#), empty());
    assert_eq!(
        b.call(ACK, &format!(r#"{{"id":"{id}"}}"#)),
        ok_status("acked")
    );
}

/// Checklist items 9 and 10: the AUTH-first rule with close on violation, retry after a
/// wrong key, `invalid auth payload`; with no key AUTH always succeeds; the HTTP port
/// defaults to TCP port − 1.
#[test]
fn checklist_auth_gate_and_default_http_port() {
    let (s, _cfg) = server_with("[security]\napi_key = \"s3cret\"\n");
    let mut c = Conn::open(s.tcp_port);
    assert_eq!(
        c.call(PUBLISH, r#"{"topic":"jobs","payload":1}"#),
        error("authentication required, send AUTH first")
    );
    assert!(c.closed_without_reply(), "closed after the violation");
    let mut c = Conn::open(s.tcp_port);
    assert_eq!(
        c.call(AUTH, r#"{"api_key":"wrong"}"#),
        error("unauthorized")
    );
    assert_eq!(c.call(AUTH, "not json"), error("invalid auth payload"));
    assert_eq!(c.call(AUTH, r#"{"api_key":"s3cret"}"#), ok_status("ok"));
    assert_eq!(c.call(PING, "{}"), ok_status("pong"));
    drop(s);

    // No key: AUTH is OK whatever it carries (the payload is not parsed).
    let (s, _cfg) = server();
    let mut c = Conn::open(s.tcp_port);
    assert_eq!(c.call(AUTH, "not json"), ok_status("ok"));
    assert_eq!(c.call(AUTH, r#"{"api_key":"anything"}"#), ok_status("ok"));
    drop(s);

    // Without --http-port the admin listener is on TCP − 1 (the SDKs' cache helpers
    // assume it).
    let tmp = boltq_io::testutil::TempDir::new("compat-ports");
    let data = tmp.path().join("data");
    // Two adjacent free ports; the server is told only the upper one.
    let tcp = support::free_ports_below_ephemeral(2)[1];
    let tcp_arg = tcp.to_string();
    let args = [
        "--data-dir",
        data.to_str().unwrap(),
        "--tcp-port",
        &tcp_arg,
        "--shards",
        "2",
    ];
    // start_raw waits for /readyz on the port it is told: TCP − 1.
    let s = Server::start_raw(&args, tcp, tcp - 1, &data);
    assert_eq!(
        support::http_get(tcp - 1, "/livez").unwrap().0,
        200,
        "HTTP on TCP − 1"
    );
    let mut c = Conn::open(s.tcp_port);
    assert_eq!(c.call(PING, "{}"), ok_status("pong"));
}
