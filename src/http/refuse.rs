//! Answering a request the server refuses to read (413, 408, a malformed head) so that the
//! client actually gets the answer.
//!
//! Closing a socket whose receive buffer still holds unread bytes makes the kernel send a
//! reset instead of a FIN, and a client still sending its body then loses the answer to
//! "connection reset" (issue 16: an oversized body's 413). So: write the answer, half-close
//! (FIN: nothing more from us), then read and discard what the client still sends until it
//! closes, `LINGER_BYTES_MAX` bytes are read, or `LINGER_MS` passes — bounded, so a client
//! that keeps sending cannot hold the connection.

use super::response::{encode_response, Response};
use boltq_io::listener::Conn;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::time::{Duration, Instant};

/// Most bytes read and discarded after a refusal before the socket is closed anyway.
pub const LINGER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Longest wait for the client to finish sending after a refusal.
pub const LINGER_MS: u64 = 2_000;

/// Writes `response` (the connection ends after it) and lingers as the module says.
pub async fn refuse(conn: &mut Conn, response: &Response) {
    let mut out = Vec::new();
    encode_response(response, false, true, &mut out);
    if conn.write_all(&out).await.is_err() || conn.close().await.is_err() {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(LINGER_MS);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut discarded = 0usize;
    while discarded < LINGER_BYTES_MAX {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match boltq_shards::timeout(left, conn.read(&mut chunk)).await {
            Some(Ok(n)) if n > 0 => discarded += n,
            // The client closed, the read failed, or the time is up.
            _ => return,
        }
    }
}
