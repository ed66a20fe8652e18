//! Journal entries: what a shard's journal file holds.
//!
//! ```text
//! entry := crc:u32 | len:u32 | kind:u8 | log:u32 | data[len - 5]
//! ```
//!
//! `crc` is CRC-32C over `kind | log | data`. `len` sits outside the checksum and is bounded
//! before anything is allocated. `log` is a handle that a `Declare` entry earlier in the same
//! journal file binds to a log name; every file declares the handles it uses, so any file can
//! be replayed once the files before it are gone. An all-zero header ends the written region
//! (journal files are pre-zeroed).

use crate::record::FRAME_BYTES_MAX;
use std::fmt;

pub const ENTRY_HEADER_BYTES: usize = 8;
/// kind + log handle.
pub const ENTRY_FIXED_BYTES: usize = 5;
/// Longest log name a `Declare` may carry.
pub const LOG_NAME_BYTES_MAX: usize = 512;
/// Longest entry body: an `Append` of the largest record frame.
pub const ENTRY_BODY_BYTES_MAX: usize = ENTRY_FIXED_BYTES + FRAME_BYTES_MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryKind {
    /// Binds `log` to the UTF-8 log name in `data` for the rest of this file.
    Declare = 1,
    /// `data` is one record frame of log `log`.
    Append = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryView<'a> {
    pub kind: EntryKind,
    pub log: u32,
    pub data: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    Incomplete,
    Zero,
    LenOutOfRange { len: u32 },
    CrcMismatch,
    UnknownKind { kind: u8 },
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete => write!(f, "journal entry truncated"),
            Self::Zero => write!(f, "end of journal data"),
            Self::LenOutOfRange { len } => write!(
                f,
                "journal entry length {len} outside [{ENTRY_FIXED_BYTES}, {ENTRY_BODY_BYTES_MAX}]"
            ),
            Self::CrcMismatch => write!(f, "journal entry checksum mismatch"),
            Self::UnknownKind { kind } => write!(f, "unknown journal entry kind {kind}"),
        }
    }
}

pub fn entry_len(data_len: usize) -> usize {
    ENTRY_HEADER_BYTES + ENTRY_FIXED_BYTES + data_len
}

/// Appends an entry to `out`.
pub fn encode_entry(kind: EntryKind, log: u32, data: &[u8], out: &mut Vec<u8>) {
    assert!(ENTRY_FIXED_BYTES + data.len() <= ENTRY_BODY_BYTES_MAX);
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&((ENTRY_FIXED_BYTES + data.len()) as u32).to_le_bytes());
    out.push(kind as u8);
    out.extend_from_slice(&log.to_le_bytes());
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out[start + ENTRY_HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the entry at the start of `buf`; returns it and its length. Never panics.
pub fn decode_entry(buf: &[u8]) -> Result<(EntryView<'_>, usize), EntryError> {
    if buf.len() < ENTRY_HEADER_BYTES {
        return Err(EntryError::Incomplete);
    }
    if buf[..ENTRY_HEADER_BYTES].iter().all(|&b| b == 0) {
        return Err(EntryError::Zero);
    }
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if (len as usize) < ENTRY_FIXED_BYTES || len as usize > ENTRY_BODY_BYTES_MAX {
        return Err(EntryError::LenOutOfRange { len });
    }
    let total = ENTRY_HEADER_BYTES + len as usize;
    if buf.len() < total {
        return Err(EntryError::Incomplete);
    }
    let body = &buf[ENTRY_HEADER_BYTES..total];
    if crc32c::crc32c(body) != u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) {
        return Err(EntryError::CrcMismatch);
    }
    let kind = match body[0] {
        1 => EntryKind::Declare,
        2 => EntryKind::Append,
        kind => return Err(EntryError::UnknownKind { kind }),
    };
    let log = u32::from_le_bytes([body[1], body[2], body[3], body[4]]);
    Ok((
        EntryView {
            kind,
            log,
            data: &body[ENTRY_FIXED_BYTES..],
        },
        total,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut buf = Vec::new();
        encode_entry(EntryKind::Declare, 3, b"queue/slot-003", &mut buf);
        encode_entry(EntryKind::Append, 3, b"frame", &mut buf);
        let (e, n) = decode_entry(&buf).unwrap();
        assert_eq!(
            (e.kind, e.log, e.data),
            (EntryKind::Declare, 3, &b"queue/slot-003"[..])
        );
        let (e, m) = decode_entry(&buf[n..]).unwrap();
        assert_eq!(
            (e.kind, e.data, n + m),
            (EntryKind::Append, &b"frame"[..], buf.len())
        );
        assert_eq!(decode_entry(&[0u8; 32]), Err(EntryError::Zero));
        assert_eq!(decode_entry(&buf[..n - 1]), Err(EntryError::Incomplete));
        let mut bad = buf.clone();
        bad[10] ^= 1;
        assert_eq!(decode_entry(&bad), Err(EntryError::CrcMismatch));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = crate::testutil::Rng::new(77);
        for _ in 0..100_000 {
            let len = rng.below(64) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if b.len() >= 8 && rng.below(2) == 0 {
                let l = (b.len() - 8) as u32;
                b[4..8].copy_from_slice(&l.to_le_bytes());
                let crc = crc32c::crc32c(&b[8..]);
                b[0..4].copy_from_slice(&crc.to_le_bytes());
            }
            let _ = decode_entry(&b);
        }
    }
}
