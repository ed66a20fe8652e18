//! Reading requests off a connection: keep-alive, pipelining, read and idle deadlines.

use super::request::{parse_request, Parsed, Request};
use super::response::Response;
use boltq_io::listener::Conn;
use futures_lite::AsyncReadExt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Bytes asked of the socket per read.
pub const READ_CHUNK_BYTES: usize = 4096;
/// A started request must arrive completely within this time.
pub const READ_TIMEOUT_MS: u64 = 10_000;
/// An idle keep-alive connection is closed after this time.
pub const IDLE_TIMEOUT_MS: u64 = 60_000;

/// Reads one request (keeping pipelined bytes in `buf`). `Ok(None)` when the client closed,
/// went idle, or `stop` fired between requests; `Err` carries the response to send before
/// closing.
pub async fn read_request(
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
