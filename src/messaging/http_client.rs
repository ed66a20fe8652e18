//! A small HTTP/1.1 client for the messaging plane's outbound calls: the operator's
//! membership service now, the push webhook later (spec/messaging-edge.md §5, §10).
//!
//! Why our own: the calls are few and simple (a GET or a POST with a JSON body, a JSON
//! answer), they must run on a shard without a second runtime, and every limit must be ours
//! to set. What it does:
//! - `http://` only; `https://` is refused with a clear error until outbound TLS lands.
//! - Bodies framed by `Content-Length`, `chunked`, or the end of the connection; the decoded
//!   body is capped by the caller and an answer over the cap is an error, never a huge
//!   allocation.
//! - Keep-alive: a small pool of idle connections per host (newest first, dropped after
//!   [`POOL_IDLE_MS_MAX`]). A connection that failed, or whose answer was not read to its
//!   end, is never pooled. A pooled connection the server has meanwhile closed is detected
//!   by the request failing before any answer byte, and the request is sent again once on a
//!   fresh connection (outbound receivers deduplicate; see §10.2).
//! - Redirects with `Location`: up to [`REDIRECTS_MAX`] for GET (any of 301/302/303/307/
//!   308) and for other methods on 307/308 only (same method and body). `Authorization` and
//!   `Cookie` are dropped when a redirect leaves the original host and port.
//! - One total timeout per call, covering name resolution, connecting, every redirect and
//!   the whole body; connecting alone also has its own shorter timeout.
//! - Names: literal IPs and `localhost` are used directly; any other name is resolved with
//!   the system resolver on the shard's blocking-thread pool at each connect (no caching),
//!   so a slow resolver costs a blocking thread, never the shard.
//!
//! The parsing steps (URL, request encoding, response head, body framing) are plain
//! functions over byte buffers, tested on their own; only [`HttpClient`] touches a socket.

use boltq_io::connect::connect_tcp;
use boltq_io::listener::Conn;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Longest URL accepted, in bytes.
pub const URL_BYTES_MAX: usize = 8 * 1024;
/// Most headers a caller may add to one request.
pub const REQUEST_HEADERS_MAX: usize = 32;
/// Longest response head (status line and headers), in bytes.
pub const RESPONSE_HEAD_BYTES_MAX: usize = 64 * 1024;
/// Most headers in one response.
pub const RESPONSE_HEADERS_MAX: usize = 64;
/// Most interim (1xx) responses skipped before the final one.
pub const INTERIM_RESPONSES_MAX: usize = 8;
/// Longest chunk-size line (hex size and extensions), in bytes.
pub const CHUNK_LINE_BYTES_MAX: usize = 1024;
/// Most trailer bytes after the last chunk.
pub const TRAILER_BYTES_MAX: usize = 16 * 1024;
/// Redirects followed per call.
pub const REDIRECTS_MAX: usize = 3;
/// Most body bytes kept from an unsuccessful answer (the rest is not read).
pub const STATUS_BODY_PREVIEW_BYTES_MAX: usize = 4 * 1024;
/// Bytes asked from the socket per read.
pub const READ_BYTES_MAX: usize = 16 * 1024;
/// Most distinct hosts with idle connections in one pool.
pub const POOL_HOSTS_MAX: usize = 64;
/// Largest `max_idle_per_host` accepted by [`HttpClient::new`].
pub const POOL_IDLE_PER_HOST_MAX: usize = 1024;
/// An idle pooled connection older than this is closed instead of reused.
pub const POOL_IDLE_MS_MAX: u64 = 90_000;
/// Connect timeout unless [`HttpClient::with_connect_timeout`] says otherwise.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// Most resolved addresses tried for one host name.
pub const RESOLVED_ADDRS_MAX: usize = 4;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL (or a redirect's `Location`) is unusable.
    Url(String),
    /// Name resolution or the TCP connect failed.
    Connect(String),
    /// The call's total timeout passed.
    Timeout,
    /// The final answer was not 2xx; keeps at most [`STATUS_BODY_PREVIEW_BYTES_MAX`] of
    /// its body.
    Status { code: u16, body_preview: String },
    /// Either side broke HTTP: a request header we refuse to send, or an answer we cannot
    /// parse. The text says which.
    Malformed(String),
    /// The answer's body is over the caller's cap.
    TooLarge { bytes_max: usize },
    /// The connection failed after it was open.
    Io(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Url(m) => write!(f, "bad URL: {m}"),
            HttpError::Connect(m) => write!(f, "cannot connect: {m}"),
            HttpError::Timeout => write!(f, "timed out"),
            HttpError::Status { code, body_preview } if body_preview.is_empty() => {
                write!(f, "HTTP status {code}")
            }
            HttpError::Status { code, body_preview } => {
                write!(f, "HTTP status {code}: {body_preview}")
            }
            HttpError::Malformed(m) => write!(f, "malformed HTTP: {m}"),
            HttpError::TooLarge { bytes_max } => {
                write!(f, "response body over {bytes_max} bytes")
            }
            HttpError::Io(m) => write!(f, "connection failed: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// The request methods the outbound calls need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// An `http://` URL split into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedUrl {
    /// Lower-case name or IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// Starts with `/`; the fragment is removed.
    pub path_and_query: String,
}

impl ParsedUrl {
    /// The `Host` header value: the port only when it is not 80.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    fn same_origin(&self, other: &ParsedUrl) -> bool {
        self.host == other.host && self.port == other.port
    }
}

impl fmt::Display for ParsedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path_and_query)
    }
}

/// One outbound request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: Method,
    pub url: ParsedUrl,
    /// Sent as given; `Host`, `Content-Length`, `Transfer-Encoding` and `Connection` are
    /// the client's own and refused here.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    pub fn get(url: ParsedUrl) -> HttpRequest {
        HttpRequest {
            method: Method::Get,
            url,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
}

/// A successful (2xx) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

// ---------------------------------------------------------------------------------------
// URLs

/// Parses an absolute `http://` URL. `https://` is refused until outbound TLS exists;
/// credentials in the URL are refused (the `Authorization` header is the way to send them).
pub fn parse_url(url: &str) -> Result<ParsedUrl, HttpError> {
    if url.len() > URL_BYTES_MAX {
        return Err(HttpError::Url(format!("URL is over {URL_BYTES_MAX} bytes")));
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| HttpError::Url(format!("{url:?} is not an absolute http:// URL")))?;
    if scheme.eq_ignore_ascii_case("https") {
        return Err(HttpError::Url(format!(
            "{url:?}: https is not supported for outbound calls yet; use http://"
        )));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HttpError::Url(format!(
            "{url:?}: scheme {scheme:?} is not supported; use http://"
        )));
    }
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(HttpError::Url(format!(
            "{url:?}: credentials in the URL are not supported; configure the Authorization header"
        )));
    }
    let (host, port) =
        split_authority(authority).map_err(|m| HttpError::Url(format!("{url:?}: {m}")))?;
    let path_and_query = match path.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_string(),
    };
    if path_and_query.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(HttpError::Url(format!(
            "{url:?}: spaces and control characters must be percent-encoded"
        )));
    }
    Ok(ParsedUrl {
        host,
        port,
        path_and_query,
    })
}

/// `host[:port]` or `[v6][:port]` → (host, port); port 80 when absent.
fn split_authority(authority: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (v6, after) = bracketed.split_once(']').ok_or("unclosed [ in the host")?;
        let v6: Ipv6Addr = v6
            .parse()
            .map_err(|_| format!("{v6:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("junk after the IPv6 address")?),
        };
        (v6.to_string(), port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if !host.chars().all(valid) {
            return Err(format!("{host:?} is not a valid host name"));
        }
        (host.to_ascii_lowercase(), port)
    };
    if host.is_empty() {
        return Err("the host is empty".to_string());
    }
    let port = match port {
        None | Some("") => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("{p:?} is not a valid port")),
        },
    };
    Ok((host, port))
}

/// Percent-encodes one query value: RFC 3986 unreserved characters stay, every other byte
/// becomes `%XX` (a space is `%20`, which every server decodes, rather than `+`).
pub fn percent_encode_query(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }
    out
}

/// Resolves a `Location` header against the URL that answered with it.
fn resolve_location(base: &ParsedUrl, location: &str) -> Result<ParsedUrl, HttpError> {
    let lower = location.get(..8).unwrap_or(location).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return parse_url(location);
    }
    if let Some(rest) = location.strip_prefix("//") {
        return parse_url(&format!("http://{rest}"));
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let path_only = base.path_and_query.split('?').next().unwrap_or("/");
        let dir = &path_only[..path_only.rfind('/').map_or(0, |i| i + 1)];
        format!("{dir}{location}")
    };
    parse_url(&format!("http://{}{path}", base.authority()))
}

// ---------------------------------------------------------------------------------------
// Request encoding

/// Headers the client writes itself; a caller setting them could break the framing.
const OWN_HEADERS: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

/// The request's bytes: request line, `Host`, the caller's headers, `Content-Length` when
/// there is a body (or the method normally carries one), then the body.
fn encode_request(req: &HttpRequest) -> Result<Vec<u8>, HttpError> {
    if req.headers.len() > REQUEST_HEADERS_MAX {
        return Err(HttpError::Malformed(format!(
            "request has over {REQUEST_HEADERS_MAX} headers"
        )));
    }
    let mut out = Vec::with_capacity(256 + req.body.len());
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.url.path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(req.url.authority().as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &req.headers {
        check_request_header(name, value)?;
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !req.body.is_empty() || matches!(req.method, Method::Post | Method::Put) {
        out.extend_from_slice(format!("Content-Length: {}\r\n", req.body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&req.body);
    Ok(out)
}

fn check_request_header(name: &str, value: &str) -> Result<(), HttpError> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(HttpError::Malformed(format!(
            "request header name {name:?} is not a valid token"
        )));
    }
    if OWN_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
        return Err(HttpError::Malformed(format!(
            "request header {name} is set by the client itself"
        )));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(HttpError::Malformed(format!(
            "request header {name} holds a line break or NUL"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Response head and body framing

/// How the body after a head ends (RFC 9112 §6.3; HEAD requests are not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    framing: Framing,
    /// HTTP/1.1 without `Connection: close`, and a body that ends before the connection.
    keep_alive: bool,
}

/// Parses a response head at the start of `buf`: `Ok(None)` while it is incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, HttpError> {
    let mut slots = [httparse::EMPTY_HEADER; RESPONSE_HEADERS_MAX];
    let mut parsed = httparse::Response::new(&mut slots);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= RESPONSE_HEAD_BYTES_MAX => {
            return Err(HttpError::Malformed(format!(
                "response head over {RESPONSE_HEAD_BYTES_MAX} bytes"
            )))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HttpError::Malformed(format!("response head: {e}"))),
    };
    if len > RESPONSE_HEAD_BYTES_MAX {
        return Err(HttpError::Malformed(format!(
            "response head over {RESPONSE_HEAD_BYTES_MAX} bytes"
        )));
    }
    let status = parsed.code.unwrap_or_default();
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            let value = String::from_utf8_lossy(h.value).trim().to_string();
            (h.name.to_string(), value)
        })
        .collect();
    let framing = framing(status, &headers)?;
    let close_asked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("connection")
            && v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))
    });
    let keep_alive = parsed.version == Some(1) && !close_asked && framing != Framing::UntilClose;
    let head = Head {
        status,
        headers,
        framing,
        keep_alive,
    };
    Ok(Some((head, len)))
}

fn framing(status: u16, headers: &[(String, String)]) -> Result<Framing, HttpError> {
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    let named = |name: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if let Some(last) = named("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .rfind(|t| !t.is_empty())
    {
        return Ok(if last.eq_ignore_ascii_case("chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    let mut length = None;
    for value in named("content-length")
        .flat_map(|v| v.split(','))
        .map(str::trim)
    {
        let n = match value.parse::<u64>() {
            Ok(n) if value.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                return Err(HttpError::Malformed(format!(
                    "Content-Length {value:?} is not a number"
                )))
            }
        };
        if length.is_some_and(|l| l != n) {
            return Err(HttpError::Malformed(
                "conflicting Content-Length headers".to_string(),
            ));
        }
        length = Some(n);
    }
    Ok(match length {
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

/// What one [`BodyDecoder::feed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fed {
    /// Input bytes used; the rest must be offered again with more data behind it.
    consumed: usize,
    done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Waiting for a `size[;ext]\r\n` line.
    Size,
    Data {
        remaining: u64,
    },
    /// Waiting for the `\r\n` after a chunk's data.
    DataEnd,
    /// After the last (zero) chunk: trailer lines up to an empty one.
    Trailers {
        seen_bytes: usize,
    },
    Done,
}

/// Sans-IO body decoder: fed raw bytes, appends the decoded body to `out`, never past
/// `bytes_max` (it stops with [`HttpError::TooLarge`], `out` then holding a prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyDecoder {
    Length { remaining: u64 },
    Chunked(Chunk),
    UntilClose,
}

impl BodyDecoder {
    /// `None` for a head with no body at all.
    fn new(framing: Framing) -> Option<BodyDecoder> {
        match framing {
            Framing::Empty => None,
            Framing::Length(n) => Some(BodyDecoder::Length { remaining: n }),
            Framing::Chunked => Some(BodyDecoder::Chunked(Chunk::Size)),
            Framing::UntilClose => Some(BodyDecoder::UntilClose),
        }
    }

    fn feed(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        bytes_max: usize,
    ) -> Result<Fed, HttpError> {
        match self {
            BodyDecoder::Length { remaining } => {
                let take = input
                    .len()
                    .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                append_capped(out, &input[..take], bytes_max)?;
                *remaining -= take as u64;
                Ok(Fed {
                    consumed: take,
                    done: *remaining == 0,
                })
            }
            BodyDecoder::UntilClose => {
                append_capped(out, input, bytes_max)?;
                Ok(Fed {
                    consumed: input.len(),
                    done: false,
                })
            }
            BodyDecoder::Chunked(state) => feed_chunked(state, input, out, bytes_max),
        }
    }

    /// The connection ended: fine only for a body framed by the end of the connection.
    fn finish_at_eof(&self) -> Result<(), HttpError> {
        match self {
            BodyDecoder::UntilClose => Ok(()),
            _ => Err(HttpError::Malformed(
                "connection closed inside the response body".to_string(),
            )),
        }
    }
}

/// Decodes one whole response held in `bytes` with the same steps the client runs on a
/// socket (head, framing, body within `body_bytes_max`): `Ok(None)` while incomplete, the
/// status and body once complete (a body framed by the connection's end is taken as
/// ending with `bytes`). For the fuzz target and tests; the client reads incrementally.
pub fn decode_response(
    bytes: &[u8],
    body_bytes_max: usize,
) -> Result<Option<(u16, Vec<u8>)>, HttpError> {
    let Some((head, used)) = parse_head(bytes)? else {
        return Ok(None);
    };
    let mut body = Vec::new();
    let Some(mut decoder) = BodyDecoder::new(head.framing) else {
        return Ok(Some((head.status, body)));
    };
    let mut input = &bytes[used..];
    loop {
        let fed = decoder.feed(input, &mut body, body_bytes_max)?;
        assert!(
            fed.consumed <= input.len(),
            "a decoder never claims unread bytes"
        );
        if fed.done {
            return Ok(Some((head.status, body)));
        }
        if fed.consumed == 0 || fed.consumed == input.len() {
            break;
        }
        input = &input[fed.consumed..];
    }
    match decoder {
        BodyDecoder::UntilClose => decoder.finish_at_eof().map(|()| Some((head.status, body))),
        _ => Ok(None),
    }
}

fn append_capped(out: &mut Vec<u8>, bytes: &[u8], bytes_max: usize) -> Result<(), HttpError> {
    let room = bytes_max.saturating_sub(out.len());
    if bytes.len() > room {
        out.extend_from_slice(&bytes[..room]);
        return Err(HttpError::TooLarge { bytes_max });
    }
    out.extend_from_slice(bytes);
    Ok(())
}

fn feed_chunked(
    state: &mut Chunk,
    input: &[u8],
    out: &mut Vec<u8>,
    bytes_max: usize,
) -> Result<Fed, HttpError> {
    let mut pos = 0;
    loop {
        let rest = &input[pos..];
        match *state {
            Chunk::Done => {
                return Ok(Fed {
                    consumed: pos,
                    done: true,
                })
            }
            Chunk::Size => {
                let Some(line) = take_line(rest, CHUNK_LINE_BYTES_MAX, "chunk-size line")? else {
                    return Ok(Fed {
                        consumed: pos,
                        done: false,
                    });
                };
                pos += line.len() + 2;
                let size = parse_chunk_size(line)?;
                *state = if size == 0 {
                    Chunk::Trailers { seen_bytes: 0 }
                } else {
                    Chunk::Data { remaining: size }
                };
            }
            Chunk::Data { remaining } => {
                if rest.is_empty() {
                    return Ok(Fed {
                        consumed: pos,
                        done: false,
                    });
                }
                let take = rest
                    .len()
                    .min(usize::try_from(remaining).unwrap_or(usize::MAX));
                append_capped(out, &rest[..take], bytes_max)?;
                pos += take;
                let remaining = remaining - take as u64;
                *state = if remaining == 0 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data { remaining }
                };
            }
            Chunk::DataEnd => {
                if rest.len() < 2 {
                    return Ok(Fed {
                        consumed: pos,
                        done: false,
                    });
                }
                if &rest[..2] != b"\r\n" {
                    return Err(HttpError::Malformed(
                        "chunk data not followed by CRLF".to_string(),
                    ));
                }
                pos += 2;
                *state = Chunk::Size;
            }
            Chunk::Trailers { seen_bytes } => {
                let left = TRAILER_BYTES_MAX.saturating_sub(seen_bytes);
                let Some(line) = take_line(rest, left, "trailer section")? else {
                    return Ok(Fed {
                        consumed: pos,
                        done: false,
                    });
                };
                pos += line.len() + 2;
                *state = if line.is_empty() {
                    Chunk::Done
                } else {
                    Chunk::Trailers {
                        seen_bytes: seen_bytes + line.len() + 2,
                    }
                };
            }
        }
    }
}

/// The line before the first CRLF in `input`; `None` while no CRLF has arrived.
fn take_line<'a>(
    input: &'a [u8],
    bytes_max: usize,
    what: &str,
) -> Result<Option<&'a [u8]>, HttpError> {
    match input.windows(2).position(|w| w == b"\r\n") {
        Some(end) if end <= bytes_max => Ok(Some(&input[..end])),
        None if input.len() <= bytes_max => Ok(None),
        _ => Err(HttpError::Malformed(format!(
            "{what} over {bytes_max} bytes"
        ))),
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let hex = line.split(|&b| b == b';').next().unwrap_or_default();
    let hex = std::str::from_utf8(hex).unwrap_or_default().trim();
    if hex.is_empty() || hex.len() > 15 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(HttpError::Malformed(format!(
            "bad chunk size {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    u64::from_str_radix(hex, 16).map_err(|e| HttpError::Malformed(format!("chunk size: {e}")))
}

/// `body` as text, at most [`STATUS_BODY_PREVIEW_BYTES_MAX`] bytes, cut at a char boundary.
fn body_preview(body: &[u8]) -> String {
    let cut = &body[..body.len().min(STATUS_BODY_PREVIEW_BYTES_MAX)];
    let mut text = String::from_utf8_lossy(cut).into_owned();
    let mut end = text.len().min(STATUS_BODY_PREVIEW_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// The next request when `status`/`location` is a redirect this client follows.
fn redirect(
    req: &HttpRequest,
    status: u16,
    location: Option<&str>,
) -> Result<Option<HttpRequest>, HttpError> {
    let follows = match req.method {
        Method::Get => matches!(status, 301 | 302 | 303 | 307 | 308),
        _ => matches!(status, 307 | 308),
    };
    let Some(location) = location.filter(|_| follows) else {
        return Ok(None);
    };
    let url = resolve_location(&req.url, location)?;
    let mut next = req.clone();
    if !url.same_origin(&req.url) {
        next.headers.retain(|(n, _)| {
            !n.eq_ignore_ascii_case("authorization") && !n.eq_ignore_ascii_case("cookie")
        });
    }
    next.url = url;
    Ok(Some(next))
}

// ---------------------------------------------------------------------------------------
// The client

/// An answer as read off the wire, before success/redirect/error is decided.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    /// For non-2xx: at most [`STATUS_BODY_PREVIEW_BYTES_MAX`] bytes.
    body: Vec<u8>,
}

/// A failed exchange, and whether it failed before any answer byte arrived (then a
/// pooled connection was probably closed by the server meanwhile, and a retry is safe).
struct Failed {
    error: HttpError,
    before_answer: bool,
}

impl Failed {
    fn before_answer(error: HttpError) -> Failed {
        Failed {
            error,
            before_answer: true,
        }
    }

    fn during_answer(error: HttpError) -> Failed {
        Failed {
            error,
            before_answer: false,
        }
    }
}

type PoolKey = (String, u16);

struct Idle {
    conn: Conn,
    since: Instant,
}

/// HTTP/1.1 client with a keep-alive pool, for one shard (not `Send`: each shard owns its
/// own, and no `RefCell` borrow is held across an `.await`).
pub struct HttpClient {
    max_idle_per_host: usize,
    connect_timeout: Duration,
    pool: RefCell<HashMap<PoolKey, Vec<Idle>>>,
}

impl HttpClient {
    /// A client keeping at most `max_idle_per_host` idle connections per host and port
    /// (0 = no keep-alive; capped at [`POOL_IDLE_PER_HOST_MAX`]).
    pub fn new(max_idle_per_host: usize) -> HttpClient {
        HttpClient {
            max_idle_per_host: max_idle_per_host.min(POOL_IDLE_PER_HOST_MAX),
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            pool: RefCell::new(HashMap::new()),
        }
    }

    /// Bounds each TCP connect (the total timeout of a call still applies). Zero keeps the
    /// current value.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> HttpClient {
        if !timeout.is_zero() {
            self.connect_timeout = timeout;
        }
        self
    }

    /// Idle connections currently pooled, all hosts together.
    pub fn idle_connections(&self) -> usize {
        self.pool.borrow().values().map(Vec::len).sum()
    }

    /// Sends `req` and returns its 2xx answer, following redirects, all within `timeout`.
    /// A body over `body_bytes_max` is [`HttpError::TooLarge`]; any other final status is
    /// [`HttpError::Status`].
    pub async fn request(
        &self,
        req: &HttpRequest,
        timeout: Duration,
        body_bytes_max: usize,
    ) -> Result<HttpResponse, HttpError> {
        boltq_shards::timeout(timeout, self.follow(req, body_bytes_max))
            .await
            .unwrap_or(Err(HttpError::Timeout))
    }

    async fn follow(
        &self,
        req: &HttpRequest,
        body_bytes_max: usize,
    ) -> Result<HttpResponse, HttpError> {
        let mut redirected: Option<HttpRequest> = None;
        let mut hops = 0;
        loop {
            let current = redirected.as_ref().unwrap_or(req);
            let answer = self.round_trip(current, body_bytes_max).await?;
            if (200..300).contains(&answer.status) {
                return Ok(HttpResponse {
                    status: answer.status,
                    headers: answer.headers,
                    body: answer.body,
                });
            }
            if hops < REDIRECTS_MAX {
                let location = header_value(&answer.headers, "location");
                if let Some(next) = redirect(current, answer.status, location)? {
                    hops += 1;
                    redirected = Some(next);
                    continue;
                }
            }
            return Err(HttpError::Status {
                code: answer.status,
                body_preview: body_preview(&answer.body),
            });
        }
    }

    /// One request and its answer: on a pooled connection when there is one (sent again on
    /// a fresh one if the pooled one turns out closed), else on a new connection.
    async fn round_trip(
        &self,
        req: &HttpRequest,
        body_bytes_max: usize,
    ) -> Result<Answer, HttpError> {
        let wire = encode_request(req)?;
        let key = (req.url.host.clone(), req.url.port);
        if let Some(conn) = self.take_idle(&key) {
            match self.exchange(conn, &key, &wire, body_bytes_max).await {
                Ok(answer) => return Ok(answer),
                Err(failed) if failed.before_answer => {
                    log::debug!(
                        "pooled connection to {} failed ({}); reconnecting",
                        req.url,
                        failed.error
                    );
                }
                Err(failed) => return Err(failed.error),
            }
        }
        let conn = self.connect(&req.url).await?;
        self.exchange(conn, &key, &wire, body_bytes_max)
            .await
            .map_err(|f| f.error)
    }

    /// Writes `wire` on `conn`, reads the answer, and pools `conn` again if it can carry
    /// another request.
    async fn exchange(
        &self,
        mut conn: Conn,
        key: &PoolKey,
        wire: &[u8],
        body_bytes_max: usize,
    ) -> Result<Answer, Failed> {
        let sent = async {
            conn.write_all(wire).await?;
            conn.flush().await
        };
        sent.await
            .map_err(|e| Failed::before_answer(HttpError::Io(format!("send: {e}"))))?;
        let mut buf = Vec::new();
        let head = read_head(&mut conn, &mut buf).await?;
        let success = (200..300).contains(&head.status);
        let cap = if success {
            body_bytes_max
        } else {
            STATUS_BODY_PREVIEW_BYTES_MAX
        };
        if let Framing::Length(n) = head.framing {
            if success && n > cap as u64 {
                return Err(Failed::during_answer(HttpError::TooLarge {
                    bytes_max: cap,
                }));
            }
        }
        let mut body = Vec::new();
        let read = match BodyDecoder::new(head.framing) {
            None => Ok(()),
            Some(decoder) => read_body(&mut conn, &mut buf, decoder, &mut body, cap).await,
        };
        match read {
            Ok(()) if head.keep_alive && buf.is_empty() => self.put_idle(key, conn),
            Ok(()) => {}
            // An unsuccessful answer keeps the start of its body; the rest is left unread
            // and the connection closed.
            Err(HttpError::TooLarge { .. }) if !success => {}
            Err(e) => return Err(Failed::during_answer(e)),
        }
        Ok(Answer {
            status: head.status,
            headers: head.headers,
            body,
        })
    }

    async fn connect(&self, url: &ParsedUrl) -> Result<Conn, HttpError> {
        let addrs = resolve(&url.host, url.port).await?;
        let mut last = String::new();
        for addr in addrs {
            match connect_tcp(addr, self.connect_timeout).await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = e.to_string(),
            }
        }
        Err(HttpError::Connect(format!("{}: {last}", url.authority())))
    }

    fn take_idle(&self, key: &PoolKey) -> Option<Conn> {
        let mut pool = self.pool.borrow_mut();
        let idle = pool.get_mut(key)?;
        let idle_max = Duration::from_millis(POOL_IDLE_MS_MAX);
        idle.retain(|i| i.since.elapsed() < idle_max);
        let conn = idle.pop().map(|i| i.conn);
        if idle.is_empty() {
            pool.remove(key);
        }
        conn
    }

    fn put_idle(&self, key: &PoolKey, conn: Conn) {
        let mut pool = self.pool.borrow_mut();
        if !pool.contains_key(key) && pool.len() >= POOL_HOSTS_MAX {
            return;
        }
        let idle = pool.entry(key.clone()).or_default();
        if idle.len() < self.max_idle_per_host {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
        if idle.is_empty() {
            pool.remove(key);
        }
    }
}

/// Reads until a final (non-1xx) head has arrived; leaves the bytes after it in `buf`.
async fn read_head(conn: &mut Conn, buf: &mut Vec<u8>) -> Result<Head, Failed> {
    let mut interim = 0;
    loop {
        match parse_head(buf).map_err(Failed::during_answer)? {
            Some((head, len)) if (100..200).contains(&head.status) => {
                interim += 1;
                if head.status == 101 || interim > INTERIM_RESPONSES_MAX {
                    return Err(Failed::during_answer(HttpError::Malformed(format!(
                        "unexpected interim response {}",
                        head.status
                    ))));
                }
                buf.drain(..len);
            }
            Some((head, len)) => {
                buf.drain(..len);
                return Ok(head);
            }
            None => {
                let first = buf.is_empty();
                let fail = |e| {
                    if first {
                        Failed::before_answer(e)
                    } else {
                        Failed::during_answer(e)
                    }
                };
                let n = read_some(conn, buf).await.map_err(fail)?;
                if n == 0 {
                    return Err(fail(HttpError::Io(
                        "connection closed before a complete response head".to_string(),
                    )));
                }
            }
        }
    }
}

/// Feeds `buf` and then further reads to `decoder` until the body ends.
async fn read_body(
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    mut decoder: BodyDecoder,
    body: &mut Vec<u8>,
    bytes_max: usize,
) -> Result<(), HttpError> {
    loop {
        let fed = decoder.feed(buf, body, bytes_max)?;
        buf.drain(..fed.consumed);
        if fed.done {
            return Ok(());
        }
        if read_some(conn, buf).await? == 0 {
            return decoder.finish_at_eof();
        }
    }
}

/// Appends up to [`READ_BYTES_MAX`] bytes from `conn` to `buf`; 0 at the end of stream.
async fn read_some(conn: &mut Conn, buf: &mut Vec<u8>) -> Result<usize, HttpError> {
    let start = buf.len();
    buf.resize(start + READ_BYTES_MAX, 0);
    let read = conn.read(&mut buf[start..]).await;
    let n = *read.as_ref().unwrap_or(&0);
    buf.truncate(start + n);
    read.map_err(|e| HttpError::Io(format!("receive: {e}")))
}

/// Addresses for `host`: literal IPs and `localhost` directly, other names through the
/// system resolver on the blocking-thread pool.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, HttpError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if host == "localhost" {
        return Ok(vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)]);
    }
    let name = host.to_string();
    let found = boltq_shards::spawn_blocking(move || {
        (name.as_str(), port)
            .to_socket_addrs()
            .map(|addrs| addrs.take(RESOLVED_ADDRS_MAX).collect::<Vec<_>>())
    })
    .await
    .map_err(|e| HttpError::Connect(format!("resolve {host}: {e}")))?;
    if found.is_empty() {
        return Err(HttpError::Connect(format!("resolve {host}: no addresses")));
    }
    Ok(found)
}

/// A tiny blocking HTTP server on std threads for tests of this client and its users.
#[cfg(test)]
pub(crate) mod test_server {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// One request as received.
    #[derive(Debug, Clone)]
    pub struct Received {
        /// Request line and headers, as sent.
        pub head: String,
        pub body: Vec<u8>,
        /// Index of the TCP connection it came on (0-based, in accept order).
        pub connection: usize,
    }

    impl Received {
        pub fn request_line(&self) -> &str {
            self.head.lines().next().unwrap_or_default()
        }

        /// The value of header `name` (case-insensitive).
        pub fn header(&self, name: &str) -> Option<String> {
            self.head.lines().skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        }
    }

    /// What the server does with one request.
    pub enum Reply {
        /// Writes these bytes and keeps the connection open.
        Raw(Vec<u8>),
        /// Writes these bytes and closes the connection.
        RawThenClose(Vec<u8>),
        /// Never answers; waits for the client to go away.
        Silent,
    }

    /// A 200 answer with a JSON body and `Content-Length`.
    pub fn json(body: &str) -> Reply {
        status(200, body)
    }

    /// An answer with `code` and a text body.
    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Raw(
            format!(
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }

    type Handler = dyn Fn(&Received) -> Reply + Send + Sync;

    /// A server on 127.0.0.1; stops accepting when dropped.
    pub struct TestServer {
        pub addr: SocketAddr,
        accepted: Arc<AtomicUsize>,
        received: Arc<Mutex<Vec<Received>>>,
        stop: Arc<AtomicBool>,
    }

    impl TestServer {
        pub fn url(&self) -> String {
            format!("http://{}", self.addr)
        }

        /// TCP connections accepted so far.
        pub fn connections(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }

        pub fn received(&self) -> Vec<Received> {
            self.received.lock().unwrap().clone()
        }
    }

    impl Drop for TestServer {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(self.addr);
        }
    }

    /// Serves every connection on its own thread, answering each request with `handler`.
    pub fn serve(handler: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = TestServer {
            addr: listener.local_addr().unwrap(),
            accepted: Arc::default(),
            received: Arc::default(),
            stop: Arc::default(),
        };
        let handler: Arc<Handler> = Arc::new(handler);
        let (accepted, received, stop) = (
            server.accepted.clone(),
            server.received.clone(),
            server.stop.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let connection = accepted.fetch_add(1, Ordering::SeqCst);
                let (handler, received) = (handler.clone(), received.clone());
                std::thread::spawn(move || {
                    serve_connection(stream, connection, &*handler, &received);
                });
            }
        });
        server
    }

    fn serve_connection(
        mut stream: TcpStream,
        connection: usize,
        handler: &Handler,
        received: &Mutex<Vec<Received>>,
    ) {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut buf = Vec::new();
        loop {
            let Some(request) = read_request(&mut stream, &mut buf, connection) else {
                return;
            };
            received.lock().unwrap().push(request.clone());
            match handler(&request) {
                Reply::Raw(bytes) => {
                    if stream.write_all(&bytes).is_err() {
                        return;
                    }
                }
                Reply::RawThenClose(bytes) => {
                    let _ = stream.write_all(&bytes);
                    return;
                }
                Reply::Silent => {
                    let mut sink = [0u8; 1024];
                    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
                    return;
                }
            }
        }
    }

    fn read_request(
        stream: &mut TcpStream,
        buf: &mut Vec<u8>,
        connection: usize,
    ) -> Option<Received> {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let mut request = Received {
            head,
            body: Vec::new(),
            connection,
        };
        let length: usize = request
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
        request.body = buf.drain(..length).collect();
        Some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::test_server::{self, Reply};
    use super::*;

    #[test]
    fn decode_response_reads_whole_answers_and_survives_random_and_mutated_bytes() {
        let ok = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(
            decode_response(ok, 1024).unwrap(),
            Some((200, b"abc".to_vec()))
        );
        assert_eq!(decode_response(&ok[..ok.len() - 3], 1024).unwrap(), None);
        let big = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n";
        let mut big = big.to_vec();
        big.extend(std::iter::repeat_n(b'x', 5000));
        assert!(matches!(
            decode_response(&big, 100),
            Err(HttpError::TooLarge { .. })
        ));
        let mut rng = boltq_io::testutil::Rng::new(7);
        for _ in 0..20_000 {
            let mut input = if rng.below(2) == 0 {
                ok.to_vec()
            } else {
                big.clone()
            };
            for _ in 0..=rng.below(4) {
                let at = rng.below(input.len() as u64) as usize;
                input[at] = rng.next_u64() as u8;
            }
            input.truncate(rng.below(input.len() as u64 + 1) as usize);
            if let Ok(Some((status, body))) = decode_response(&input, 1024) {
                assert!(body.len() <= 1024);
                assert!(status <= 999);
            }
        }
    }
    use boltq_io::testutil::Rng;

    fn url(s: &str) -> ParsedUrl {
        parse_url(s).unwrap()
    }

    /// Runs `f` on a temporary glommio executor and returns its result.
    fn run<T: Send + 'static>(
        f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
    ) -> T {
        boltq_shards::block_on("http-client-test", f).unwrap()
    }

    async fn get(client: &HttpClient, u: &str) -> Result<HttpResponse, HttpError> {
        let req = HttpRequest::get(url(u));
        client.request(&req, Duration::from_secs(5), 1 << 20).await
    }

    #[test]
    fn parse_url_splits_host_port_and_path() {
        let u = url("http://Example.COM:8080/a/b?x=1#frag");
        assert_eq!(u.host, "example.com");
        assert_eq!(u.port, 8080);
        assert_eq!(u.path_and_query, "/a/b?x=1");
        assert_eq!(u.to_string(), "http://example.com:8080/a/b?x=1");
        let u = url("HTTP://10.0.0.1");
        assert_eq!(
            (u.host.as_str(), u.port, u.path_and_query.as_str()),
            ("10.0.0.1", 80, "/")
        );
        assert_eq!(u.authority(), "10.0.0.1");
        assert_eq!(url("http://h?q=1").path_and_query, "/?q=1");
        assert_eq!(url("http://h:/").port, 80);
        let v6 = url("http://[::1]:9000/x");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9000));
        assert_eq!(v6.authority(), "[::1]:9000");
    }

    #[test]
    fn parse_url_refuses_what_it_cannot_serve() {
        let err = |s: &str| match parse_url(s) {
            Err(HttpError::Url(m)) => m,
            other => panic!("{s}: {other:?}"),
        };
        assert!(err("https://h/x").contains("https is not supported"));
        assert!(err("ftp://h/x").contains("scheme"));
        assert!(err("h/x").contains("absolute"));
        assert!(err("http://user:pw@h/").contains("credentials"));
        assert!(err("http:///x").contains("empty"));
        assert!(err("http://h:0/").contains("port"));
        assert!(err("http://h:70000/").contains("port"));
        assert!(err("http://h:+80/").contains("port"));
        assert!(err("http://h o/").contains("host"));
        assert!(err("http://[::1/").contains("unclosed"));
        assert!(err("http://[nope]/").contains("IPv6"));
        assert!(err("http://h/a b").contains("percent-encoded"));
        assert!(err("http://h/a\r\nX: y").contains("percent-encoded"));
        let long = format!("http://h/{}", "a".repeat(URL_BYTES_MAX));
        assert!(err(&long).contains("over"));
    }

    #[test]
    fn percent_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(percent_encode_query("aZ09-._~"), "aZ09-._~");
        assert_eq!(
            percent_encode_query("a b/c?d=e&f+g#%"),
            "a%20b%2Fc%3Fd%3De%26f%2Bg%23%25"
        );
        assert_eq!(percent_encode_query("é"), "%C3%A9");
        assert_eq!(percent_encode_query(""), "");
    }

    #[test]
    fn locations_resolve_against_the_answering_url() {
        let base = url("http://h:81/a/b?q=1");
        assert_eq!(
            resolve_location(&base, "/c").unwrap().to_string(),
            "http://h:81/c"
        );
        assert_eq!(
            resolve_location(&base, "c?x").unwrap().to_string(),
            "http://h:81/a/c?x"
        );
        assert_eq!(
            resolve_location(&base, "//o/p").unwrap().to_string(),
            "http://o/p"
        );
        assert_eq!(
            resolve_location(&base, "HTTP://o:2/").unwrap().to_string(),
            "http://o:2/"
        );
        assert!(matches!(
            resolve_location(&base, "https://o/"),
            Err(HttpError::Url(_))
        ));
    }

    #[test]
    fn redirects_drop_credentials_when_leaving_the_origin() {
        let mut req = HttpRequest::get(url("http://h/a"));
        req.headers = vec![
            ("Authorization".into(), "Bearer s".into()),
            ("Cookie".into(), "c=1".into()),
            ("Accept".into(), "application/json".into()),
        ];
        let same = redirect(&req, 302, Some("/b")).unwrap().unwrap();
        assert_eq!(same.headers.len(), 3);
        let other = redirect(&req, 301, Some("http://o/b")).unwrap().unwrap();
        assert_eq!(
            other.headers,
            vec![("Accept".into(), "application/json".into())]
        );
        assert!(redirect(&req, 302, None).unwrap().is_none());
        assert!(redirect(&req, 304, Some("/b")).unwrap().is_none());
        let mut post = req.clone();
        post.method = Method::Post;
        assert!(redirect(&post, 302, Some("/b")).unwrap().is_none());
        assert_eq!(
            redirect(&post, 307, Some("/b")).unwrap().unwrap().method,
            Method::Post
        );
    }

    #[test]
    fn requests_are_encoded_with_host_headers_and_length() {
        let mut req = HttpRequest::get(url("http://h:8080/p?q=1"));
        req.headers
            .push(("Accept".into(), "application/json".into()));
        let wire = encode_request(&req).unwrap();
        assert_eq!(
            wire,
            b"GET /p?q=1 HTTP/1.1\r\nHost: h:8080\r\nAccept: application/json\r\n\r\n"
        );
        req.method = Method::Post;
        req.body = b"{}".to_vec();
        let wire = String::from_utf8(encode_request(&req).unwrap()).unwrap();
        assert!(wire.starts_with("POST /p?q=1 HTTP/1.1\r\n"), "{wire}");
        assert!(wire.ends_with("Content-Length: 2\r\n\r\n{}"), "{wire}");
    }

    #[test]
    fn request_headers_that_could_break_framing_are_refused() {
        for (name, value) in [
            ("X-A", "a\r\nEvil: 1"),
            ("X-A", "a\nb"),
            ("Bad Name", "v"),
            ("", "v"),
            ("content-length", "5"),
            ("Host", "other"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
        ] {
            let mut req = HttpRequest::get(url("http://h/"));
            req.headers.push((name.into(), value.into()));
            assert!(
                matches!(encode_request(&req), Err(HttpError::Malformed(_))),
                "{name:?}: {value:?}"
            );
        }
        let mut req = HttpRequest::get(url("http://h/"));
        req.headers = vec![("X".into(), "v".into()); REQUEST_HEADERS_MAX + 1];
        assert!(matches!(encode_request(&req), Err(HttpError::Malformed(_))));
    }

    #[test]
    fn heads_give_status_framing_and_keep_alive() {
        let (head, len) = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(
            (head.status, head.framing, head.keep_alive, len),
            (200, Framing::Length(5), true, 38)
        );
        let parse = |raw: &str| parse_head(raw.as_bytes()).unwrap().unwrap().0;
        let h = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
        let h = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        let h = parse("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        let h = parse("HTTP/1.1 204 No\r\nContent-Length: 9\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Empty, true));
        let h =
            parse("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 1\r\n\r\n");
        assert!(!h.keep_alive);
        let h = parse("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n");
        assert!(!h.keep_alive);
        let h = parse("HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(3));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-"), Ok(None));
        assert_eq!(parse_head(b""), Ok(None));
    }

    #[test]
    fn bad_heads_are_malformed() {
        for raw in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
            "HTTP/1.1 2x0 OK\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(raw.as_bytes()), Err(HttpError::Malformed(_))),
                "{raw:?}"
            );
        }
        let mut many = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..=RESPONSE_HEADERS_MAX {
            many.push_str(&format!("X-{i}: v\r\n"));
        }
        many.push_str("\r\n");
        assert!(matches!(
            parse_head(many.as_bytes()),
            Err(HttpError::Malformed(_))
        ));
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.resize(RESPONSE_HEAD_BYTES_MAX, b'a');
        assert!(matches!(parse_head(&long), Err(HttpError::Malformed(_))));
    }

    /// Chunked encoding of `body` with the chunk sizes `rng` picks, plus a trailer.
    fn chunked(body: &[u8], rng: &mut Rng) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let n = (1 + rng.below(40) as usize).min(rest.len());
            out.extend_from_slice(format!("{n:x};ext=1\r\n").as_bytes());
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
        out
    }

    /// Feeds `wire` to a decoder in pieces sized by `rng`, as reads would deliver them.
    fn decode_in_pieces(
        framing: Framing,
        wire: &[u8],
        rng: &mut Rng,
        cap: usize,
    ) -> Result<(Vec<u8>, usize), HttpError> {
        let mut decoder = BodyDecoder::new(framing).unwrap();
        let (mut buf, mut out, mut sent) = (Vec::new(), Vec::new(), 0);
        loop {
            let n = (rng.below(17) as usize).min(wire.len() - sent);
            buf.extend_from_slice(&wire[sent..sent + n]);
            sent += n;
            let fed = decoder.feed(&buf, &mut out, cap)?;
            buf.drain(..fed.consumed);
            if fed.done {
                return Ok((out, buf.len() + wire.len() - sent));
            }
            if sent == wire.len() && n == 0 {
                decoder.finish_at_eof()?;
                return Ok((out, buf.len()));
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_read_boundaries() {
        for seed in 1..200 {
            let mut rng = Rng::new(seed);
            let body: Vec<u8> = (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect();
            let mut wire = chunked(&body, &mut rng);
            wire.extend_from_slice(b"NEXT");
            let (out, left) = decode_in_pieces(Framing::Chunked, &wire, &mut rng, 1 << 20)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(out, body, "seed {seed}");
            assert_eq!(
                left, 4,
                "seed {seed}: bytes after the body are not consumed"
            );
        }
    }

    #[test]
    fn length_and_until_close_bodies_decode() {
        let mut rng = Rng::new(7);
        let (out, left) = decode_in_pieces(Framing::Length(5), b"helloXY", &mut rng, 100).unwrap();
        assert_eq!((out.as_slice(), left), (&b"hello"[..], 2));
        let (out, _) = decode_in_pieces(Framing::UntilClose, b"to the end", &mut rng, 100).unwrap();
        assert_eq!(out, b"to the end");
        let cut = decode_in_pieces(Framing::Length(9), b"short", &mut rng, 100);
        assert!(matches!(cut, Err(HttpError::Malformed(_))));
    }

    #[test]
    fn bodies_stop_at_the_cap_keeping_a_prefix() {
        for (seed, framing) in [
            (1, Framing::Chunked),
            (2, Framing::Length(1000)),
            (3, Framing::UntilClose),
        ] {
            let mut rng = Rng::new(seed);
            let body = vec![b'z'; 1000];
            let wire = if framing == Framing::Chunked {
                chunked(&body, &mut rng)
            } else {
                body.clone()
            };
            let mut decoder = BodyDecoder::new(framing).unwrap();
            let mut out = Vec::new();
            let err = decoder.feed(&wire, &mut out, 100).unwrap_err();
            assert_eq!(err, HttpError::TooLarge { bytes_max: 100 }, "{framing:?}");
            assert_eq!(out.len(), 100, "{framing:?}");
        }
    }

    #[test]
    fn broken_chunked_bodies_are_malformed() {
        for wire in [
            &b"zz\r\nab\r\n0\r\n\r\n"[..],
            b"2\r\nabXY0\r\n\r\n",
            b"\r\n",
            b"1000000000000000\r\n",
        ] {
            let mut decoder = BodyDecoder::new(Framing::Chunked).unwrap();
            let got = decoder.feed(wire, &mut Vec::new(), 1 << 20);
            assert!(
                matches!(got, Err(HttpError::Malformed(_))),
                "{wire:?}: {got:?}"
            );
        }
        let mut decoder = BodyDecoder::new(Framing::Chunked).unwrap();
        let long_line = vec![b'1'; CHUNK_LINE_BYTES_MAX + 1];
        assert!(matches!(
            decoder.feed(&long_line, &mut Vec::new(), 10),
            Err(HttpError::Malformed(_))
        ));
        let mut decoder = BodyDecoder::new(Framing::Chunked).unwrap();
        let mut trailers = b"0\r\n".to_vec();
        while trailers.len() < TRAILER_BYTES_MAX + 100 {
            trailers.extend_from_slice(b"X-T: 1\r\n");
        }
        assert!(matches!(
            decoder.feed(&trailers, &mut Vec::new(), 10),
            Err(HttpError::Malformed(_))
        ));
        let mut decoder = BodyDecoder::new(Framing::Chunked).unwrap();
        let fed = decoder.feed(b"3\r\nab", &mut Vec::new(), 10).unwrap();
        assert!(!fed.done);
        assert!(matches!(
            decoder.finish_at_eof(),
            Err(HttpError::Malformed(_))
        ));
    }

    #[test]
    fn previews_are_bounded_and_valid_text() {
        assert_eq!(body_preview(b"oops"), "oops");
        let long = "é".repeat(STATUS_BODY_PREVIEW_BYTES_MAX);
        let p = body_preview(long.as_bytes());
        assert!(
            p.len() <= STATUS_BODY_PREVIEW_BYTES_MAX && p.len() > STATUS_BODY_PREVIEW_BYTES_MAX - 4
        );
        assert!(p.chars().all(|c| c == 'é'));
    }

    #[test]
    fn redirects_are_followed_up_to_the_limit() {
        let server = test_server::serve(|r| match r.request_line() {
            l if l.starts_with("GET /start ") => Reply::Raw(
                b"HTTP/1.1 302 Found\r\nLocation: /end\r\nContent-Length: 3\r\n\r\nbye".to_vec(),
            ),
            l if l.starts_with("GET /end ") => test_server::json("{\"ok\":1}"),
            _ => Reply::Raw(
                b"HTTP/1.1 301 Moved\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".to_vec(),
            ),
        });
        let base = server.url();
        let (ok, looped) = run(move || {
            Box::pin(async move {
                let client = HttpClient::new(4);
                let ok = get(&client, &format!("{base}/start")).await;
                let looped = get(&client, &format!("{base}/loop")).await;
                (ok, looped)
            })
        });
        assert_eq!(ok.unwrap().body, b"{\"ok\":1}");
        assert!(
            matches!(looped, Err(HttpError::Status { code: 301, .. })),
            "{looped:?}"
        );
        let loops = server
            .received()
            .iter()
            .filter(|r| r.request_line().starts_with("GET /loop "))
            .count();
        assert_eq!(loops, 1 + REDIRECTS_MAX);
        assert_eq!(
            server.connections(),
            1,
            "redirect answers with a body still keep the connection"
        );
    }

    #[test]
    fn a_pooled_connection_closed_by_the_server_is_replaced() {
        // Closes after every answer without saying so: the second call finds its pooled
        // connection dead and must send again on a new one.
        let server = test_server::serve(|_| {
            Reply::RawThenClose(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
        });
        let base = server.url();
        let results = run(move || {
            Box::pin(async move {
                let client = HttpClient::new(4);
                let mut results = Vec::new();
                for _ in 0..3 {
                    results.push(get(&client, &base).await.map(|r| r.body));
                }
                results
            })
        });
        assert!(
            results.iter().all(|r| r.as_deref() == Ok(&b"ok"[..])),
            "{results:?}"
        );
        assert_eq!(server.connections(), 3);
    }

    #[test]
    fn a_connection_that_broke_http_is_not_pooled() {
        let server = test_server::serve(|r| {
            if r.connection == 0 {
                Reply::Raw(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok".to_vec(),
                )
            } else {
                test_server::json("{}")
            }
        });
        let base = server.url();
        let (first, second, idle) = run(move || {
            Box::pin(async move {
                let client = HttpClient::new(4);
                let first = get(&client, &base).await;
                let second = get(&client, &base).await;
                (first, second, client.idle_connections())
            })
        });
        assert!(matches!(first, Err(HttpError::Malformed(_))), "{first:?}");
        assert_eq!(second.unwrap().body, b"{}");
        assert_eq!(server.connections(), 2);
        assert_eq!(idle, 1);
    }

    #[test]
    fn error_answers_keep_a_bounded_preview_and_the_status() {
        let big = "e".repeat(100_000);
        let server = test_server::serve(move |_| test_server::status(503, &big));
        let base = server.url();
        let got = run(move || Box::pin(async move { get(&HttpClient::new(4), &base).await }));
        match got {
            Err(HttpError::Status {
                code: 503,
                body_preview,
            }) => {
                assert_eq!(body_preview.len(), STATUS_BODY_PREVIEW_BYTES_MAX);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn post_bodies_go_out_with_their_length() {
        let server = test_server::serve(|r| test_server::json(&String::from_utf8_lossy(&r.body)));
        let base = server.url();
        let echoed = run(move || {
            Box::pin(async move {
                let mut req = HttpRequest::get(url(&base));
                req.method = Method::Post;
                req.body = b"{\"n\":1}".to_vec();
                req.headers
                    .push(("Content-Type".into(), "application/json".into()));
                HttpClient::new(1)
                    .request(&req, Duration::from_secs(5), 1024)
                    .await
            })
        });
        assert_eq!(echoed.unwrap().body, b"{\"n\":1}");
        let received = &server.received()[0];
        assert_eq!(received.request_line(), "POST / HTTP/1.1");
        assert_eq!(received.header("content-length").as_deref(), Some("7"));
        assert_eq!(
            received.header("content-type").as_deref(),
            Some("application/json")
        );
    }
}
