//! The record frame: the unit every log stores, for both planes.
//!
//! ```text
//! frame := crc:u32 | body_len:u32 | body[body_len]
//! body  := seq:u64 | timestamp_ns:i64 | flags:u8 | key_len:u16 | hdr_len:u32 | payload_len:u32
//!          | [epoch:u32 if flags & HAS_EPOCH] | key | headers | payload
//! headers := ( k_len:u16 | k | v_len:u16 | v )*      sorted by key on encode
//! ```
//!
//! All integers little-endian. The layout is the messaging engine's record frame; the
//! checksum is CRC-32C (Castagnoli, hardware accelerated) over the body only. `body_len`
//! sits outside the checksum so a reader can bound its allocation before trusting anything,
//! and every length is checked on both encode and decode: nothing silently wraps (a header
//! value over 65,535 bytes is refused at encode instead of producing a record that can never
//! be decoded again).

use bytes::Bytes;
use std::fmt;

/// Bytes before the body: crc and body length.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Fixed part of a body without an epoch.
pub const BODY_FIXED_BYTES: usize = 27;
/// Fixed part of a body that carries an epoch.
pub const BODY_FIXED_EPOCH_BYTES: usize = 31;
/// Largest body accepted by encode and decode: 8 MiB.
pub const BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Largest frame (header + largest body).
pub const FRAME_BYTES_MAX: usize = FRAME_HEADER_BYTES + BODY_BYTES_MAX;
/// Largest key, a u16 length.
pub const KEY_BYTES_MAX: usize = u16::MAX as usize;
/// Largest header key or value, a u16 length.
pub const HEADER_FIELD_BYTES_MAX: usize = u16::MAX as usize;
/// Largest header block. Bounded well below the body limit so headers cannot crowd out
/// the payload, and so a hostile header map costs a bounded amount to sort and check.
pub const HEADERS_BYTES_MAX: usize = 256 * 1024;

/// Flag: a tombstone (reserved for compaction).
pub const FLAG_TOMBSTONE: u8 = 0x01;
/// Flag: an ephemeral record that must never be persisted; every append refuses it.
pub const FLAG_EPHEMERAL: u8 = 0x02;
/// Flag owned by the codec: set exactly when `epoch != 0`.
pub const FLAG_HAS_EPOCH: u8 = 0x04;

/// An owned record. `headers` are kept as given; encode sorts them by key so the same
/// record always encodes to the same bytes (and the same checksum) on every replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub timestamp_ns: i64,
    /// Caller flags; `FLAG_HAS_EPOCH` is ignored here and derived from `epoch`.
    pub flags: u8,
    pub epoch: u32,
    pub key: Bytes,
    pub headers: Vec<(Bytes, Bytes)>,
    pub payload: Bytes,
}

/// Why a record cannot be encoded. Nothing is written when encode fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    KeyTooLong { len: usize },
    HeaderFieldTooLong { len: usize },
    HeadersTooLarge { len: usize },
    BodyTooLarge { len: usize },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeyTooLong { len } => {
                write!(f, "record key is {len} bytes; the limit is {KEY_BYTES_MAX}")
            }
            Self::HeaderFieldTooLong { len } => write!(
                f,
                "record header key or value is {len} bytes; the limit is {HEADER_FIELD_BYTES_MAX}"
            ),
            Self::HeadersTooLarge { len } => write!(
                f,
                "record headers take {len} bytes; the limit is {HEADERS_BYTES_MAX}"
            ),
            Self::BodyTooLarge { len } => {
                write!(
                    f,
                    "record body is {len} bytes; the limit is {BODY_BYTES_MAX}"
                )
            }
        }
    }
}

impl std::error::Error for EncodeError {}

/// Why bytes do not decode to a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the frame needs. At the end of a log this is a torn tail.
    Incomplete {
        needed_bytes: usize,
        have_bytes: usize,
    },
    /// An all-zero frame header: the end of the written region of a pre-zeroed or padded file.
    Zero,
    /// `body_len` outside `[BODY_FIXED_BYTES, BODY_BYTES_MAX]`.
    BodyLenOutOfRange { body_len: u32 },
    /// The checksum does not match the body.
    CrcMismatch { stored: u32, computed: u32 },
    /// The checksum matches but the body's own lengths are inconsistent.
    Corrupt { reason: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete {
                needed_bytes,
                have_bytes,
            } => write!(
                f,
                "incomplete record: need {needed_bytes} bytes, have {have_bytes}"
            ),
            Self::Zero => write!(f, "zero record header (end of written data)"),
            Self::BodyLenOutOfRange { body_len } => write!(
                f,
                "record body length {body_len} outside [{BODY_FIXED_BYTES}, {BODY_BYTES_MAX}]"
            ),
            Self::CrcMismatch { stored, computed } => write!(
                f,
                "record checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            Self::Corrupt { reason } => write!(f, "corrupt record: {reason}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A decoded record borrowing the buffer it was decoded from. Reading a log decodes into
/// views first so that records skipped by a read cost no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub seq: u64,
    pub timestamp_ns: i64,
    /// Flags as stored, with `FLAG_HAS_EPOCH` stripped.
    pub flags: u8,
    pub epoch: u32,
    pub key: &'a [u8],
    /// The raw header block, already validated by decode; iterate with [`HeaderIter`].
    pub headers_raw: &'a [u8],
    pub payload: &'a [u8],
}

impl RecordView<'_> {
    pub fn headers(&self) -> HeaderIter<'_> {
        HeaderIter {
            rest: self.headers_raw,
        }
    }

    /// Copies the view into an owned record.
    pub fn to_record(&self) -> Record {
        Record {
            seq: self.seq,
            timestamp_ns: self.timestamp_ns,
            flags: self.flags,
            epoch: self.epoch,
            key: Bytes::copy_from_slice(self.key),
            headers: self
                .headers()
                .map(|(k, v)| (Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)))
                .collect(),
            payload: Bytes::copy_from_slice(self.payload),
        }
    }
}

/// Iterates the pairs of a header block that [`decode`] has validated.
pub struct HeaderIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (k, rest) = split_field(self.rest).ok()?;
        let (v, rest) = split_field(rest).ok()?;
        self.rest = rest;
        Some((k, v))
    }
}

fn split_field(buf: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    if buf.len() < 2 {
        return Err(DecodeError::Corrupt {
            reason: "header length truncated",
        });
    }
    let len = u16::from_le_bytes([buf[0], buf[1]]) as usize;
    let rest = &buf[2..];
    if rest.len() < len {
        return Err(DecodeError::Corrupt {
            reason: "header field overruns the header block",
        });
    }
    Ok((&rest[..len], &rest[len..]))
}

fn validate_headers(mut block: &[u8]) -> Result<(), DecodeError> {
    while !block.is_empty() {
        let (_, rest) = split_field(block)?;
        let (_, rest) = split_field(rest)?;
        block = rest;
    }
    Ok(())
}

/// Size of the encoded header block, or why it is refused.
pub fn headers_len(headers: &[(Bytes, Bytes)]) -> Result<usize, EncodeError> {
    let mut total = 0usize;
    for (k, v) in headers {
        for field in [k, v] {
            if field.len() > HEADER_FIELD_BYTES_MAX {
                return Err(EncodeError::HeaderFieldTooLong { len: field.len() });
            }
        }
        total += 4 + k.len() + v.len();
        if total > HEADERS_BYTES_MAX {
            return Err(EncodeError::HeadersTooLarge { len: total });
        }
    }
    Ok(total)
}

/// The full frame length of `record`, or why it cannot be encoded.
pub fn encoded_len(record: &Record) -> Result<usize, EncodeError> {
    if record.key.len() > KEY_BYTES_MAX {
        return Err(EncodeError::KeyTooLong {
            len: record.key.len(),
        });
    }
    let fixed = if record.epoch != 0 {
        BODY_FIXED_EPOCH_BYTES
    } else {
        BODY_FIXED_BYTES
    };
    let body = fixed + record.key.len() + headers_len(&record.headers)? + record.payload.len();
    if body > BODY_BYTES_MAX {
        return Err(EncodeError::BodyTooLarge { len: body });
    }
    Ok(FRAME_HEADER_BYTES + body)
}

/// Appends the frame of `record` to `out`. On error `out` is left unchanged.
pub fn encode(record: &Record, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
    let frame_len = encoded_len(record)?;
    let body_len = frame_len - FRAME_HEADER_BYTES;
    let start = out.len();
    out.reserve(frame_len);
    out.extend_from_slice(&[0u8; 4]); // crc, filled in below
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    let body_start = out.len();
    let flags = if record.epoch != 0 {
        record.flags | FLAG_HAS_EPOCH
    } else {
        record.flags & !FLAG_HAS_EPOCH
    };
    let hdr_len = headers_len(&record.headers)?;
    out.extend_from_slice(&record.seq.to_le_bytes());
    out.extend_from_slice(&record.timestamp_ns.to_le_bytes());
    out.push(flags);
    out.extend_from_slice(&(record.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(hdr_len as u32).to_le_bytes());
    out.extend_from_slice(&(record.payload.len() as u32).to_le_bytes());
    if record.epoch != 0 {
        out.extend_from_slice(&record.epoch.to_le_bytes());
    }
    out.extend_from_slice(&record.key);
    encode_headers_sorted(&record.headers, out);
    out.extend_from_slice(&record.payload);
    let crc = crc32c::crc32c(&out[body_start..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len() - start, frame_len);
    Ok(frame_len)
}

fn encode_headers_sorted(headers: &[(Bytes, Bytes)], out: &mut Vec<u8>) {
    let mut order: Vec<usize> = (0..headers.len()).collect();
    order.sort_by(|&a, &b| headers[a].0.cmp(&headers[b].0));
    for i in order {
        let (k, v) = &headers[i];
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u16).to_le_bytes());
        out.extend_from_slice(v);
    }
}

/// Reads the frame header at the start of `buf` and returns the whole frame length,
/// checking only the length bound. Lets a scanner know how much to read next.
pub fn peek_frame_len(buf: &[u8]) -> Result<usize, DecodeError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Err(DecodeError::Incomplete {
            needed_bytes: FRAME_HEADER_BYTES,
            have_bytes: buf.len(),
        });
    }
    if buf[..FRAME_HEADER_BYTES].iter().all(|&b| b == 0) {
        return Err(DecodeError::Zero);
    }
    let body_len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if (body_len as usize) < BODY_FIXED_BYTES || body_len as usize > BODY_BYTES_MAX {
        return Err(DecodeError::BodyLenOutOfRange { body_len });
    }
    Ok(FRAME_HEADER_BYTES + body_len as usize)
}

/// Decodes the frame at the start of `buf`; returns the view and the frame length.
/// Never panics and never allocates, whatever the input.
pub fn decode(buf: &[u8]) -> Result<(RecordView<'_>, usize), DecodeError> {
    let frame_len = peek_frame_len(buf)?;
    if buf.len() < frame_len {
        return Err(DecodeError::Incomplete {
            needed_bytes: frame_len,
            have_bytes: buf.len(),
        });
    }
    let stored = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let body = &buf[FRAME_HEADER_BYTES..frame_len];
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(DecodeError::CrcMismatch { stored, computed });
    }
    decode_body(body).map(|view| (view, frame_len))
}

fn decode_body(body: &[u8]) -> Result<RecordView<'_>, DecodeError> {
    debug_assert!(body.len() >= BODY_FIXED_BYTES);
    let u32_at =
        |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
    let seq = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
    let timestamp_ns = i64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    let stored_flags = body[16];
    let key_len = u16::from_le_bytes([body[17], body[18]]) as usize;
    let hdr_len = u32_at(19) as usize;
    let payload_len = u32_at(23) as usize;
    let (epoch, fixed) = if stored_flags & FLAG_HAS_EPOCH != 0 {
        if body.len() < BODY_FIXED_EPOCH_BYTES {
            return Err(DecodeError::Corrupt {
                reason: "epoch flag set but body too short for an epoch",
            });
        }
        (u32_at(27), BODY_FIXED_EPOCH_BYTES)
    } else {
        (0, BODY_FIXED_BYTES)
    };
    // Sum in u64: three attacker-controlled u32s cannot overflow it.
    let declared = fixed as u64 + key_len as u64 + hdr_len as u64 + payload_len as u64;
    if declared != body.len() as u64 {
        return Err(DecodeError::Corrupt {
            reason: "field lengths do not add up to the body length",
        });
    }
    let key = &body[fixed..fixed + key_len];
    let headers_raw = &body[fixed + key_len..fixed + key_len + hdr_len];
    let payload = &body[fixed + key_len + hdr_len..];
    validate_headers(headers_raw)?;
    Ok(RecordView {
        seq,
        timestamp_ns,
        flags: stored_flags & !FLAG_HAS_EPOCH,
        epoch,
        key,
        headers_raw,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn sample() -> Record {
        Record {
            seq: 1,
            timestamp_ns: 1_700_000_000_000_000_000,
            flags: 0,
            epoch: 0,
            key: Bytes::from_static(b"alice:bob"),
            headers: vec![(Bytes::from_static(b"sender"), Bytes::from_static(b"alice"))],
            payload: Bytes::from_static(b"hi"),
        }
    }

    /// The body layout matches the messaging engine's test vector byte for byte; only the
    /// checksum differs (CRC-32C here, recorded in STATUS.md decisions).
    #[test]
    fn body_matches_spec_vector_one() {
        let mut out = Vec::new();
        let n = encode(&sample(), &mut out).unwrap();
        assert_eq!(n, 61);
        let expected_after_crc = hex(
            "35000000 0100000000000000 00002a36fe9c9717 00 0900 0f000000 02000000
             616c6963653a626f62 0600 73656e646572 0500 616c696365 6869",
        );
        assert_eq!(&out[4..], &expected_after_crc[..]);
        assert_eq!(
            u32::from_le_bytes(out[0..4].try_into().unwrap()),
            crc32c::crc32c(&out[8..])
        );
    }

    #[test]
    fn body_matches_spec_vector_with_epoch() {
        let rec = Record {
            seq: 7,
            timestamp_ns: 42,
            epoch: 9,
            key: Bytes::from_static(b"k"),
            payload: Bytes::from_static(b"v"),
            ..Default::default()
        };
        let mut out = Vec::new();
        assert_eq!(encode(&rec, &mut out).unwrap(), 41);
        let expected = hex(
            "21000000 0700000000000000 2a00000000000000 04 0100 00000000 01000000 09000000 6b 76",
        );
        assert_eq!(&out[4..], &expected[..]);
        let (view, used) = decode(&out).unwrap();
        assert_eq!(used, 41);
        assert_eq!(view.epoch, 9);
        assert_eq!(view.flags, 0, "HAS_EPOCH is stripped from decoded flags");
    }

    #[test]
    fn round_trip_sorts_headers() {
        let mut rec = sample();
        rec.headers = vec![
            (Bytes::from_static(b"z"), Bytes::from_static(b"1")),
            (Bytes::from_static(b"a"), Bytes::from_static(b"")),
            (Bytes::from_static(b""), Bytes::from_static(b"empty key")),
        ];
        let mut out = Vec::new();
        encode(&rec, &mut out).unwrap();
        let (view, _) = decode(&out).unwrap();
        let keys: Vec<&[u8]> = view.headers().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![&b""[..], &b"a"[..], &b"z"[..]]);
        let mut rec_sorted = rec.clone();
        rec_sorted.headers.sort();
        assert_eq!(view.to_record(), rec_sorted);
    }

    #[test]
    fn codec_owns_has_epoch_flag() {
        let rec = Record {
            flags: FLAG_HAS_EPOCH | FLAG_TOMBSTONE,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode(&rec, &mut out).unwrap();
        assert_eq!(out[8 + 16], FLAG_TOMBSTONE, "flag cleared when epoch is 0");
        assert_eq!(decode(&out).unwrap().0.flags, FLAG_TOMBSTONE);
    }

    #[test]
    fn oversized_fields_are_refused_not_wrapped() {
        let long = Bytes::from(vec![b'x'; HEADER_FIELD_BYTES_MAX + 1]);
        let mut rec = sample();
        rec.headers = vec![(Bytes::from_static(b"k"), long.clone())];
        let mut out = vec![1, 2, 3];
        assert_eq!(
            encode(&rec, &mut out),
            Err(EncodeError::HeaderFieldTooLong {
                len: HEADER_FIELD_BYTES_MAX + 1
            })
        );
        assert_eq!(out, vec![1, 2, 3], "nothing written on error");
        let mut rec = sample();
        rec.key = long;
        assert!(matches!(
            encode(&rec, &mut out),
            Err(EncodeError::KeyTooLong { .. })
        ));
        let mut rec = sample();
        rec.payload = Bytes::from(vec![0u8; BODY_BYTES_MAX]);
        assert!(matches!(
            encode(&rec, &mut out),
            Err(EncodeError::BodyTooLarge { .. })
        ));
        let mut rec = sample();
        rec.headers = (0..5)
            .map(|i| (Bytes::from(vec![i as u8]), Bytes::from(vec![0u8; 60_000])))
            .collect();
        assert!(matches!(
            encode(&rec, &mut out),
            Err(EncodeError::HeadersTooLarge { .. })
        ));
    }

    #[test]
    fn decode_rejects_each_kind_of_damage() {
        let mut good = Vec::new();
        encode(&sample(), &mut good).unwrap();
        assert_eq!(decode(&[0u8; 16]), Err(DecodeError::Zero));
        assert!(matches!(
            decode(&good[..30]),
            Err(DecodeError::Incomplete { .. })
        ));
        assert!(matches!(
            decode(&good[..5]),
            Err(DecodeError::Incomplete { .. })
        ));
        let mut bad = good.clone();
        bad[20] ^= 0xFF;
        assert!(matches!(decode(&bad), Err(DecodeError::CrcMismatch { .. })));
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&(BODY_BYTES_MAX as u32 + 1).to_le_bytes());
        assert!(matches!(
            decode(&bad),
            Err(DecodeError::BodyLenOutOfRange { .. })
        ));
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            decode(&bad),
            Err(DecodeError::BodyLenOutOfRange { .. })
        ));
        // Valid checksum over inconsistent lengths: payload_len claims one byte more.
        let mut bad = good.clone();
        bad[8 + 23] += 1;
        let crc = crc32c::crc32c(&bad[8..]);
        bad[0..4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode(&bad), Err(DecodeError::Corrupt { .. })));
        // Header block whose inner length overruns it.
        let mut bad = good.clone();
        bad[8 + 27 + 9] = 0xFF;
        let crc = crc32c::crc32c(&bad[8..]);
        bad[0..4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode(&bad), Err(DecodeError::Corrupt { .. })));
    }

    /// Random and mutated inputs never panic; a successful decode is self-consistent.
    #[test]
    fn decode_never_panics_on_random_or_mutated_bytes() {
        let mut rng = crate::testutil::Rng::new(0x5eed_1234);
        let mut good = Vec::new();
        encode(&sample(), &mut good).unwrap();
        for _ in 0..200_000 {
            let mut buf = if rng.below(2) == 0 {
                let len = rng.below(96) as usize;
                (0..len).map(|_| rng.next_u64() as u8).collect::<Vec<u8>>()
            } else {
                let mut b = good.clone();
                for _ in 0..=rng.below(4) {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next_u64() as u8;
                }
                b.truncate(rng.below(b.len() as u64 + 1) as usize);
                b
            };
            if rng.below(3) == 0 && buf.len() >= 8 {
                // Give mutated bodies a valid checksum so the inner checks are reached.
                let crc = crc32c::crc32c(&buf[8..]);
                buf[0..4].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok((view, used)) = decode(&buf) {
                assert!(used <= buf.len());
                let fixed = used
                    - FRAME_HEADER_BYTES
                    - view.key.len()
                    - view.headers_raw.len()
                    - view.payload.len();
                assert!(fixed == BODY_FIXED_BYTES || fixed == BODY_FIXED_EPOCH_BYTES);
                assert!(view.headers().count() * 4 <= view.headers_raw.len());
            }
        }
    }
}
