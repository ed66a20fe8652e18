//! Clients that hold the server's resources without doing their part (issue 17), against the
//! real binary: a TCP client that begins a frame and never completes it, one that never
//! authenticates when a key is required. Each is disconnected after its deadline
//! (`server.read_timeout`, `server.auth_timeout`, shortened here) while a well-behaved
//! client keeps being answered, and a connection that is merely idle is never closed.
//! Connections past `server.tcp_connections_max` are closed at once and counted, and
//! subscriptions past `queue.subscriptions_per_connection_max` are refused.

use crate::support::Server;
use boltq::queue::protocol::frame::{op, status};
use boltq_io::testutil::TempDir;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The deadlines the tests set (short, so the tests are quick).
const READ_TIMEOUT: Duration = Duration::from_millis(800);
const AUTH_TIMEOUT: Duration = Duration::from_millis(800);
/// How long past its deadline a cut-off may take on a loaded machine.
const CUTOFF_SLACK: Duration = Duration::from_secs(5);
const KEY: &str = "hostile-test-key";

fn server(with_key: bool) -> (Server, TempDir) {
    let dir = TempDir::new("hostile-cfg");
    let config = dir.path().join("boltq.toml");
    let security = if with_key {
        format!("[security]\napi_key = \"{KEY}\"\n")
    } else {
        String::new()
    };
    std::fs::write(
        &config,
        format!(
            "[server]\nread_timeout = \"{}ms\"\nauth_timeout = \"{}ms\"\n{security}",
            READ_TIMEOUT.as_millis(),
            AUTH_TIMEOUT.as_millis()
        ),
    )
    .unwrap();
    (Server::start(&["--config", config.to_str().unwrap()]), dir)
}

fn frame(code: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![code];
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", s.tcp_port)).unwrap();
    c.set_nodelay(true).unwrap();
    c
}

/// One request, its reply's status and payload.
fn call(c: &mut TcpStream, code: u8, payload: &[u8]) -> (u8, Vec<u8>) {
    c.write_all(&frame(code, payload)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 5];
    c.read_exact(&mut head).unwrap();
    let len = u32::from_le_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    (head[0], body)
}

fn ping(c: &mut TcpStream) {
    let (code, body) = call(c, op::PING, b"");
    assert_eq!(code, status::OK, "{}", String::from_utf8_lossy(&body));
}

/// Waits until the server closes `c` (EOF or reset), pinging on `good` meanwhile; returns
/// when it closed, measured from `since`. Panics if it stays open past `limit`.
fn closed_within(
    c: &mut TcpStream,
    good: &mut TcpStream,
    since: Instant,
    limit: Duration,
) -> Duration {
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 64];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return since.elapsed(),
            Ok(n) => panic!("the server sent {n} bytes to a client that owes it a frame"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return since.elapsed(),
        }
        assert!(
            since.elapsed() < limit,
            "still open {:?} after it stopped sending",
            since.elapsed()
        );
        // Everyone else is served meanwhile.
        ping(good);
    }
}

#[test]
fn a_half_sent_frame_is_cut_off_after_the_read_timeout_while_others_are_served() {
    let (s, _dir) = server(false);
    let mut good = connect(&s);
    let mut slow = connect(&s);
    // A frame that declares 4 MiB, then 10 bytes of it, then silence.
    let mut head = vec![op::PUBLISH];
    head.extend_from_slice(&(4u32 * 1024 * 1024).to_le_bytes());
    head.extend_from_slice(b"{\"topic\":\"");
    slow.write_all(&head).unwrap();
    let sent = Instant::now();
    let took = closed_within(&mut slow, &mut good, sent, READ_TIMEOUT + CUTOFF_SLACK);
    assert!(
        took >= READ_TIMEOUT - Duration::from_millis(50),
        "closed after {took:?}, before the {READ_TIMEOUT:?} it had"
    );
    ping(&mut good);
}

#[test]
fn a_frame_sent_slowly_but_within_the_read_timeout_is_answered() {
    let (s, _dir) = server(false);
    let mut c = connect(&s);
    let whole = frame(op::PING, b"");
    for byte in &whole {
        c.write_all(std::slice::from_ref(byte)).unwrap();
        std::thread::sleep(READ_TIMEOUT / 10);
    }
    let mut head = [0u8; 5];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.read_exact(&mut head).unwrap();
    assert_eq!(head[0], status::OK);
}

#[test]
fn an_idle_connection_outlives_both_deadlines() {
    let (s, _dir) = server(false);
    let mut c = connect(&s);
    ping(&mut c);
    std::thread::sleep(READ_TIMEOUT + AUTH_TIMEOUT + Duration::from_millis(400));
    ping(&mut c);
}

#[test]
fn a_client_that_never_authenticates_is_cut_off_and_one_that_did_stays() {
    let (s, _dir) = server(true);
    let mut good = connect(&s);
    let auth = format!(r#"{{"api_key":"{KEY}"}}"#);
    let (code, body) = call(&mut good, op::AUTH, auth.as_bytes());
    assert_eq!(code, status::OK, "{}", String::from_utf8_lossy(&body));
    let connected = Instant::now();
    let mut silent = connect(&s);
    let took = closed_within(
        &mut silent,
        &mut good,
        connected,
        AUTH_TIMEOUT + CUTOFF_SLACK,
    );
    assert!(
        took >= AUTH_TIMEOUT - Duration::from_millis(50),
        "closed after {took:?}, before the {AUTH_TIMEOUT:?} it had"
    );
    // The authenticated one is past the auth deadline and still served.
    std::thread::sleep(AUTH_TIMEOUT);
    ping(&mut good);
}

/// Whether the server answers a PING on `c` (false: it closed the connection).
fn answers(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if c.write_all(&frame(op::PING, b"")).is_err() {
        return false;
    }
    let mut head = [0u8; 5];
    c.read_exact(&mut head).is_ok() && head[0] == status::OK
}

#[test]
fn connections_past_the_cap_are_closed_counted_and_room_comes_back() {
    let dir = TempDir::new("hostile-cap");
    let config = dir.path().join("boltq.toml");
    // Two shards (the test server's default): two connections each.
    std::fs::write(&config, "[server]\ntcp_connections_max = 4\n").unwrap();
    let s = Server::start(&["--config", config.to_str().unwrap()]);
    let mut conns: Vec<TcpStream> = (0..10).map(|_| connect(&s)).collect();
    let answered = conns.iter_mut().map(answers).filter(|ok| *ok).count();
    // Each shard holds at most its two; which shard the kernel gives a connection to is
    // its choice, so at least one shard filled up.
    assert!(
        (2..=4).contains(&answered),
        "{answered} of 10 connections answered with a cap of 4"
    );
    let metrics = crate::support::get(&s, "/metrics").body;
    let refused = crate::support::refused_connections(&metrics, "tcp");
    assert_eq!(refused, 10 - answered as u64);
    // The places come back once their connections close.
    drop(conns);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again: Vec<TcpStream> = (0..2).map(|_| connect(&s)).collect();
        if again.iter_mut().all(answers) {
            break;
        }
        assert!(Instant::now() < deadline, "no room after the others closed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn http_connections_past_the_cap_are_closed_and_counted() {
    let dir = TempDir::new("hostile-http-cap");
    let config = dir.path().join("boltq.toml");
    // Two shards (the test server's default): two connections each.
    std::fs::write(&config, "[server]\nhttp_connections_max = 4\n").unwrap();
    let s = Server::start(&["--config", config.to_str().unwrap()]);
    let mut conns: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(("127.0.0.1", s.http_port)).unwrap())
        .collect();
    let answered = conns
        .iter_mut()
        .map(|c| crate::support::answers_get(c, "/health"))
        .filter(|ok| *ok)
        .count();
    assert!(
        (2..=4).contains(&answered),
        "{answered} of 10 HTTP connections answered with a cap of 4"
    );
    drop(conns);
    // Room comes back as they close; then the refusals are in /metrics.
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let r = crate::support::http(s.http_port, "GET", "/metrics", &[], b"");
        if r.status == 200 {
            break r.body;
        }
        assert!(Instant::now() < deadline, "no room after the others closed");
        std::thread::sleep(Duration::from_millis(50));
    };
    let refused = crate::support::refused_connections(&metrics, "http");
    assert!(
        refused >= 10 - answered as u64,
        "{refused} refused, {answered} answered"
    );
}

#[test]
fn subscriptions_past_the_per_connection_cap_are_refused_with_an_error_naming_the_key() {
    let dir = TempDir::new("hostile-subs");
    let config = dir.path().join("boltq.toml");
    std::fs::write(&config, "[queue]\nsubscriptions_per_connection_max = 3\n").unwrap();
    let s = Server::start(&["--config", config.to_str().unwrap()]);
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    let mut c = boltq::client::Client::connect(&addr, Default::default()).unwrap();
    for topic in ["t1", "t2", "t3"] {
        c.subscribe(topic, "me", false).unwrap();
    }
    // A re-subscribe of a pair it holds is not a new one.
    c.subscribe("t2", "me", false).unwrap();
    let refused = c.subscribe("t4", "me", false).unwrap_err().to_string();
    assert!(
        refused.contains("too many subscriptions on this connection (limit 3")
            && refused.contains("queue.subscriptions_per_connection_max"),
        "{refused}"
    );
    // The connection itself carries on, and the cap is per connection.
    c.ping().unwrap();
    let mut other = boltq::client::Client::connect(&addr, Default::default()).unwrap();
    other.subscribe("t4", "other", false).unwrap();
}

/// Reads one reply frame off `c`: its status and payload.
fn read_reply(c: &mut TcpStream) -> (u8, Vec<u8>) {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 5];
    c.read_exact(&mut head).unwrap();
    let len = u32::from_le_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    (head[0], body)
}

/// A pipelined batch's large replies are written as they are ready, not held until the
/// whole batch is answered (`REPLY_BUFFER_BYTES_MAX`). The batch is a CONSUME of a ~1 MiB
/// message followed by a long-poll on an empty queue; the test publishes to that queue only
/// once it has read the first reply. Were replies held for the batch, the first would come
/// only after the long-poll ran out, and the second would be EMPTY.
#[test]
fn a_batchs_large_replies_are_written_before_the_rest_of_the_batch_is_answered() {
    let (s, _dir) = server(false);
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    let mut publisher = boltq::client::Client::connect(&addr, Default::default()).unwrap();
    let big = format!("\"{}\"", "x".repeat(1 << 20));
    publisher
        .publish("reply-big", &big, None, Default::default())
        .unwrap();

    let mut c = connect(&s);
    let mut batch = frame(op::CONSUME, br#"{"topic":"reply-big"}"#);
    batch.extend(frame(
        op::CONSUME,
        br#"{"topic":"reply-later","wait_ms":20000}"#,
    ));
    c.write_all(&batch).unwrap();
    let (code, body) = read_reply(&mut c);
    assert_eq!(code, status::OK, "{}", String::from_utf8_lossy(&body));
    assert!(
        body.len() > 1 << 20,
        "the first reply carries the large message"
    );

    publisher
        .publish("reply-later", "\"second\"", None, Default::default())
        .unwrap();
    let (code, body) = read_reply(&mut c);
    assert_eq!(
        code,
        status::OK,
        "the long-poll got the message published after the first reply"
    );
    assert!(String::from_utf8_lossy(&body).contains("second"));
}

/// A queue-name flood meets `queue.queues_per_slot_max`: publishes that would create a queue
/// past it are refused with an error naming the key (counted in
/// `boltq_queues_refused_total`), a CONSUME of such a name answers EMPTY, and every
/// accepted queue keeps its message across a kill -9 and a restart with the limit lowered
/// (replay does not refuse what was accepted once).
#[test]
fn queues_past_the_per_slot_cap_are_refused_and_a_lowered_cap_keeps_what_was_accepted() {
    let dir = TempDir::new("hostile-queues");
    let config = dir.path().join("boltq.toml");
    std::fs::write(&config, "[queue]\nqueues_per_slot_max = 2\n").unwrap();
    let s = Server::start_restartable(&["--config", config.to_str().unwrap()]);
    let addr = format!("127.0.0.1:{}", s.tcp_port);
    let mut c = boltq::client::Client::connect(&addr, Default::default()).unwrap();
    let (mut accepted, mut refused) = (Vec::new(), Vec::new());
    // 600 names over 256 slots: every slot is asked for more than two.
    for n in 0..600 {
        let queue = format!("flood-{n}");
        match c.publish(&queue, &n.to_string(), None, Default::default()) {
            Ok(_) => accepted.push((queue, n)),
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("queue.queues_per_slot_max"), "{e}");
                refused.push(queue);
            }
        }
    }
    assert!(accepted.len() <= 2 * 256, "{} accepted", accepted.len());
    assert!(!refused.is_empty());
    assert_eq!(c.consume(&refused[0]).unwrap(), None);
    let metrics = crate::support::get(&s, "/metrics").body;
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("boltq_queues_refused_total "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no boltq_queues_refused_total in:\n{metrics}"));
    assert_eq!(
        counted,
        refused.len() as u64 + 1,
        "the refused CONSUME counts too"
    );

    std::fs::write(&config, "[queue]\nqueues_per_slot_max = 1\n").unwrap();
    let (s, _) = s.restart_when_ports_free(libc::SIGKILL);
    let mut c =
        boltq::client::Client::connect(&format!("127.0.0.1:{}", s.tcp_port), Default::default())
            .unwrap();
    for (queue, n) in &accepted {
        let m = c
            .consume(queue)
            .unwrap()
            .unwrap_or_else(|| panic!("{queue} lost its message over the restart"));
        assert_eq!(m.payload_json, n.to_string());
    }
}

/// The value of counter `name` on the server's `/metrics`.
fn counter(s: &Server, name: &str) -> u64 {
    let metrics = crate::support::get(s, "/metrics").body;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
}

/// The queue names STATS lists.
fn queue_names(c: &mut boltq::client::Client) -> Vec<String> {
    let stats = c.stats().unwrap();
    stats["Queues"]
        .as_object()
        .expect("STATS lists Queues")
        .keys()
        .cloned()
        .collect()
}

/// Issue 17: the queues a flood of CONSUMEs of new names created are forgotten once idle
/// (`queue.idle_queue_ttl`, 1 s here) and counted in `boltq_queues_forgotten_total`, while
/// a queue holding a message stays; a forgotten name is created again, empty, by its next
/// CONSUME; and after a kill -9 and a restart the log reproduces exactly that (the creating
/// CONSUMEs and the forgetting ticks are logged).
#[test]
fn queues_a_consume_flood_created_are_forgotten_once_idle_and_a_busy_one_stays() {
    const NAMES: usize = 3_000;
    let dir = TempDir::new("hostile-idle-queues");
    let config = dir.path().join("boltq.toml");
    std::fs::write(
        &config,
        "[queue]\nidle_queue_ttl = \"1s\"\nqueues_per_slot_max = 65536\n",
    )
    .unwrap();
    let s = Server::start_restartable(&["--config", config.to_str().unwrap()]);
    let mut c =
        boltq::client::Client::connect(&format!("127.0.0.1:{}", s.tcp_port), Default::default())
            .unwrap();
    c.publish("keep", "1", None, Default::default()).unwrap();
    for n in 0..NAMES {
        assert_eq!(c.consume(&format!("poll-{n}")).unwrap(), None);
    }
    let last = format!("poll-{}", NAMES - 1);
    assert!(
        queue_names(&mut c).contains(&last),
        "a CONSUME creates its queue"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while queue_names(&mut c) != ["keep"] {
        assert!(
            Instant::now() < deadline,
            "{} queues left",
            queue_names(&mut c).len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(counter(&s, "boltq_queues_forgotten_total"), NAMES as u64);
    assert_eq!(c.consume("poll-7").unwrap(), None);
    let mut names = queue_names(&mut c);
    names.sort();
    assert_eq!(names, ["keep", "poll-7"]);

    let (s, _) = s.restart_when_ports_free(libc::SIGKILL);
    let mut c =
        boltq::client::Client::connect(&format!("127.0.0.1:{}", s.tcp_port), Default::default())
            .unwrap();
    // The forgotten names stay forgotten; "poll-7" too, once its own TTL has passed
    // (a slow restart may take longer than that).
    let names = queue_names(&mut c);
    assert!(names.contains(&"keep".to_string()), "{names:?}");
    assert!(
        names.iter().all(|n| n == "keep" || n == "poll-7"),
        "the log reproduces what was forgotten: {names:?}"
    );
    let kept = c
        .consume("keep")
        .unwrap()
        .expect("the busy queue's message");
    assert_eq!(kept.payload_json, "1");
}
