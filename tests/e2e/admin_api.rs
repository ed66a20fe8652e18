//! End-to-end: the admin HTTP API of the queue plane against the real binary.

use crate::support::{get, http, post, Server};
use boltq::client::{Client, ClientOptions, PublishOptions};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

#[test]
fn health_options_routing_and_limits() {
    let s = Server::start(&[]);
    assert_eq!(get(&s, "/health").json(), json!({"status": "ok"}));
    let ready = get(&s, "/readyz");
    assert_eq!(
        (ready.status, ready.json()["ready"].clone()),
        (200, json!(true))
    );
    let pre = http(s.http_port, "OPTIONS", "/publish", &[], b"");
    assert_eq!(pre.status, 204);
    // No CORS headers unless admin.cors_origins names the origin (tests/e2e/security_defaults.rs).
    assert_eq!(pre.header("access-control-allow-origin"), None);
    let missing = get(&s, "/nowhere");
    assert_eq!(
        (missing.status, missing.body.as_str()),
        (404, "404 page not found\n")
    );
    assert_eq!(get(&s, "/publish").status, 405);
    // Refused from the Content-Length alone, before any body is read.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    write!(
        raw,
        "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n"
    )
    .unwrap();
    let mut head = String::new();
    BufReader::new(raw).read_line(&mut head).unwrap();
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert_eq!(
        post(&s, "/publish", json!("not an object")).json(),
        json!({"error": "invalid json"})
    );
    let dash = get(&s, "/");
    assert_eq!(dash.status, 200);
    assert!(dash
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
}

#[test]
fn api_key_guards_every_route_but_health() {
    let dir = boltq_io::testutil::TempDir::new("adminkey");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(&cfg, "[security]\napi_key = \"k3y\"\n").unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(get(&s, "/stats").status, 401);
    assert_eq!(get(&s, "/stats").json(), json!({"error": "unauthorized"}));
    assert_eq!(
        http(s.http_port, "GET", "/stats", &[("X-API-Key", "wrong")], b"").status,
        401
    );
    assert_eq!(
        http(s.http_port, "GET", "/stats", &[("X-API-Key", "k3y")], b"").status,
        200
    );
    assert_eq!(
        get(&s, "/stats?api_key=k3y").status,
        401,
        "query keys are off by default"
    );
    assert_eq!(get(&s, "/health").status, 200);
    assert_eq!(get(&s, "/readyz").status, 200);
    assert_eq!(
        get(&s, "/metrics").status,
        401,
        "admin.metrics_public is off"
    );
    assert_eq!(http(s.http_port, "OPTIONS", "/stats", &[], b"").status, 204);
}

#[test]
fn publish_consume_ack_purge_and_dead_letters_over_http() {
    let dir = boltq_io::testutil::TempDir::new("admincfg");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(&cfg, "[queue]\nmax_retry = 1\nretry_backoff_base_ms = 0\n").unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let p = post(
        &s,
        "/publish",
        json!({"topic": "h", "payload": {"n": 1}, "headers": {"k": "v"}}),
    );
    assert_eq!(p.status, 200);
    let id = p.json()["id"].as_str().unwrap().to_string();
    assert_eq!(p.json()["status"], "published");
    // The headers of an HTTP publish are kept (v1 dropped them).
    let mut tcp = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    tcp.publish("h", "2", None, PublishOptions::default())
        .unwrap();
    let c = get(&s, "/consume?topic=h");
    assert_eq!(c.status, 200);
    let m = c.json();
    assert_eq!(
        (m["id"].as_str(), m["headers"]["k"].as_str()),
        (Some(id.as_str()), Some("v"))
    );
    assert_eq!(
        m["payload"], "eyJuIjoxfQ==",
        "payload is base64 of the JSON text, as v1"
    );
    assert_eq!(
        post(&s, "/ack", json!({"id": id})).json(),
        json!({"status": "acked"})
    );
    assert_eq!(post(&s, "/ack", json!({"id": id})).status, 500);
    assert_eq!(
        post(&s, "/ack", json!({})).json(),
        json!({"error": "id is required"})
    );
    // Several ids in one request (a BoltQ addition), as over TCP.
    let ids: Vec<String> = (0..3)
        .map(|i| {
            tcp.publish("h-many", &format!("{i}"), None, PublishOptions::default())
                .unwrap();
            get(&s, "/consume?topic=h-many").json()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        post(&s, "/ack", json!({"ids": [ids[0], ids[1], id]})).json(),
        json!({"status": "acked", "count": 2, "failed": [
            {"id": id, "error": format!("message {id} not found in pending")}
        ]})
    );
    assert_eq!(
        post(&s, "/nack", json!({"ids": [ids[2]]})).json(),
        json!({"status": "nacked", "count": 1})
    );
    assert_eq!(
        post(&s, "/ack", json!({"ids": []})).json(),
        json!({"error": "ids is empty"})
    );
    assert_eq!(
        post(&s, "/queues/purge", json!({"queue": "h"})).json(),
        json!({"purged_count": 1, "queue": "h", "status": "purged"})
    );
    assert_eq!(get(&s, "/consume?topic=h").status, 404);
    assert_eq!(
        post(&s, "/queues/purge", json!({"queue": "nope"})).status,
        500
    );
    // max_retry 1: the second nack dead-letters.
    post(&s, "/publish", json!({"topic": "d", "payload": 5}));
    let dm = get(&s, "/consume?topic=d").json();
    for round in 0..2 {
        if round == 1 {
            assert_eq!(get(&s, "/consume?topic=d").json()["id"], dm["id"]);
        }
        let r = post(&s, "/nack", json!({"id": dm["id"]}));
        assert_eq!(r.json(), json!({"status": "nacked"}));
    }
    let list = get(&s, "/dead-letters").json();
    assert_eq!(list["dead_letters"][0]["queue"], "d", "{list}");
    assert_eq!(list["dead_letters"][0]["count"], 1);
    let read = get(&s, "/dead-letters?queue=d").json();
    assert_eq!(read["messages"][0]["id"], dm["id"]);
    assert_eq!(
        post(&s, "/dead-letters/requeue", json!({"queue": "d"})).json(),
        json!({"queue": "d", "requeued": 1})
    );
    assert_eq!(get(&s, "/consume?topic=d").json()["id"], dm["id"]);
    let stats = get(&s, "/stats").json();
    assert_eq!(stats["PendingCount"], 1, "{stats}");
    let overview = get(&s, "/overview").json();
    for key in [
        "health",
        "stats",
        "metrics",
        "storage",
        "system",
        "uptime_ms",
        "cluster",
        "cache",
    ] {
        assert!(
            overview.get(key).is_some(),
            "/overview has {key}: {overview}"
        );
    }
    assert!(overview["metrics"]["messages_published"].as_u64().unwrap() >= 3);
    assert_eq!(overview["storage"]["mode"], "disk");
    assert!(overview["system"]["goroutines"].as_u64().unwrap() >= 2);
}

#[test]
fn exchanges_over_http() {
    let s = Server::start(&[]);
    assert_eq!(
        post(
            &s,
            "/exchange/declare",
            json!({"name": "t", "type": "topic", "durable": true})
        )
        .json(),
        json!({"status": "ok"})
    );
    assert_eq!(
        post(
            &s,
            "/exchange/bind",
            json!({"exchange": "t", "queue": "tq", "binding_key": "a.*"})
        )
        .status,
        200
    );
    let listed = get(&s, "/exchanges").json();
    assert!(listed.to_string().contains("\"tq\""), "{listed}");
    let p = post(
        &s,
        "/exchange/publish",
        json!({"exchange": "t", "routing_key": "a.b", "payload": 1}),
    );
    assert_eq!(p.json()["status"], "published");
    assert_eq!(get(&s, "/consume?topic=tq").status, 200);
    assert_eq!(
        post(
            &s,
            "/exchange/publish",
            json!({"exchange": "none", "routing_key": "x"})
        )
        .status,
        500
    );
    assert_eq!(
        post(&s, "/exchange/bind", json!({"exchange": "t"})).json(),
        json!({"error": "exchange and queue are required"})
    );
    assert_eq!(
        post(&s, "/exchange/delete", json!({"name": "t"})).json(),
        json!({"status": "ok"})
    );
}

#[test]
fn subscribe_streams_server_sent_events() {
    let s = Server::start(&[]);
    let mut reader = open_sse(&s, "topic=ev&id=s1");
    let mut line = String::new();
    let mut p = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    p.publish_topic("ev", "9", None, 0).unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    let event: serde_json::Value =
        serde_json::from_str(line.trim_start_matches("data: ").trim()).unwrap();
    assert_eq!(
        (event["payload"].clone(), event["subscriber_id"].clone()),
        (json!(9), json!("s1"))
    );
}

#[test]
fn metrics_move_when_their_events_happen() {
    let s = Server::start(&[]);
    let mut c = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    for _ in 0..3 {
        c.publish("m", "1", None, PublishOptions::default())
            .unwrap();
    }
    let m = c.consume("m").unwrap().unwrap();
    c.ack(&m.id).unwrap();
    let text = get(&s, "/metrics");
    assert!(text
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    for line in [
        "boltq_messages_published 3",
        "boltq_messages_consumed 1",
        "boltq_messages_acked 1",
        "boltq_ready_messages 2",
        "boltq_publish_reply_latency_us_count 3",
        "boltq_queue_ready_messages{queue=\"m\"} 2",
        "boltq_scrape_shards_missing 0",
    ] {
        assert!(
            text.body.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            text.body
        );
    }
    assert!(
        text.body
            .contains("boltq_http_requests_total{code=\"200\",route=\"/metrics\"}")
            || text.body.contains("boltq_http_requests_total"),
        "{}",
        text.body
    );
    let j = http(
        s.http_port,
        "GET",
        "/metrics",
        &[("Accept", "application/json")],
        b"",
    )
    .json();
    assert_eq!(
        (j["messages_published"].clone(), j["messages_acked"].clone()),
        (json!(3), json!(1))
    );
    assert_eq!(j["publish_latency_us"]["count"], 3);
    for key in [
        "retry_count",
        "dead_letter_count",
        "raft_apply_count",
        "snapshot_count",
        "leader_changes",
        "cache_hits",
        "cache_misses",
        "cache_sets",
        "cache_deletes",
    ] {
        assert!(j.get(key).is_some(), "v1 key {key} present");
    }
}

#[test]
fn cache_routes_keep_json_types_and_span_shards() {
    let s = Server::start(&[]);
    for i in 0..20 {
        let r = post(
            &s,
            "/cache/set",
            json!({"key": format!("k{i}"), "value": i}),
        );
        assert_eq!(r.json(), json!({"key": format!("k{i}"), "status": "ok"}));
    }
    post(&s, "/cache/set", json!({"key": "str", "value": "123"}));
    let got = get(&s, "/cache/get?key=str").json();
    assert_eq!(
        (got["value"].clone(), got["ttl"].clone()),
        (json!("123"), json!(-1)),
        "a string stays a string"
    );
    assert_eq!(
        get(&s, "/cache/get?key=nope").json(),
        json!({"error": "key not found"})
    );
    assert_eq!(
        get(&s, "/cache/get").json(),
        json!({"error": "key is required"})
    );
    let keys = get(&s, "/cache/keys?pattern=k*").json();
    assert_eq!(keys["count"], 20, "keys of every shard: {keys}");
    assert_eq!(
        post(&s, "/cache/incr", json!({"key": "k5", "delta": 10})).json(),
        json!({"key": "k5", "value": 15})
    );
    assert_eq!(
        post(&s, "/cache/incr", json!({"key": "str", "delta": 1})).json(),
        json!({"key": "str", "value": 124}),
        "a decimal string counts (v1 counters)"
    );
    post(&s, "/cache/set", json!({"key": "obj", "value": {"a": 1}}));
    assert_eq!(post(&s, "/cache/incr", json!({"key": "obj"})).status, 400);
    assert_eq!(
        get(&s, "/cache/exists?key=k1").json(),
        json!({"exists": true, "key": "k1"})
    );
    assert_eq!(
        post(&s, "/cache/expire", json!({"key": "k1", "ttl": 1})).json()["found"],
        true
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        get(&s, "/cache/exists?key=k1").json()["exists"],
        false,
        "expired"
    );
    let entries = get(&s, "/cache/entries?pattern=k1*").json();
    assert_eq!(entries["total"], 10, "k10..k19 remain: {entries}");
    assert_eq!(
        post(&s, "/cache/del", json!({"key": "k2"})).json(),
        json!({"deleted": true, "status": "ok"})
    );
    let stats = get(&s, "/cache/stats").json();
    assert_eq!(stats["enabled"], true);
    assert!(stats["stats"]["key_count"].as_u64().unwrap() >= 19);
    let m = http(
        s.http_port,
        "GET",
        "/metrics",
        &[("Accept", "application/json")],
        b"",
    )
    .json();
    assert_eq!(
        (m["cache_hits"].clone(), m["cache_misses"].clone()),
        (json!(1), json!(1)),
        "{m}"
    );
    assert_eq!(m["cache_deletes"], 1);
    let flushed = post(&s, "/cache/flush", json!(null)).json();
    assert_eq!(flushed["status"], "flushed");
    assert_eq!(get(&s, "/cache/keys").json()["count"], 0);
}

#[test]
fn cache_disabled_answers_503_except_stats() {
    let dir = boltq_io::testutil::TempDir::new("nocache");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(&cfg, "[cache]\nenabled = false\n").unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        get(&s, "/cache/get?key=a").json(),
        json!({"error": "cache not enabled"})
    );
    assert_eq!(get(&s, "/cache/get?key=a").status, 503);
    assert_eq!(get(&s, "/cache/stats").json(), json!({"enabled": false}));
}

#[test]
fn an_sse_subscription_ends_when_its_client_leaves() {
    let s = Server::start(&[]);
    let reader = open_sse(&s, "topic=gone&id=s1&durable=true");
    assert_eq!(get(&s, "/stats").json()["Topics"]["gone"], 1);
    drop(reader);
    // No publish needed to notice: the server sees the closed socket.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut p = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    loop {
        p.publish_topic("gone", "1", None, 0).unwrap();
        let stats = get(&s, "/stats").json();
        if stats["Queues"]["gone:s1"].as_u64().unwrap_or(0) >= 1 {
            break; // offline: the durable subscription backlogs instead of pushing
        }
        assert!(std::time::Instant::now() < deadline, "still live: {stats}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An SSE subscription (`GET /subscribe?<query>`) read past its response head.
fn open_sse(s: &Server, query: &str) -> BufReader<std::net::TcpStream> {
    let mut sse = std::net::TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    sse.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(sse, "GET /subscribe?{query} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(sse);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    reader
}

/// The payload of the next SSE event.
fn next_sse_payload(reader: &mut BufReader<std::net::TcpStream>) -> serde_json::Value {
    let mut line = String::new();
    while line.trim().is_empty() {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended");
    }
    let event: serde_json::Value =
        serde_json::from_str(line.trim_start_matches("data: ").trim()).unwrap();
    event["payload"].clone()
}

#[test]
fn an_sse_durable_subscriber_gets_a_backlog_of_several_chunks_in_order_then_live_pushes() {
    let s = Server::start(&[]);
    drop(open_sse(&s, "topic=big&id=s1&durable=true"));
    let mut p = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    // Offline once a publish backlogs instead of being pushed.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        p.publish_topic("big", "\"probe\"", None, 0).unwrap();
        if get(&s, "/stats").json()["Queues"]["big:s1"]
            .as_u64()
            .unwrap_or(0)
            >= 1
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still live");
        std::thread::sleep(Duration::from_millis(50));
    }
    let probes = get(&s, "/stats").json()["Queues"]["big:s1"]
        .as_u64()
        .unwrap();
    // 40 × 64 KiB: a catch-up of several 1 MiB chunks.
    let pad = "x".repeat(64 * 1024);
    for i in 0..40 {
        p.publish_topic("big", &format!("\"{i}-{pad}\""), None, 0)
            .unwrap();
    }
    let mut reader = open_sse(&s, "topic=big&id=s1&durable=true");
    for _ in 0..probes {
        assert_eq!(next_sse_payload(&mut reader), json!("probe"));
    }
    for i in 0..40 {
        let payload = next_sse_payload(&mut reader);
        assert_eq!(payload, json!(format!("{i}-{pad}")), "catch-up message {i}");
    }
    p.publish_topic("big", "\"live\"", None, 0).unwrap();
    assert_eq!(next_sse_payload(&mut reader), json!("live"));
}

#[test]
fn connections_lists_open_tcp_clients_of_every_shard() {
    let s = Server::start(&[]);
    let clients: Vec<Client> = (0..4)
        .map(|_| {
            Client::connect(
                &format!("127.0.0.1:{}", s.tcp_port),
                ClientOptions::default(),
            )
            .unwrap()
        })
        .collect();
    let list = get(&s, "/connections").json();
    assert_eq!(list["count"], 4, "{list}");
    let entry = &list["connections"][0];
    assert!(
        entry["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{list}"
    );
    assert!(
        entry["since_ms"].as_u64().unwrap() > 1_600_000_000_000,
        "Unix ms: {list}"
    );
    drop(clients);
}

/// `idle_ms` is the time since the server last read from a connection: a client that just
/// sent a PING is fresher than one silent since it connected 400 ms ago.
#[test]
fn connections_say_how_long_each_client_has_been_silent() {
    let s = Server::start(&[]);
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    let silent = std::net::TcpStream::connect(&addr).unwrap();
    let mut talking = std::net::TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    talking.write_all(&[0x06, 0, 0, 0, 0]).unwrap();
    let mut pong = [0u8; 5];
    std::io::Read::read_exact(&mut talking, &mut pong).unwrap();
    let list = get(&s, "/connections").json();
    let idle_of = |c: &std::net::TcpStream| {
        let me = c.local_addr().unwrap().to_string();
        list["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["peer"] == me.as_str())
            .and_then(|e| e["idle_ms"].as_u64())
            .unwrap_or_else(|| panic!("{me} not listed: {list}"))
    };
    let (silent_ms, talking_ms) = (idle_of(&silent), idle_of(&talking));
    assert!(silent_ms >= 350, "{list}");
    assert!(talking_ms + 200 <= silent_ms, "{list}");
}

/// A busy server lists at most 1,000 connections per shard, but `count` stays exact, so a
/// reader (the dashboard says "showing N") knows some were left out. 2,050 connections over
/// two shards put more than 1,000 on at least one of them.
#[test]
fn connections_counts_every_connection_when_the_list_is_cut() {
    const OPEN: usize = 2_050;
    raise_open_files_limit(OPEN as u64 + 512);
    let s = Server::start(&[]);
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    // A PING each: every connection is then registered with its shard.
    let _clients: Vec<Client> = (0..OPEN)
        .map(|_| {
            let mut c = Client::connect(&addr, ClientOptions::default()).unwrap();
            c.ping().unwrap();
            c
        })
        .collect();
    let list = get(&s, "/connections").json();
    assert_eq!(list["count"], OPEN, "exact count");
    let listed = list["connections"].as_array().unwrap().len();
    assert!(
        (OPEN - 1_050..=2_000).contains(&listed),
        "at most 1,000 per shard listed: {listed}"
    );
}

/// Lifts this process's soft limit on open files to `want` (within the hard limit), for a
/// test holding many sockets; the server it starts inherits it.
fn raise_open_files_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}
