//! HTTP/1.1 connection handling on `httparse`: keep-alive, pipelining, bounded heads,
//! read and idle deadlines. Request bodies are refused until routes need them.

use super::routes::{self, Response};
use crate::server::state::ServerState;
use boltq_io::listener::Conn;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Largest request head (request line + headers).
pub const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most headers in one request.
pub const HEADERS_MAX: usize = 64;
/// A started request must arrive completely within this time.
pub const READ_TIMEOUT_MS: u64 = 10_000;
/// An idle keep-alive connection is closed after this time.
pub const IDLE_TIMEOUT_MS: u64 = 60_000;

/// Serves requests on `conn` until the client closes, a deadline passes, an error, or
/// `stop` resolves while the connection waits for a new request (shutdown must not wait for
/// idle keep-alive clients).
pub async fn serve(mut conn: Conn, state: Arc<ServerState>, stop: impl Future<Output = ()>) {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut stop = std::pin::pin!(stop);
    loop {
        let head = match read_head(&mut conn, &mut buf, stop.as_mut()).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(response) => {
                let _ = write_response(&mut conn, &response, false, true).await;
                return;
            }
        };
        let response = routes::route(&head.method, &head.path, &state);
        if write_response(&mut conn, &response, head.is_head, head.close)
            .await
            .is_err()
            || head.close
        {
            return;
        }
    }
}

struct Head {
    method: String,
    path: String,
    is_head: bool,
    close: bool,
}

/// Reads one request head from `conn` (keeping pipelined bytes in `buf`). `Ok(None)` when
/// the client closed, went idle, or `stop` fired between requests; `Err` carries the error
/// response to send before closing.
async fn read_head(
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    mut stop: Pin<&mut impl Future<Output = ()>>,
) -> Result<Option<Head>, Response> {
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            if let Some(head) = parse_head(buf)? {
                return Ok(Some(head));
            }
        }
        let idle = buf.is_empty();
        let timeout_ms = if idle {
            IDLE_TIMEOUT_MS
        } else {
            READ_TIMEOUT_MS
        };
        let read = boltq_shards::timeout(Duration::from_millis(timeout_ms), conn.read(&mut chunk));
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
            None => return Err(error(408, "request not received in time")),
            Some(Ok(0)) | Some(Err(_)) => return Ok(None),
            Some(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > HEAD_BYTES_MAX && parse_head(buf)?.is_none() {
            return Err(error(431, "request head too large"));
        }
    }
}

fn parse_head(buf: &mut Vec<u8>) -> Result<Option<Head>, Response> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(error(431, "too many headers")),
        Err(e) => return Err(error(400, &format!("malformed request: {e}"))),
    };
    let method = req.method.unwrap_or("").to_string();
    let path = req.path.unwrap_or("").to_string();
    let http10 = req.version == Some(0);
    let mut close = http10;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        match name.as_str() {
            "connection" if value.contains("close") => close = true,
            "connection" if value.contains("keep-alive") => close = false,
            "content-length" if value.trim() != "0" => {
                return Err(error(413, "request bodies are not accepted here"))
            }
            "transfer-encoding" => {
                return Err(error(501, "chunked request bodies are not supported"))
            }
            _ => {}
        }
    }
    buf.drain(..used);
    Ok(Some(Head {
        is_head: method == "HEAD",
        method,
        path,
        close,
    }))
}

fn error(status: u16, message: &str) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: serde_json::json!({ "error": message })
            .to_string()
            .into_bytes(),
    }
}

async fn write_response(
    conn: &mut Conn,
    r: &Response,
    head_only: bool,
    close: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(&r.body);
    }
    conn.write_all(&out).await?;
    conn.flush().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}
