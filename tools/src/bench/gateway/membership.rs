//! A tiny membership service for the run's own groups (`--membership-listen`), so group
//! scenarios need nothing but the server and the generator. It answers the contract of
//! docs/building-a-chat-app.md §9:
//!
//! - `GET /is-member?tenant=&user=&group=` → `{"member":true|false}`
//! - `GET /members?tenant=&group=` → `{"members":[…]}`
//!
//! The server calls `/members` on every group send (uncached), so answers are rendered once
//! per group and the service runs its own epoll loop on one thread: HTTP/1.1 keep-alive,
//! pipelined requests, many connections. [`Directory::answer`] decides; the loop only moves
//! bytes. The tenant is ignored (the run uses one).

use super::super::poll::Epoll;
use super::topology::Conv;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Longest request head; a longer one closes the connection.
pub const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most headers in one request.
pub const REQUEST_HEADERS_MAX: usize = 64;
/// Connections served at once; more are closed on accept.
pub const CONNECTIONS_MAX: usize = 4096;
/// Unsent answer bytes per connection before it stops reading (pipelining backpressure).
pub const PENDING_ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;
const LISTENER_TOKEN: u64 = u64::MAX;
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Groups and their members, with the `/members` answer of each rendered once.
pub struct Directory {
    groups: HashMap<String, Group>,
}

struct Group {
    /// Sorted, for binary search.
    members: Vec<String>,
    body: Arc<Vec<u8>>,
}

impl Directory {
    /// The groups among `convs` (direct conversations are ignored).
    pub fn new(convs: &[Conv]) -> Directory {
        let groups = convs
            .iter()
            .filter(|c| c.kind == super::topology::Kind::Group)
            .map(|c| {
                let mut members = c.members.clone();
                members.sort();
                let body = serde_json::json!({ "members": c.members }).to_string();
                (
                    c.id.clone(),
                    Group {
                        members,
                        body: Arc::new(body.into_bytes()),
                    },
                )
            })
            .collect();
        Directory { groups }
    }

    /// Status and JSON body for a request line's method and target.
    pub fn answer(&self, method: &str, target: &str) -> (u16, Arc<Vec<u8>>) {
        let body = |s: &str| Arc::new(s.as_bytes().to_vec());
        if method != "GET" {
            return (405, body("{\"error\":\"method not allowed\"}"));
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let param = |name: &str| -> Option<String> {
            query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| percent_decode(v))
        };
        let group = param("group").unwrap_or_default();
        match path {
            "/is-member" => {
                let user = param("user").unwrap_or_default();
                let member = self
                    .groups
                    .get(&group)
                    .is_some_and(|g| g.members.binary_search(&user).is_ok());
                (200, body(&format!("{{\"member\":{member}}}")))
            }
            "/members" => match self.groups.get(&group) {
                Some(g) => (200, g.body.clone()),
                None => (200, body("{\"members\":[]}")),
            },
            _ => (404, body("{\"error\":\"not found\"}")),
        }
    }
}

/// `%XX` decoding (and `+` as a space, as form encoding has it); `None` if malformed or not
/// UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// One HTTP answer with a JSON body.
fn render(status: u16, body: &[u8], close: bool, out: &mut Vec<u8>) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Error",
    };
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
}

/// What [`handle_requests`] did with a connection's buffered bytes.
#[derive(Debug, PartialEq, Eq)]
enum Handled {
    /// Bytes of complete requests consumed; keep the connection.
    Consumed(usize),
    /// Answered what it could; close once the answers are written.
    Close,
}

/// Answers every complete request at the start of `buf` into `out`.
fn handle_requests(dir: &Directory, buf: &[u8], out: &mut Vec<u8>, calls: &AtomicU64) -> Handled {
    let mut used = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; REQUEST_HEADERS_MAX];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[used..]) {
            Ok(httparse::Status::Complete(n)) => {
                let has_body = req.headers.iter().any(|h| {
                    (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
                        || h.name.eq_ignore_ascii_case("transfer-encoding")
                });
                let close = req.version == Some(0)
                    || req.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("connection")
                            && h.value.eq_ignore_ascii_case(b"close")
                    });
                if has_body {
                    render(400, b"{\"error\":\"no bodies here\"}", true, out);
                    return Handled::Close;
                }
                let (status, body) = dir.answer(req.method.unwrap_or(""), req.path.unwrap_or(""));
                calls.fetch_add(1, Ordering::Relaxed);
                render(status, &body, close, out);
                used += n;
                if close {
                    return Handled::Close;
                }
            }
            Ok(httparse::Status::Partial) => {
                if buf.len() - used > REQUEST_HEAD_BYTES_MAX {
                    render(400, b"{\"error\":\"request head too long\"}", true, out);
                    return Handled::Close;
                }
                return Handled::Consumed(used);
            }
            Err(_) => {
                render(400, b"{\"error\":\"bad request\"}", true, out);
                return Handled::Close;
            }
        }
    }
}

/// The running service; stopped (and its thread joined) on drop.
pub struct Service {
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    pub addr: String,
}

impl Service {
    /// Requests answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds `listen` and serves `dir` on a thread of its own (it inherits the caller's CPU
/// mask, so pin the caller first).
pub fn start(listen: &str, dir: Directory) -> Result<Service, String> {
    let listener =
        TcpListener::bind(listen).map_err(|e| format!("--membership-listen {listen}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| e.to_string())?
        .to_string();
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let (s, c) = (stop.clone(), calls.clone());
    let thread = std::thread::Builder::new()
        .name("bench-membership".into())
        .spawn(move || {
            if let Err(e) = serve(listener, &dir, &s, &c) {
                eprintln!("boltq-bench: membership service stopped: {e}");
            }
        })
        .map_err(|e| format!("cannot start the membership thread: {e}"))?;
    Ok(Service {
        stop,
        calls,
        thread: Some(thread),
        addr,
    })
}

struct HttpConn {
    stream: TcpStream,
    rx: Vec<u8>,
    tx: Vec<u8>,
    tx_pos: usize,
    closing: bool,
}

fn serve(
    listener: TcpListener,
    dir: &Directory,
    stop: &AtomicBool,
    calls: &AtomicU64,
) -> io::Result<()> {
    let epoll = Epoll::new()?;
    epoll.add(listener.as_raw_fd(), LISTENER_TOKEN, libc::EPOLLIN as u32)?;
    let mut conns: HashMap<u64, HttpConn> = HashMap::new();
    let mut next_token = 0u64;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    while !stop.load(Ordering::Relaxed) {
        let n = epoll.wait(&mut events, 50)?.len();
        for &ev in &events[..n] {
            let token = ev.u64;
            if token == LISTENER_TOKEN {
                accept_all(&listener, &epoll, &mut conns, &mut next_token);
                continue;
            }
            let Some(c) = conns.get_mut(&token) else {
                continue;
            };
            let keep = pump(c, dir, calls, &mut chunk);
            let c = conns.get_mut(&token).expect("present");
            let interest = if c.tx_pos < c.tx.len() {
                (libc::EPOLLIN | libc::EPOLLOUT) as u32
            } else {
                libc::EPOLLIN as u32
            };
            if !keep || epoll.modify(c.stream.as_raw_fd(), token, interest).is_err() {
                let c = conns.remove(&token).expect("present");
                let _ = epoll.delete(c.stream.as_raw_fd());
            }
        }
    }
    Ok(())
}

fn accept_all(
    listener: &TcpListener,
    epoll: &Epoll,
    conns: &mut HashMap<u64, HttpConn>,
    next_token: &mut u64,
) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if conns.len() >= CONNECTIONS_MAX || stream.set_nonblocking(true).is_err() {
                    continue; // dropped: closed
                }
                let _ = stream.set_nodelay(true);
                let token = *next_token;
                *next_token += 1;
                if epoll
                    .add(stream.as_raw_fd(), token, libc::EPOLLIN as u32)
                    .is_ok()
                {
                    conns.insert(
                        token,
                        HttpConn {
                            stream,
                            rx: Vec::new(),
                            tx: Vec::new(),
                            tx_pos: 0,
                            closing: false,
                        },
                    );
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return, // WouldBlock, or a transient accept error: wait for the next event
        }
    }
}

/// Reads, answers and writes what it can; false when the connection is done.
fn pump(c: &mut HttpConn, dir: &Directory, calls: &AtomicU64, chunk: &mut [u8]) -> bool {
    while !c.closing && c.tx.len() - c.tx_pos < PENDING_ANSWER_BYTES_MAX {
        match c.stream.read(chunk) {
            Ok(0) => return false,
            Ok(n) => {
                c.rx.extend_from_slice(&chunk[..n]);
                match handle_requests(dir, &c.rx, &mut c.tx, calls) {
                    Handled::Consumed(used) => {
                        c.rx.drain(..used);
                    }
                    Handled::Close => c.closing = true,
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    while c.tx_pos < c.tx.len() {
        match c.stream.write(&c.tx[c.tx_pos..]) {
            Ok(0) => return false,
            Ok(n) => c.tx_pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    c.tx.clear();
    c.tx_pos = 0;
    !c.closing
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn dir() -> Directory {
        Directory::new(&[
            Conv::group("g1".into(), vec!["bob".into(), "alice".into()]),
            Conv::direct("x", "y"),
        ])
    }

    fn json(body: &[u8]) -> Value {
        serde_json::from_slice(body).unwrap()
    }

    #[test]
    fn answers_the_contract() {
        let d = dir();
        let (s, b) = d.answer("GET", "/is-member?tenant=&user=alice&group=g1");
        assert_eq!((s, json(&b)), (200, serde_json::json!({"member": true})));
        let (_, b) = d.answer("GET", "/is-member?tenant=&user=carol&group=g1");
        assert_eq!(json(&b)["member"], false);
        let (_, b) = d.answer("GET", "/is-member?user=alice&group=x%3Ay");
        assert_eq!(
            json(&b)["member"],
            false,
            "direct conversations are not groups"
        );
        let (_, b) = d.answer("GET", "/members?tenant=t&group=g1");
        assert_eq!(json(&b)["members"], serde_json::json!(["bob", "alice"]));
        let (_, b) = d.answer("GET", "/members?group=nope");
        assert_eq!(json(&b)["members"], serde_json::json!([]));
        assert_eq!(d.answer("GET", "/other").0, 404);
        assert_eq!(d.answer("POST", "/members?group=g1").0, 405);
        let (_, b) = d.answer("GET", "/is-member?user=%61lice&group=g%31");
        assert_eq!(json(&b)["member"], true, "percent-encoded values");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%40b+c").as_deref(), Some("a@b c"));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None, "not UTF-8");
    }

    #[test]
    fn pipelined_requests_and_partial_heads() {
        let d = dir();
        let calls = AtomicU64::new(0);
        let two = b"GET /is-member?user=bob&group=g1 HTTP/1.1\r\nHost: x\r\n\r\n\
                    GET /members?group=g1 HTTP/1.1\r\nHost: x\r\n\r\nGET /mem";
        let mut out = Vec::new();
        let h = handle_requests(&d, two, &mut out, &calls);
        let complete = two.len() - b"GET /mem".len();
        assert_eq!(h, Handled::Consumed(complete));
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
        assert!(
            text.contains("Content-Length: 15\r\n\r\n{\"member\":true}"),
            "{text}"
        );

        let mut out = Vec::new();
        let close = b"GET /members?group=g1 HTTP/1.1\r\nConnection: close\r\n\r\n";
        assert_eq!(handle_requests(&d, close, &mut out, &calls), Handled::Close);
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("Connection: close"));

        let mut out = Vec::new();
        assert_eq!(
            handle_requests(&d, b"\x00\x01garbage\r\n\r\n", &mut out, &calls),
            Handled::Close
        );
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 400"));

        let mut out = Vec::new();
        let long = vec![b'a'; REQUEST_HEAD_BYTES_MAX + 1];
        let mut req = b"GET /".to_vec();
        req.extend(long);
        assert_eq!(handle_requests(&d, &req, &mut out, &calls), Handled::Close);
    }

    /// The service over real sockets: keep-alive, two requests on one connection.
    #[test]
    fn serves_over_tcp() {
        let svc = start("127.0.0.1:0", dir()).unwrap();
        let mut s = TcpStream::connect(&svc.addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        for _ in 0..2 {
            s.write_all(b"GET /is-member?user=alice&group=g1 HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut got = Vec::new();
            while !got.ends_with(b"{\"member\":true}") {
                let mut b = [0u8; 512];
                let n = s.read(&mut b).unwrap();
                assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&b[..n]);
            }
        }
        assert_eq!(svc.calls(), 2);
    }
}
