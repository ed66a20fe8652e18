//! Fuzzes the record frame decoder (`boltq_io::record::{decode, peek_frame_len}`), which
//! reads bytes from segment files, journal entries and (later) replication peers.
//!
//! Input: the first byte picks a mode, the rest is the candidate frame.
//! - mode even: the bytes as given. Exercises the length, zero and checksum gates.
//! - mode odd: the checksum is fixed up before decoding. Random bodies almost never pass a
//!   CRC-32C, so without this the fuzzer would never reach the body parser.
//!
//! Checked on every input: no panic; `decode` agrees with `peek_frame_len`; a decoded frame
//! fits in the input; the header iterator consumes exactly the validated header block; and
//! re-encoding the decoded record round-trips. Re-encoding gives back the *same bytes* only
//! for canonical frames, because decode accepts three things encode never produces:
//! 1. headers not sorted by key (encode sorts them, stably);
//! 2. `FLAG_HAS_EPOCH` set with an epoch of 0 (encode sets the flag exactly when epoch != 0,
//!    so it drops the 4 epoch bytes);
//! 3. a header block over `HEADERS_BYTES_MAX` (decode bounds only the body; encode refuses).
//!
//! For every other frame the bytes must match exactly; for all frames the canonical form
//! must be a fixed point (decode → encode → decode → encode gives the same bytes).
#![no_main]

use boltq_io::record::{
    self, DecodeError, EncodeError, Record, BODY_FIXED_BYTES, FLAG_HAS_EPOCH, FRAME_BYTES_MAX,
    FRAME_HEADER_BYTES, HEADERS_BYTES_MAX,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let mut data = rest.to_vec();
    if mode & 1 == 1 {
        fix_crc(&mut data);
    }
    check(&data);
});

/// Writes the correct CRC-32C for the body that the header's length claims (or for
/// whatever part of it is present).
fn fix_crc(data: &mut [u8]) {
    if data.len() < FRAME_HEADER_BYTES {
        return;
    }
    let body_len = u32::from_le_bytes([data[4], data[5], data[6], data[7]]) as usize;
    let end = (FRAME_HEADER_BYTES + body_len).min(data.len());
    let crc = crc32c(&data[FRAME_HEADER_BYTES..end]);
    data[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32C (Castagnoli), bitwise. Independent of the codec's (hardware-accelerated) crate on
/// purpose: if the two disagree, fixed-up frames fail to decode and the fuzzer notices.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0x82F6_3B78 & mask);
        }
    }
    !crc
}

fn check(data: &[u8]) {
    let peeked = record::peek_frame_len(data);
    if let Ok(n) = peeked {
        assert!(
            (FRAME_HEADER_BYTES + BODY_FIXED_BYTES..=FRAME_BYTES_MAX).contains(&n),
            "peek_frame_len out of bounds: {n}"
        );
    }
    let (view, used) = match record::decode(data) {
        Ok(x) => x,
        Err(e) => {
            match (&peeked, &e) {
                // A header-level failure is exactly what peek reported.
                (Err(p), _) => assert_eq!(p, &e, "decode and peek disagree"),
                (
                    Ok(n),
                    DecodeError::Incomplete {
                        needed_bytes,
                        have_bytes,
                    },
                ) => {
                    assert_eq!((*needed_bytes, *have_bytes), (*n, data.len()));
                    assert!(data.len() < *n);
                }
                (Ok(_), DecodeError::CrcMismatch { .. }) | (Ok(_), DecodeError::Corrupt { .. }) => {
                }
                (Ok(_), other) => panic!("decode failed with {other:?} after peek succeeded"),
            }
            return;
        }
    };
    assert!(used <= data.len(), "frame longer than the input");
    assert_eq!(peeked, Ok(used), "decode and peek disagree on the length");
    let frame = &data[..used];

    // The header iterator walks exactly the validated block.
    let mut walked = 0usize;
    let mut sorted = true;
    let mut prev: Option<&[u8]> = None;
    for (k, v) in view.headers() {
        walked += 4 + k.len() + v.len();
        if prev.is_some_and(|p| p > k) {
            sorted = false;
        }
        prev = Some(k);
    }
    assert_eq!(
        walked,
        view.headers_raw.len(),
        "header iterator stopped early"
    );

    let stored_flags = frame[FRAME_HEADER_BYTES + 16];
    assert_eq!(view.flags, stored_flags & !FLAG_HAS_EPOCH);
    let empty_epoch_flag = stored_flags & FLAG_HAS_EPOCH != 0 && view.epoch == 0;

    let rec = view.to_record();
    let mut out = Vec::new();
    match record::encode(&rec, &mut out) {
        Ok(n) => assert_eq!(n, out.len()),
        Err(EncodeError::HeadersTooLarge { .. }) => {
            assert!(view.headers_raw.len() > HEADERS_BYTES_MAX);
            return;
        }
        Err(e) => panic!("a decoded record does not re-encode: {e}"),
    }
    assert!(view.headers_raw.len() <= HEADERS_BYTES_MAX);
    if sorted && !empty_epoch_flag {
        assert_eq!(
            out, frame,
            "canonical frame does not re-encode to the same bytes"
        );
    }

    // The re-encoded frame decodes to the same record with its headers stably sorted.
    let (view2, used2) = record::decode(&out).expect("re-encoded frame decodes");
    assert_eq!(used2, out.len());
    let mut expect: Record = rec.clone();
    expect.headers.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(view2.to_record(), expect);
    let mut again = Vec::new();
    record::encode(&view2.to_record(), &mut again).expect("canonical re-encodes");
    assert_eq!(again, out, "canonical form is not a fixed point");
}
