//! Incoming requests: the type and the pure parser (`httparse` underneath), bounded in
//! head size, header count and body size, refusing what a proxy could read differently.

use super::query::parse_query;
use super::response::Response;

/// Largest request head (request line + headers).
pub const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most headers in one request.
pub const HEADERS_MAX: usize = 64;
/// Largest request body (v1 documented 1 MB and enforced nothing).
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

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
