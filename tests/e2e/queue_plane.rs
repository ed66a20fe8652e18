//! End-to-end: the v1 protocol against the real binary (2 shards, so commands cross shards),
//! driven by the Rust client and by raw frames.

use crate::support::Server;
use boltq::client::{Client, ClientError, ClientOptions, PublishOptions};
use boltq::queue::protocol::frame::{self, op, status};
use serde_json::json;
use std::time::{Duration, Instant};

/// A server with fast retries and a short ack timeout, so retry paths run in test time.
fn server(extra_toml: &str) -> (Server, boltq_io::testutil::TempDir) {
    server_with_ack_timeout("300ms", extra_toml)
}

fn server_with_ack_timeout(
    ack_timeout: &str,
    extra_toml: &str,
) -> (Server, boltq_io::testutil::TempDir) {
    server_with_ack_timeout_env(ack_timeout, extra_toml, &[])
}

/// [`server_with_ack_timeout`] with more environment; `extra_toml` begins in `[queue]`.
fn server_with_ack_timeout_env(
    ack_timeout: &str,
    extra_toml: &str,
    env: &[(&str, &str)],
) -> (Server, boltq_io::testutil::TempDir) {
    let dir = boltq_io::testutil::TempDir::new("qcfg");
    let cfg = dir.path().join("boltq.toml");
    let toml = format!(
        "[queue]\nmax_retry = 2\nack_timeout = \"{ack_timeout}\"\nretry_backoff_base_ms = 0\n{extra_toml}"
    );
    std::fs::write(&cfg, toml).unwrap();
    let s = Server::start_with_env(&["--config", cfg.to_str().unwrap()], env);
    (s, dir)
}

pub(crate) fn client(s: &Server) -> Client {
    Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap()
}

pub(crate) fn raw(s: &Server) -> std::net::TcpStream {
    let c = std::net::TcpStream::connect(("127.0.0.1", s.tcp_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

pub(crate) fn send(c: &mut std::net::TcpStream, code: u8, payload: &str) {
    use std::io::Write;
    let mut out = Vec::new();
    frame::encode(code, payload.as_bytes(), &mut out);
    c.write_all(&out).unwrap();
}

/// Reads one frame; None when the server closed the connection.
pub(crate) fn recv(c: &mut std::net::TcpStream) -> Option<(u8, String)> {
    use std::io::Read;
    let mut hdr = [0u8; 5];
    if c.read_exact(&mut hdr).is_err() {
        return None;
    }
    let len = u32::from_le_bytes(hdr[1..5].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    Some((hdr[0], String::from_utf8(body).unwrap()))
}

#[test]
fn publish_consume_ack_round_trip_and_errors() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    assert_eq!(
        c.consume("jobs").unwrap(),
        None,
        "empty queue answers EMPTY"
    );
    let p = c
        .publish("jobs", r#"{"n":1}"#, None, PublishOptions::default())
        .unwrap();
    assert_eq!((p.id.len(), p.topic.as_str()), (32, "jobs"));
    let m = c.consume("jobs").unwrap().expect("a message");
    assert_eq!(
        (m.id.as_str(), m.payload_json.as_str(), m.retry),
        (p.id.as_str(), r#"{"n":1}"#, 0)
    );
    c.ack(&m.id).unwrap();
    match c.ack(&m.id) {
        Err(ClientError::Server(e)) => {
            assert_eq!(e, format!("message {} not found in pending", m.id))
        }
        other => panic!("second ack: {other:?}"),
    }
    match c.publish("", "1", None, PublishOptions::default()) {
        Err(ClientError::Server(e)) => assert_eq!(e, "topic is required"),
        other => panic!("{other:?}"),
    }
    // A string payload stays a string (v1 compatibility checklist item 6).
    c.publish("jobs", r#""text""#, None, PublishOptions::default())
        .unwrap();
    assert_eq!(
        c.consume("jobs").unwrap().unwrap().payload_json,
        r#""text""#
    );
}

/// ACK and NACK with `ids` (a BoltQ addition): one request settles a batch, messages of
/// every slot (both shards), and the reply lists what it could not settle; the prefetch
/// window opens by the number acknowledged.
#[test]
fn one_ack_settles_many_messages_and_names_those_it_could_not() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    let queues = ["batch-a", "batch-b", "batch-c", "batch-d"];
    for i in 0..40 {
        c.publish(
            queues[i % 4],
            &format!("{i}"),
            None,
            PublishOptions::default(),
        )
        .unwrap();
    }
    c.set_prefetch(40).unwrap();
    let mut taken = Vec::new();
    for q in queues {
        taken.extend(c.consume_wait(q, 0, 10).unwrap());
    }
    assert_eq!(taken.len(), 40);
    match c.consume_wait("batch-a", 0, 1) {
        Err(ClientError::Server(e)) => assert_eq!(e, "prefetch limit reached"),
        other => panic!("past the prefetch window: {other:?}"),
    }
    let (acked, nacked) = taken.split_at(30);
    let mut ids: Vec<&str> = acked.iter().map(|m| m.id.as_str()).collect();
    ids.push("0123456789abcdef0123456789abcdef");
    ids.push("not-an-id");
    let reply = c.ack_many(&ids).unwrap();
    assert_eq!(reply.count, 30);
    assert_eq!(
        reply
            .failed
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["0123456789abcdef0123456789abcdef", "not-an-id"]
    );
    assert!(
        reply.failed[0].1.contains("not found in pending"),
        "{reply:?}"
    );
    // Acknowledged for good: a second ACK finds nothing.
    assert_eq!(c.ack_many(&ids[..2]).unwrap().failed.len(), 2);
    let nack_ids: Vec<&str> = nacked.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        c.nack_many(&nack_ids).unwrap(),
        boltq::client::AckedMany {
            count: 10,
            failed: vec![]
        }
    );
    // Those ten are ready again (no retry backoff in this config), and the window is open.
    let mut again = Vec::new();
    for q in queues {
        again.extend(c.consume_wait(q, 0, 10).unwrap());
    }
    let mut again_ids: Vec<String> = again.iter().map(|m| m.id.clone()).collect();
    let mut want: Vec<String> = nack_ids.iter().map(|s| s.to_string()).collect();
    again_ids.sort();
    want.sort();
    assert_eq!(again_ids, want);
    assert!(again.iter().all(|m| m.retry == 1));
}

#[test]
fn priorities_high_first_fifo_within_a_level() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    for (n, prio) in [(1, 0), (2, 5), (3, 9), (4, 5), (5, 0)] {
        let opts = PublishOptions {
            priority: prio,
            ..Default::default()
        };
        c.publish("prio", &n.to_string(), None, opts).unwrap();
    }
    let order: Vec<String> = (0..5)
        .map(|_| c.consume("prio").unwrap().unwrap().payload_json)
        .collect();
    assert_eq!(order, ["3", "2", "4", "1", "5"]);
}

#[test]
fn nack_retries_then_dead_letters_and_dlq_commands_work() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    let p = c
        .publish("work", "42", None, PublishOptions::default())
        .unwrap();
    // max_retry = 2: delivered 3 times, then dead-lettered.
    for retry in 0..=2 {
        let m = c.consume("work").unwrap().expect("redelivered");
        assert_eq!((m.id.as_str(), m.retry), (p.id.as_str(), retry));
        c.nack(&m.id).unwrap();
    }
    assert_eq!(c.consume("work").unwrap(), None);
    let stats = c.stats().unwrap();
    assert_eq!(stats["DeadLetters"]["work_dead_letter"], 1, "{stats}");
    let list = c.dlq_list(None).unwrap();
    assert!(list.to_string().contains("work"), "{list}");
    let read = c.dlq_read("work", 0, 10).unwrap();
    assert!(
        read.to_string().contains(&p.id),
        "dead letter readable: {read}"
    );
    c.dlq_requeue("work", 10).unwrap();
    let m = c.consume("work").unwrap().expect("requeued");
    assert_eq!((m.payload_json.as_str(), m.retry), ("42", 0));
    c.nack(&m.id).unwrap();
    for _ in 0..2 {
        let id = c.consume("work").unwrap().unwrap().id;
        c.nack(&id).unwrap();
    }
    c.dlq_purge("work").unwrap();
    // As v1: a purged dead-letter queue stays in STATS at 0.
    assert_eq!(
        c.stats().unwrap()["DeadLetters"],
        serde_json::json!({"work_dead_letter": 0})
    );
}

#[test]
fn ack_timeout_redelivers_and_releases_prefetch() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    c.set_prefetch(1).unwrap();
    c.publish("slow", "1", None, PublishOptions::default())
        .unwrap();
    c.publish("slow", "2", None, PublishOptions::default())
        .unwrap();
    let first = c.consume("slow").unwrap().unwrap();
    match c.consume("slow") {
        Err(ClientError::Server(e)) => assert_eq!(e, "prefetch limit reached"),
        other => panic!("{other:?}"),
    }
    // Not acked: after the 300 ms ack timeout the message is redelivered and the prefetch
    // unit is released (v1 wedged the connection here).
    std::thread::sleep(Duration::from_millis(800));
    let again = c.consume("slow").unwrap().expect("released prefetch");
    assert!(
        [first.id.as_str()].contains(&again.id.as_str()) || again.payload_json == "2",
        "redelivery or the next message"
    );
}

/// Delays and TTLs are nanoseconds. The message checked invisible waits a minute: one of
/// 300 ms was once visible at its first CONSUME on a loaded CI machine, whose publish reply
/// (after an fdatasync) took longer than the delay.
#[test]
fn delay_and_ttl_are_nanoseconds() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    let delayed = |delay_ns| PublishOptions {
        delay_ns,
        ..Default::default()
    };
    c.publish("much-later", "0", None, delayed(60_000_000_000))
        .unwrap();
    assert_eq!(
        c.consume("much-later").unwrap(),
        None,
        "invisible while delayed"
    );
    assert_eq!(c.stats().unwrap()["DelayedCount"], 1);
    c.publish(r#""later""#, "1", None, delayed(300_000_000))
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(c.consume(r#""later""#).unwrap().unwrap().payload_json, "1");
    assert_eq!(c.stats().unwrap()["DelayedCount"], 1, "the minute-long one");
    let short = PublishOptions {
        ttl_ns: 100_000_000,
        ..Default::default()
    };
    c.publish("ttl", r#""gone""#, None, short).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.consume("ttl").unwrap(), None, "expired message skipped");
}

/// The shard's timer sleeps until the earliest deadline it knows; a delay shorter than one
/// already waiting in the same queue must wake it earlier.
#[test]
fn a_short_delay_behind_a_long_one_becomes_visible_on_its_own_time() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    let delay = |delay_ns| PublishOptions {
        delay_ns,
        ..Default::default()
    };
    c.publish("sooner", r#""far""#, None, delay(60_000_000_000))
        .unwrap();
    c.publish("sooner", r#""near""#, None, delay(200_000_000))
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let got = c
        .consume("sooner")
        .unwrap()
        .expect("the short delay has passed");
    assert_eq!(got.payload_json, r#""near""#);
    assert_eq!(
        c.stats().unwrap()["DelayedCount"],
        1,
        "the long one still waits"
    );
}

#[test]
fn pipelined_requests_across_shards_answer_in_order() {
    let (s, _cfg) = server("");
    let mut c = raw(&s);
    // 64 queues spread over both shards' slots; publish then consume, all in one write.
    let mut frames = Vec::new();
    for i in 0..64 {
        frame::encode(
            op::PUBLISH,
            format!(r#"{{"topic":"pq{i}","payload":{i}}}"#).as_bytes(),
            &mut frames,
        );
    }
    for i in 0..64 {
        frame::encode(
            op::CONSUME,
            format!(r#"{{"topic":"pq{i}"}}"#).as_bytes(),
            &mut frames,
        );
    }
    use std::io::Write;
    c.write_all(&frames).unwrap();
    for i in 0..64 {
        let (code, body) = recv(&mut c).unwrap();
        assert_eq!(code, status::OK);
        assert!(
            body.contains(&format!(r#""topic":"pq{i}""#)),
            "publish reply {i} in order: {body}"
        );
    }
    for i in 0..64 {
        let (code, body) = recv(&mut c).unwrap();
        assert_eq!(code, status::OK);
        assert!(
            body.contains(&format!(r#""payload":{i}"#)),
            "consume reply {i} in order: {body}"
        );
    }
}

#[test]
fn auth_gate_closes_on_violation_and_allows_retry() {
    let (s, _cfg) = server("[security]\napi_key = \"s3cret\"\n");
    let mut c = raw(&s);
    send(&mut c, op::PING, "{}");
    let (code, body) = recv(&mut c).unwrap();
    assert_eq!(
        (code, body.as_str()),
        (
            status::ERROR,
            r#"{"error":"authentication required, send AUTH first"}"#
        )
    );
    assert!(
        recv(&mut c).is_none(),
        "connection closed after the violation"
    );
    let mut c = raw(&s);
    send(&mut c, op::AUTH, r#"{"api_key":"wrong"}"#);
    assert_eq!(
        recv(&mut c).unwrap(),
        (status::ERROR, r#"{"error":"unauthorized"}"#.to_string())
    );
    send(&mut c, op::AUTH, r#"{"api_key":"s3cret"}"#);
    assert_eq!(
        recv(&mut c).unwrap(),
        (status::OK, r#"{"status":"ok"}"#.to_string())
    );
    send(&mut c, op::PING, "{}");
    assert_eq!(
        recv(&mut c).unwrap(),
        (status::OK, r#"{"status":"pong"}"#.to_string())
    );
    let opts = ClientOptions {
        api_key: Some("s3cret".into()),
        ..Default::default()
    };
    let mut ok = Client::connect(&format!("127.0.0.1:{}", s.tcp_port), opts).unwrap();
    ok.ping().unwrap();
}

#[test]
fn confirm_mode_numbers_publishes() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    let p = c
        .publish("c", "1", None, PublishOptions::default())
        .unwrap();
    assert_eq!((p.seq_no, p.ack), (None, None));
    c.confirm_select().unwrap();
    let a = c
        .publish("c", "1", None, PublishOptions::default())
        .unwrap();
    let b = c.publish_topic("t", "1", None, 0).unwrap();
    assert_eq!((a.seq_no, a.ack, b.seq_no), (Some(1), Some(true), Some(2)));
}

#[test]
fn exchanges_of_all_four_types_route() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    c.exchange_declare("d", "direct", true).unwrap();
    c.exchange_declare("d", "direct", true).unwrap(); // idempotent
    match c.exchange_declare("d", "fanout", true) {
        Err(ClientError::Server(e)) => {
            assert_eq!(e, r#"exchange "d" already exists with type direct"#)
        }
        other => panic!("{other:?}"),
    }
    c.exchange_declare("f", "fanout", false).unwrap();
    c.exchange_declare("t", "topic", false).unwrap();
    c.exchange_declare("h", "headers", false).unwrap();
    c.bind_queue("d", "dq", "red", None, false).unwrap();
    c.bind_queue("f", "fq1", "", None, false).unwrap();
    c.bind_queue("f", "fq2", "", None, false).unwrap();
    c.bind_queue("t", "tq", "logs.*.error", None, false)
        .unwrap();
    c.bind_queue("t", "tall", "logs.#", None, false).unwrap();
    let want: boltq::client::Headers = [("x".to_string(), "1".to_string())].into();
    c.bind_queue("h", "hq", "", Some(&want), true).unwrap();
    c.publish_exchange("d", "red", "1", None, 0).unwrap();
    c.publish_exchange("d", "blue", "2", None, 0).unwrap();
    c.publish_exchange("f", "any", "3", None, 0).unwrap();
    c.publish_exchange("t", "logs.db.error", "4", None, 0)
        .unwrap();
    c.publish_exchange("t", "logs", "5", None, 0).unwrap();
    c.publish_exchange("h", "", "6", Some(&want), 0).unwrap();
    c.publish_exchange("h", "", "7", None, 0).unwrap();
    let dflt = c.publish_exchange("", "plain", "8", None, 0).unwrap();
    assert_eq!(dflt.topic, "plain");
    let drain = |c: &mut Client, q: &str| -> Vec<String> {
        std::iter::from_fn(|| c.consume(q).unwrap().map(|m| m.payload_json)).collect()
    };
    assert_eq!(drain(&mut c, "dq"), ["1"]);
    assert_eq!(drain(&mut c, "fq1"), ["3"]);
    assert_eq!(drain(&mut c, "fq2"), ["3"]);
    assert_eq!(drain(&mut c, "tq"), ["4"]);
    assert_eq!(drain(&mut c, "tall"), ["4", "5"]);
    assert_eq!(drain(&mut c, "hq"), ["6"]);
    assert_eq!(drain(&mut c, "plain"), ["8"]);
    match c.publish_exchange("nope", "k", "1", None, 0) {
        Err(ClientError::Server(e)) => assert_eq!(e, r#"exchange "nope" not found"#),
        other => panic!("{other:?}"),
    }
    c.exchange_delete("f").unwrap();
    match c.exchange_declare("bad", "fancy", false) {
        Err(ClientError::Server(e)) => assert!(e.contains("fancy"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn pubsub_pushes_carry_subscriber_id_and_reply_comes_first() {
    let (s, _cfg) = server("");
    let mut sub = raw(&s);
    send(&mut sub, op::CONSUME, r#"{"topic":"news","id":"s1"}"#);
    assert_eq!(
        recv(&mut sub).unwrap(),
        (status::OK, r#"{"status":"subscribed"}"#.to_string())
    );
    let mut publisher = client(&s);
    for i in 0..20 {
        publisher
            .publish_topic("news", &i.to_string(), None, 0)
            .unwrap();
    }
    for i in 0..20 {
        let (code, body) = recv(&mut sub).unwrap();
        assert_eq!(code, status::OK);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (v["subscriber_id"].as_str(), v["topic"].as_str()),
            (Some("s1"), Some("news"))
        );
        assert_eq!(v["payload"], i, "in order");
    }
    let stats = publisher.stats().unwrap();
    assert_eq!(stats["Topics"]["news"], 1, "{stats}");
    // The subscription ends with its connection.
    drop(sub);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(publisher.stats().unwrap()["Topics"], serde_json::json!({}));
}

#[test]
fn durable_subscriber_gets_backlog_of_what_it_missed_only() {
    let (s, _cfg) = server("");
    let mut p = client(&s);
    let mut sub = raw(&s);
    send(
        &mut sub,
        op::CONSUME,
        r#"{"topic":"feed","id":"d1","durable":true}"#,
    );
    assert_eq!(recv(&mut sub).unwrap().1, r#"{"status":"subscribed"}"#);
    p.publish_topic("feed", "1", None, 0).unwrap();
    assert!(recv(&mut sub).unwrap().1.contains(r#""payload":1"#));
    drop(sub);
    std::thread::sleep(Duration::from_millis(200));
    p.publish_topic("feed", "2", None, 0).unwrap();
    p.publish_topic("feed", "3", None, 0).unwrap();
    let mut sub = raw(&s);
    send(
        &mut sub,
        op::CONSUME,
        r#"{"topic":"feed","id":"d1","durable":true}"#,
    );
    assert_eq!(
        recv(&mut sub).unwrap().1,
        r#"{"status":"subscribed"}"#,
        "reply precedes catch-up"
    );
    assert!(recv(&mut sub).unwrap().1.contains(r#""payload":2"#));
    assert!(recv(&mut sub).unwrap().1.contains(r#""payload":3"#));
}

#[test]
fn a_durable_catch_up_of_several_chunks_arrives_whole_and_in_order_before_live_pushes() {
    let (s, _cfg) = server("");
    let mut p = client(&s);
    let subscribe = r#"{"topic":"bulk","id":"d1","durable":true}"#;
    let mut sub = raw(&s);
    send(&mut sub, op::CONSUME, subscribe);
    assert_eq!(recv(&mut sub).unwrap().1, r#"{"status":"subscribed"}"#);
    drop(sub);
    std::thread::sleep(Duration::from_millis(200));
    // 40 × 64 KiB: more than two of the 1 MiB chunks a catch-up is written in.
    let pad = "x".repeat(64 * 1024);
    for i in 0..40 {
        p.publish_topic("bulk", &format!(r#""{i}-{pad}""#), None, 0)
            .unwrap();
    }
    let mut sub = raw(&s);
    send(&mut sub, op::CONSUME, subscribe);
    assert_eq!(recv(&mut sub).unwrap().1, r#"{"status":"subscribed"}"#);
    for i in 0..40 {
        let push = recv(&mut sub).unwrap().1;
        assert!(
            push.contains(&format!(r#""payload":"{i}-x"#)),
            "catch-up message {i}: {}",
            &push[..push.len().min(120)]
        );
    }
    p.publish_topic("bulk", "\"live\"", None, 0).unwrap();
    assert!(recv(&mut sub).unwrap().1.contains(r#""payload":"live""#));
}

#[test]
fn bad_input_is_answered_or_closes_only_that_connection() {
    let (s, _cfg) = server("");
    let mut c = raw(&s);
    send(&mut c, 0x7f, "{}");
    assert_eq!(
        recv(&mut c).unwrap(),
        (
            status::ERROR,
            r#"{"error":"unknown command: 0x7f"}"#.to_string()
        )
    );
    send(&mut c, op::PUBLISH, r#"{"topic":"q","priority":"5"}"#);
    let (code, body) = recv(&mut c).unwrap();
    assert!(
        code == status::ERROR && body.contains("invalid json"),
        "{body}"
    );
    send(
        &mut c,
        op::PUBLISH,
        &format!(
            r#"{{"topic":"q","payload":{}1{}}}"#,
            "[".repeat(5000),
            "]".repeat(5000)
        ),
    );
    let (code, _) = recv(&mut c).unwrap();
    assert_eq!(code, status::ERROR, "deep nesting refused, not a crash");
    // Oversized frame: closed without a reply; another client is unaffected.
    let mut other = client(&s);
    use std::io::Write;
    let mut hdr = vec![op::PUBLISH];
    hdr.extend_from_slice(&(frame::PAYLOAD_BYTES_MAX as u32 + 1).to_le_bytes());
    c.write_all(&hdr).unwrap();
    assert!(
        recv(&mut c).is_none(),
        "oversized frame closes the connection"
    );
    // Random garbage on fresh connections never takes the server down.
    let mut rng = boltq_io::testutil::Rng::new(99);
    for _ in 0..50 {
        let mut g = raw(&s);
        let junk: Vec<u8> = (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect();
        let _ = g.write_all(&junk);
    }
    other.ping().unwrap();
    assert_eq!(other.stats().unwrap()["PendingCount"], 0);
}

#[test]
fn everything_survives_restart_and_kill_9() {
    let (mut s, _cfg) = server_with_ack_timeout("5m", "");
    let mut c = client(&s);
    c.exchange_declare("keep", "fanout", true).unwrap();
    c.exchange_declare("temp", "fanout", false).unwrap();
    c.bind_queue("keep", "kq", "", None, false).unwrap();
    for i in 0..10 {
        c.publish("r", &i.to_string(), None, PublishOptions::default())
            .unwrap();
    }
    let delayed = PublishOptions {
        delay_ns: 60_000_000_000,
        ..Default::default()
    };
    c.publish("r", r#""later""#, None, delayed).unwrap();
    let mut pending = c.consume("r").unwrap().unwrap();
    let acked = c.consume("r").unwrap().unwrap();
    c.ack(&acked.id).unwrap();
    drop(c);
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let (next, code) = s.restart(signal);
        s = next;
        if signal == libc::SIGTERM {
            assert_eq!(code, Some(0));
        }
        let mut c = client(&s);
        let stats = c.stats().unwrap();
        assert_eq!(
            stats["Queues"]["r"], 8,
            "ready survive (signal {signal}): {stats}"
        );
        assert_eq!(stats["PendingCount"], 1, "pending survives: {stats}");
        assert_eq!(stats["DelayedCount"], 1, "delayed survives: {stats}");
        // The durable exchange and its binding survived; the transient one did not.
        c.publish_exchange("keep", "", r#""via-keep""#, None, 0)
            .unwrap();
        let routed = c.consume("kq").unwrap().unwrap();
        assert_eq!(routed.payload_json, r#""via-keep""#);
        c.ack(&routed.id).unwrap();
        assert!(c.publish_exchange("temp", "", "1", None, 0).is_err());
        c.exchange_declare("temp", "fanout", false).unwrap();
        // The pending message can be acked after the restart, from a new connection; a
        // replacement keeps the counts equal for the next round.
        c.ack(&pending.id).unwrap();
        pending = c.consume("r").unwrap().unwrap();
        // A CONSUME answers once the message's publish is durable; its own pending record
        // becomes durable with the next commit round, here the replacement's publish (a kill
        // before that would put the message back in line, which at-least-once allows).
        c.publish("r", r#""replacement""#, None, PublishOptions::default())
            .unwrap();
    }
}

/// Publishes `n` messages (a multiple of 250) to `queue` in pipelined batches.
fn publish_many(s: &Server, queue: &str, n: usize, payload_bytes: usize) {
    let mut c = client(s);
    let body = format!(
        r#"{{"topic":"{queue}","payload":"{}"}}"#,
        "x".repeat(payload_bytes)
    );
    let frames: Vec<(u8, &[u8])> = vec![(op::PUBLISH, body.as_bytes()); 250];
    for _ in 0..n / 250 {
        for (code, _) in c.pipeline(&frames).unwrap() {
            assert_eq!(code, status::OK);
        }
    }
}

/// Consumes `n` messages in batches of up to 250 and acks them, pipelined.
fn consume_ack_many(s: &Server, queue: &str, n: usize) {
    let mut c = client(s);
    let mut done = 0;
    while done < n {
        let batch = c
            .consume_wait(queue, 0, (n - done).min(250) as u32)
            .unwrap();
        assert!(!batch.is_empty(), "ran dry after {done}");
        let acks: Vec<String> = batch
            .iter()
            .map(|m| format!(r#"{{"id":"{}"}}"#, m.id))
            .collect();
        let frames: Vec<(u8, &[u8])> = acks.iter().map(|a| (op::ACK, a.as_bytes())).collect();
        for (code, body) in c.pipeline(&frames).unwrap() {
            assert_eq!(code, status::OK, "{}", String::from_utf8_lossy(&body));
        }
        done += batch.len();
    }
}

fn segment_bases(dir: &std::path::Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    bases.sort_unstable();
    bases
}

#[test]
fn command_log_is_compacted_behind_snapshots_and_restores() {
    // 1 MiB segments and the smallest per-slot compaction threshold (1 MiB).
    let (mut s, _cfg) = server_with_ack_timeout(
        "5m",
        "[storage]\nsegment_bytes = 1048576\ncompaction_threshold = 1\n",
    );
    let slot = boltq::queue::server::dispatch::slot_of_name("big");
    let wal_dir = s.data_dir().join(format!("logs/queue/slot-{slot:03}/wal"));
    for round in 0..3 {
        publish_many(&s, "big", 2000, 400);
        consume_ack_many(&s, "big", 1500);
        // Let a checkpoint make the sealed segments durable, so the next snapshot can drop
        // them.
        std::thread::sleep(Duration::from_millis(2500));
        let _ = round;
    }
    let bases = segment_bases(&wal_dir);
    assert!(!bases.is_empty());
    assert!(
        bases[0] > 1,
        "the oldest command segments were removed behind a snapshot: {bases:?}"
    );
    let snap_dir = wal_dir.with_file_name("snap");
    assert!(!segment_bases(&snap_dir).is_empty(), "a snapshot exists");
    // Counted the same in v1's `/overview` field and on `/metrics` (it used to say 0).
    let overview = crate::support::get(&s, "/overview").json()["metrics"]["snapshot_count"].clone();
    assert!(overview.as_u64().is_some_and(|n| n >= 1), "{overview}");
    let metrics = crate::support::get(&s, "/metrics").body;
    let line = format!("boltq_snapshot_count {overview}");
    assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    // State after restart = snapshot + the commands after it.
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let (next, _) = s.restart(signal);
        s = next;
        let mut c = client(&s);
        assert_eq!(
            c.stats().unwrap()["Queues"]["big"],
            1500,
            "after signal {signal}"
        );
        assert_eq!(c.stats().unwrap()["PendingCount"], 0);
    }
    let mut c = client(&s);
    let m = c.consume("big").unwrap().unwrap();
    assert_eq!(m.payload_json.len(), 402);
}

/// `boltq_snapshot_count` as the server reports it.
fn snapshot_count(s: &Server) -> u64 {
    counter_sum(s, "boltq_snapshot_count")
}

#[test]
fn a_snapshot_that_came_due_while_the_last_was_written_is_taken_without_new_commands() {
    // The smallest threshold (1 MiB) and the slowest snapshot writes (1 MiB/s): the first
    // snapshot is still being written when the burst below ends.
    let (s, _cfg) = server_with_ack_timeout(
        "5m",
        "[storage]\ncompaction_threshold = 1\nsnapshot_write_bytes_per_sec = 1048576\n",
    );
    publish_many(&s, "burst", 1250, 1000);
    assert_eq!(snapshot_count(&s), 1, "the first snapshot started");
    publish_many(&s, "burst", 1500, 1000);
    // Nothing more arrives. The commands since the first snapshot outweigh it, so a
    // second one is due; it must start once the first is done.
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshot_count(&s) < 2 {
        assert!(
            Instant::now() < deadline,
            "no second snapshot of an idle slot whose log outgrew its snapshot"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, _) = s.restart(libc::SIGKILL);
    assert_eq!(client(&s).stats().unwrap()["Queues"]["burst"], 2750);
}

#[test]
fn long_poll_consume_waits_for_a_publish_on_any_shard() {
    let (s, _cfg) = server("");
    // Queues on both shards' slots: the waiter parks on each queue's owner.
    for queue in ["lp-a", "lp-b", "lp-c", "lp-d"] {
        let addr = format!("127.0.0.1:{}", s.tcp_port);
        let waiter = std::thread::spawn({
            let addr = addr.clone();
            let queue = queue.to_string();
            move || {
                let mut c = Client::connect(&addr, ClientOptions::default()).unwrap();
                c.consume_wait(&queue, 10_000, 1).unwrap()
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut p = client(&s);
        p.publish(queue, "7", None, PublishOptions::default())
            .unwrap();
        let got = waiter.join().unwrap();
        assert_eq!(got.len(), 1, "{queue}: the parked consumer got the message");
        assert_eq!(got[0].payload_json, "7");
    }
    // Nothing published: EMPTY once the wait is over, not before.
    let mut c = client(&s);
    let started = Instant::now();
    assert!(c.consume_wait("lp-none", 300, 1).unwrap().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    // A v1 consume (no wait_ms) still never blocks.
    assert_eq!(c.consume("lp-none").unwrap(), None);
}

#[test]
fn more_pipelined_requests_than_one_batch_all_get_replies() {
    let (s, _cfg) = server("");
    let mut c = raw(&s);
    let mut frames = Vec::new();
    for _ in 0..3000 {
        frame::encode(op::PING, b"{}", &mut frames);
    }
    use std::io::Write;
    c.write_all(&frames).unwrap();
    for i in 0..3000 {
        let (code, body) = recv(&mut c).unwrap_or_else(|| panic!("reply {i} missing"));
        assert_eq!((code, body.as_str()), (status::OK, r#"{"status":"pong"}"#));
    }
}

#[test]
fn pipelined_exchange_changes_apply_before_a_later_publish_routes() {
    let (s, _cfg) = server("");
    // Connections land on either shard; only shard 0 applies exchange changes, so try
    // several connections.
    for i in 0..6 {
        let mut c = raw(&s);
        let mut frames = Vec::new();
        let ex = format!("px{i}");
        frame::encode(
            op::EXCHANGE_DECLARE,
            format!(r#"{{"name":"{ex}","type":"fanout"}}"#).as_bytes(),
            &mut frames,
        );
        frame::encode(
            op::BIND_QUEUE,
            format!(r#"{{"exchange":"{ex}","queue":"pq-{i}"}}"#).as_bytes(),
            &mut frames,
        );
        frame::encode(
            op::PUBLISH_EXCHANGE,
            format!(r#"{{"exchange":"{ex}","payload":{i}}}"#).as_bytes(),
            &mut frames,
        );
        frame::encode(
            op::CONSUME,
            format!(r#"{{"topic":"pq-{i}"}}"#).as_bytes(),
            &mut frames,
        );
        use std::io::Write;
        c.write_all(&frames).unwrap();
        for step in 0..3 {
            let (code, body) = recv(&mut c).unwrap();
            assert_eq!(code, status::OK, "connection {i} step {step}: {body}");
        }
        let (code, body) = recv(&mut c).unwrap();
        assert_eq!(
            code,
            status::OK,
            "the routed copy is consumable at once: {body}"
        );
        assert!(body.contains(&format!(r#""payload":{i}"#)), "{body}");
    }
}

#[test]
fn a_batch_consume_never_takes_more_than_one_reply_can_carry() {
    let (s, _cfg) = server_with_ack_timeout("5m", "");
    let mut c = client(&s);
    let big = format!(r#""{}""#, "b".repeat(1_500_000));
    for _ in 0..3 {
        c.publish("huge", &big, None, PublishOptions::default())
            .unwrap();
    }
    let first = c.consume_wait("huge", 0, 3).unwrap();
    assert_eq!(
        first.len(),
        2,
        "two 1.5 MB messages fit in one 4 MiB reply, three do not"
    );
    let stats = c.stats().unwrap();
    assert_eq!(
        (
            stats["PendingCount"].clone(),
            stats["Queues"]["huge"].clone()
        ),
        (json!(2), json!(1)),
        "the third stays ready: {stats}"
    );
    let rest = c.consume_wait("huge", 0, 3).unwrap();
    assert_eq!(rest.len(), 1);
}

#[test]
fn durable_backlog_survives_restart_and_is_delivered_once() {
    let (mut s, _cfg) = server_with_ack_timeout("5m", "");
    let mut sub = raw(&s);
    send(
        &mut sub,
        op::CONSUME,
        r#"{"topic":"keep","id":"d1","durable":true}"#,
    );
    assert_eq!(recv(&mut sub).unwrap().1, r#"{"status":"subscribed"}"#);
    let mut p = client(&s);
    p.publish_topic("keep", "1", None, 0).unwrap();
    assert!(
        recv(&mut sub).unwrap().1.contains(r#""payload":1"#),
        "pushed live"
    );
    drop(sub);
    std::thread::sleep(Duration::from_millis(300));
    p.publish_topic("keep", "2", None, 0).unwrap();
    p.publish_topic("keep", "3", None, 0).unwrap();
    drop(p);
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let (next, _) = s.restart(signal);
        s = next;
        let stats = client(&s).stats().unwrap();
        assert_eq!(
            stats["Queues"]["keep:d1"], 2,
            "backlog kept over restart ({signal}): {stats}"
        );
    }
    let mut sub = raw(&s);
    send(
        &mut sub,
        op::CONSUME,
        r#"{"topic":"keep","id":"d1","durable":true}"#,
    );
    assert_eq!(recv(&mut sub).unwrap().1, r#"{"status":"subscribed"}"#);
    assert!(recv(&mut sub).unwrap().1.contains(r#""payload":2"#));
    assert!(recv(&mut sub).unwrap().1.contains(r#""payload":3"#));
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        recv(&mut sub).is_none(),
        "nothing delivered twice (message 1 was pushed live)"
    );
}

/// One connection, 40,000 requests one at a time: every read races a push wait, and each
/// dropped wait must deregister (glommio counts waker clones in an i16: 32,767 leaked
/// clones used to kill the shard).
#[test]
fn a_long_lived_connection_survives_tens_of_thousands_of_reads() {
    let (s, _cfg) = server("[storage]\nmode = \"memory\"\n");
    let mut c = raw(&s);
    for i in 0..40_000 {
        send(&mut c, op::PING, "{}");
        let (code, _) = recv(&mut c).unwrap_or_else(|| panic!("no reply to request {i}"));
        assert_eq!(code, status::OK);
    }
}

#[test]
fn unroutable_exchange_publishes_are_reported_only_when_asked() {
    let (s, _cfg) = server("report_unroutable = true\n");
    let mut c = client(&s);
    c.exchange_declare("r", "direct", false).unwrap();
    c.bind_queue("r", "rq", "yes", None, false).unwrap();
    c.publish_exchange("r", "yes", "1", None, 0).unwrap();
    match c.publish_exchange("r", "no", "1", None, 0) {
        Err(ClientError::Server(e)) => assert!(e.starts_with("unroutable:"), "{e}"),
        other => panic!("expected an unroutable error, got {other:?}"),
    }
    // Default (v1): silently dropped with an OK.
    let (s2, _cfg2) = server("");
    let mut c2 = client(&s2);
    c2.exchange_declare("r", "direct", false).unwrap();
    c2.publish_exchange("r", "no", "1", None, 0).unwrap();
}

/// v1: binding a queue creates it, so STATS lists it (at 0) before anything is published,
/// and it stays created across a kill -9 and restart (the creation is a logged command, and
/// the BIND reply waits for it to be durable).
#[test]
fn bind_creates_its_queue_and_the_queue_survives_a_restart() {
    let (s, _cfg) = server("");
    let mut c = client(&s);
    c.exchange_declare("ex", "direct", true).unwrap();
    assert!(c.stats().unwrap()["Queues"].get("bound-q").is_none());
    c.bind_queue("ex", "bound-q", "k", None, false).unwrap();
    let stats = c.stats().unwrap();
    assert_eq!(stats["Queues"]["bound-q"], 0, "{stats}");
    // A second bind of the same queue changes nothing about it.
    c.bind_queue("ex", "bound-q", "k2", None, false).unwrap();
    assert_eq!(c.stats().unwrap()["Queues"]["bound-q"], 0);
    // An unknown exchange creates nothing.
    assert!(c.bind_queue("nope", "other-q", "k", None, false).is_err());
    drop(c);
    let (s, _) = s.restart_when_ports_free(libc::SIGKILL);
    let mut c = client(&s);
    let stats = c.stats().unwrap();
    assert_eq!(stats["Queues"]["bound-q"], 0, "{stats}");
    assert!(stats["Queues"].get("other-q").is_none(), "{stats}");
}

/// Sums every series of counter `name` in the server's `/metrics`.
fn counter_sum(s: &Server, name: &str) -> u64 {
    let (code, text) = crate::support::http_get(s.http_port, "/metrics").unwrap();
    assert_eq!(code, 200);
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

/// A server whose shards' journals hold at most 1 MiB not yet durable
/// (`storage.journal_backlog_bytes_max`), so a few 512 KiB publishes fill one.
fn server_with_small_journal() -> (Server, boltq_io::testutil::TempDir) {
    server_with_ack_timeout("60s", "[storage]\njournal_backlog_bytes_max = 1048576\n")
}

/// A payload of about 512 KiB.
fn filler() -> String {
    "x".repeat(512 * 1024)
}

/// PUBLISH bodies to `queue` numbered `from..from + count`, each payload the number in six
/// digits, then `filler`.
fn numbered_publishes(queue: &str, from: usize, count: usize, filler: &str) -> Vec<String> {
    (from..from + count)
        .map(|n| format!(r#"{{"topic":"{queue}","payload":"{n:06}{filler}"}}"#))
        .collect()
}

/// Consumes and acknowledges everything in `queue`; the numbers of the messages, in
/// delivery order ([`numbered_publishes`]).
fn drain_numbers(c: &mut Client, queue: &str) -> Vec<usize> {
    let mut seen = Vec::new();
    loop {
        let batch = c.consume_wait(queue, 0, 4).unwrap();
        if batch.is_empty() {
            return seen;
        }
        for m in batch {
            seen.push(m.payload_json[1..7].parse::<usize>().unwrap());
            c.ack(&m.id).unwrap();
        }
    }
}

/// Producers writing faster than the journal's backlog limit lets through are slowed, not
/// refused: with `storage.journal_backlog_bytes_max` at 1 MiB, eight connections pipelining
/// 512 KiB publishes (several MiB in flight against each fdatasync) get every one
/// acknowledged, commands do wait for room, and each connection's messages come back in
/// the order it published them. Until 2026-12-07 some were refused with "storage is
/// behind; retry later" (with the line switched off, they are: checked).
#[test]
fn publishes_faster_than_the_disk_wait_for_room_in_order_instead_of_being_refused() {
    const CONNECTIONS: usize = 8;
    const BATCHES: usize = 2;
    const PER_BATCH: usize = 4;
    let (s, _cfg) = server_with_small_journal();
    let filler = filler();
    std::thread::scope(|scope| {
        for conn in 0..CONNECTIONS {
            let (s, filler) = (&s, &filler);
            scope.spawn(move || {
                let mut c = client(s);
                for batch in 0..BATCHES {
                    let queue = format!("room{conn}");
                    let bodies = numbered_publishes(&queue, batch * PER_BATCH, PER_BATCH, filler);
                    let frames: Vec<(u8, &[u8])> =
                        bodies.iter().map(|b| (op::PUBLISH, b.as_bytes())).collect();
                    for (code, body) in c.pipeline(&frames).unwrap() {
                        assert_eq!(code, status::OK, "{}", String::from_utf8_lossy(&body));
                    }
                }
            });
        }
    });
    assert!(
        counter_sum(&s, "boltq_queue_commands_waited_for_room_total") > 0,
        "no command met a full journal: the test drove nothing"
    );
    let mut c = client(&s);
    for conn in 0..CONNECTIONS {
        let seen = drain_numbers(&mut c, &format!("room{conn}"));
        let expected: Vec<usize> = (0..BATCHES * PER_BATCH).collect();
        assert_eq!(
            seen, expected,
            "connection {conn}'s messages in publish order"
        );
    }
}

/// Publishes pipelined into a shard whose journal is full (`journal_backlog_bytes_max` at
/// 1 MiB, default fsync) wait in line; a kill -9 while they wait loses none that was
/// acknowledged, and what survives of each connection's publishes is a prefix of them in
/// order (a later publish never survives an earlier one of the same connection). With
/// waiting publishes answered before they are applied, acknowledged ones are lost (checked).
#[test]
fn a_kill_while_publishes_wait_for_room_loses_no_acknowledged_publish() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const CONNECTIONS: usize = 8;
    const PER_BATCH: usize = 4;
    const BATCHES_MAX: usize = 200;
    let (s, _cfg) = server_with_small_journal();
    let filler = filler();
    let acked: Vec<AtomicUsize> = (0..CONNECTIONS).map(|_| AtomicUsize::new(0)).collect();
    let running = AtomicUsize::new(CONNECTIONS);
    let killed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for (conn, acked) in acked.iter().enumerate() {
            let (s, filler, running, killed) = (&s, &filler, &running, &killed);
            scope.spawn(move || {
                let mut c = client(s);
                for batch in 0..BATCHES_MAX {
                    let queue = format!("kill{conn}");
                    let bodies = numbered_publishes(&queue, batch * PER_BATCH, PER_BATCH, filler);
                    let frames: Vec<(u8, &[u8])> =
                        bodies.iter().map(|b| (op::PUBLISH, b.as_bytes())).collect();
                    let Ok(replies) = c.pipeline(&frames) else {
                        assert!(
                            killed.load(Ordering::SeqCst),
                            "the connection failed unkilled"
                        );
                        break;
                    };
                    for (code, body) in replies {
                        assert_eq!(code, status::OK, "{}", String::from_utf8_lossy(&body));
                    }
                    acked.store((batch + 1) * PER_BATCH, Ordering::SeqCst);
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while counter_sum(&s, "boltq_queue_commands_waited_for_room_total") < 64 {
            assert!(Instant::now() < deadline, "no command met a full journal");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            running.load(Ordering::SeqCst),
            CONNECTIONS,
            "a publisher finished before the kill: the kill met no waiting command"
        );
        killed.store(true, Ordering::SeqCst);
        // SAFETY: kill(2) on the server, our child, which is reaped only by the restart below.
        unsafe { libc::kill(s.pid() as i32, libc::SIGKILL) };
    });
    let (s, _) = s.restart_when_ports_free(libc::SIGKILL);
    let mut c = client(&s);
    for (conn, acked) in acked.iter().enumerate() {
        let acked = acked.load(Ordering::SeqCst);
        let seen = drain_numbers(&mut c, &format!("kill{conn}"));
        assert!(
            seen.len() >= acked,
            "connection {conn}: {acked} publishes acknowledged, {} survived the kill",
            seen.len()
        );
        let expected: Vec<usize> = (0..seen.len()).collect();
        assert_eq!(
            seen, expected,
            "connection {conn}'s publishes, a prefix in order"
        );
    }
}

/// A connection served by the shard that owns `queue`'s slot (`on_owner`) or by the other:
/// with connection affinity off the kernel picks the shard, so connections are opened until
/// it picks the one wanted (`/connections` names each client's shard).
fn connection_served_by(s: &Server, queue: &str, on_owner: bool) -> std::net::TcpStream {
    let owner = boltq_shards::owner_of_slot(boltq_shards::slot_of(queue), 2) as u64;
    for _ in 0..64 {
        let c = raw(s);
        let me = c.local_addr().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        let shard = loop {
            let (code, body) = crate::support::http_get(s.http_port, "/connections").unwrap();
            assert_eq!(code, 200, "{body}");
            let list: serde_json::Value = serde_json::from_str(&body).unwrap();
            let mine = list["connections"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["peer"] == me);
            if let Some(mine) = mine {
                break mine["shard"].as_u64().unwrap();
            }
            assert!(Instant::now() < deadline, "{me} never listed: {body}");
            std::thread::sleep(Duration::from_millis(10));
        };
        if (shard == owner) == on_owner {
            return c;
        }
    }
    panic!("64 connections in a row landed on the same side of shard {owner}");
}

fn durable_subscribe(topic: &str, sub_id: &str) -> String {
    format!(r#"{{"topic":"{topic}","id":"{sub_id}","durable":true}}"#)
}

/// Sends a durable SUBSCRIBE to `topic` from a connection its owner shard does not serve
/// until one is told it timed out in the owner's line, each from a new connection under a
/// new id (`r0`, `r1`, …: one answered in time met a short line); closes that connection
/// and returns its id.
fn subscribe_until_it_times_out(s: &Server, topic: &str) -> String {
    for attempt in 0..8 {
        let sub_id = format!("r{attempt}");
        let mut sub = connection_served_by(s, topic, false);
        send(&mut sub, op::CONSUME, &durable_subscribe(topic, &sub_id));
        let (code, reply) = recv(&mut sub).unwrap();
        if code == status::ERROR && reply.contains("the command may still be applied") {
            return sub_id;
        }
        assert_eq!(reply, r#"{"status":"subscribed"}"#);
    }
    panic!("eight subscribes in a row were answered in time: the line never held one");
}

/// A durable SUBSCRIBE sent to the owner shard, which holds it in its line for the journal
/// past the sender's patience (50 ms under the fault `short-remote-timeout`): the client
/// is told the command may still be applied and closes; its disconnect reaches the owner
/// while the SUBSCRIBE still waits, and waits behind it. So the registration ends offline,
/// and the topic publishes acknowledged afterwards are kept for it, also over kill -9
/// (with the disconnect applied at once, it overtakes the SUBSCRIBE, the registration stays
/// live on the closed connection and the publishes are lost: checked).
#[test]
fn a_durable_subscribe_that_timed_out_in_line_and_its_close_keep_what_follows() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const PUBLISHES: usize = 5;
    let (s, _cfg) = server_with_ack_timeout_env(
        "60s",
        "connection_affinity = false\n[storage]\njournal_backlog_bytes_max = 1048576\n",
        &[("BOLTQ_FAULTS", "short-remote-timeout")],
    );
    let topic = beside_the_flood("news");
    let filler = filler();
    let (stop, flood_ended) = (AtomicBool::new(false), AtomicBool::new(false));
    let sub_id = std::thread::scope(|scope| {
        flood(scope, &s, &filler, &stop, &flood_ended);
        let sub_id = subscribe_until_it_times_out(&s, &topic);
        // From the owner's shard: a publish from the other would time out as well.
        let mut p = connection_served_by(&s, &topic, true);
        for n in 1..=PUBLISHES {
            send(
                &mut p,
                op::PUBLISH_TOPIC,
                &format!(r#"{{"topic":"{topic}","payload":{n}}}"#),
            );
            let (code, reply) = recv(&mut p).unwrap();
            assert_eq!(code, status::OK, "publish {n}: {reply}");
        }
        let flood_was_on = !flood_ended.load(Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        assert!(flood_was_on, "the flood ended before the publishes");
        sub_id
    });
    // A push to the closed connection before its disconnect was applied comes back with
    // the disconnect; once that is applied, all of them wait for the registration.
    let (mut c, deadline) = (client(&s), Instant::now() + Duration::from_secs(10));
    loop {
        let stats = c.stats().unwrap();
        if stats["Queues"][format!("{topic}:{sub_id}")] == PUBLISHES {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not kept for the offline registration: {stats}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (s, _) = s.restart_when_ports_free(libc::SIGKILL);
    // From the owner's shard: the restarted process has the short patience too.
    let mut sub = connection_served_by(&s, &topic, true);
    send(&mut sub, op::CONSUME, &durable_subscribe(&topic, &sub_id));
    assert_eq!(recv(&mut sub).unwrap().1, r#"{"status":"subscribed"}"#);
    for n in 1..=PUBLISHES {
        let (_, push) = recv(&mut sub).unwrap_or_else(|| panic!("publish {n} was lost"));
        assert!(push.contains(&format!(r#""payload":{n}"#)), "{n}: {push}");
    }
}

/// The line of commands waiting for the journal is bounded (64 MiB of payload on a shard):
/// 256 connections each publishing 512 KiB at once into a 1 MiB journal backlog fill it, and
/// the publishes past the bound are refused with an error that names the bound. The queue
/// then holds exactly the acknowledged publishes (with refused ones applied too, or with
/// the bound raised, the test fails: checked).
#[test]
fn publishes_past_the_bound_of_the_line_are_refused_and_none_acknowledged_is_lost() {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    const CONNECTIONS: usize = 256;
    const PER_CONNECTION: usize = 1;
    let (s, _cfg) = server_with_small_journal();
    let filler = filler();
    let acked = Mutex::new(BTreeSet::new());
    let refused = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for conn in 0..CONNECTIONS {
            let (s, filler, acked, refused) = (&s, &filler, &acked, &refused);
            scope.spawn(move || {
                let mut c = client(s);
                for n in 0..PER_CONNECTION {
                    let body = format!(r#"{{"topic":"line","payload":"{conn:03}{n}{filler}"}}"#);
                    let replies = c.pipeline(&[(op::PUBLISH, body.as_bytes())]).unwrap();
                    let (code, reply) = &replies[0];
                    match *code {
                        status::OK => acked.lock().unwrap().insert((conn, n)),
                        _ => {
                            refused.lock().unwrap().push(((conn, n), reply.clone()));
                            true
                        }
                    };
                }
            });
        }
    });
    let (acked, refused) = (acked.into_inner().unwrap(), refused.into_inner().unwrap());
    assert!(
        !refused.is_empty(),
        "no publish met the line's bound: the test drove nothing"
    );
    for (_, reply) in &refused {
        let reply = String::from_utf8_lossy(reply);
        assert!(reply.contains("commands wait for it"), "{reply}");
        assert!(reply.contains("67108864 bytes of payload"), "{reply}");
    }
    // Counted rather than consumed: reading back 128 MiB of JSON takes a debug build
    // minutes. A refused publish applied, or an acknowledged one lost, changes the count.
    let stats = client(&s).stats().unwrap();
    assert_eq!(stats["Queues"]["line"], acked.len(), "{stats}");
}

/// A queue on the shard that owns `flood`: commands to it meet the flood's line.
fn beside_the_flood(prefix: &str) -> String {
    let owner = |name: &str| boltq_shards::owner_of_slot(boltq_shards::slot_of(name), 2);
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|name| owner(name) == owner("flood"))
        .unwrap()
}

/// Eight connections pipelining 512 KiB publishes to `flood`, four at a time, until `stop`
/// (at most 400 rounds each; `ended` says one ran out of rounds). Returns once commands
/// wait for room in the journal. The connections are served by `flood`'s owner, so the
/// flood is the same whatever the remote timeout (one sent on by another shard and timed
/// out would let its connection pipeline on past the line's bound).
fn flood<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    s: &'scope Server,
    filler: &'scope str,
    stop: &'scope std::sync::atomic::AtomicBool,
    ended: &'scope std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering;
    const CONNECTIONS: usize = 8;
    const BATCHES_MAX: usize = 400;
    const PER_ROUND: usize = 4;
    for _ in 0..CONNECTIONS {
        let mut c = connection_served_by(s, "flood", true);
        scope.spawn(move || {
            use std::io::Write;
            let body = format!(r#"{{"topic":"flood","payload":"{filler}"}}"#);
            let mut frames = Vec::new();
            for _ in 0..PER_ROUND {
                frame::encode(op::PUBLISH, body.as_bytes(), &mut frames);
            }
            for _ in 0..BATCHES_MAX {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                c.write_all(&frames).unwrap();
                for _ in 0..PER_ROUND {
                    let (code, reply) = recv(&mut c).expect("a flood publish unanswered");
                    assert_eq!(code, status::OK, "{reply}");
                }
            }
            ended.store(true, Ordering::SeqCst);
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while counter_sum(s, "boltq_queue_commands_waited_for_room_total") == 0 {
        assert!(Instant::now() < deadline, "no command met a full journal");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Timers keep running while producers keep the journal full: a delayed message on the
/// flooded shard becomes visible, and a long-poll waiting for it gets it, while publishes
/// still wait for room (a tick waits its turn in the line, not for the line to empty,
/// which a flood could keep from ever happening; with ticks skipped while commands wait,
/// the test fails: checked).
#[test]
fn a_delayed_message_becomes_visible_while_publishes_wait_for_room() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (s, _cfg) = server_with_small_journal();
    let late = beside_the_flood("late");
    let filler = filler();
    let (stop, flood_ended) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|scope| {
        flood(scope, &s, &filler, &stop, &flood_ended);
        let mut c = client(&s);
        let delayed = PublishOptions {
            delay_ns: 200_000_000,
            ..PublishOptions::default()
        };
        c.publish(&late, r#""late""#, None, delayed).unwrap();
        let got = c.consume_wait(&late, 30_000, 1).unwrap();
        let flood_was_on = !flood_ended.load(Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        assert_eq!(got.len(), 1, "the delayed message never became visible");
        assert!(
            flood_was_on,
            "the delayed message came only once the flood had ended"
        );
    });
}
