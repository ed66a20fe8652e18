//! A TCP connection moves, once, to the shard owning the queue its first requests name
//! (`queue.connection_affinity`, `src/queue/server/affinity.rs`), carrying the bytes it had
//! read, its AUTH, PREFETCH and CONFIRM_SELECT; the shard that accepted it keeps its place
//! under the connection cap until it ends.
//!
//! The kernel picks the accepting shard, so each test opens enough connections that, with
//! two shards, some are accepted by the shard that does not own their queue: with moves
//! off, all of 8 landing on the owner by chance has odds of 1 in 256.

use crate::support::{http, HttpResponse, Server};
use boltq::queue::protocol::frame::{self, op, status};
use boltq_io::testutil::TempDir;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SHARDS: usize = 2;
const KEY: &str = "affinity-key";

/// A server with two shards, an API key, and `extra` appended to its config. Affinity is
/// on by default: unless `extra` says otherwise, the key is left out.
fn server(extra: &str) -> (Server, TempDir) {
    let dir = TempDir::new("affinity");
    let config = dir.path().join("boltq.toml");
    let toml = format!("[security]\napi_key = \"{KEY}\"\n{extra}");
    std::fs::write(&config, toml).unwrap();
    let s = Server::start(&["--config", config.to_str().unwrap()]);
    (s, dir)
}

/// A queue name whose slot the given shard owns.
fn queue_owned_by(shard: usize, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .find(|q| boltq_shards::owner_of_queue(q, SHARDS) == shard)
        .unwrap()
}

fn request(code: u8, body: &str) -> Vec<u8> {
    let mut f = Vec::new();
    frame::encode(code, body.as_bytes(), &mut f);
    f
}

fn publish(queue: &str, n: usize) -> Vec<u8> {
    request(
        op::PUBLISH,
        &format!("{{\"topic\":\"{queue}\",\"payload\":{{\"n\":{n}}}}}"),
    )
}

fn get(s: &Server, path: &str) -> HttpResponse {
    http(s.http_port, "GET", path, &[("X-API-Key", KEY)], b"")
}

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", s.tcp_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn read_reply(c: &mut TcpStream) -> (u8, Value) {
    let mut head = [0u8; 5];
    c.read_exact(&mut head).unwrap();
    let len = u32::from_le_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (head[0], value)
}

/// Shard of each open TCP connection, by the peer's local port.
fn shards_by_port(s: &Server) -> Vec<(u16, u64)> {
    let list = get(s, "/connections").json();
    list["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let peer = c["peer"].as_str().unwrap();
            let port = peer.rsplit(':').next().unwrap().parse().unwrap();
            (port, c["shard"].as_u64().unwrap())
        })
        .collect()
}

/// Writes AUTH, CONFIRM_SELECT and `publishes` PUBLISHes to `queue` in one write (so they
/// are read as one batch, the first the connection's move is decided on) and checks every
/// reply, in order: the move carried the unread bytes, the AUTH and the confirm mode.
fn authenticate_and_publish(c: &mut TcpStream, queue: &str, publishes: usize) {
    let mut batch = request(op::AUTH, &format!("{{\"api_key\":\"{KEY}\"}}"));
    batch.extend(request(op::CONFIRM_SELECT, ""));
    for n in 0..publishes {
        batch.extend(publish(queue, n));
    }
    c.write_all(&batch).unwrap();
    assert_eq!(read_reply(c).0, status::OK, "AUTH");
    assert_eq!(read_reply(c).0, status::OK, "CONFIRM_SELECT");
    for n in 0..publishes {
        let (code, body) = read_reply(c);
        assert_eq!(code, status::OK, "publish {n}: {body}");
        assert_eq!(body["topic"], queue, "{body}");
        assert_eq!(body["seq_no"], n as u64 + 1, "confirm mode carried: {body}");
    }
}

#[test]
fn connections_move_to_the_shard_owning_their_queue_with_what_they_sent() {
    let (s, _dir) = server("");
    let queues = [queue_owned_by(0, "home"), queue_owned_by(1, "home")];
    let mut conns = Vec::new();
    for i in 0..16 {
        let queue = &queues[i % SHARDS];
        let mut c = connect(&s);
        authenticate_and_publish(&mut c, queue, 25);
        conns.push((c, i % SHARDS));
    }
    let shards = shards_by_port(&s);
    for (c, owner) in &conns {
        let port = c.local_addr().unwrap().port();
        let shard = shards.iter().find(|(p, _)| *p == port).map(|(_, s)| *s);
        assert_eq!(
            shard,
            Some(*owner as u64),
            "the connection on port {port} is served by the owner of its queue: {shards:?}"
        );
    }
    // Nothing was lost or doubled on the way: each queue holds its 8 × 25 publishes.
    let stats = get(&s, "/stats").json();
    for q in &queues {
        assert_eq!(stats["Queues"][q], 200, "{q}: {stats}");
    }
}

#[test]
fn a_connection_that_moves_keeps_its_prefetch_window() {
    let (s, _dir) = server("");
    let queue = queue_owned_by(1, "window");
    let mut setup = connect(&s);
    authenticate_and_publish(&mut setup, &queue, 8);
    for _ in 0..8 {
        let mut c = connect(&s);
        // AUTH and PREFETCH alone decide nothing: no slot command yet.
        let mut first = request(op::AUTH, &format!("{{\"api_key\":\"{KEY}\"}}"));
        first.extend(request(op::PREFETCH, "{\"count\":1}"));
        c.write_all(&first).unwrap();
        assert_eq!(read_reply(&mut c).0, status::OK);
        assert_eq!(read_reply(&mut c).0, status::OK);
        // Two CONSUMEs in one write: the first takes the window's one place, the second is
        // refused by it on whichever shard serves them.
        let consume = request(op::CONSUME, &format!("{{\"topic\":\"{queue}\"}}"));
        c.write_all(&[consume.clone(), consume].concat()).unwrap();
        let (code, message) = read_reply(&mut c);
        assert_eq!(code, status::OK, "{message}");
        let (code, refused) = read_reply(&mut c);
        assert_eq!(code, status::ERROR, "{refused}");
        assert!(
            refused.to_string().contains("prefetch limit reached"),
            "{refused}"
        );
        let ack = format!("{{\"id\":{}}}", message["id"]);
        c.write_all(&request(op::ACK, &ack)).unwrap();
        let (code, acked) = read_reply(&mut c);
        assert_eq!(code, status::OK, "{acked}");
    }
    assert_eq!(get(&s, "/stats").json()["Queues"][&queue], 0);
}

/// With a cap of four connections (two per shard), twenty connections in turn, each
/// moving half the time: the accepting shard keeps a moved connection's place while it
/// lives and gets it back when it ends, so none of the twenty is refused.
#[test]
fn a_moved_connection_gives_its_place_back_when_it_ends() {
    let (s, _dir) = server("[server]\ntcp_connections_max = 4\n");
    let queue = queue_owned_by(1, "cap");
    for round in 0..20 {
        let mut c = connect(&s);
        authenticate_and_publish(&mut c, &queue, 1);
        drop(c);
        wait_for(|| get(&s, "/connections").json()["count"] == 0);
        let _ = round;
    }
    let metrics = get(&s, "/metrics").body;
    assert_eq!(crate::support::refused_connections(&metrics, "tcp"), 0);
}

#[test]
fn with_affinity_off_connections_stay_where_they_were_accepted() {
    let (s, _dir) = server("[queue]\nconnection_affinity = false\n");
    let queue = queue_owned_by(1, "stay");
    let conns: Vec<TcpStream> = (0..16)
        .map(|_| {
            let mut c = connect(&s);
            authenticate_and_publish(&mut c, &queue, 1);
            c
        })
        .collect();
    let shards = shards_by_port(&s);
    assert_eq!(shards.len(), conns.len(), "{shards:?}");
    assert!(
        shards.iter().any(|(_, shard)| *shard == 0),
        "16 connections all accepted by shard 1 (odds 1 in 65,536), or moved: {shards:?}"
    );
}

fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}
