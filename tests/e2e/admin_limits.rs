//! End-to-end limits of the admin HTTP server and exact metrics, against the real binary:
//! slow clients are cut off by the read deadline (10 s, `http::READ_TIMEOUT_MS`)
//! while others are served, 10,000 pipelined keep-alive requests on one connection,
//! unambiguous request framing, and every v1 counter of `/metrics` moving by exactly what a
//! scripted sequence of operations implies.
//!
//! The two slow-client tests take about 10 s each by design; the test harness runs them in
//! parallel with each other and with the rest.

use crate::support::{get, http, post, Server};
use boltq::client::{Client, ClientOptions, PublishOptions};
use boltq::http::READ_TIMEOUT_MS;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const READ_TIMEOUT: Duration = Duration::from_millis(READ_TIMEOUT_MS);
/// Slack for the server's timer and a loaded machine, on top of the read deadline.
const CUTOFF_SLACK: Duration = Duration::from_secs(3);

/// What a slow connection has seen so far.
#[derive(Debug, Default)]
struct Watch {
    bytes: Vec<u8>,
    /// When the server closed (or reset) the connection.
    closed: Option<Instant>,
}

impl Watch {
    /// Reads what is there (waiting at most `wait`); notes a close.
    fn poll(&mut self, conn: &mut TcpStream, wait: Duration) {
        if self.closed.is_some() {
            return;
        }
        conn.set_read_timeout(Some(wait)).unwrap();
        let mut chunk = [0u8; 4096];
        match conn.read(&mut chunk) {
            Ok(0) => self.closed = Some(Instant::now()),
            Ok(n) => self.bytes.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            // A reset: the server closed with our bytes unread.
            Err(_) => self.closed = Some(Instant::now()),
        }
    }

    /// What the server did is what a slow client may get: a 408 and a close, or a close.
    fn assert_cut_off_cleanly(&self) {
        let text = String::from_utf8_lossy(&self.bytes);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 408 "),
            "a slow client gets 408 or a closed connection, got: {text:?}"
        );
        if !text.is_empty() {
            assert!(text.contains("\r\nConnection: close\r\n"), "{text:?}");
        }
    }
}

/// A client sends half a request head and then nothing: the server answers 408 (or closes)
/// once the read deadline passes, and keeps serving everyone else meanwhile. A connection
/// that has sent nothing at all is idle, not slow: it stays open past the read deadline
/// (the idle limit is 60 s) and is served afterwards.
#[test]
fn half_sent_request_is_cut_off_after_the_read_timeout_while_others_are_served() {
    let s = Server::start(&[]);
    let mut idle = TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    let mut slow = TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Half: ")
        .unwrap();
    let started = Instant::now();
    let mut watch = Watch::default();
    let mut served = 0;
    let mut slowest = Duration::ZERO;
    while watch.closed.is_none() {
        assert!(
            started.elapsed() < READ_TIMEOUT + CUTOFF_SLACK,
            "the half-sent request is still open {:?} after it started (read deadline \
             {READ_TIMEOUT:?}); seen: {watch:?}",
            started.elapsed()
        );
        let t = Instant::now();
        let r = get(&s, "/health");
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, "{\"status\":\"ok\"}\n"),
            "other clients are served while one is slow"
        );
        served += 1;
        slowest = slowest.max(t.elapsed());
        watch.poll(&mut slow, Duration::from_millis(200));
    }
    let cut = watch.closed.unwrap() - started;
    assert!(
        cut >= READ_TIMEOUT - Duration::from_millis(500),
        "cut off after {cut:?}, before the {READ_TIMEOUT:?} read deadline"
    );
    watch.assert_cut_off_cleanly();
    assert!(served >= 20, "{served} requests served meanwhile");
    assert!(
        slowest < Duration::from_secs(2),
        "slowest request while a client was slow: {slowest:?}"
    );

    // The idle connection outlived the read deadline and is served now.
    let mut idle_watch = Watch::default();
    idle_watch.poll(&mut idle, Duration::from_millis(50));
    assert!(
        idle_watch.closed.is_none() && idle_watch.bytes.is_empty(),
        "an idle connection is not cut at the read deadline: {idle_watch:?}"
    );
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    idle.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer:?}");
    let how = if watch.bytes.is_empty() {
        "closed without an answer"
    } else {
        "answered 408 and closed"
    };
    println!(
        "half-sent request {how} after {cut:?}; {served} requests served meanwhile, \
         slowest {slowest:?}"
    );
}

/// A client that trickles its request head (one byte every 500 ms, so no single read ever
/// waits long) is cut off too: a started request must arrive completely within the read
/// deadline (`READ_TIMEOUT_MS`: "A started request must arrive completely within this
/// time"), not merely make some progress every 10 s, or one slowloris client holds a
/// connection for as long as the 16 KiB head limit lasts (about 2 h 15 min at this rate).
#[test]
fn trickled_request_is_cut_off_once_the_read_timeout_since_its_start_passes() {
    let s = Server::start(&[]);
    let mut slow = TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Trickle: ")
        .unwrap();
    let started = Instant::now();
    let mut watch = Watch::default();
    while watch.closed.is_none() {
        assert!(
            started.elapsed() < READ_TIMEOUT + CUTOFF_SLACK,
            "a request trickled byte by byte is still open {:?} after it started (read \
             deadline {READ_TIMEOUT:?}): the deadline restarts on every read instead of \
             bounding the whole request; seen: {watch:?}",
            started.elapsed()
        );
        watch.poll(&mut slow, Duration::from_millis(500));
        if watch.closed.is_none() && watch.bytes.is_empty() && slow.write_all(b"a").is_err() {
            watch.closed = Some(Instant::now());
        }
        if !watch.bytes.is_empty() {
            // The answer arrived; wait for the close that follows it.
            watch.poll(&mut slow, Duration::from_secs(2));
        }
    }
    let cut = watch.closed.unwrap() - started;
    assert!(
        cut >= READ_TIMEOUT - Duration::from_millis(500),
        "cut off after {cut:?}, before the {READ_TIMEOUT:?} read deadline"
    );
    watch.assert_cut_off_cleanly();
    assert_eq!(get(&s, "/health").status, 200);
}

/// A keep-alive connection with a buffer, reading responses one by one.
struct KeepAlive {
    conn: TcpStream,
    buf: Vec<u8>,
}

/// One response read from a keep-alive connection.
struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl KeepAlive {
    fn connect(port: u16) -> KeepAlive {
        let conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn.set_nodelay(true).unwrap();
        KeepAlive {
            conn,
            buf: Vec::new(),
        }
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 64 * 1024];
        let n = self.conn.read(&mut chunk).expect("read a response");
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// The next response (head and `Content-Length` body).
    fn reply(&mut self) -> Reply {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            assert!(self.fill() > 0, "connection closed mid-response");
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).unwrap();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line: {head:?}"));
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no Content-Length: {head:?}"));
        while self.buf.len() < head_end + len {
            assert!(self.fill() > 0, "connection closed mid-body");
        }
        let body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        Reply { status, head, body }
    }

    /// True once the server has closed the connection (and sent nothing more).
    fn closed(&mut self) -> bool {
        self.buf.is_empty() && self.fill() == 0
    }
}

/// 10,000 requests on one keep-alive connection, pipelined 100 at a time: every one is
/// answered 200, in order, and the connection stays open until the last asks to close.
#[test]
fn ten_thousand_pipelined_keep_alive_requests_on_one_connection() {
    const TOTAL: usize = 10_000;
    const CHUNK: usize = 100;
    let s = Server::start(&[]);
    let before = get(&s, "/metrics").body;
    let mut c = KeepAlive::connect(s.http_port);
    let started = Instant::now();
    let mut answered = 0;
    for first in (0..TOTAL).step_by(CHUNK) {
        let mut batch = String::new();
        for i in first..first + CHUNK {
            // Two routes with different bodies alternate, so a reordered answer shows.
            let path = if i % 2 == 0 { "/health" } else { "/readyz" };
            let close = if i == TOTAL - 1 {
                "Connection: close\r\n"
            } else {
                ""
            };
            batch.push_str(&format!(
                "GET {path}?n={i} HTTP/1.1\r\nHost: x\r\n{close}\r\n"
            ));
        }
        c.conn.write_all(batch.as_bytes()).unwrap();
        for i in first..first + CHUNK {
            let r = c.reply();
            assert_eq!(r.status, 200, "request {i}: {}", r.head);
            let body = String::from_utf8_lossy(&r.body);
            if i % 2 == 0 {
                assert_eq!(body, "{\"status\":\"ok\"}\n", "request {i}");
            } else {
                assert!(body.contains("\"ready\":true"), "request {i}: {body}");
            }
            assert_eq!(
                r.head.contains("\r\nConnection: close\r\n"),
                i == TOTAL - 1,
                "only the last response closes: request {i}: {}",
                r.head
            );
            answered += 1;
        }
    }
    assert_eq!(answered, TOTAL);
    assert!(c.closed(), "the server closes after `Connection: close`");
    println!(
        "{TOTAL} keep-alive requests on one connection in {:?}",
        started.elapsed()
    );
    let after = get(&s, "/metrics").body;
    assert_eq!(
        ok_count(&after, "/health") + ok_count(&after, "/readyz"),
        ok_count(&before, "/health") + ok_count(&before, "/readyz") + TOTAL as u64,
        "every request is counted in boltq_http_requests_total"
    );
}

/// `boltq_http_requests_total` of `route` with code 200 in a Prometheus text scrape.
fn ok_count(text: &str, route: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.starts_with(&format!(
                "boltq_http_requests_total{{code=\"200\",route=\"{route}\"}}"
            )) || l.starts_with(&format!(
                "boltq_http_requests_total{{route=\"{route}\",code=\"200\"}}"
            ))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Request framing is unambiguous (RFC 9112 §6.3): a request with two different
/// `Content-Length` values, or a value that is not all digits, is refused with 400 and the
/// connection closed. Taking one of the values (the last, say) lets a proxy in front and
/// this server disagree on where the request ends: request smuggling.
#[test]
fn ambiguous_content_length_is_refused() {
    let s = Server::start(&[]);
    let body = r#"{"topic":"smuggled","payload":1}"#;
    let cases = [
        format!(
            "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        format!(
            "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nContent-Length: 0\r\n\r\n{body}",
            body.len()
        ),
        format!(
            "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: +{}\r\n\r\n{body}",
            body.len()
        ),
    ];
    let mut failures = Vec::new();
    for raw in &cases {
        let mut c = KeepAlive::connect(s.http_port);
        c.conn.write_all(raw.as_bytes()).unwrap();
        let r = c.reply();
        if r.status != 400 || !c.closed() {
            failures.push(format!(
                "{raw:?}\n  -> {} {}",
                r.status,
                String::from_utf8_lossy(&r.body).trim()
            ));
        }
    }
    let stats = get(&s, "/stats").json();
    assert!(
        failures.is_empty(),
        "ambiguous requests must get 400 and a close; these did not:\n{}\n/stats after: {stats}",
        failures.join("\n")
    );
    assert_eq!(stats["Queues"].get("smuggled"), None, "{stats}");
}

/// The v1 counters of `/metrics` (JSON form).
const V1_COUNTERS: [&str; 13] = [
    "messages_published",
    "messages_consumed",
    "messages_acked",
    "messages_nacked",
    "retry_count",
    "dead_letter_count",
    "raft_apply_count",
    "snapshot_count",
    "leader_changes",
    "cache_hits",
    "cache_misses",
    "cache_sets",
    "cache_deletes",
];

fn metrics_json(s: &Server) -> Value {
    let r = http(
        s.http_port,
        "GET",
        "/metrics",
        &[("Accept", "application/json")],
        b"",
    );
    assert_eq!(r.status, 200);
    r.json()
}

fn counter(m: &Value, name: &str) -> u64 {
    m[name]
        .as_u64()
        .unwrap_or_else(|| panic!("/metrics has no counter {name}: {m}"))
}

/// After a scripted sequence of publishes, consumes, acks, nacks (retries and one dead
/// letter, with `max_retry = 1` and no backoff) and cache operations, every v1 counter has
/// moved by exactly the expected amount, in the JSON form and the Prometheus text alike.
#[test]
fn every_v1_counter_moves_by_exactly_the_scripted_amount() {
    let dir = boltq_io::testutil::TempDir::new("limits-metrics");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(&cfg, "[queue]\nmax_retry = 1\nretry_backoff_base_ms = 0\n").unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let before = metrics_json(&s);

    // Publishes: 3 over TCP and 2 over HTTP to a work queue, 1 to a pub/sub topic.
    let mut c = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    for n in 0..3 {
        c.publish("mq", &n.to_string(), None, PublishOptions::default())
            .unwrap();
    }
    for n in 3..5 {
        assert_eq!(
            post(&s, "/publish", json!({"topic": "mq", "payload": n})).status,
            200
        );
    }
    c.publish_topic("news", "1", None, 0).unwrap();

    // Consumes: 3 over TCP, acked; 2 over HTTP.
    for _ in 0..3 {
        let m = c.consume("mq").unwrap().expect("a ready message");
        c.ack(&m.id).unwrap();
    }
    let m4 = get(&s, "/consume?topic=mq").json()["id"].clone();
    let m5 = get(&s, "/consume?topic=mq").json()["id"].clone();
    assert_eq!(
        get(&s, "/consume?topic=mq").status,
        404,
        "all five consumed"
    );
    // m4: NACK → retry 1, redelivered; NACK again → over max_retry → dead letter.
    assert_eq!(post(&s, "/nack", json!({"id": m4})).status, 200);
    assert_eq!(get(&s, "/consume?topic=mq").json()["id"], m4);
    assert_eq!(post(&s, "/nack", json!({"id": m4})).status, 200);
    // m5: NACK → retry, redelivered, acked.
    assert_eq!(post(&s, "/nack", json!({"id": m5})).status, 200);
    assert_eq!(get(&s, "/consume?topic=mq").json()["id"], m5);
    assert_eq!(post(&s, "/ack", json!({"id": m5})).status, 200);
    let stats = get(&s, "/stats").json();
    assert_eq!(stats["DeadLetters"]["mq_dead_letter"], 1, "{stats}");
    assert_eq!(stats["PendingCount"], 0, "{stats}");

    // Cache: 3 writes (set, set, incr of a new key), 2 hits, 2 misses, 1 delete that
    // removed a key (deleting a missing key is not counted).
    for (key, value) in [("ka", json!("x")), ("kb", json!({"n": 1}))] {
        let r = post(&s, "/cache/set", json!({"key": key, "value": value}));
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        post(&s, "/cache/incr", json!({"key": "kc", "delta": 2})).json(),
        json!({"key": "kc", "value": 2})
    );
    assert_eq!(get(&s, "/cache/get?key=ka").status, 200);
    assert_eq!(get(&s, "/cache/get?key=kc").status, 200);
    assert_eq!(get(&s, "/cache/get?key=nope").status, 404);
    assert_eq!(
        post(&s, "/cache/del", json!({"key": "kb"})).json()["deleted"],
        true
    );
    assert_eq!(
        post(&s, "/cache/del", json!({"key": "kb"})).json()["deleted"],
        false
    );
    assert_eq!(get(&s, "/cache/get?key=kb").status, 404);

    let after = metrics_json(&s);
    let expected: [(&str, u64); 13] = [
        ("messages_published", 6),
        ("messages_consumed", 7),
        ("messages_acked", 4),
        ("messages_nacked", 3),
        ("retry_count", 2),
        ("dead_letter_count", 1),
        ("raft_apply_count", 0),
        ("snapshot_count", 0),
        ("leader_changes", 0),
        ("cache_hits", 2),
        ("cache_misses", 2),
        ("cache_sets", 3),
        ("cache_deletes", 1),
    ];
    assert_eq!(expected.map(|(k, _)| k), V1_COUNTERS);
    let moved: Vec<(&str, i128)> = V1_COUNTERS
        .iter()
        .map(|&k| (k, counter(&after, k) as i128 - counter(&before, k) as i128))
        .collect();
    let want: Vec<(&str, i128)> = expected.iter().map(|&(k, n)| (k, n as i128)).collect();
    assert_eq!(
        moved, want,
        "counter deltas (left: measured, right: expected)\nbefore: {before}\nafter: {after}"
    );

    // The Prometheus text form reports the same values (nothing happened in between).
    let text = get(&s, "/metrics").body;
    for k in V1_COUNTERS {
        let line = format!("boltq_{k} {}", counter(&after, k));
        assert!(
            text.lines().any(|l| l == line),
            "text form lacks {line:?}:\n{text}"
        );
    }
    assert_eq!(after["dead_letter_messages"], 1, "{after}");
    assert_eq!(after["pending_messages"], 0, "{after}");
}

/// A client that sends an oversized body and reads only then (as curl and most clients do)
/// gets its upload through, then the 413 and a clean end (issue 16): the server answers from
/// the Content-Length, half-closes and reads the rest of the body away before it closes.
/// Closing at once with the body unread resets the connection: the upload fails with
/// "connection reset" and a client that stops at that error never sees the 413.
#[test]
fn an_oversized_body_gets_its_413_although_the_client_sent_it_all_first() {
    let s = Server::start(&[]);
    // More than the socket buffers hold, so the client is still sending when the answer
    // comes (as it is with a large upload over a real network).
    let body_bytes = 16 * boltq::http::BODY_BYTES_MAX;
    for round in 0..5 {
        let mut conn = TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
        let head = format!(
            "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {body_bytes}\r\n\r\n"
        );
        conn.write_all(head.as_bytes()).unwrap();
        // The whole body before reading; the server may stop reading, so a failed write is
        // expected when it does.
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < body_bytes && conn.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        assert_eq!(
            sent, body_bytes,
            "round {round}: the upload was cut off by a reset after {sent} bytes"
        );
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let outcome = loop {
            match conn.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break Err(e),
            }
        };
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 413 ") && outcome.is_ok(),
            "round {round}: got {text:?}, then {outcome:?}"
        );
        assert!(text.contains("\r\nConnection: close\r\n"), "{text:?}");
    }
}

/// `cache.memory_bytes_max` bounds what the KV store holds: 40 values of ~500 KiB into a
/// 4 MiB cap (2 MiB per shard) keep at most 4 MiB, evict the rest (oldest first), and the
/// newest value is still there.
#[test]
fn the_cache_keeps_at_most_memory_bytes_max_and_evicts_the_oldest() {
    let dir = boltq_io::testutil::TempDir::new("limits-cache");
    let cfg = dir.path().join("boltq.toml");
    let cap_bytes: u64 = 4 << 20;
    std::fs::write(
        &cfg,
        format!("[server]\nshards = 2\n[cache]\nmemory_bytes_max = {cap_bytes}\n"),
    )
    .unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let value = "v".repeat(500 << 10);
    for n in 0..40 {
        let r = post(
            &s,
            "/cache/set",
            json!({"key": format!("big-{n}"), "value": value}),
        );
        assert_eq!(r.status, 200, "set {n}: {}", r.body);
    }
    let stats = get(&s, "/cache/stats").json()["stats"].clone();
    let used = stats["memory_used"].as_u64().expect("memory_used");
    assert!(
        used <= cap_bytes,
        "{used} bytes held over a {cap_bytes}-byte cap: {stats}"
    );
    assert!(stats["evicted"].as_u64().unwrap_or(0) >= 30, "{stats}");
    assert_eq!(get(&s, "/cache/get?key=big-39").status, 200);
    assert_eq!(
        get(&s, "/cache/get?key=big-0").status,
        404,
        "the oldest went first"
    );
}
