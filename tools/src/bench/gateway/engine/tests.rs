//! Scripted misbehaving gateways against one worker.

use super::*;
use crate::bench::gateway::proto::{self, Stamp, StampKind};
use crate::bench::gateway::ws::{self, opcode};
use crate::bench::stats::Op;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The server side of one WebSocket connection, for scripting a misbehaving gateway.
struct FakeConn {
    s: TcpStream,
}

impl FakeConn {
    /// Accepts one connection on `l` and answers its upgrade.
    fn accept(l: &TcpListener) -> FakeConn {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        let text = String::from_utf8(head).unwrap();
        let key = text
            .lines()
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .unwrap();
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
            ws::accept_for(key)
        );
        s.write_all(answer.as_bytes()).unwrap();
        FakeConn { s }
    }

    /// Reads one (masked) client frame as JSON.
    fn read(&mut self) -> Value {
        let mut h = [0u8; 2];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(h[1] & 0x80, 0x80, "client frames are masked");
        let len = match h[1] & 0x7F {
            126 => {
                let mut b = [0u8; 2];
                self.s.read_exact(&mut b).unwrap();
                u16::from_be_bytes(b) as usize
            }
            127 => panic!("unexpectedly large frame"),
            n => n as usize,
        };
        let mut mask = [0u8; 4];
        self.s.read_exact(&mut mask).unwrap();
        let mut body = vec![0u8; len];
        self.s.read_exact(&mut body).unwrap();
        body.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b ^= mask[i & 3]);
        serde_json::from_slice(&body).unwrap()
    }

    fn frame(op: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0x80 | op];
        if payload.len() < 126 {
            out.push(payload.len() as u8);
        } else {
            out.push(126);
            out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(payload);
        out
    }

    fn send_all(&mut self, frames: &[Vec<u8>]) {
        self.s.write_all(&frames.concat()).unwrap();
    }
}

fn text(v: Value) -> Vec<u8> {
    FakeConn::frame(opcode::TEXT, v.to_string().as_bytes())
}

fn gw_run(addr: SocketAddr) -> GwRun {
    GwRun {
        url: ws::parse_url(&format!("ws://{addr}/ws")).unwrap(),
        addr,
        templates: vec![SendTemplate::new("direct", "a:b")],
        tls: None,
        sizes: SizeDist::Fixed(24),
        filler_b64: proto::filler_b64(24),
        interval_ns: None,
        depth: 1,
        connect_concurrency: 4,
        reconnect: None,
        recipients: 1,
        echoes: false,
        pointers_per_send: 0,
        counters: GwCounters::default(),
    }
}

fn listener_device(topic: &str) -> DeviceSpec {
    DeviceSpec {
        index: 0,
        device: "dev0".into(),
        token: "t".into(),
        subs: vec![(topic.to_string(), false)],
        targets: Vec::new(),
        primes: Vec::new(),
        roams: false,
        phase_ns: 0,
    }
}

fn record_b64(sender: u32, seq: u64) -> String {
    use base64::Engine as _;
    let stamp = Stamp {
        kind: StampKind::Measured,
        sender,
        seq,
        sent_ns: 1,
    };
    base64::engine::general_purpose::STANDARD.encode(stamp.encode())
}

/// A record arriving twice counts as a duplicate, a skipped seq as a hole; neither is
/// a delivery.
#[test]
fn repeated_and_skipped_records_are_counted() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let run = gw_run(l.local_addr().unwrap());
    let shared = Shared::new(None, 0, 10_000_000_000);
    let server = std::thread::spawn(move || {
        let mut c = FakeConn::accept(&l);
        let hello = c.read();
        assert_eq!(
            (&hello["op"], &hello["device_id"]),
            (&json!("hello"), &json!("dev0"))
        );
        c.send_all(&[text(json!({"op":"welcome","id":hello["id"],"token":"S.x"}))]);
        let sub = c.read();
        assert_eq!(sub["topic"], "chat.direct.a:b");
        let rec = |seq: u64| json!({"seq": seq, "payload": record_b64(7, seq)});
        c.send_all(&[
            text(json!({"op":"ack","id":sub["id"],"topic":"chat.direct.a:b","from_seq":5})),
            text(json!({"op":"record","topic":"chat.direct.a:b",
                        "records":[rec(5), rec(7), rec(7), rec(4)]})),
        ]);
        c
    });
    let mut w = Worker::new(vec![listener_device("chat.direct.a:b")], &run, &shared).unwrap();
    w.setup().unwrap();
    let _conn = server.join().unwrap();
    // Setup is done at the ack; the records came in the same read.
    let c = &run.counters;
    assert_eq!(Counters::get(&shared.counters.delivered), 2, "seq 5 and 7");
    assert_eq!(Counters::get(&c.holes), 1, "seq 6 never came");
    assert_eq!(Counters::get(&c.duplicates), 2, "7 again, then 4");
    assert_eq!(shared.counters.errors_total(), 0);
}

/// A gateway that closes during setup fails the run, naming the device and the code.
#[test]
fn a_close_during_setup_names_the_device_and_code() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let run = gw_run(l.local_addr().unwrap());
    let shared = Shared::new(None, 0, 10_000_000_000);
    let server = std::thread::spawn(move || {
        let mut c = FakeConn::accept(&l);
        let _hello = c.read();
        let mut close = 4003u16.to_be_bytes().to_vec();
        close.extend_from_slice(b"unsupported protocol version");
        c.send_all(&[FakeConn::frame(opcode::CLOSE, &close)]);
        c
    });
    let mut w = Worker::new(vec![listener_device("t")], &run, &shared).unwrap();
    let e = w.setup().unwrap_err();
    let _conn = server.join().unwrap();
    assert!(e.contains("dev0"), "{e}");
    assert!(e.contains("closed by the server: 4003"), "{e}");
    // The hello was sent and never answered: an error of its kind.
    assert_eq!(
        Counters::get(&shared.counters.errors[Op::Hello as usize]),
        1
    );
}

/// A reply whose id is not the oldest request's breaks the connection (replies come in
/// request order); a ping is answered with a pong carrying its payload.
#[test]
fn replies_out_of_order_fail_and_pings_are_answered() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let run = gw_run(l.local_addr().unwrap());
    let shared = Shared::new(None, 0, 10_000_000_000);
    let server = std::thread::spawn(move || {
        let mut c = FakeConn::accept(&l);
        let hello = c.read();
        c.send_all(&[
            FakeConn::frame(opcode::PING, b"p1"),
            text(json!({"op":"welcome","id":hello["id"]})),
        ]);
        // The pong comes before the subscribe (frames leave in order).
        let mut h = [0u8; 2];
        c.s.read_exact(&mut h).unwrap();
        assert_eq!((h[0], h[1] & 0x7F), (0x80 | opcode::PONG, 2));
        let mut rest = [0u8; 6];
        c.s.read_exact(&mut rest).unwrap();
        let pong: Vec<u8> = rest[4..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ rest[i & 3])
            .collect();
        assert_eq!(pong, b"p1");
        let _sub = c.read();
        c.send_all(&[text(json!({"op":"ack","id":"999"}))]);
        c
    });
    let mut w = Worker::new(vec![listener_device("t")], &run, &shared).unwrap();
    let e = w.setup().unwrap_err();
    let _conn = server.join().unwrap();
    assert!(e.contains("ack with id Some(\"999\")"), "{e}");
}
