//! A small blocking client for the messaging gateway (WebSocket, protocol v1,
//! spec/messaging-edge.md §2). It exists for tools and end-to-end tests, not for devices: one
//! plain `ws://` connection over `std::net`, no TLS, no reconnect, no resume logic beyond
//! passing a resume token to `hello`.
//!
//! - [`GatewayClient::request`] gives each request an id and returns the reply carrying it;
//!   frames that arrive meanwhile (live `record` batches, `gap`s, replies to other requests)
//!   are kept, in arrival order, for later calls. The buffer is bounded
//!   ([`PENDING_FRAMES_MAX`]); overflowing it is an error, never a silent drop, because a
//!   test that lost a frame would report a server bug that is not there.
//! - [`GatewayClient::submit`] and [`GatewayClient::reply`] split a request in two so a
//!   caller can pipeline: write many frames, then read the replies.
//! - Every wait is bounded ([`DEFAULT_TIMEOUT_MS`] unless told otherwise). A timed-out wait
//!   leaves the connection usable (tungstenite keeps partial frames); an I/O or protocol
//!   error does not, and every later call then fails fast.

use async_tungstenite::tungstenite;
use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::http::{HeaderValue, Uri};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// Bound on connecting (TCP and upgrade) and on each wait for a reply.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Largest message accepted from the server. Record batches are bounded by stored bytes
/// (4 MiB at most, spec §2.10); their JSON with base64 payloads is about a third larger.
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Frames received but not yet claimed by a call.
pub const PENDING_FRAMES_MAX: usize = 65_536;

/// One gateway connection that has said `hello`. Not thread-safe: one per thread.
pub struct GatewayClient {
    ws: WebSocket<TcpStream>,
    welcome: Value,
    /// Received, not yet claimed, in arrival order.
    pending: VecDeque<Value>,
    next_id: u64,
    timeout: Duration,
    /// Why the connection can no longer be trusted, once it can't.
    broken: Option<String>,
}

impl GatewayClient {
    /// Opens `url` (`ws://host:port/path`) with `Authorization: Bearer <token>`, says
    /// `hello` as `device` (presenting `resume` when given) and keeps the `welcome`
    /// ([`GatewayClient::welcome`]). Any reply other than `welcome` is an error.
    pub fn connect(
        url: &str,
        token: &str,
        device: &str,
        resume: Option<&str>,
    ) -> Result<GatewayClient, String> {
        let timeout = Duration::from_millis(DEFAULT_TIMEOUT_MS);
        let ws = open(url, token, timeout)?;
        let mut client = GatewayClient {
            ws,
            welcome: Value::Null,
            pending: VecDeque::new(),
            next_id: 0,
            timeout,
            broken: None,
        };
        let mut hello = json!({"op": "hello", "version": 1, "device_id": device});
        if let Some(r) = resume {
            hello["resume"] = Value::String(r.to_string());
        }
        let welcome = client.request(hello)?;
        if welcome["op"] != "welcome" {
            return Err(format!("hello was answered with {welcome}"));
        }
        client.welcome = welcome;
        Ok(client)
    }

    /// The server's `welcome` (session id, resume token, `resumed`).
    pub fn welcome(&self) -> &Value {
        &self.welcome
    }

    /// Sends `frame` (an object; an `id` is assigned unless it has one) and returns the
    /// reply carrying that id. A `gap` with the id is kept for later (it precedes the
    /// subscribe `ack`, spec §2.12); history answers `gap` *instead of* a page, so a caller
    /// expecting one finds it with [`GatewayClient::take_pending`].
    pub fn request(&mut self, frame: Value) -> Result<Value, String> {
        let id = self.submit(frame)?;
        self.reply(&id)
    }

    /// Writes `frame` without waiting for its reply (for pipelining); returns its id.
    pub fn submit(&mut self, mut frame: Value) -> Result<String, String> {
        let Some(fields) = frame.as_object_mut() else {
            return Err(format!("a frame is a JSON object, not {frame}"));
        };
        let id = match fields.get("id").and_then(Value::as_str) {
            Some(id) => id.to_string(),
            None => {
                self.next_id += 1;
                let id = format!("c{}", self.next_id);
                fields.insert("id".to_string(), Value::String(id.clone()));
                id
            }
        };
        self.write(Message::Text(frame.to_string().into()))?;
        Ok(id)
    }

    /// The reply to the request with `id` (not a `gap`), from what is buffered or what
    /// arrives within the timeout.
    pub fn reply(&mut self, id: &str) -> Result<Value, String> {
        let is_reply = |f: &Value| f["id"] == id && f["op"] != "gap";
        if let Some(i) = self.pending.iter().position(is_reply) {
            return Ok(self.pending.remove(i).expect("position is in range"));
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let frame = self
                .read_until(deadline)?
                .ok_or_else(|| format!("no reply to {id} within {:?}", self.timeout))?;
            if is_reply(&frame) {
                return Ok(frame);
            }
            self.keep(frame)?;
        }
    }

    /// Collects `count` records of `topic` from live `record` frames (those without an
    /// id), buffered ones first, waiting at most `timeout`. Frames of other kinds or topics
    /// stay buffered. Returns the records themselves (the `records` arrays, concatenated);
    /// more than `count` may come back when the last batch was larger.
    pub fn records(
        &mut self,
        topic: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Value>, String> {
        let is_live =
            |f: &Value| f["op"] == "record" && f["topic"] == topic && f.get("id").is_none();
        let mut got = Vec::new();
        let mut kept = VecDeque::with_capacity(self.pending.len());
        for f in std::mem::take(&mut self.pending) {
            if is_live(&f) {
                got.extend(batch_records(&f));
            } else {
                kept.push_back(f);
            }
        }
        self.pending = kept;
        let deadline = Instant::now() + timeout;
        while got.len() < count {
            let Some(frame) = self.read_until(deadline)? else {
                return Err(format!(
                    "{} of {count} records of {topic} within {timeout:?}",
                    got.len()
                ));
            };
            if is_live(&frame) {
                got.extend(batch_records(&frame));
            } else {
                self.keep(frame)?;
            }
        }
        Ok(got)
    }

    /// The first frame `pick` selects, buffered or arriving within `timeout`; the frames
    /// it passes over stay buffered.
    pub fn next_frame(
        &mut self,
        mut pick: impl FnMut(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Value, String> {
        if let Some(i) = self.pending.iter().position(&mut pick) {
            return Ok(self.pending.remove(i).expect("position is in range"));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let frame = self
                .read_until(deadline)?
                .ok_or_else(|| format!("no such frame within {timeout:?}"))?;
            if pick(&frame) {
                return Ok(frame);
            }
            self.keep(frame)?;
        }
    }

    /// Removes and returns every buffered frame that `pick` selects, in arrival order.
    pub fn take_pending(&mut self, mut pick: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let (taken, kept): (VecDeque<Value>, VecDeque<Value>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|f| pick(f));
        self.pending = kept;
        taken.into()
    }

    /// `send` of a UTF-8 text to `conversation` (`kind` "group" or "direct"; an empty
    /// `client_msg_id` is left out); returns the reply (`sent` or `error`).
    pub fn send_text(
        &mut self,
        conversation: &str,
        kind: &str,
        client_msg_id: &str,
        text: &str,
    ) -> Result<Value, String> {
        self.request(send_frame(conversation, kind, client_msg_id, text))
    }

    /// Says goodbye with a normal close (1000) and waits (bounded) for the server's close.
    pub fn close(mut self) -> Result<(), String> {
        if self.broken.is_some() {
            return Ok(());
        }
        self.ws.close(None).map_err(|e| format!("close: {e}"))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            set_read_timeout(&self.ws, deadline)?;
            match self.ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Ok(())
                }
                Err(tungstenite::Error::Io(e)) if is_timeout(&e) => {
                    return Err("the server did not close within the timeout".to_string())
                }
                Err(e) => return Err(format!("close: {e}")),
            }
        }
    }

    fn write(&mut self, msg: Message) -> Result<(), String> {
        self.check()?;
        self.ws
            .send(msg)
            .map_err(|e| self.fail(format!("write: {e}")))
    }

    /// The next data frame, decoded; `None` when `deadline` passed first.
    fn read_until(&mut self, deadline: Instant) -> Result<Option<Value>, String> {
        self.check()?;
        loop {
            if Instant::now() >= deadline {
                return Ok(None);
            }
            set_read_timeout(&self.ws, deadline).map_err(|e| self.fail(e))?;
            let bytes = match self.ws.read() {
                Ok(Message::Text(t)) => t.as_bytes().to_vec(),
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Close(c)) => {
                    let why = c.map(|c| format!("{} {}", c.code, c.reason));
                    return Err(self.fail(format!("closed by the server: {why:?}")));
                }
                Ok(_) => continue, // ping/pong: tungstenite answers pings itself
                Err(tungstenite::Error::Io(e)) if is_timeout(&e) => return Ok(None),
                Err(e) => return Err(self.fail(format!("read: {e}"))),
            };
            let frame: Value = serde_json::from_slice(&bytes)
                .map_err(|e| self.fail(format!("server sent a non-JSON frame: {e}")))?;
            if !frame.is_object() {
                return Err(self.fail(format!("server sent a non-object frame: {frame}")));
            }
            return Ok(Some(frame));
        }
    }

    fn keep(&mut self, frame: Value) -> Result<(), String> {
        if self.pending.len() >= PENDING_FRAMES_MAX {
            return Err(self.fail(format!(
                "more than {PENDING_FRAMES_MAX} unclaimed frames from the server"
            )));
        }
        self.pending.push_back(frame);
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        match &self.broken {
            Some(why) => Err(format!("connection unusable: {why}")),
            None => Ok(()),
        }
    }

    fn fail(&mut self, why: String) -> String {
        self.broken = Some(why.clone());
        why
    }
}

/// A `send` frame carrying `text` as its payload.
pub fn send_frame(conversation: &str, kind: &str, client_msg_id: &str, text: &str) -> Value {
    let mut frame = json!({
        "op": "send",
        "conversation": conversation,
        "kind": kind,
        "payload": base64::engine::general_purpose::STANDARD.encode(text),
    });
    if !client_msg_id.is_empty() {
        frame["client_msg_id"] = Value::String(client_msg_id.to_string());
    }
    frame
}

/// The text of a record's payload (empty when it has none or it is not base64 UTF-8).
pub fn payload_text(record: &Value) -> String {
    record["payload"]
        .as_str()
        .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default()
}

fn batch_records(frame: &Value) -> Vec<Value> {
    frame["records"].as_array().cloned().unwrap_or_default()
}

fn open(url: &str, token: &str, timeout: Duration) -> Result<WebSocket<TcpStream>, String> {
    let uri: Uri = url.parse().map_err(|e| format!("bad url {url:?}: {e}"))?;
    if uri.scheme_str() != Some("ws") {
        return Err(format!("only ws:// urls are supported, not {url:?}"));
    }
    let host = uri.host().ok_or_else(|| format!("no host in {url:?}"))?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = connect_tcp(
        host.trim_start_matches('[').trim_end_matches(']'),
        port,
        timeout,
    )?;
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .and_then(|()| stream.set_read_timeout(Some(timeout)))
        .map_err(|e| format!("socket options: {e}"))?;
    let mut request = url
        .into_client_request()
        .map_err(|e| format!("bad url {url:?}: {e}"))?;
    let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "the token is not a valid header value".to_string())?;
    request.headers_mut().insert("Authorization", bearer);
    let config = WebSocketConfig::default()
        .max_message_size(Some(MESSAGE_BYTES_MAX))
        .max_frame_size(Some(MESSAGE_BYTES_MAX));
    match tungstenite::client::client_with_config(request, stream, Some(config)) {
        Ok((ws, _response)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            Err(format!(
                "upgrade refused: HTTP {} {body}",
                response.status().as_u16()
            ))
        }
        Err(tungstenite::HandshakeError::Failure(e)) => Err(format!("upgrade failed: {e}")),
        Err(tungstenite::HandshakeError::Interrupted(_)) => {
            Err(format!("upgrade did not finish within {timeout:?}"))
        }
    }
}

fn connect_tcp(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving {host}: {e}"))?;
    let mut last = format!("no address for {host}");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("connecting to {addr}: {e}"),
        }
    }
    Err(last)
}

fn set_read_timeout(ws: &WebSocket<TcpStream>, deadline: Instant) -> Result<(), String> {
    // A zero timeout means "block forever" to std; wait at least a millisecond instead.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    ws.get_ref()
        .set_read_timeout(Some(left))
        .map_err(|e| format!("socket options: {e}"))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;
    use tungstenite::handshake::server::{Request, Response};

    /// Runs `script` as a scripted gateway on a loopback port; returns the client's URL.
    /// The script sees the upgrade's `Authorization` header first.
    // The header callback's error type is tungstenite's, large or not.
    #[allow(clippy::result_large_err)]
    fn fake_gateway(
        script: impl FnOnce(&mut WebSocket<TcpStream>, String) + Send + 'static,
    ) -> (String, thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let handle = thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut auth = String::new();
            let mut ws = tungstenite::accept_hdr(stream, |req: &Request, resp: Response| {
                auth = req.headers()["Authorization"].to_str().unwrap().to_string();
                Ok(resp)
            })
            .unwrap();
            script(&mut ws, auth);
        });
        (url, handle)
    }

    fn recv(ws: &mut WebSocket<TcpStream>) -> Value {
        loop {
            match ws.read().unwrap() {
                Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
                Message::Close(_) => {
                    // Sends the queued close reply, completing the handshake.
                    let _ = ws.flush();
                    return Value::Null;
                }
                _ => {}
            }
        }
    }

    fn say(ws: &mut WebSocket<TcpStream>, v: Value) {
        ws.send(Message::Text(v.to_string().into())).unwrap();
    }

    fn record(topic: &str, seqs: &[u64]) -> Value {
        let recs: Vec<Value> = seqs.iter().map(|s| json!({"seq": s})).collect();
        json!({"op": "record", "topic": topic, "partition": 0, "records": recs})
    }

    #[test]
    fn replies_are_paired_by_id_and_other_frames_kept_for_later() {
        let (url, server) = fake_gateway(|ws, auth| {
            assert_eq!(auth, "Bearer tok");
            let hello = recv(ws);
            assert_eq!(hello["op"], "hello");
            assert_eq!(hello["device_id"], "d1");
            assert_eq!(hello["resume"], "s.x");
            say(
                ws,
                json!({"op": "welcome", "id": hello["id"], "session": "s"}),
            );
            let a = recv(ws);
            let b = recv(ws);
            assert_ne!(a["id"], b["id"], "ids are distinct");
            // Out of order, with a gap and live records in between.
            say(ws, record("t", &[1, 2]));
            say(ws, json!({"op": "gap", "id": b["id"]}));
            say(ws, json!({"op": "ack", "id": b["id"]}));
            say(ws, record("other", &[9]));
            say(ws, json!({"op": "pong", "id": a["id"]}));
            say(ws, record("t", &[3]));
            assert!(recv(ws).is_null(), "the client closes");
        });
        let mut c = GatewayClient::connect(&url, "tok", "d1", Some("s.x")).unwrap();
        assert_eq!(c.welcome()["session"], "s");
        let a = c.submit(json!({"op": "ping"})).unwrap();
        let b = c.submit(json!({"op": "subscribe", "topic": "t"})).unwrap();
        assert_eq!(c.reply(&a).unwrap()["op"], "pong");
        assert_eq!(c.reply(&b).unwrap()["op"], "ack");
        let recs = c.records("t", 3, Duration::from_secs(5)).unwrap();
        let seqs: Vec<u64> = recs.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, [1, 2, 3]);
        let gaps = c.take_pending(|f| f["op"] == "gap");
        assert_eq!(gaps.len(), 1);
        let other = c.records("other", 1, Duration::from_secs(5)).unwrap();
        assert_eq!(other[0]["seq"], 9);
        c.close().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn waits_are_bounded_and_leave_the_connection_usable() {
        let (url, server) = fake_gateway(|ws, _| {
            let hello = recv(ws);
            say(ws, json!({"op": "welcome", "id": hello["id"]}));
            let req = recv(ws);
            say(ws, json!({"op": "ack", "id": req["id"]}));
            assert!(recv(ws).is_null());
        });
        let mut c = GatewayClient::connect(&url, "tok", "d1", None).unwrap();
        let err = c.records("t", 1, Duration::from_millis(50)).unwrap_err();
        assert!(err.contains("0 of 1"), "{err}");
        let ack = c
            .request(json!({"op": "commit", "topic": "t", "seq": 1}))
            .unwrap();
        assert_eq!(ack["op"], "ack");
        c.close().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn a_refused_upgrade_and_a_refused_hello_are_errors() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let server = thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\n\r\nunauthorized")
                .unwrap();
        });
        let err = GatewayClient::connect(&url, "bad", "d1", None)
            .err()
            .unwrap();
        assert!(err.contains("401"), "{err}");
        server.join().unwrap();

        let (url, server) = fake_gateway(|ws, _| {
            let hello = recv(ws);
            say(
                ws,
                json!({"op": "error", "id": hello["id"], "error": {"code": "bad_request"}}),
            );
        });
        let err = GatewayClient::connect(&url, "tok", "d1", None)
            .err()
            .unwrap();
        assert!(err.contains("bad_request"), "{err}");
        server.join().unwrap();
        assert!(GatewayClient::connect("wss://x/ws", "t", "d", None).is_err());
    }

    #[test]
    fn send_frames_carry_base64_text_and_omit_an_empty_client_msg_id() {
        let f = send_frame("g1", "group", "", "hi");
        assert_eq!(f["payload"], "aGk=");
        assert!(f.get("client_msg_id").is_none());
        let f = send_frame("a:b", "direct", "m1", "hi");
        assert_eq!(f["client_msg_id"], "m1");
        assert_eq!(payload_text(&json!({"payload": "aGk="})), "hi");
        assert_eq!(payload_text(&json!({})), "");
    }
}
