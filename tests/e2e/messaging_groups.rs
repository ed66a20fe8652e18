//! Group conversations end to end: the real binary, real WebSockets through
//! `boltq::client::gateway::GatewayClient`, and a membership service run inside each test
//! (a tiny HTTP server answering `/is-member` and `/members` from a shared table,
//! spec/messaging-edge.md §5). Each test starts its own server and its own service.
//!
//! The service's answers are not cached by the server in these tests
//! (`membership_cache_ttl = "-1s"`), so a change to the table or an outage shows at once.

use crate::support::gateway::{connect, SECRET};

use crate::support::stub::StubServer;
use crate::support::Server;
use boltq::client::gateway::{payload_text, send_frame, GatewayClient};
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const GROUP: &str = "team";
const GROUP_TOPIC: &str = "chat.group.team";
/// Bound on waiting for records that must come.
const WAIT: Duration = Duration::from_secs(10);

// ---- the membership service ------------------------------------------------------------

/// What the in-test membership service answers.
#[derive(Default)]
struct Table {
    /// group → members.
    groups: HashMap<String, Vec<String>>,
    /// Answer every request with 500.
    failing: bool,
}

/// The operator's membership service, played by the test: one std thread accepting on
/// 127.0.0.1:0, one short-lived thread per connection, `Connection: close` on every answer.
struct MembershipService {
    table: Arc<Mutex<Table>>,
    stub: StubServer,
}

impl MembershipService {
    fn start(group: &str, members: &[&str]) -> MembershipService {
        let mut table = Table::default();
        table.groups.insert(
            group.to_string(),
            members.iter().map(|m| m.to_string()).collect(),
        );
        let table = Arc::new(Mutex::new(table));
        let t = Arc::clone(&table);
        MembershipService {
            table,
            stub: StubServer::start("membership service", move |conn| serve(conn, &t)),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.stub.port)
    }

    fn set_failing(&self, failing: bool) {
        self.table.lock().unwrap().failing = failing;
    }

    /// Closes the listener: from now on connecting is refused.
    fn stop(&mut self) {
        self.stub.stop();
    }
}

/// Answers one GET and closes.
fn serve(mut conn: TcpStream, table: &Mutex<Table>) {
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
    let (status, body) = answer(target, &table.lock().unwrap());
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes());
}

fn answer(target: &str, table: &Table) -> (u16, String) {
    if table.failing {
        return (500, r#"{"error":"down"}"#.to_string());
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params: HashMap<String, String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect();
    let param = |k: &str| params.get(k).cloned().unwrap_or_default();
    let members = table
        .groups
        .get(&param("group"))
        .cloned()
        .unwrap_or_default();
    match path {
        "/is-member" => {
            let member = members.contains(&param("user"));
            (200, json!({ "member": member }).to_string())
        }
        "/members" => (200, json!({ "members": members }).to_string()),
        _ => (404, "{}".to_string()),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---- the server and its clients --------------------------------------------------------

/// A server with the messaging plane on, the given membership service and no membership
/// cache. The temporary directory holding the config lives as long as the server.
fn start(service: &MembershipService) -> (Server, TempDir) {
    let tmp = TempDir::new("groups");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             membership_cache_ttl = \"-1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\n\
             [messaging.chat]\nmembership_url = \"{}\"\n",
            service.url()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    (server, tmp)
}

fn subscribe(c: &mut GatewayClient, topic: &str) {
    let ack = c
        .request(json!({"op": "subscribe", "topic": topic}))
        .unwrap();
    assert_eq!(ack["op"], "ack", "subscribe {topic}: {ack}");
}

/// The error code of a reply, or "" when it is not an error.
fn error_code(reply: &Value) -> String {
    match reply["op"].as_str() {
        Some("error") => reply["error"]["code"].as_str().unwrap_or("?").to_string(),
        _ => String::new(),
    }
}

/// What a `sent` reply says about one message.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    sender: String,
    text: String,
    message_id: String,
    partition: u64,
    seq: u64,
}

fn send_group(c: &mut GatewayClient, sender: &str, text: &str) -> Sent {
    let reply = c.send_text(GROUP, "group", "", text).unwrap();
    sent_of(&reply, sender, text)
}

fn sent_of(reply: &Value, sender: &str, text: &str) -> Sent {
    assert_eq!(reply["op"], "sent", "send of {text:?} by {sender}: {reply}");
    let s = &reply["sent"];
    assert_eq!(s["topic"], GROUP_TOPIC, "{reply}");
    Sent {
        sender: sender.to_string(),
        text: text.to_string(),
        message_id: s["message_id"].as_str().unwrap().to_string(),
        partition: s["partition"].as_u64().unwrap(),
        seq: s["seq"].as_u64().unwrap(),
    }
}

fn seqs(records: &[Value]) -> Vec<u64> {
    records.iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

fn header<'a>(record: &'a Value, name: &str) -> &'a str {
    record["headers"][name].as_str().unwrap_or("")
}

/// Every page of `history` on `topic` from seq 1, `limit` records a page, paginating with
/// `from_seq = last + 1` until an empty page; returns the pages.
fn history_pages(c: &mut GatewayClient, topic: &str, limit: u64) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut from = 1;
    loop {
        assert!(pages.len() < 1000, "history never ends");
        let page = c
            .request(json!({"op": "history", "topic": topic, "from_seq": from, "limit": limit}))
            .unwrap();
        assert_eq!(page["op"], "record", "history from {from}: {page}");
        let records = page["records"].as_array().cloned().unwrap_or_default();
        let Some(last) = records.last() else {
            return pages;
        };
        from = last["seq"].as_u64().unwrap() + 1;
        pages.push(records);
    }
}

const FIVE: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];

/// One device per member, two for erin.
const DEVICES: [(&str, &str); 6] = [
    ("alice", "a-phone"),
    ("bob", "b-phone"),
    ("carol", "c-phone"),
    ("dave", "d-phone"),
    ("erin", "e-phone"),
    ("erin", "e-laptop"),
];

/// Rounds of sends by alice, bob and carol (devices 0, 1, 2), one message each per round,
/// each send answered before the next: the sends' order is the conversation's order.
fn send_rounds(devices: &mut [GatewayClient], rounds: usize) -> Vec<Sent> {
    let mut sent = Vec::new();
    for round in 0..rounds {
        for (i, device) in devices.iter_mut().enumerate().take(3) {
            let sender = DEVICES[i].0;
            sent.push(send_group(
                device,
                sender,
                &format!("{sender} says {round}"),
            ));
        }
    }
    sent
}

// ---- tests -----------------------------------------------------------------------------

#[test]
fn every_device_of_a_group_of_five_gets_every_message_in_one_gap_free_order() {
    const PER_SENDER: usize = 8;
    let service = MembershipService::start(GROUP, &FIVE);
    let (s, _tmp) = start(&service);
    let mut devices: Vec<GatewayClient> = DEVICES.iter().map(|(u, d)| connect(&s, u, d)).collect();
    for d in &mut devices {
        subscribe(d, GROUP_TOPIC);
    }
    // Three senders at once, each on its own connection and thread (the server's shards
    // take them in whatever order they arrive); the log decides one order for everyone.
    let mut sent: Vec<Sent> = std::thread::scope(|scope| {
        let senders: Vec<_> = devices
            .iter_mut()
            .zip(DEVICES)
            .take(3)
            .map(|(d, (user, _))| {
                scope.spawn(move || {
                    (0..PER_SENDER)
                        .map(|i| send_group(d, user, &format!("{user} says {i}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        senders
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    sent.sort_by_key(|m| m.seq);
    let expected_seqs: Vec<u64> = (1..=sent.len() as u64).collect();
    assert_eq!(
        sent.iter().map(|m| m.seq).collect::<Vec<_>>(),
        expected_seqs,
        "every send got its own seq, none skipped"
    );
    for (d, (user, device)) in devices.iter_mut().zip(DEVICES) {
        let got = d
            .records(GROUP_TOPIC, sent.len(), WAIT)
            .unwrap_or_else(|e| panic!("{user}/{device}: {e}\nserver log:\n{}", s.log()));
        assert_eq!(
            seqs(&got),
            expected_seqs,
            "{user}/{device}: gap-free, in order"
        );
        for (r, m) in got.iter().zip(&sent) {
            assert_eq!(header(r, "message_id"), m.message_id, "{user}/{device}");
            assert_eq!(header(r, "sender"), m.sender, "{user}/{device}");
            assert_eq!(header(r, "kind"), "group", "{user}/{device}");
            assert_eq!(header(r, "conversation"), GROUP, "{user}/{device}");
            assert_eq!(payload_text(r), m.text, "{user}/{device}");
            assert_eq!(
                r["partition"].as_u64(),
                Some(m.partition),
                "{user}/{device}"
            );
        }
    }
}

#[test]
fn each_members_inbox_gets_one_payload_free_pointer_per_message() {
    let service = MembershipService::start(GROUP, &FIVE);
    let (s, _tmp) = start(&service);
    let mut devices: Vec<GatewayClient> = DEVICES.iter().map(|(u, d)| connect(&s, u, d)).collect();
    for (d, (user, _)) in devices.iter_mut().zip(DEVICES) {
        subscribe(d, &format!("chat.inbox.{user}"));
    }
    let sent = send_rounds(&mut devices, 3);
    let by_seq: HashMap<u64, &Sent> = sent.iter().map(|m| (m.seq, m)).collect();
    for (d, (user, device)) in devices.iter_mut().zip(DEVICES) {
        let inbox = format!("chat.inbox.{user}");
        let got = d
            .records(&inbox, sent.len(), WAIT)
            .unwrap_or_else(|e| panic!("{user}/{device}: {e}\nserver log:\n{}", s.log()));
        let inbox_seqs = seqs(&got);
        let first = inbox_seqs[0];
        let consecutive: Vec<u64> = (first..first + got.len() as u64).collect();
        assert_eq!(inbox_seqs, consecutive, "{inbox}: gap-free");
        let mut pointed = BTreeSet::new();
        for p in &got {
            assert!(
                p.get("payload").is_none(),
                "{inbox}: a pointer carries no payload: {p}"
            );
            assert_eq!(header(p, "pointer"), "1", "{inbox}: {p}");
            assert_eq!(header(p, "kind"), "group", "{inbox}: {p}");
            assert_eq!(header(p, "conversation"), GROUP, "{inbox}: {p}");
            let conv_seq: u64 = header(p, "conv_seq").parse().expect("conv_seq is decimal");
            let m = by_seq
                .get(&conv_seq)
                .unwrap_or_else(|| panic!("{inbox}: pointer to no message: {p}"));
            assert_eq!(header(p, "message_id"), m.message_id, "{inbox}: {p}");
            assert_eq!(header(p, "sender"), m.sender, "{inbox}: {p}");
            assert_eq!(
                header(p, "conv_partition"),
                m.partition.to_string(),
                "{inbox}: {p}"
            );
            assert!(
                pointed.insert(conv_seq),
                "{inbox}: two pointers to {conv_seq}"
            );
        }
        assert_eq!(
            pointed.len(),
            sent.len(),
            "{inbox}: one pointer per message"
        );
        // Nothing more was written than what arrived live: the inbox holds one pointer per
        // message, not more.
        let stored: usize = history_pages(d, &inbox, 200).iter().map(Vec::len).sum();
        assert_eq!(stored, sent.len(), "{inbox}: pointers stored");
    }
}

#[test]
fn a_user_the_service_does_not_list_is_forbidden_the_group() {
    let service = MembershipService::start(GROUP, &["alice", "bob"]);
    let (s, _tmp) = start(&service);
    let mut alice = connect(&s, "alice", "a-phone");
    let ok = send_group(&mut alice, "alice", "members only");
    let mut mallory = connect(&s, "mallory", "m-phone");
    let attempts = [
        json!({"op": "subscribe", "topic": GROUP_TOPIC}),
        json!({"op": "history", "topic": GROUP_TOPIC}),
        send_frame(GROUP, "group", "", "let me in"),
        send_frame(GROUP, "group", "m-1", "let me in"),
    ];
    for frame in attempts {
        let reply = mallory.request(frame.clone()).unwrap();
        assert_eq!(error_code(&reply), "forbidden", "{frame} → {reply}");
    }
    // Her sends wrote nothing: the group holds alice's message only.
    let pages = history_pages(&mut alice, GROUP_TOPIC, 200);
    let all: Vec<Value> = pages.into_iter().flatten().collect();
    assert_eq!(seqs(&all), [ok.seq], "{all:?}");
    assert_eq!(header(&all[0], "sender"), "alice");
}

#[test]
fn a_membership_service_outage_denies_and_recovery_allows_again() {
    let mut service = MembershipService::start(GROUP, &["alice", "bob"]);
    let (s, _tmp) = start(&service);
    let mut alice = connect(&s, "alice", "a-phone");
    subscribe(&mut alice, GROUP_TOPIC);
    send_group(&mut alice, "alice", "before");
    let ops = || {
        [
            json!({"op": "subscribe", "topic": GROUP_TOPIC}),
            json!({"op": "history", "topic": GROUP_TOPIC}),
            send_frame(GROUP, "group", "", "during the outage"),
        ]
    };
    // The service answers 500.
    service.set_failing(true);
    for frame in ops() {
        let reply = alice.request(frame.clone()).unwrap();
        assert_eq!(error_code(&reply), "forbidden", "500: {frame} → {reply}");
    }
    // Back: allowed again at once (nothing cached, the denial was not remembered).
    service.set_failing(false);
    let after = send_group(&mut alice, "alice", "after");
    assert_eq!(after.seq, 2, "the denied send wrote nothing");
    // The live subscription saw exactly the two allowed messages. Waited for before the
    // service goes: a delivery looks at access again once `acl_recheck` (1 s here) has
    // passed, and on a busy machine "after" could be delivered only once the service was
    // gone, and be refused then (as a revoked member's would be).
    let live = alice.records(GROUP_TOPIC, 2, WAIT).unwrap();
    assert_eq!(seqs(&live), [1, 2]);
    assert_eq!(payload_text(&live[1]), "after");
    // The service is gone: connections are refused.
    service.stop();
    for frame in ops() {
        let reply = alice.request(frame.clone()).unwrap();
        assert_eq!(
            error_code(&reply),
            "forbidden",
            "refused: {frame} → {reply}"
        );
    }
}

#[test]
fn history_pages_follow_each_other_losing_and_repeating_nothing() {
    let service = MembershipService::start(GROUP, &["alice", "bob"]);
    let (s, _tmp) = start(&service);
    let mut alice = connect(&s, "alice", "a-phone");
    let texts: Vec<String> = (0..23).map(|i| format!("message {i}")).collect();
    for t in &texts {
        send_group(&mut alice, "alice", t);
    }
    let mut bob = connect(&s, "bob", "b-phone");
    let pages = history_pages(&mut bob, GROUP_TOPIC, 5);
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(
        sizes,
        [5, 5, 5, 5, 3],
        "limit 5 gives full pages until the end"
    );
    let all: Vec<Value> = pages.into_iter().flatten().collect();
    assert_eq!(seqs(&all), (1..=23).collect::<Vec<u64>>());
    let got: Vec<String> = all.iter().map(payload_text).collect();
    assert_eq!(got, texts);
    // A page from the middle answers exactly that window, with the partition's bounds.
    let page = bob
        .request(json!({"op": "history", "topic": GROUP_TOPIC, "from_seq": 7, "limit": 4}))
        .unwrap();
    let records = page["records"].as_array().unwrap();
    assert_eq!(seqs(records), [7, 8, 9, 10], "{page}");
    assert_eq!(page["first_seq"], 1, "{page}");
    assert_eq!(page["next_seq"], 24, "{page}");
}

#[test]
fn thirty_pipelined_sends_get_thirty_distinct_consecutive_seqs() {
    const SENDS: usize = 30;
    let service = MembershipService::start(GROUP, &["alice", "bob"]);
    let (s, _tmp) = start(&service);
    let mut alice = connect(&s, "alice", "a-phone");
    // Subscribed as well, so live records interleave with the replies.
    subscribe(&mut alice, GROUP_TOPIC);
    let ids: Vec<String> = (0..SENDS)
        .map(|i| {
            let frame = send_frame(GROUP, "group", &format!("p-{i}"), &format!("piped {i}"));
            alice.submit(frame).unwrap()
        })
        .collect();
    let mut got = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let reply = alice
            .reply(id)
            .unwrap_or_else(|e| panic!("reply {i}: {e}\nserver log:\n{}", s.log()));
        let m = sent_of(&reply, "alice", &format!("piped {i}"));
        assert_eq!(reply["sent"]["client_msg_id"], format!("p-{i}"), "{reply}");
        assert!(reply["sent"].get("duplicate").is_none(), "{reply}");
        got.push(m);
    }
    let seqs_sent: Vec<u64> = got.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs_sent,
        (1..=SENDS as u64).collect::<Vec<u64>>(),
        "one connection's requests are handled in arrival order"
    );
    let ids: BTreeSet<&str> = got.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids.len(), SENDS, "distinct message ids");
    let live = alice.records(GROUP_TOPIC, SENDS, WAIT).unwrap();
    assert_eq!(
        seqs(&live),
        seqs_sent,
        "the live stream has them all, in order"
    );
    let stored: Vec<Value> = history_pages(&mut alice, GROUP_TOPIC, 200)
        .into_iter()
        .flatten()
        .collect();
    let texts: Vec<String> = stored.iter().map(payload_text).collect();
    let expected: Vec<String> = (0..SENDS).map(|i| format!("piped {i}")).collect();
    assert_eq!(texts, expected, "stored once each, in order");
}

/// A member removed from the group stops receiving on a live subscription within the
/// re-check interval (1 s here: the membership cache is off) and is told why.
#[test]
fn a_removed_member_stops_receiving_on_a_live_subscription() {
    let service = MembershipService::start(GROUP, &["alice", "bob"]);
    let (s, _tmp) = start(&service);
    let mut alice = connect(&s, "alice", "a-phone");
    let mut bob = connect(&s, "bob", "b-phone");
    subscribe(&mut bob, GROUP_TOPIC);
    let first = send_group(&mut alice, "alice", "before");
    let got = bob
        .records(GROUP_TOPIC, 1, std::time::Duration::from_secs(10))
        .unwrap();
    assert_eq!(seqs(&got), [first.seq]);
    service
        .table
        .lock()
        .unwrap()
        .groups
        .get_mut(GROUP)
        .unwrap()
        .retain(|m| m != "bob");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    send_group(&mut alice, "alice", "after");
    // bob gets a forbidden error for the subscription, and never the second message.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut ended = false;
    while !ended && std::time::Instant::now() < deadline {
        let _ = bob.request(json!({"op": "ping"}));
        for f in bob.take_pending(|_| true) {
            assert_ne!(f["op"], "record", "bob received after removal: {f}");
            ended |= error_code(&f) == "forbidden";
        }
    }
    assert!(ended, "bob was not told the subscription ended");
}
