//! Reading a log: a read is planned under a borrow (records served from memory, or the
//! file range to fetch), run without one, and the fetched bytes decoded and verified.

use super::Log;
use crate::appender;
use crate::record::{self, DecodeError, Record};
use crate::segment::{self, SegmentFiles};
use glommio::io::DmaFile;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::rc::Rc;

#[derive(Debug)]
pub enum ReadError {
    /// The requested sequence was removed by retention.
    Truncated {
        requested_seq: u64,
        first_seq: u64,
    },
    /// Stored bytes failed verification; `records_before` were returned intact before it.
    Corrupt {
        seq: u64,
        detail: DecodeError,
    },
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated {
                requested_seq,
                first_seq,
            } => write!(
                f,
                "sequence {requested_seq} was removed by retention; the oldest available is {first_seq}"
            ),
            Self::Corrupt { seq, detail } => write!(f, "corrupt record at or after sequence {seq}: {detail}"),
            Self::Io(e) => write!(f, "read failed: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// What a read needs next.
pub enum ReadStep {
    /// Records decoded from memory; call again from one past the last.
    Records(Vec<Record>),
    /// Read `[pos, pos + len)` of a segment file, append `mem_tail`, and decode records
    /// below `end_seq` with [`decode_records`].
    File {
        file: FileSource,
        pos: u64,
        len: usize,
        mem_tail: Vec<u8>,
        end_seq: u64,
    },
    /// Nothing more at or after the requested sequence.
    End,
}

/// A segment file to read: still open (active or being sealed) or closed (sealed and
/// durable, or idle and closed to keep the store within its open-files budget), opened per
/// read so that neither a long log nor many logs hold two descriptors per segment.
pub enum FileSource {
    Open(Rc<DmaFile>),
    Closed(PathBuf),
}

impl FileSource {
    /// The bytes as the read left them, not copied: a bulk read (recovery's replay) decodes
    /// them in place, where a copy cost a memmove and fresh pages per 8 MiB step.
    pub async fn read(&self, pos: u64, len: usize) -> io::Result<glommio::io::ReadResult> {
        match self {
            FileSource::Open(f) => appender::read_range_in_place(f, pos, len).await,
            FileSource::Closed(path) => {
                let f = glommio::io::DmaFile::open(path)
                    .await
                    .map_err(|e| io::Error::other(format!("open {}: {e}", path.display())))?;
                let r = appender::read_range_in_place(&f, pos, len).await;
                let _ = f.close().await;
                r
            }
        }
    }
}

/// Least and most one step of a read fetches from a segment file. The most matters for
/// bulk reads (recovery's replay, a snapshot's chunks of 1 MiB each): at 1 MiB a chunk
/// never fitted one read, so each was fetched three times (1 MiB that held no whole record,
/// then 2 MiB), and every step waited for the disk alone; 8 MiB holds seven chunks.
pub const FILE_READ_BYTES_MIN: u64 = 64 * 1024;
pub const FILE_READ_BYTES_MAX: u64 = 8 * 1024 * 1024;

impl Log {
    /// The next step of reading from `from`, returning at most `max_records` records and
    /// stopping once `max_bytes` of key+payload have been gathered. `hint_bytes` is how much
    /// to read from disk at least (the caller doubles it when a frame did not fit).
    pub fn plan_read(
        &self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
        hint_bytes: usize,
    ) -> Result<ReadStep, ReadError> {
        if from < self.first_seq() {
            return Err(ReadError::Truncated {
                requested_seq: from,
                first_seq: self.first_seq(),
            });
        }
        if from >= self.next_seq() || max_records == 0 {
            return Ok(ReadStep::End);
        }
        let i = self.segments.partition_point(|s| s.base_seq <= from) - 1;
        let seg = &self.segments[i];
        if from >= seg.next_seq {
            return Ok(ReadStep::End);
        }
        let pos = seg.scan_start(from);
        if let Some(mem) = seg.data.mem_slice(pos) {
            let records = decode_records(mem, from, seg.next_seq, max_records, max_bytes)
                .map_err(|(seq, detail)| ReadError::Corrupt { seq, detail })?;
            return Ok(ReadStep::Records(records));
        }
        let file = match &seg.files {
            SegmentFiles::Open { data, .. } => FileSource::Open(Rc::clone(data)),
            SegmentFiles::Closed => FileSource::Closed(segment::data_path(&self.dir, seg.base_seq)),
            SegmentFiles::NotCreated => {
                return Err(ReadError::Io(io::Error::other(
                    "segment bytes neither in memory nor on disk",
                )))
            }
        };
        let want = (max_bytes as u64)
            .saturating_add(self.cfg.index_interval_bytes)
            .clamp(FILE_READ_BYTES_MIN, FILE_READ_BYTES_MAX)
            .max(hint_bytes as u64);
        // The file holds [0, written) and memory holds [mem_start, end) with
        // mem_start <= written: read the file up to mem_start and take the rest from
        // memory, so a frame straddling the boundary is still whole.
        let mem_start = seg.data.mem_start();
        let file_len = want.min(mem_start - pos);
        let mem_tail = if pos + file_len == mem_start {
            let mem = seg.data.mem_slice(mem_start).unwrap_or(&[]);
            let take = (want - file_len).min(mem.len() as u64) as usize;
            mem[..take].to_vec()
        } else {
            Vec::new()
        };
        Ok(ReadStep::File {
            file,
            pos,
            len: file_len as usize,
            mem_tail,
            end_seq: seg.next_seq,
        })
    }
}

/// Decodes frames from `buf` (starting at a frame boundary), keeping records with
/// `seq >= from` and `< end_seq`. Stops at the limits, at the end of the buffer, or at a torn
/// frame at the end. Err carries the last good seq + 1 and the failure.
pub fn decode_records(
    buf: &[u8],
    from: u64,
    end_seq: u64,
    max_records: usize,
    max_bytes: usize,
) -> Result<Vec<Record>, (u64, DecodeError)> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut at = 0usize;
    let mut expect_seq = None;
    while at < buf.len() && out.len() < max_records && bytes < max_bytes {
        match record::decode(&buf[at..]) {
            Ok((view, used)) => {
                if let Some(e) = expect_seq {
                    if view.seq != e {
                        return Err((
                            e,
                            DecodeError::Corrupt {
                                reason: "sequence gap in segment",
                            },
                        ));
                    }
                }
                expect_seq = Some(view.seq + 1);
                if view.seq >= end_seq {
                    break;
                }
                if view.seq >= from {
                    bytes += view.payload.len() + view.key.len();
                    out.push(view.to_record());
                }
                at += used;
            }
            Err(DecodeError::Incomplete { .. }) | Err(DecodeError::Zero) => break,
            Err(e) => return Err((expect_seq.unwrap_or(from), e)),
        }
    }
    Ok(out)
}
