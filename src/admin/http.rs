//! HTTP/1.1 connection handling on `httparse`: keep-alive, pipelining, bounded heads and
//! bodies, read and idle deadlines. The codec (`parse_head`, `encode_response`) is pure;
//! `serve` only moves bytes.

use super::router::{self, AdminCtx};
use boltq_io::listener::Conn;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

/// Largest request head (request line + headers).
pub const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Bytes asked of the socket per read.
pub const READ_CHUNK_BYTES: usize = 4096;
/// Most headers in one request.
pub const HEADERS_MAX: usize = 64;
/// Largest request body (v1 documented 1 MB and enforced nothing).
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
/// A started request must arrive completely within this time.
pub const READ_TIMEOUT_MS: u64 = 10_000;
/// An idle keep-alive connection is closed after this time.
pub const IDLE_TIMEOUT_MS: u64 = 60_000;

/// A parsed request.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub close: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A response ready to be written.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Extra headers (e.g. `Cache-Control`).
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    /// A JSON body followed by a newline, as v1 sends.
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec(value).expect("a Value always serialises");
        body.push(b'\n');
        Response {
            status,
            content_type: "application/json",
            body,
            headers: Vec::new(),
        }
    }

    pub fn error(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error": message }))
    }

    pub fn text(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }
}

/// What parsing the buffered bytes gave.
#[derive(Debug)]
pub enum Parsed {
    /// Need more bytes.
    Partial,
    /// A whole request and the bytes it used.
    Request(Request, usize),
    /// The request is refused; answer and close.
    Refused(Response),
}

/// Parses one request (head and body) from the start of `buf`. Pure: fuzzable.
pub fn parse_request(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > HEAD_BYTES_MAX => {
            return Parsed::Refused(Response::error(431, "request head too large"))
        }
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Refused(Response::error(431, "too many headers"))
        }
        Err(e) => return Parsed::Refused(Response::error(400, &format!("malformed request: {e}"))),
    };
    if head_len > HEAD_BYTES_MAX {
        return Parsed::Refused(Response::error(431, "request head too large"));
    }
    let target = req.path.unwrap_or("/");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, parse_query(q)),
        None => (target, Vec::new()),
    };
    let mut out = Request {
        method: req.method.unwrap_or("").to_string(),
        path: path.to_string(),
        query,
        headers: Vec::with_capacity(req.headers.len()),
        body: Vec::new(),
        close: req.version == Some(0),
    };
    let mut content_length = 0usize;
    let mut seen_length = false;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value).trim().to_string();
        match name.as_str() {
            "connection" if value.eq_ignore_ascii_case("close") => out.close = true,
            "connection" if value.eq_ignore_ascii_case("keep-alive") => out.close = false,
            "content-length" if seen_length || !is_digits(&value) => {
                // Two lengths, or a signed or non-decimal one, could be read differently by
                // a proxy in front of us: refuse rather than guess (request smuggling).
                return Parsed::Refused(Response::error(400, "bad Content-Length"));
            }
            "content-length" => match value.parse::<usize>() {
                Ok(n) if n <= BODY_BYTES_MAX => {
                    content_length = n;
                    seen_length = true;
                }
                Ok(_) => {
                    return Parsed::Refused(Response::error(
                        413,
                        &format!("request body over {BODY_BYTES_MAX} bytes"),
                    ))
                }
                Err(_) => return Parsed::Refused(Response::error(400, "bad Content-Length")),
            },
            "transfer-encoding" => {
                return Parsed::Refused(Response::error(
                    501,
                    "chunked request bodies are not supported; send Content-Length",
                ))
            }
            _ => {}
        }
        out.headers.push((name, value));
    }
    let total = head_len + content_length;
    if buf.len() < total {
        return Parsed::Partial;
    }
    out.body = buf[head_len..total].to_vec();
    Parsed::Request(out, total)
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Decodes `%XX` escapes and `+` as space; invalid escapes are kept as they are.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Appends the response's bytes, with the CORS headers every admin route carries (v1).
pub fn encode_response(r: &Response, head_only: bool, close: bool, out: &mut Vec<u8>) {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
         Access-Control-Allow-Origin: *\r\n\
         Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n\
         Access-Control-Allow-Headers: Content-Type, X-API-Key\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
    );
    for (k, v) in &r.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    out.extend_from_slice(head.as_bytes());
    if !head_only {
        out.extend_from_slice(&r.body);
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Serves requests on `conn` until the client closes, a deadline passes, an error, or
/// `stop` resolves while the connection waits for a new request (shutdown must not wait for
/// idle keep-alive clients).
pub async fn serve(mut conn: Conn, ctx: Rc<AdminCtx>, stop: impl Future<Output = ()>) {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut stop = std::pin::pin!(stop);
    let mut out = Vec::new();
    loop {
        let req = match read_request(&mut conn, &mut buf, stop.as_mut()).await {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(response) => {
                out.clear();
                encode_response(&response, false, true, &mut out);
                let _ = conn.write_all(&out).await;
                return;
            }
        };
        if let Some(gw) = ctx.gateway.as_ref().filter(|g| g.settings.path == req.path) {
            // The WebSocket takes over the connection; no admin timeout applies to it.
            let leftover = std::mem::take(&mut buf);
            crate::messaging::gateway::upgrade::serve(conn, req, leftover, Rc::clone(gw)).await;
            return;
        }
        if req.path == "/subscribe" && req.method == "GET" {
            // Server-sent events take over the connection until the client leaves.
            Box::pin(router::serve_events(conn, &req, ctx, stop.as_mut())).await;
            return;
        }
        // Boxed: route futures are large, and this connection's task lives as long as the
        // connection (a gateway WebSocket for days) — it should not carry their space.
        let response = Box::pin(router::route(&req, &ctx)).await;
        out.clear();
        encode_response(&response, req.method == "HEAD", req.close, &mut out);
        if conn.write_all(&out).await.is_err() || req.close {
            return;
        }
    }
}

/// Reads one request (keeping pipelined bytes in `buf`). `Ok(None)` when the client closed,
/// went idle, or `stop` fired between requests; `Err` carries the response to send before
/// closing.
pub(crate) async fn read_request(
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    mut stop: Pin<&mut impl Future<Output = ()>>,
) -> Result<Option<Request>, Response> {
    // Small: this is also what an idle keep-alive connection (and every gateway upgrade)
    // keeps posted to the kernel; larger requests just take more reads.
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    // The whole request must arrive within READ_TIMEOUT_MS of its first byte, however it
    // trickles in (a per-read timeout would let one byte every few seconds hold a task).
    let mut request_deadline = (!buf.is_empty())
        .then(|| std::time::Instant::now() + Duration::from_millis(READ_TIMEOUT_MS));
    loop {
        if !buf.is_empty() {
            match parse_request(buf) {
                Parsed::Request(req, used) => {
                    buf.drain(..used);
                    return Ok(Some(req));
                }
                Parsed::Refused(r) => return Err(r),
                Parsed::Partial => {}
            }
        }
        let idle = buf.is_empty();
        let wait = match request_deadline {
            _ if idle => Duration::from_millis(IDLE_TIMEOUT_MS),
            Some(d) => d.saturating_duration_since(std::time::Instant::now()),
            None => Duration::from_millis(READ_TIMEOUT_MS),
        };
        let read = boltq_shards::timeout(wait, conn.read(&mut chunk));
        let outcome = if idle {
            futures_lite::future::or(read, async {
                stop.as_mut().await;
                None
            })
            .await
        } else {
            read.await
        };
        match outcome {
            None if idle => return Ok(None),
            None => return Err(Response::error(408, "request not received in time")),
            Some(Ok(0)) | Some(Err(_)) => return Ok(None),
            Some(Ok(n)) => {
                if buf.is_empty() {
                    request_deadline =
                        Some(std::time::Instant::now() + Duration::from_millis(READ_TIMEOUT_MS));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(bytes: &[u8]) -> Request {
        match parse_request(bytes) {
            Parsed::Request(r, used) => {
                assert_eq!(used, bytes.len());
                r
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_query_headers_and_body() {
        let r = req(
            b"POST /publish?a=1&b=x%20y+z HTTP/1.1\r\nX-API-Key: k\r\nContent-Length: 2\r\n\r\n{}",
        );
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/publish"));
        assert_eq!(r.query("b"), Some("x y z"));
        assert_eq!(r.header("x-api-key"), Some("k"));
        assert_eq!(r.body, b"{}");
        assert!(!r.close);
    }

    #[test]
    fn waits_for_the_whole_body_and_refuses_oversize_and_chunked() {
        assert!(matches!(
            parse_request(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"),
            Parsed::Partial
        ));
        let big = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            BODY_BYTES_MAX + 1
        );
        assert!(matches!(parse_request(big.as_bytes()), Parsed::Refused(r) if r.status == 413));
        assert!(matches!(
            parse_request(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Parsed::Refused(r) if r.status == 501
        ));
        assert!(
            matches!(parse_request(b"\x00\x01 garbage\r\n\r\n"), Parsed::Refused(r) if r.status == 400)
        );
        for bad in [
            "Content-Length: +10",
            "Content-Length: 1\r\nContent-Length: 2",
            "Content-Length: 0x5",
        ] {
            let req = format!("POST / HTTP/1.1\r\n{bad}\r\n\r\n");
            assert!(
                matches!(parse_request(req.as_bytes()), Parsed::Refused(r) if r.status == 400),
                "{bad}"
            );
        }
        let huge_head = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(HEAD_BYTES_MAX));
        assert!(
            matches!(parse_request(huge_head.as_bytes()), Parsed::Refused(r) if r.status == 431)
        );
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%4"), "%4");
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = boltq_io::testutil::Rng::new(5);
        for _ in 0..20_000 {
            let len = rng.below(200) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if rng.below(2) == 0 {
                let mut v = b"POST /x?y=%2 HTTP/1.1\r\nContent-Length: 3\r\n\r\n".to_vec();
                v.append(&mut b);
                b = v;
            }
            let _ = parse_request(&b);
        }
    }
}
