//! Stream publishing over TCP for trusted backends (issue 6 part 3), end to end: the real
//! binary, backends speaking the binary protocol through `boltq::client::Client`, devices
//! through the gateway (`boltq::client::gateway::GatewayClient`).
//!
//! The server runs with an ACL that lets a device read its own `match.<user>` topic and
//! write nothing else (a custom `messaging.identity.policy` replaces the built-in chat
//! rules), and with an API key, so backends authenticate as for every TCP command.

use crate::support::gateway::{token, SECRET};

use crate::support::Server;
use base64::Engine as _;
use boltq::client::gateway::{payload_text, GatewayClient};
use boltq::client::{
    Client, ClientError, ClientOptions, Headers, StreamAt, StreamConsumer, StreamPayload,
};
use boltq::queue::protocol::frame::{self, status};
use boltq_io::testutil::TempDir;
use serde_json::json;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const API_KEY: &str = "backend-key";
/// Bound on waiting for records that must come.
const WAIT: Duration = Duration::from_secs(10);

fn start() -> (Server, TempDir) {
    let tmp = TempDir::new("stream-tcp");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[security]\napi_key = \"{API_KEY}\"\n\
             [messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             policy = [{{ pattern = \"match.${{user}}\", actions = [\"read\"], effect = \"allow\" }}]\n\
             [messaging.gateway]\nenabled = true\n"
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    (server, tmp)
}

fn device(s: &Server, user: &str, device: &str) -> GatewayClient {
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    GatewayClient::connect(&url, &token(user), device, None)
        .unwrap_or_else(|e| panic!("{user}/{device} connects: {e}\nserver log:\n{}", s.log()))
}

fn backend(s: &Server) -> Client {
    let opts = ClientOptions {
        api_key: Some(API_KEY.to_string()),
        ..Default::default()
    };
    Client::connect(&format!("127.0.0.1:{}", s.tcp_port), opts).unwrap()
}

fn publish_text(c: &mut Client, at: &StreamAt, text: &str) -> u64 {
    c.stream_publish(at, &Headers::new(), StreamPayload::Bytes(text.as_bytes()))
        .unwrap_or_else(|e| panic!("publish {text}: {e}"))
        .seq
}

fn texts(page: &boltq::client::StreamPage) -> Vec<String> {
    page.records
        .iter()
        .map(|r| String::from_utf8(r.payload.clone()).unwrap())
        .collect()
}

#[test]
fn a_backend_publish_reaches_a_subscribed_device_in_order() {
    let (s, _tmp) = start();
    let mut alice = device(&s, "alice", "phone");
    let ack = alice
        .request(json!({"op": "subscribe", "topic": "match.alice"}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "{ack}");
    let mut b = backend(&s);
    // Keyed by the user: the partition the device subscribed to by default.
    let at = StreamAt::topic("match.alice").key("alice");
    let mut published = Vec::new();
    for i in 0..20 {
        let text = format!("event {i}");
        let mut h = Headers::new();
        h.insert("round".to_string(), i.to_string());
        let p = b
            .stream_publish(&at, &h, StreamPayload::Bytes(text.as_bytes()))
            .unwrap();
        assert_eq!(p.topic, "match.alice");
        assert_eq!(
            p.partition,
            u32::try_from(ack["partition"].as_u64().unwrap()).unwrap()
        );
        published.push((p.seq, text));
    }
    // A JSON payload is stored as its compact text.
    let p = b
        .stream_publish(
            &at,
            &Headers::new(),
            StreamPayload::Json(r#"{ "score": 3 }"#),
        )
        .unwrap();
    published.push((p.seq, r#"{"score":3}"#.to_string()));

    let got = alice.records("match.alice", published.len(), WAIT).unwrap();
    let got: Vec<(u64, String)> = got
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), payload_text(r)))
        .collect();
    assert_eq!(got, published, "every record, in order, once");
    let seqs: Vec<u64> = published.iter().map(|p| p.0).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");

    // The same records read back over TCP, headers included.
    let page = b.stream_read(&at, seqs[0], 5).unwrap();
    assert_eq!(
        texts(&page),
        ["event 0", "event 1", "event 2", "event 3", "event 4"]
    );
    assert_eq!(page.records[3].headers["round"], "3");
    assert_eq!(page.records[0].key, "alice");
    assert_eq!(page.next, seqs[0] + 5);
}

#[test]
fn a_backend_consumer_tails_commits_and_resumes_from_its_cursor() {
    let (s, _tmp) = start();
    let at = StreamAt::topic("orders.eu").key("shop-1");
    let mut producer = backend(&s);
    let first = publish_text(&mut producer, &at, "o1");
    for i in 2..=10 {
        publish_text(&mut producer, &at, &format!("o{i}"));
    }
    let me = StreamConsumer {
        group: "billing",
        member: "worker-1",
    };
    let mut seen: Vec<String> = Vec::new();

    // Tail from an explicit sequence: the position wins over any cursor.
    let mut c = backend(&s);
    let page = c.stream_tail(&at, Some(me), Some(first + 2), 3, 0).unwrap();
    assert_eq!(texts(&page), ["o3", "o4", "o5"]);

    // No cursor yet and no position: from the first retained record.
    let page = c.stream_tail(&at, Some(me), None, 4, 0).unwrap();
    assert_eq!((page.from, texts(&page).len()), (first, 4));
    seen.extend(texts(&page));
    c.stream_commit(&at, me, page.next).unwrap();
    let page = c.stream_tail(&at, Some(me), None, 4, 0).unwrap();
    assert_eq!(page.from, first + 4, "resumed from the commit");
    seen.extend(texts(&page));
    c.stream_commit(&at, me, page.next).unwrap();
    drop(c);

    // Reconnect: the cursor survives the connection.
    let mut c = backend(&s);
    let page = c.stream_tail(&at, Some(me), None, 4, 0).unwrap();
    assert_eq!(page.from, first + 8);
    seen.extend(texts(&page));
    c.stream_commit(&at, me, page.next).unwrap();

    // Caught up: a long-poll waits for the next record and returns it when it is durable.
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    let at2 = at.clone();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let opts = ClientOptions {
            api_key: Some(API_KEY.to_string()),
            ..Default::default()
        };
        let mut p = Client::connect(&addr, opts).unwrap();
        publish_text(&mut p, &at2, "o11")
    });
    let started = Instant::now();
    let page = c.stream_tail(&at, Some(me), None, 4, 5_000).unwrap();
    let late_seq = late.join().unwrap();
    assert_eq!(texts(&page), ["o11"], "woken by the append");
    assert_eq!(page.records[0].seq, late_seq);
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    assert!(
        started.elapsed() < Duration::from_millis(4_500),
        "not until the deadline"
    );
    seen.extend(texts(&page));
    c.stream_commit(&at, me, page.next).unwrap();

    let want: Vec<String> = (1..=11).map(|i| format!("o{i}")).collect();
    assert_eq!(seen, want, "nothing lost, nothing repeated");

    // Nothing new: the long-poll ends empty at its deadline, and the position stays.
    let started = Instant::now();
    let page = c.stream_tail(&at, Some(me), None, 4, 300).unwrap();
    assert!(page.records.is_empty());
    assert_eq!(page.next, late_seq + 1);
    assert!(started.elapsed() >= Duration::from_millis(250));

    // Another group has its own cursor: it starts from the beginning.
    let other = StreamConsumer {
        group: "audit",
        member: "",
    };
    let page = c.stream_tail(&at, Some(other), None, 2, 0).unwrap();
    assert_eq!(texts(&page), ["o1", "o2"]);

    // A commit never moves a cursor back.
    c.stream_commit(&at, me, first).unwrap();
    let page = c.stream_tail(&at, Some(me), None, 4, 0).unwrap();
    assert_eq!(page.from, late_seq + 1);
}

#[test]
fn devices_cannot_publish_where_they_may_only_read_and_backends_not_to_chat() {
    let (s, _tmp) = start();
    let mut alice = device(&s, "alice", "phone");
    let payload = base64::engine::general_purpose::STANDARD.encode("cheat");
    let reply = alice
        .request(json!({"op": "publish", "topic": "match.alice", "payload": payload}))
        .unwrap();
    assert_eq!(reply["op"], "error", "{reply}");
    assert_eq!(reply["error"]["code"], "forbidden", "{reply}");
    // Nothing was written.
    let mut b = backend(&s);
    let page = b
        .stream_read(&StreamAt::topic("match.alice").key("alice"), 0, 10)
        .unwrap();
    assert!(page.records.is_empty(), "{page:?}");

    // Backends may not write the gateway's namespaces, nor invalid names.
    for topic in [
        "chat.group.team",
        "chat.inbox.alice",
        "typing.team",
        "match..x",
    ] {
        let e = b
            .stream_publish(
                &StreamAt::topic(topic),
                &Headers::new(),
                StreamPayload::Bytes(b"x"),
            )
            .unwrap_err();
        assert!(matches!(e, ClientError::Server(_)), "{topic}: {e}");
    }
    // The connection is still usable after the errors.
    b.ping().unwrap();
}

#[test]
fn stream_commands_need_auth_and_the_messaging_plane() {
    let (s, _tmp) = start();
    // Without AUTH the server answers with an error and closes, as for every command.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", s.tcp_port)).unwrap();
    raw.set_read_timeout(Some(WAIT)).unwrap();
    let mut req = Vec::new();
    frame::encode(0x1D, br#"{"topic":"match.alice"}"#, &mut req);
    raw.write_all(&req).unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).unwrap();
    let (f, _) = frame::decode(&reply).unwrap().unwrap();
    assert_eq!(f.code, status::ERROR);
    assert!(String::from_utf8_lossy(f.payload).contains("authentication required"));
    drop(s);

    // A server without the messaging plane answers every stream command with an error.
    let plain = Server::start(&[]);
    let mut c = Client::connect(
        &format!("127.0.0.1:{}", plain.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    let at = StreamAt::topic("match.alice");
    let errors = [
        c.stream_publish(&at, &Headers::new(), StreamPayload::Bytes(b"x"))
            .map(drop)
            .unwrap_err(),
        c.stream_read(&at, 0, 1).map(drop).unwrap_err(),
        c.stream_tail(&at, None, None, 1, 100)
            .map(drop)
            .unwrap_err(),
        c.stream_commit(
            &at,
            StreamConsumer {
                group: "g",
                member: "",
            },
            1,
        )
        .unwrap_err(),
    ];
    for e in errors {
        match e {
            ClientError::Server(text) => assert_eq!(text, "the messaging plane is not enabled"),
            other => panic!("{other}"),
        }
    }
}

/// Partitions are owned by different shards and connections land on either: for each of
/// several partitions a fresh connection's long-poll is woken by the append, whether the
/// owner is its own shard or another one, and two tails waiting on the same partition
/// (sharing the shard's mirror) are both woken.
#[test]
fn long_polls_are_woken_whichever_shard_owns_the_partition() {
    let (s, _tmp) = start();
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    for partition in 0..6u32 {
        let at = StreamAt::topic("wake.t").partition(partition);
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (addr, at) = (addr.clone(), at.clone());
                std::thread::spawn(move || {
                    let opts = ClientOptions {
                        api_key: Some(API_KEY.to_string()),
                        ..Default::default()
                    };
                    let mut c = Client::connect(&addr, opts).unwrap();
                    let started = Instant::now();
                    let page = c.stream_tail(&at, None, None, 10, 8_000).unwrap();
                    (texts(&page), started.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut p = backend(&s);
        let text = format!("p{partition}");
        publish_text(&mut p, &at, &text);
        for w in waiters {
            let (got, waited) = w.join().unwrap();
            assert_eq!(got, [text.as_str()], "partition {partition}");
            assert!(
                waited < Duration::from_millis(6_000),
                "partition {partition}: {waited:?}"
            );
        }
    }
}
