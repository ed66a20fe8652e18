//! The gateway's two ways of ending a connection on its own, end to end against the real
//! binary (docs/gateway-protocol.md §2.2 item 4, §6; the 503 of §2.1):
//! - a device silent for `messaging.gateway.pong_timeout` is closed with 4010, while one that
//!   keeps sending within the deadline stays open;
//! - after SIGTERM, connected devices get 1001 and an upgrade that arrives while the server
//!   drains gets `503`.
//!
//! The devices here are raw sockets ([`RawWs`]), not a WebSocket library: libraries answer
//! the server's pings on their own, which would keep a "silent" device alive.

use crate::support::gateway::{token, SECRET};
use crate::support::Server;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The liveness deadline the test servers run with (the smallest the config accepts is 1 s;
/// 3 s leaves a talking device's 300 ms cadence a wide margin on a loaded machine).
const PONG_TIMEOUT_S: u64 = 3;
/// How often the talking device sends a request: a tenth of the deadline.
const TALK_EVERY: Duration = Duration::from_millis(300);
/// Bound on waiting for a frame or a close that must come (generous: a loaded CI machine).
const WAIT: Duration = Duration::from_secs(30);

/// The messaging plane on, one HS256 key, the gateway on the admin listener, with
/// `pong_timeout`.
fn config(dir: &std::path::Path, pong_timeout: &str) -> std::path::PathBuf {
    let path = dir.join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\npong_timeout = \"{pong_timeout}\"\n"
        ),
    )
    .unwrap();
    path
}

/// What a raw device read from the server.
#[derive(Debug)]
enum Frame {
    Text(Value),
    Ping,
    /// The close frame's status code (`None`: a close frame without one).
    Close(Option<u16>),
}

/// A WebSocket device on a plain socket: masked text frames out (RFC 6455 §5.3), and it
/// never answers a ping — only what the test sends reaches the server.
struct RawWs {
    sock: TcpStream,
}

impl RawWs {
    /// Upgrades on `port` as `user` and completes `hello` (returns after `welcome`).
    fn connect(port: u16, user: &str, device: &str) -> RawWs {
        let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.write_all(upgrade_request(user).as_bytes()).unwrap();
        let (status, _) = read_response_head(&mut sock);
        assert_eq!(status, 101, "{user}/{device}: the upgrade is accepted");
        let mut ws = RawWs { sock };
        ws.send(&json!({"op": "hello", "id": "h", "device_id": device}));
        let welcome = ws.next_text();
        assert_eq!(welcome["op"], "welcome", "{welcome}");
        ws
    }

    fn send(&mut self, frame: &Value) {
        let data = frame.to_string().into_bytes();
        let mask = [0x5a, 0x13, 0xc7, 0x88];
        let mut out = vec![0x81]; // FIN + text
        match data.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n => {
                assert!(n <= usize::from(u16::MAX), "test frames are small");
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.sock.write_all(&out).unwrap();
    }

    /// The next frame within `within`; `None` if none came (the socket is still open).
    /// Panics if the server closed the TCP connection without a close frame.
    fn next_frame(&mut self, within: Duration) -> Option<Frame> {
        self.sock.set_read_timeout(Some(within)).unwrap();
        let mut head = [0u8; 2];
        match self.sock.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(e) => panic!("socket ended without a close frame: {e}"),
        }
        // Once a frame has begun, the rest of it must follow.
        self.sock.set_read_timeout(Some(WAIT)).unwrap();
        assert_eq!(head[1] & 0x80, 0, "server frames are not masked");
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.sock.read_exact(&mut b).unwrap();
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                self.sock.read_exact(&mut b).unwrap();
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        assert!(len <= 1 << 20, "frame of {len} bytes");
        let mut payload = vec![0u8; len as usize];
        self.sock.read_exact(&mut payload).unwrap();
        Some(match head[0] & 0x0f {
            0x1 => Frame::Text(serde_json::from_slice(&payload).unwrap()),
            0x8 => Frame::Close(
                (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]])),
            ),
            0x9 => Frame::Ping,
            op => panic!("unexpected opcode {op:#x}"),
        })
    }

    /// The next text frame, skipping pings (never answered); panics on a close.
    fn next_text(&mut self) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_frame(left.max(Duration::from_millis(1))) {
                Some(Frame::Text(v)) => return v,
                Some(Frame::Ping) => {}
                Some(Frame::Close(code)) => panic!("closed with {code:?} while a reply was due"),
                None => panic!("no frame within {WAIT:?}"),
            }
        }
    }

    /// Reads until the close frame (skipping pings and text) and returns its code and how
    /// many pings came first; panics if none comes within [`WAIT`].
    fn close_code(&mut self) -> (Option<u16>, usize) {
        let deadline = Instant::now() + WAIT;
        let mut pings = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_frame(left.max(Duration::from_millis(1))) {
                Some(Frame::Close(code)) => return (code, pings),
                Some(Frame::Ping) => pings += 1,
                Some(Frame::Text(_)) => {}
                None => panic!("still open after {WAIT:?}: no close frame"),
            }
        }
    }
}

/// A WebSocket upgrade of `/ws` carrying `user`'s token.
fn upgrade_request(user: &str) -> String {
    format!(
        "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {}\r\n\r\n",
        token(user)
    )
}

/// Reads one response head (and, with a `Content-Length`, its body); returns the status and
/// the body. Reads byte by byte so nothing after the head (WebSocket frames) is consumed.
fn read_response_head(sock: &mut TcpStream) -> (u16, String) {
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        sock.read_exact(&mut b)
            .unwrap_or_else(|e| panic!("response head {:?}: {e}", String::from_utf8_lossy(&head)));
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad response head {head:?}"));
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.trim().parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    sock.read_exact(&mut body).unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A device silent after `hello` (it does not even answer pings, of which it got one every
/// third of the deadline) is closed with 4010 once `pong_timeout` passes; a device sending a `ping` op every tenth of the deadline, for more
/// than twice the deadline, is still open and answered — requests alone re-arm it.
#[test]
fn a_silent_device_is_closed_with_4010_and_a_talking_one_stays_open() {
    let tmp = TempDir::new("liveness");
    let cfg = config(tmp.path(), &format!("{PONG_TIMEOUT_S}s"));
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let mut silent = RawWs::connect(s.http_port, "alice", "silent");
    let mut talker = RawWs::connect(s.http_port, "bob", "talker");

    let talk_for = Duration::from_secs(2 * PONG_TIMEOUT_S + 1);
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < talk_for {
        n += 1;
        let id = format!("p{n}");
        talker.send(&json!({"op": "ping", "id": id}));
        let reply = talker.next_text();
        assert_eq!(
            (reply["op"].as_str(), reply["id"].as_str()),
            (Some("pong"), Some(id.as_str())),
            "{reply}\nserver log:\n{}",
            s.log()
        );
        std::thread::sleep(TALK_EVERY);
    }
    // Nothing but pings (unanswered) is waiting for the talker: no close frame.
    while let Some(frame) = talker.next_frame(Duration::from_millis(200)) {
        assert!(
            matches!(frame, Frame::Ping),
            "talker got {frame:?}\nserver log:\n{}",
            s.log()
        );
    }

    // The silent device's close frame has been waiting in its socket since the deadline.
    let (code, pings) = silent.close_code();
    assert_eq!(
        code,
        Some(4010),
        "the silent device is closed for liveness (after {pings} unanswered pings)\n\
         server log:\n{}",
        s.log()
    );
    // It was pinged every third of the deadline before that: a device that answers pings
    // stays open without sending anything else.
    assert!(pings >= 2, "{pings} pings before the close");

    // The talker outlived the silent one and is still served.
    talker.send(&json!({"op": "ping", "id": "last"}));
    assert_eq!(talker.next_text()["id"], "last");
}

/// After SIGTERM the connected device gets 1001, and an upgrade request that completes while
/// the server drains gets `503 gateway shutting down` instead of a WebSocket.
///
/// One shard, so the device's 1001 proves the shard serving the upgrade has begun its
/// shutdown. The upgrading connection is accepted before SIGTERM (the listener stops
/// accepting at SIGTERM): it first asks `/readyz` and pipelines the start of the upgrade in
/// the same write, so when the answer arrives the server is holding a half-read request —
/// which keeps the connection (and the drain) open until the request is complete. The rest
/// of the request is sent only after the 1001.
#[test]
fn shutdown_sends_1001_and_refuses_upgrades_with_503() {
    let tmp = TempDir::new("liveness-shutdown");
    let cfg = config(tmp.path(), "90s");
    let data = tmp.path().join("data");
    let s = Server::start_raw(
        &[
            "--data-dir",
            data.to_str().unwrap(),
            "--tcp-port",
            "0",
            "--http-port",
            "0",
            "--shards",
            "1",
            "--config",
            cfg.to_str().unwrap(),
        ],
        0,
        0,
        &data,
    );
    let http = s.http_port;
    let mut device = RawWs::connect(http, "alice", "phone");

    let upgrade = upgrade_request("bob");
    let (first, rest) = upgrade.split_at(upgrade.find("Upgrade:").unwrap());
    let mut late = TcpStream::connect(("127.0.0.1", http)).unwrap();
    late.write_all(format!("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n{first}").as_bytes())
        .unwrap();
    let (status, _) = read_response_head(&mut late);
    assert_eq!(status, 200, "ready before SIGTERM");

    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    let (code, _) = device.close_code();
    assert_eq!(code, Some(1001), "server log:\n{}", s.log());

    late.write_all(rest.as_bytes()).unwrap();
    let (status, body) = read_response_head(&mut late);
    assert_eq!(
        (status, body.trim_end()),
        (503, "gateway shutting down"),
        "server log:\n{}",
        s.log()
    );

    let (code, log) = s.stop(libc::SIGTERM);
    assert_eq!(
        code,
        Some(0),
        "the drain ends and the server exits 0; log:\n{log}"
    );
}
