//! One segment of a log: `<base>.log` (record frames) and `<base>.index` (sparse index).
//!
//! The index is an array of 16-byte entries `seq:u64 | file_pos:u64`. An entry is added
//! before the first record of the segment and then whenever `index_interval_bytes` have been
//! appended since the previous one, so a lookup scans at most about that many bytes. Both
//! files are written lazily from memory by the log's flusher; the shard journal is what makes
//! an append durable, so a torn segment tail is repaired at startup by scanning and replaying.

use crate::appender::Appender;
use glommio::io::DmaFile;
use std::path::{Path, PathBuf};
use std::rc::Rc;

pub const INDEX_ENTRY_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub seq: u64,
    pub pos: u64,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; INDEX_ENTRY_BYTES] {
        let mut out = [0u8; INDEX_ENTRY_BYTES];
        out[..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..].copy_from_slice(&self.pos.to_le_bytes());
        out
    }
}

/// Parses an index file, keeping the longest prefix of entries that is plausible for a
/// segment starting at `base_seq` whose data file is `data_len` bytes: seqs and positions
/// strictly increasing, seqs at or above the base, positions inside the file. The rest (a
/// torn or zero-padded tail) is dropped; the caller verifies the last kept entry against the
/// data before trusting it.
pub fn parse_index(bytes: &[u8], base_seq: u64, data_len: u64) -> Vec<IndexEntry> {
    let mut out: Vec<IndexEntry> = Vec::with_capacity(bytes.len() / INDEX_ENTRY_BYTES);
    for chunk in bytes.chunks_exact(INDEX_ENTRY_BYTES) {
        let e = IndexEntry {
            seq: u64::from_le_bytes(chunk[..8].try_into().expect("8 bytes")),
            pos: u64::from_le_bytes(chunk[8..].try_into().expect("8 bytes")),
        };
        let plausible = e.seq >= base_seq
            && e.pos < data_len
            && out.last().is_none_or(|p| e.seq > p.seq && e.pos > p.pos)
            && (!out.is_empty() || e.pos == 0);
        if !plausible {
            break;
        }
        out.push(e);
    }
    out
}

pub fn data_path(dir: &Path, base_seq: u64) -> PathBuf {
    dir.join(format!("{base_seq:020}.log"))
}

pub fn index_path(dir: &Path, base_seq: u64) -> PathBuf {
    dir.join(format!("{base_seq:020}.index"))
}

/// The base sequence named by a segment file name, if it is one.
pub fn parse_data_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&b| b > 0)
}

/// Where a segment's two files stand. A shard may own far more logs than it may hold open
/// descriptors, so a segment with nothing to write or sync gives its files back (`Closed`)
/// and reopens them by name when it next needs them; readers of a closed segment open the
/// data file for the one read.
pub enum SegmentFiles {
    /// Not on disk yet: the flusher creates both once the segment has bytes.
    NotCreated,
    Open {
        data: Rc<DmaFile>,
        index: Rc<DmaFile>,
    },
    /// Both exist on disk and hold everything written so far; no descriptor is held.
    Closed,
}

impl SegmentFiles {
    /// Descriptors this segment holds.
    pub fn open_count(&self) -> usize {
        match self {
            SegmentFiles::Open { .. } => 2,
            SegmentFiles::NotCreated | SegmentFiles::Closed => 0,
        }
    }
}

/// A segment's in-memory state.
pub struct Segment {
    pub base_seq: u64,
    /// One past the last record held.
    pub next_seq: u64,
    pub data: Appender,
    pub index: Vec<IndexEntry>,
    pub index_app: Appender,
    /// Created lazily by the flusher; closed when sealed and durable, or when idle and the
    /// store is over its open-files budget.
    pub files: SegmentFiles,
    pub bytes_since_index: u64,
    /// Newest record timestamp, for retention by age.
    pub max_timestamp_ns: i64,
    /// No more appends: a later segment exists.
    pub sealed: bool,
    /// Sealed and both files fully written and synced: the next segment's files may exist.
    pub sealed_durable: bool,
}

impl Segment {
    pub fn new_empty(base_seq: u64, retain_bytes: usize) -> Segment {
        Segment {
            base_seq,
            next_seq: base_seq,
            data: Appender::new(0, Vec::new(), 4096, retain_bytes),
            index: Vec::new(),
            index_app: Appender::new(0, Vec::new(), 4096, 0),
            files: SegmentFiles::NotCreated,
            bytes_since_index: 0,
            max_timestamp_ns: 0,
            sealed: false,
            sealed_durable: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.next_seq == self.base_seq
    }

    pub fn size_bytes(&self) -> u64 {
        self.data.end()
    }

    /// Appends one frame, adding an index entry first when one is due.
    pub fn append_frame(
        &mut self,
        seq: u64,
        timestamp_ns: i64,
        frame: &[u8],
        index_interval_bytes: u64,
    ) {
        assert!(!self.sealed, "append to a sealed segment");
        assert_eq!(seq, self.next_seq, "segment sequences are gap-free");
        if self.index.is_empty() || self.bytes_since_index >= index_interval_bytes {
            let entry = IndexEntry {
                seq,
                pos: self.data.end(),
            };
            self.index.push(entry);
            self.index_app.append(&entry.encode());
            self.bytes_since_index = 0;
        }
        self.data.append(frame);
        self.bytes_since_index += frame.len() as u64;
        self.next_seq += 1;
        self.max_timestamp_ns = self.max_timestamp_ns.max(timestamp_ns);
    }

    /// File position to start scanning from for `seq`: the last index entry at or before it.
    pub fn scan_start(&self, seq: u64) -> u64 {
        let i = self.index.partition_point(|e| e.seq <= seq);
        if i == 0 {
            0
        } else {
            self.index[i - 1].pos
        }
    }

    pub fn has_unwritten(&self) -> bool {
        self.data.unwritten_bytes() > 0 || self.index_app.unwritten_bytes() > 0
    }

    pub fn has_unsynced(&self) -> bool {
        self.data.synced() < self.data.written()
            || self.index_app.synced() < self.index_app.written()
    }

    /// Whether the flusher has anything left to do here: bytes to write or sync, or a seal
    /// to make durable. A write or sync in flight counts (its bytes are not yet recorded as
    /// written or synced), so a segment without pending I/O holds no file another task uses
    /// for writing.
    pub fn has_pending_io(&self) -> bool {
        !self.sealed_durable && (self.sealed || self.has_unwritten() || self.has_unsynced())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_parse_keeps_plausible_prefix() {
        let mut bytes = Vec::new();
        for (seq, pos) in [
            (5u64, 0u64),
            (9, 4100),
            (20, 9000),
            (19, 9500),
            (30, 10_000),
        ] {
            bytes.extend_from_slice(&IndexEntry { seq, pos }.encode());
        }
        bytes.extend_from_slice(&[0u8; 7]);
        let idx = parse_index(&bytes, 5, 20_000);
        assert_eq!(idx.len(), 3, "stops at the first decreasing seq");
        assert_eq!(
            parse_index(&bytes, 5, 5000).len(),
            2,
            "positions beyond the file dropped"
        );
        assert!(parse_index(&[0u8; 64], 1, 100).is_empty());
    }

    #[test]
    fn file_names() {
        assert_eq!(parse_data_file_name("00000000000000000001.log"), Some(1));
        assert_eq!(parse_data_file_name("00000000000000000001.index"), None);
        assert_eq!(parse_data_file_name("1.log"), None);
        assert_eq!(parse_data_file_name("00000000000000000000.log"), None);
        assert_eq!(
            data_path(Path::new("/d"), 4096),
            PathBuf::from("/d/00000000000000004096.log")
        );
    }

    #[test]
    fn index_every_interval() {
        let mut s = Segment::new_empty(1, 0);
        for seq in 1..=100 {
            s.append_frame(seq, seq as i64, &[0u8; 100], 1000);
        }
        assert_eq!(s.index.len(), 10);
        assert_eq!(s.index[0], IndexEntry { seq: 1, pos: 0 });
        assert_eq!(s.scan_start(15), s.index[1].pos);
        assert_eq!(s.index_app.end(), 10 * INDEX_ENTRY_BYTES as u64);
    }
}
