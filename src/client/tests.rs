//! The client against the scripted fake server (`fake_server`).

use super::fake_server::{FakeServer, Step};
use super::*;
use crate::queue::protocol::frame::{op, status, PAYLOAD_BYTES_MAX};
use std::net::TcpListener;

fn connect(server: &FakeServer) -> Client {
    Client::connect(&server.addr, quick()).unwrap()
}

fn quick() -> ClientOptions {
    ClientOptions {
        timeout_ms: 2_000,
        ..Default::default()
    }
}

fn reply(code: u8, payload: &str) -> Vec<u8> {
    fake_server::frame_bytes(code, payload)
}

fn ok(payload: &str) -> Step {
    Step::Send(reply(status::OK, payload))
}

fn push_frame(n: u32) -> Vec<u8> {
    reply(
        status::OK,
        &format!(
            r#"{{"id":"p{n}","topic":"news","payload":{{"n":{n}}},"timestamp":{n},"subscriber_id":"s1"}}"#
        ),
    )
}

fn body(f: &RawFrame) -> &str {
    std::str::from_utf8(&f.1).unwrap()
}

const PUBLISHED: &str = r#"{"id":"9f86d081884c7d659a2feaa0c55ad015","topic":"jobs"}"#;

#[test]
fn publish_sends_the_go_sdk_body_and_parses_the_reply() {
    let server = FakeServer::start(vec![
        Step::Expect,
        ok(PUBLISHED),
        Step::Expect,
        ok(r#"{"id":"a","topic":"jobs","seq_no":3,"ack":true}"#),
    ]);
    let mut c = connect(&server);
    let r = c
        .publish("jobs", " { \"n\" : 1 } ", None, PublishOptions::default())
        .unwrap();
    assert_eq!(r.id, "9f86d081884c7d659a2feaa0c55ad015");
    assert_eq!((r.topic.as_str(), r.seq_no, r.ack), ("jobs", None, None));
    let mut h = Headers::new();
    h.insert("k".into(), "v".into());
    let opts = PublishOptions {
        delay_ns: 5_000_000_000,
        ttl_ns: 7,
        priority: 9,
    };
    let r = c.publish("jobs", "\"<s>\"", Some(&h), opts).unwrap();
    assert_eq!((r.seq_no, r.ack), (Some(3), Some(true)));
    let got = server.received();
    assert_eq!(got[0].0, op::PUBLISH);
    assert_eq!(
        body(&got[0]),
        r#"{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}"#
    );
    assert_eq!(
        body(&got[1]),
        r#"{"delay":5000000000,"headers":{"k":"v"},"payload":"\u003cs\u003e","priority":9,"topic":"jobs","ttl":7}"#
    );
}

#[test]
fn invalid_payload_is_refused_before_sending() {
    let server = FakeServer::start(vec![Step::Expect, ok(r#"{"status":"pong"}"#)]);
    let mut c = connect(&server);
    let err = c
        .publish("q", "{nope", None, PublishOptions::default())
        .unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err:?}");
    let huge = format!("\"{}\"", "x".repeat(PAYLOAD_BYTES_MAX));
    let err = c
        .publish("q", &huge, None, PublishOptions::default())
        .unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err:?}");
    c.ping().unwrap();
    assert_eq!(server.received(), vec![(op::PING, b"{}".to_vec())]);
}

#[test]
fn auth_is_the_first_frame_when_a_key_is_set() {
    let server = FakeServer::start(vec![
        Step::Expect,
        ok(r#"{"status":"ok"}"#),
        Step::Expect,
        ok(r#"{"status":"pong"}"#),
    ]);
    let options = ClientOptions {
        api_key: Some("s3cret".into()),
        ..quick()
    };
    let mut c = Client::connect(&server.addr, options).unwrap();
    c.ping().unwrap();
    let got = server.received();
    assert_eq!(got[0], (op::AUTH, br#"{"api_key":"s3cret"}"#.to_vec()));
    assert_eq!(got[1].0, op::PING);
}

#[test]
fn refused_auth_is_an_auth_error_with_the_payload() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(reply(status::ERROR, r#"{"error":"unauthorized"}"#)),
    ]);
    let options = ClientOptions {
        api_key: Some("wrong".into()),
        ..quick()
    };
    let err = Client::connect(&server.addr, options).err().unwrap();
    assert_eq!(err.to_string(), r#"auth failed: {"error":"unauthorized"}"#);
    server.received();
}

#[test]
fn consume_maps_empty_message_and_error() {
    let msg = r#"{"id":"m1","topic":"jobs","payload":{"z":1,"a":2},"timestamp":1700000000000000000,"retry":1}"#;
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(reply(status::EMPTY, "")),
        Step::Expect,
        ok(msg),
        Step::Expect,
        Step::Send(reply(status::ERROR, r#"{"error":"topic is required"}"#)),
        Step::Expect,
        ok(r#"{"status":"pong"}"#),
    ]);
    let mut c = connect(&server);
    assert_eq!(c.consume("jobs").unwrap(), None);
    let m = c.consume("jobs").unwrap().unwrap();
    assert_eq!(
        (m.id.as_str(), m.payload_json.as_str()),
        ("m1", r#"{"z":1,"a":2}"#)
    );
    assert_eq!((m.timestamp_ns, m.retry), (1_700_000_000_000_000_000, 1));
    let err = c.consume("").unwrap_err();
    assert_eq!(err.to_string(), "server error: topic is required");
    assert!(matches!(&err, ClientError::Server(s) if s == "topic is required"));
    c.ping()
        .expect("an ERROR reply leaves the connection usable");
    assert_eq!(
        server.received()[0],
        (op::CONSUME, br#"{"topic":"jobs"}"#.to_vec())
    );
}

#[test]
fn not_leader_carries_the_leader_addresses() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(reply(
            status::NOT_LEADER,
            r#"{"error":"not leader","leader":"10.0.0.1:9100","leader_id":"n1","leader_tcp":"10.0.0.1:9091"}"#,
        )),
        Step::Expect,
        Step::Send(reply(
            status::NOT_LEADER,
            r#"{"error":"not leader","leader":"","leader_id":""}"#,
        )),
    ]);
    let mut c = connect(&server);
    match c.ack("m1").unwrap_err() {
        ClientError::NotLeader {
            leader,
            leader_id,
            leader_tcp,
            leader_http,
        } => {
            assert_eq!(
                (leader.as_str(), leader_id.as_str()),
                ("10.0.0.1:9100", "n1")
            );
            assert_eq!(
                (leader_tcp.as_deref(), leader_http),
                (Some("10.0.0.1:9091"), None)
            );
        }
        other => panic!("{other:?}"),
    }
    let err = c.nack("m1").unwrap_err();
    assert_eq!(err.to_string(), "not leader, current leader is  ()");
    let got = server.received();
    assert_eq!(got[0], (op::ACK, br#"{"id":"m1"}"#.to_vec()));
    assert_eq!(got[1], (op::NACK, br#"{"id":"m1"}"#.to_vec()));
}

#[test]
fn a_push_before_the_reply_is_queued_not_taken_for_the_reply() {
    let server = FakeServer::start(vec![
        Step::Expect,
        // v1 could send a durable catch-up push before the `subscribed` reply.
        Step::Send(push_frame(1)),
        ok(r#"{"status":"subscribed"}"#),
        Step::Expect,
        Step::Send(push_frame(2)),
        ok(PUBLISHED),
        Step::Send(push_frame(3)),
    ]);
    let mut c = connect(&server);
    c.subscribe("news", "s1", true).unwrap();
    assert_eq!(c.pending_pushes(), 1);
    let r = c.publish_topic("news", "1", None, 0).unwrap();
    assert_eq!(r.topic, "jobs");
    for n in 1..=3 {
        let p = c.next_push(2_000).unwrap().unwrap();
        assert_eq!((p.id, p.subscriber_id.as_str()), (format!("p{n}"), "s1"));
        assert_eq!(p.payload_json, format!(r#"{{"n":{n}}}"#));
    }
    let got = server.received();
    assert_eq!(
        body(&got[0]),
        r#"{"durable":true,"id":"s1","topic":"news"}"#
    );
    assert_eq!(got[1].0, op::PUBLISH_TOPIC);
    assert_eq!(
        body(&got[1]),
        r#"{"headers":null,"payload":1,"priority":0,"topic":"news"}"#
    );
}

#[test]
fn a_reply_mentioning_subscriber_id_below_the_top_level_is_a_reply() {
    let msg = r#"{"id":"m","topic":"q","payload":{"subscriber_id":"x"},"timestamp":1,"retry":0}"#;
    let server = FakeServer::start(vec![Step::Expect, ok(msg)]);
    let mut c = connect(&server);
    let m = c.consume("q").unwrap().unwrap();
    assert_eq!(m.payload_json, r#"{"subscriber_id":"x"}"#);
    assert_eq!(c.pending_pushes(), 0);
    server.received();
}

#[test]
fn next_push_times_out_without_breaking_the_connection() {
    let server = FakeServer::start(vec![Step::Expect, ok(r#"{"status":"pong"}"#)]);
    let mut c = connect(&server);
    assert_eq!(c.next_push(50).unwrap(), None);
    c.ping().unwrap();
    server.received();
}

#[test]
fn next_push_keeps_replies_to_raw_sends_for_read_frame() {
    let server = FakeServer::start(vec![
        Step::Expect,
        ok(r#"{"status":"pong"}"#),
        Step::Send(push_frame(1)),
    ]);
    let mut c = connect(&server);
    c.send_frame(op::PING, b"{}").unwrap();
    let err = c.ping().unwrap_err();
    assert!(
        matches!(err, ClientError::InvalidArgument(_)),
        "typed calls wait for raw replies"
    );
    assert_eq!(c.next_push(2_000).unwrap().unwrap().id, "p1");
    assert_eq!(
        c.read_frame().unwrap(),
        (status::OK, br#"{"status":"pong"}"#.to_vec())
    );
    server.received();
}

#[test]
fn an_unsolicited_reply_is_a_protocol_error() {
    let server = FakeServer::start(vec![ok(r#"{"status":"pong"}"#), Step::SleepMs(200)]);
    let mut c = connect(&server);
    let err = c.next_push(2_000).unwrap_err();
    assert!(matches!(err, ClientError::Protocol(_)), "{err:?}");
    server.received();
}

#[test]
fn the_push_queue_is_bounded_and_counts_drops() {
    let mut pushes = Vec::new();
    for n in 0..(PUSH_QUEUE_FRAMES_MAX as u32 + 5) {
        pushes.extend(push_frame(n));
    }
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(pushes),
        ok(r#"{"status":"pong"}"#),
    ]);
    let mut c = connect(&server);
    c.ping().unwrap();
    assert_eq!(
        (c.pending_pushes(), c.dropped_pushes()),
        (PUSH_QUEUE_FRAMES_MAX, 5)
    );
    assert_eq!(
        c.next_push(0).unwrap().unwrap().id,
        "p0",
        "oldest kept, newest dropped"
    );
    server.received();
}

#[test]
fn an_oversized_frame_breaks_the_connection() {
    let mut header = vec![status::OK];
    header.extend_from_slice(&(PAYLOAD_BYTES_MAX as u32 + 1).to_le_bytes());
    let server = FakeServer::start(vec![Step::Expect, Step::Send(header), Step::SleepMs(100)]);
    let mut c = connect(&server);
    let err = c.stats().unwrap_err();
    assert!(
        matches!(&err, ClientError::Protocol(m) if m.contains("exceeds")),
        "{err:?}"
    );
    let again = c.ping().unwrap_err();
    assert!(matches!(&again, ClientError::Io(e) if e.kind() == io::ErrorKind::NotConnected));
    server.received();
}

#[test]
fn a_closed_connection_is_an_io_error() {
    let server = FakeServer::start(vec![Step::Expect]);
    let mut c = connect(&server);
    let err = c.ping().unwrap_err();
    assert!(
        matches!(&err, ClientError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof),
        "{err:?}"
    );
    server.received();
}

#[test]
fn a_late_reply_times_out_and_the_connection_is_not_reused() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::SleepMs(400),
        ok(r#"{"status":"pong"}"#),
    ]);
    let options = ClientOptions {
        timeout_ms: 100,
        ..Default::default()
    };
    let mut c = Client::connect(&server.addr, options).unwrap();
    let err = c.ping().unwrap_err();
    assert!(
        matches!(&err, ClientError::Io(e) if e.kind() == io::ErrorKind::TimedOut),
        "{err:?}"
    );
    assert!(
        c.ping().is_err(),
        "the late pong must not answer a later request"
    );
    server.received();
}

#[test]
fn frames_split_across_reads_are_reassembled() {
    let stats =
        r#"{"DeadLetters":{},"DelayedCount":0,"PendingCount":2,"Queues":{"jobs":5},"Topics":{}}"#;
    let server = FakeServer::start(vec![Step::Expect, Step::Trickle(reply(status::OK, stats))]);
    let mut c = connect(&server);
    let v = c.stats().unwrap();
    assert_eq!(v["Queues"]["jobs"], 5);
    assert_eq!(v["PendingCount"], 2);
    server.received();
}

#[test]
fn pipeline_writes_all_then_reads_replies_in_order() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Expect,
        Step::Expect,
        Step::Send(
            [
                reply(status::OK, r#"{"status":"pong"}"#),
                push_frame(7),
                reply(status::EMPTY, ""),
                reply(status::ERROR, r#"{"error":"unknown command: 0x0a"}"#),
            ]
            .concat(),
        ),
    ]);
    let mut c = connect(&server);
    let replies = c
        .pipeline(&[
            (op::PING, b"{}"),
            (op::CONSUME, br#"{"topic":"q"}"#),
            (0x0a, b""),
        ])
        .unwrap();
    assert_eq!(replies[0].0, status::OK);
    assert_eq!(replies[1], (status::EMPTY, Vec::new()));
    assert_eq!(replies[2].0, status::ERROR);
    assert_eq!(c.pending_pushes(), 1);
    let got = server.received();
    let codes: Vec<u8> = got.iter().map(|f| f.0).collect();
    assert_eq!(codes, [op::PING, op::CONSUME, 0x0a]);
}

#[test]
fn raw_bytes_and_wire_frames_for_exact_tests() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(push_frame(1)),
        ok(r#"{"status":"pong"}"#),
    ]);
    let mut c = connect(&server);
    c.send_bytes(&[op::PING, 2, 0, 0, 0, b'{', b'}']).unwrap();
    let first = c.read_wire_frame().unwrap();
    assert!(
        Push::is_push(&first.1),
        "read_wire_frame returns pushes in wire order"
    );
    assert_eq!(c.read_wire_frame().unwrap().1, br#"{"status":"pong"}"#);
    server.received();
}

#[test]
fn long_poll_consume_sends_its_fields_and_accepts_batches() {
    let batch = r#"{"messages":[{"id":"a","topic":"q","payload":1,"timestamp":1,"retry":0},{"id":"b","topic":"q","payload":{"y":[2]},"timestamp":2,"retry":0}]}"#;
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::SleepMs(300),
        ok(batch),
        Step::Expect,
        Step::Send(reply(status::EMPTY, "")),
    ]);
    let options = ClientOptions {
        timeout_ms: 100,
        ..Default::default()
    };
    let mut c = Client::connect(&server.addr, options).unwrap();
    let got = c.consume_wait("q", 1_000, 10).unwrap();
    assert_eq!(
        got.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(got[1].payload_json, r#"{"y":[2]}"#);
    assert!(c.consume_wait("q", 0, 1).unwrap().is_empty());
    let sent = server.received();
    assert_eq!(body(&sent[0]), r#"{"max":10,"topic":"q","wait_ms":1000}"#);
}

#[test]
fn every_command_uses_its_byte_and_go_body() {
    let mut script = Vec::new();
    for i in 0..14 {
        script.push(Step::Expect);
        // The seventh call is PUBLISH_EXCHANGE, whose reply carries an id.
        script.push(ok(if i == 6 {
            PUBLISHED
        } else {
            r#"{"status":"ok"}"#
        }));
    }
    let server = FakeServer::start(script);
    let mut c = connect(&server);
    let mut h = Headers::new();
    h.insert("x-type".into(), "a".into());
    c.set_prefetch(5).unwrap();
    c.confirm_select().unwrap();
    c.exchange_declare("ex", "topic", true).unwrap();
    c.exchange_delete("ex").unwrap();
    c.bind_queue("ex", "q", "a.*", Some(&h), true).unwrap();
    c.unbind_queue("ex", "q", "a.*").unwrap();
    let r = c.publish_exchange("ex", "a.b", "{}", None, 3).unwrap();
    assert_eq!(r.id, "9f86d081884c7d659a2feaa0c55ad015");
    c.cluster_status().unwrap();
    c.cluster_join("n2", "10.0.0.2:9100").unwrap();
    c.cluster_leave("n2").unwrap();
    c.dlq_list(None).unwrap();
    c.dlq_read("jobs", 5, 20).unwrap();
    c.dlq_requeue("jobs", 100).unwrap();
    c.dlq_purge("jobs").unwrap();
    let got = server.received();
    let want: [(u8, &str); 14] = [
        (op::PREFETCH, r#"{"count":5}"#),
        (op::CONFIRM_SELECT, "{}"),
        (
            op::EXCHANGE_DECLARE,
            r#"{"durable":true,"name":"ex","type":"topic"}"#,
        ),
        (op::EXCHANGE_DELETE, r#"{"name":"ex"}"#),
        (
            op::BIND_QUEUE,
            r#"{"binding_key":"a.*","exchange":"ex","headers":{"x-type":"a"},"match_all":true,"queue":"q"}"#,
        ),
        (
            op::UNBIND_QUEUE,
            r#"{"binding_key":"a.*","exchange":"ex","queue":"q"}"#,
        ),
        (
            op::PUBLISH_EXCHANGE,
            r#"{"exchange":"ex","headers":null,"payload":{},"priority":3,"routing_key":"a.b"}"#,
        ),
        (op::CLUSTER_STATUS, "{}"),
        (
            op::CLUSTER_JOIN,
            r#"{"addr":"10.0.0.2:9100","node_id":"n2"}"#,
        ),
        (op::CLUSTER_LEAVE, r#"{"node_id":"n2"}"#),
        (0x19, "{}"),
        (0x1A, r#"{"limit":20,"offset":5,"queue":"jobs"}"#),
        (0x1B, r#"{"limit":100,"queue":"jobs"}"#),
        (0x1C, r#"{"queue":"jobs"}"#),
    ];
    assert_eq!(got.len(), want.len());
    for (g, (code, text)) in got.iter().zip(want) {
        assert_eq!((g.0, body(g)), (code, text));
    }
}

#[test]
fn dlq_list_with_a_queue_and_empty_replies() {
    let server = FakeServer::start(vec![Step::Expect, Step::Send(reply(status::EMPTY, ""))]);
    let mut c = connect(&server);
    assert_eq!(c.dlq_list(Some("jobs")).unwrap(), Value::Null);
    assert_eq!(
        server.received()[0],
        (0x19, br#"{"queue":"jobs"}"#.to_vec())
    );
}

#[test]
fn unexpected_empty_outside_consume_is_a_protocol_error() {
    let server = FakeServer::start(vec![Step::Expect, Step::Send(reply(status::EMPTY, ""))]);
    let mut c = connect(&server);
    let err = c.ping().unwrap_err();
    assert!(
        matches!(&err, ClientError::Protocol(m) if m.contains("0x02")),
        "{err:?}"
    );
    server.received();
}

#[test]
fn connect_failure_is_an_io_error() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let err = Client::connect(&addr, quick()).err().unwrap();
    assert!(matches!(err, ClientError::Io(_)), "{err:?}");
}
