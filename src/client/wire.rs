//! The client's half of the wire: writing frames, reading them back in order, setting pushes
//! aside, deadlines, and the raw API for tests that need exact bytes or pipelining.

use super::error::{ClientError, Result};
use super::types::Push;
use super::Client;
use crate::queue::protocol::frame::{self, status, PAYLOAD_BYTES_MAX};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Most pushes held for [`Client::next_push`] while nobody takes them. Beyond this (or
/// [`PUSH_QUEUE_BYTES_MAX`]) new pushes are dropped and counted: pushes are at-most-once in
/// v1 anyway (the server drops them for a full 100-slot subscriber buffer), and a reader
/// that only ever sends commands must not grow without bound.
pub const PUSH_QUEUE_FRAMES_MAX: usize = 1024;
/// Most payload bytes held in the push queue.
pub const PUSH_QUEUE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Socket read size; the server's buffers are 64 KiB too.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A frame as read: status (or command) byte and payload.
pub type RawFrame = (u8, Vec<u8>);

/// Pushes waiting for [`Client::next_push`], bounded by count and payload bytes.
#[derive(Default)]
pub(super) struct PushQueue {
    /// Each push with the size of the frame payload it came in.
    items: VecDeque<(Push, usize)>,
    payload_bytes: usize,
    dropped: u64,
}

impl PushQueue {
    fn offer(&mut self, push: Push, frame_bytes: usize) {
        if self.items.len() >= PUSH_QUEUE_FRAMES_MAX
            || self.payload_bytes + frame_bytes > PUSH_QUEUE_BYTES_MAX
        {
            self.dropped += 1;
            return;
        }
        self.payload_bytes += frame_bytes;
        self.items.push_back((push, frame_bytes));
    }

    fn take(&mut self) -> Option<Push> {
        let (push, frame_bytes) = self.items.pop_front()?;
        self.payload_bytes -= frame_bytes;
        Some(push)
    }
}

impl Client {
    // ---- raw API -------------------------------------------------------------------------

    /// Sends one frame without waiting; read its reply with [`Client::read_frame`]. Typed
    /// calls refuse to run until every raw send's reply has been read, so replies cannot be
    /// paired with the wrong request.
    pub fn send_frame(&mut self, code: u8, payload: &[u8]) -> Result<()> {
        self.check_usable()?;
        let bytes = encode_checked(&[(code, payload)])?;
        let written = self.write_bytes(&bytes);
        self.outstanding += 1;
        self.note(written)
    }

    /// Writes arbitrary bytes (truncated or oversized frames, garbage). Not counted as a
    /// request; read whatever comes back with [`Client::read_wire_frame`].
    pub fn send_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.check_usable()?;
        let written = self.write_bytes(bytes);
        self.note(written)
    }

    /// The next reply (any status), setting pushes aside for [`Client::next_push`].
    pub fn read_frame(&mut self) -> Result<RawFrame> {
        self.check_usable()?;
        let deadline = self.reply_deadline(Duration::ZERO);
        let reply = self.next_reply(deadline);
        self.outstanding = self.outstanding.saturating_sub(1);
        self.note(reply)
    }

    /// The next frame off the socket, push or reply, for tests of frame order. Frames
    /// already set aside (pushes, early replies) are not returned here.
    pub fn read_wire_frame(&mut self) -> Result<RawFrame> {
        self.check_usable()?;
        let deadline = self.reply_deadline(Duration::ZERO);
        let frame = self
            .read_wire(deadline)
            .and_then(|f| f.ok_or_else(timed_out));
        self.note(frame)
    }

    /// Sends every frame in one write, then reads one reply per frame, in order. The whole
    /// batch is written before any reply is read, so keep a batch's replies within what the
    /// socket buffers hold (a few MiB): a server that answers in order stops reading while
    /// its replies are not drained.
    pub fn pipeline(&mut self, frames: &[(u8, &[u8])]) -> Result<Vec<RawFrame>> {
        self.check_no_raw_replies_pending()?;
        let bytes = encode_checked(frames)?;
        let written = self.write_bytes(&bytes);
        self.note(written)?;
        self.outstanding += frames.len();
        let mut replies = Vec::with_capacity(frames.len());
        for _ in frames {
            let deadline = self.reply_deadline(Duration::ZERO);
            let reply = self.next_reply(deadline);
            replies.push(self.note(reply)?);
            self.outstanding -= 1;
        }
        Ok(replies)
    }

    // ---- pushes --------------------------------------------------------------------------

    /// The next pub/sub push: one already set aside, or the next to arrive within
    /// `timeout_ms` (`Ok(None)` when none did; the connection stays usable). Replies to raw
    /// sends arriving meanwhile are kept for [`Client::read_frame`].
    pub fn next_push(&mut self, timeout_ms: u64) -> Result<Option<Push>> {
        if let Some(push) = self.pushes.take() {
            return Ok(Some(push));
        }
        self.check_usable()?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let push = self.wait_for_push(deadline);
        self.note(push)
    }

    /// Pushes set aside and not yet taken.
    pub fn pending_pushes(&self) -> usize {
        self.pushes.items.len()
    }

    /// Pushes dropped because the push queue was full (see [`PUSH_QUEUE_FRAMES_MAX`]).
    pub fn dropped_pushes(&self) -> u64 {
        self.pushes.dropped
    }

    fn wait_for_push(&mut self, deadline: Instant) -> Result<Option<Push>> {
        loop {
            let Some((code, payload)) = self.read_wire(Some(deadline))? else {
                return Ok(None);
            };
            if code == status::OK && Push::is_push(&payload) {
                return Ok(Some(Push::parse(&String::from_utf8_lossy(&payload))?));
            }
            if self.early_replies.len() >= self.outstanding {
                return Err(ClientError::Protocol(format!(
                    "unsolicited frame with status 0x{code:02x} while waiting for a push"
                )));
            }
            self.early_replies.push_back((code, payload));
        }
    }

    // ---- request/reply used by the typed calls -------------------------------------------

    /// Sends one request and returns its reply; `extra_wait` extends the reply timeout (for
    /// long-polls).
    pub(super) fn call(&mut self, code: u8, body: &[u8], extra_wait: Duration) -> Result<RawFrame> {
        self.check_no_raw_replies_pending()?;
        let bytes = encode_checked(&[(code, body)])?;
        let written = self.write_bytes(&bytes);
        self.note(written)?;
        let deadline = self.reply_deadline(extra_wait);
        let reply = self.next_reply(deadline);
        self.note(reply)
    }

    fn next_reply(&mut self, deadline: Option<Instant>) -> Result<RawFrame> {
        if let Some(reply) = self.early_replies.pop_front() {
            return Ok(reply);
        }
        loop {
            let (code, payload) = self.read_wire(deadline)?.ok_or_else(timed_out)?;
            if code == status::OK && Push::is_push(&payload) {
                let push = Push::parse(&String::from_utf8_lossy(&payload))?;
                self.pushes.offer(push, payload.len());
                continue;
            }
            return Ok((code, payload));
        }
    }

    /// The next frame off the socket, or `None` once `deadline` passes. A partial frame stays
    /// buffered across a timeout, so nothing is lost by giving up early.
    fn read_wire(&mut self, deadline: Option<Instant>) -> Result<Option<RawFrame>> {
        loop {
            let unread = &self.read_buf[self.read_pos..];
            match frame::decode(unread) {
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
                Ok(Some((f, used))) => {
                    let out = (f.code, f.payload.to_vec());
                    self.consume_buffered(used);
                    return Ok(Some(out));
                }
                Ok(None) => {}
            }
            let timeout = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
            };
            self.stream.set_read_timeout(timeout)?;
            self.fill_buffer()?;
        }
    }

    /// Reads what the socket has into the buffer. A timeout returns normally (the caller
    /// re-checks its deadline); end of stream is an error because a reply was expected.
    fn fill_buffer(&mut self) -> Result<()> {
        let filled = self.read_buf.len();
        self.read_buf.resize(filled + READ_CHUNK_BYTES, 0);
        let got = self.stream.read(&mut self.read_buf[filled..]);
        let n = *got.as_ref().unwrap_or(&0);
        self.read_buf.truncate(filled + n);
        match got {
            Ok(0) => Err(ClientError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ))),
            Ok(_) => Ok(()),
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn consume_buffered(&mut self, used: usize) {
        self.read_pos += used;
        if self.read_pos == self.read_buf.len() {
            self.read_buf.clear();
            self.read_pos = 0;
        } else if self.read_pos >= READ_CHUNK_BYTES {
            // Shift the unread tail down only now and then, not after every frame of a
            // pipelined batch.
            self.read_buf.drain(..self.read_pos);
            self.read_pos = 0;
        }
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    fn reply_deadline(&self, extra_wait: Duration) -> Option<Instant> {
        self.reply_timeout.map(|t| Instant::now() + t + extra_wait)
    }

    /// Records an error that leaves the connection out of step, so later calls fail fast
    /// instead of pairing a late reply with the wrong request.
    fn note<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            if e.breaks_connection() && self.broken.is_none() {
                self.broken = Some(e.to_string());
            }
        }
        result
    }

    fn check_usable(&self) -> Result<()> {
        match &self.broken {
            None => Ok(()),
            Some(reason) => Err(ClientError::Io(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("connection unusable after an earlier error ({reason}); reconnect"),
            ))),
        }
    }

    fn check_no_raw_replies_pending(&self) -> Result<()> {
        self.check_usable()?;
        if self.outstanding > 0 {
            return Err(ClientError::InvalidArgument(format!(
                "{} raw request(s) still await read_frame; their replies come first",
                self.outstanding
            )));
        }
        Ok(())
    }
}

/// Encodes frames back to back, refusing payloads over the protocol limit (the codec would
/// panic: the server closes the connection on them, so they are never worth sending).
fn encode_checked(frames: &[(u8, &[u8])]) -> Result<Vec<u8>> {
    let total: usize = frames
        .iter()
        .map(|(_, p)| frame::HEADER_BYTES + p.len())
        .sum();
    let mut out = Vec::with_capacity(total);
    for &(code, payload) in frames {
        if payload.len() > PAYLOAD_BYTES_MAX {
            return Err(ClientError::InvalidArgument(format!(
                "payload of {} bytes exceeds the {PAYLOAD_BYTES_MAX}-byte frame limit",
                payload.len()
            )));
        }
        frame::encode(code, payload, &mut out);
    }
    Ok(out)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn timed_out() -> ClientError {
    ClientError::Io(io::Error::new(
        io::ErrorKind::TimedOut,
        "timed out waiting for the reply",
    ))
}
