//! Frames of the v1 TCP protocol, both directions:
//!
//! ```text
//! code:u8 | payload_len:u32 LE | payload[payload_len]      (payload: UTF-8 JSON or empty)
//! ```
//!
//! `code` is a command byte on requests and a status byte on responses and pushes. There is
//! no correlation id: replies are matched to requests by order. A payload longer than
//! 4 MiB is refused; exactly 4 MiB is allowed.

use std::fmt;

pub const HEADER_BYTES: usize = 5;
/// Largest payload either side may send (v1: 4,194,304 bytes, inclusive).
pub const PAYLOAD_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Request command bytes.
pub mod op {
    pub const PUBLISH: u8 = 0x01;
    pub const PUBLISH_TOPIC: u8 = 0x02;
    /// CONSUME, or SUBSCRIBE when the request has a non-empty `id`.
    pub const CONSUME: u8 = 0x03;
    pub const ACK: u8 = 0x04;
    pub const NACK: u8 = 0x05;
    pub const PING: u8 = 0x06;
    pub const STATS: u8 = 0x07;
    pub const AUTH: u8 = 0x08;
    pub const PREFETCH: u8 = 0x09;
    pub const CLUSTER_JOIN: u8 = 0x10;
    pub const CLUSTER_LEAVE: u8 = 0x11;
    pub const CLUSTER_STATUS: u8 = 0x12;
    pub const CONFIRM_SELECT: u8 = 0x13;
    pub const EXCHANGE_DECLARE: u8 = 0x14;
    pub const EXCHANGE_DELETE: u8 = 0x15;
    pub const BIND_QUEUE: u8 = 0x16;
    pub const UNBIND_QUEUE: u8 = 0x17;
    pub const PUBLISH_EXCHANGE: u8 = 0x18;
    /// First byte of BoltQ's additive commands; v1 never sends these.
    pub const EXTENSIONS_FIRST: u8 = 0x19;
}

/// Response and push status bytes.
pub mod status {
    pub const OK: u8 = 0x00;
    pub const ERROR: u8 = 0x01;
    pub const EMPTY: u8 = 0x02;
    pub const NOT_LEADER: u8 = 0x03;
}

/// One frame, borrowing its payload from the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub code: u8,
    pub payload: &'a [u8],
}

/// A frame that must not be processed. The v1 server closes the connection without a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge { payload_len: u32 },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge { payload_len } => write!(
                f,
                "frame payload of {payload_len} bytes exceeds the {PAYLOAD_BYTES_MAX}-byte limit"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Decodes the frame at the start of `buf`: `Ok(None)` until the whole frame is buffered
/// (the caller reads more), then the frame and the bytes it used. The length is checked
/// against the limit before anything is buffered, so a hostile length costs nothing.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() < HEADER_BYTES {
        return Ok(None);
    }
    let payload_len = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if payload_len as usize > PAYLOAD_BYTES_MAX {
        return Err(FrameError::TooLarge { payload_len });
    }
    let total = HEADER_BYTES + payload_len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((
        Frame {
            code: buf[0],
            payload: &buf[HEADER_BYTES..total],
        },
        total,
    )))
}

/// Appends a frame to `out`. The payload must be within the limit: every producer of
/// replies bounds what it puts in one (a v1 Go client drops the connection otherwise).
pub fn encode(code: u8, payload: &[u8], out: &mut Vec<u8>) {
    assert!(
        payload.len() <= PAYLOAD_BYTES_MAX,
        "reply payload of {} bytes over the frame limit",
        payload.len()
    );
    out.reserve(HEADER_BYTES + payload.len());
    out.push(code);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of the v1 spec, byte for byte.
    #[test]
    fn spec_worked_example() {
        let body = br#"{"topic":"jobs","payload":{"n":1}}"#;
        let mut out = Vec::new();
        encode(op::PUBLISH, body, &mut out);
        assert_eq!(&out[..5], &[0x01, 0x22, 0x00, 0x00, 0x00]);
        let (f, used) = decode(&out).unwrap().unwrap();
        assert_eq!((f.code, f.payload, used), (op::PUBLISH, &body[..], 39));
        let mut empty = Vec::new();
        encode(status::EMPTY, b"", &mut empty);
        assert_eq!(empty, [0x02, 0, 0, 0, 0]);
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let mut out = Vec::new();
        encode(op::PING, b"{}", &mut out);
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn limit_is_inclusive_and_checked_from_the_header_alone() {
        let mut hdr = vec![op::PUBLISH];
        hdr.extend_from_slice(&(PAYLOAD_BYTES_MAX as u32).to_le_bytes());
        assert_eq!(decode(&hdr), Ok(None), "exactly 4 MiB is allowed");
        let mut hdr = vec![op::PUBLISH];
        hdr.extend_from_slice(&(PAYLOAD_BYTES_MAX as u32 + 1).to_le_bytes());
        assert_eq!(
            decode(&hdr),
            Err(FrameError::TooLarge {
                payload_len: PAYLOAD_BYTES_MAX as u32 + 1
            })
        );
        let mut hdr = vec![op::PUBLISH];
        hdr.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&hdr).is_err());
    }

    #[test]
    fn pipelined_frames_split_in_order() {
        let mut out = Vec::new();
        encode(op::PING, b"{}", &mut out);
        encode(op::STATS, b"", &mut out);
        let (a, n) = decode(&out).unwrap().unwrap();
        let (b, m) = decode(&out[n..]).unwrap().unwrap();
        assert_eq!((a.code, b.code, n + m), (op::PING, op::STATS, out.len()));
    }
}
