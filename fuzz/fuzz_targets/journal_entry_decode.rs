//! Fuzzes the journal entry decoder (`boltq_io::journal_entry::decode_entry`) the way
//! startup recovery uses it: walking a whole journal file entry by entry, and decoding the
//! record frame inside every `Append` entry.
//!
//! Input: the first byte picks a mode, the rest is the file.
//! - mode even: the bytes as given.
//! - mode odd: before each entry is decoded, its checksum is fixed up (for the length its
//!   header claims), so the fuzzer gets past CRC-32C and reaches kind/handle/data handling
//!   and the nested record decoder.
//!
//! Checked: no panic; the walk always advances and stays inside the input; every decoded
//! entry re-encodes to exactly its input bytes (the entry format has one encoding); the
//! length reported equals header + fixed part + data; and `record::decode` of an Append's
//! data never panics and, when it succeeds, never claims more bytes than the entry holds.
#![no_main]

use boltq_io::journal_entry::{
    self, EntryError, ENTRY_BODY_BYTES_MAX, ENTRY_FIXED_BYTES, ENTRY_HEADER_BYTES,
};
use boltq_io::record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let mut file = rest.to_vec();
    let fix = mode & 1 == 1;
    let mut at = 0usize;
    // Like recovery's replay loop: stop at the first error (Zero is the normal end).
    while at < file.len() {
        if fix {
            fix_crc(&mut file[at..]);
        }
        let buf = &file[at..];
        match journal_entry::decode_entry(buf) {
            Ok((entry, used)) => {
                assert!(
                    used > 0 && used <= buf.len(),
                    "entry length {used} out of input"
                );
                assert_eq!(
                    used,
                    ENTRY_HEADER_BYTES + ENTRY_FIXED_BYTES + entry.data.len()
                );
                assert!(used - ENTRY_HEADER_BYTES <= ENTRY_BODY_BYTES_MAX);
                let mut again = Vec::new();
                journal_entry::encode_entry(entry.kind, entry.log, entry.data, &mut again);
                assert_eq!(again, &buf[..used], "entry does not re-encode to its bytes");
                if entry.kind == journal_entry::EntryKind::Append {
                    if let Ok((_, n)) = record::decode(entry.data) {
                        assert!(n <= entry.data.len());
                    }
                }
                at += used;
            }
            Err(EntryError::Zero) => {
                assert!(buf.len() >= ENTRY_HEADER_BYTES && buf[..ENTRY_HEADER_BYTES] == [0; 8]);
                break;
            }
            Err(EntryError::Incomplete) => {
                if buf.len() >= ENTRY_HEADER_BYTES {
                    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
                    assert!(buf.len() < ENTRY_HEADER_BYTES + len);
                }
                break;
            }
            Err(EntryError::LenOutOfRange { len }) => {
                let len = len as usize;
                assert!(!(ENTRY_FIXED_BYTES..=ENTRY_BODY_BYTES_MAX).contains(&len));
                break;
            }
            Err(EntryError::CrcMismatch) => {
                assert!(!fix, "checksum was fixed up but still mismatched");
                break;
            }
            Err(EntryError::UnknownKind { kind }) => {
                assert!(kind != 1 && kind != 2);
                break;
            }
        }
    }
});

/// Writes the correct CRC-32C for the entry body the header claims, if it is all present
/// and its length is in range.
fn fix_crc(buf: &mut [u8]) {
    if buf.len() < ENTRY_HEADER_BYTES {
        return;
    }
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if !(ENTRY_FIXED_BYTES..=ENTRY_BODY_BYTES_MAX).contains(&len)
        || buf.len() < ENTRY_HEADER_BYTES + len
    {
        return;
    }
    let crc = crc32c(&buf[ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + len]);
    buf[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32C (Castagnoli), bitwise, independent of the crate the decoder uses.
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
