//! Opening a log from disk after a restart or crash: list its segments (honouring a restart
//! marker, `restart.rs`), verify each one's frames from the last good index entry on, and
//! cut a torn tail.

use super::{restart, Log, LogConfig};
use crate::appender::{self, Appender};
use crate::record::{self, DecodeError};
use crate::segment::{self, IndexEntry, Segment, SegmentFiles, INDEX_ENTRY_BYTES};
use glommio::io::DmaFile;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Opens the log stored under `dir`, repairing a torn tail: the active segment is scanned
/// from its last verified index entry, every frame's checksum is checked, and the files are
/// truncated at the first bad, zero or short frame. A sealed segment that does not run
/// cleanly up to the next segment's base is reported as corruption (it was synced before the
/// next segment existed, so a crash cannot explain it).
pub async fn open_log(name: &str, dir: PathBuf, cfg: LogConfig) -> io::Result<Log> {
    let mut bases = list_segment_bases(&dir)?;
    if let Some(start) = restart::read_marker(&dir).await? {
        bases = restart::drop_bases_below(&dir, bases, start).await?;
        if bases.is_empty() {
            return Ok(Log::new_empty_at(name, dir, cfg, start));
        }
    }
    if bases.is_empty() {
        return Ok(Log::new_empty(name, dir, cfg));
    }
    bases.sort_unstable();
    let mut segments = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied();
        let seg = open_segment(&dir, base, next_base, &cfg).await?;
        segments.push(seg);
    }
    Ok(Log {
        name: name.to_string(),
        dir,
        cfg,
        segments,
        dir_durable: true,
        used_tick: 0,
    })
}

fn list_segment_bases(dir: &Path) -> io::Result<Vec<u64>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry?;
        if let Some(base) = entry
            .file_name()
            .to_str()
            .and_then(segment::parse_data_file_name)
        {
            out.push(base);
        }
    }
    Ok(out)
}

async fn open_segment(
    dir: &Path,
    base: u64,
    next_base: Option<u64>,
    cfg: &LogConfig,
) -> io::Result<Segment> {
    let data_path = segment::data_path(dir, base);
    let index_path = segment::index_path(dir, base);
    let data = appender::open_rw(&data_path, false).await?;
    let index = appender::open_rw(&index_path, true).await?;
    let data_len = data
        .file_size()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    let index_len = index
        .file_size()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    let index_bytes = appender::read_range(&index, 0, index_len as usize).await?;
    let mut entries = segment::parse_index(&index_bytes, base, data_len);

    // Scan from the last index entry whose record verifies; drop entries that do not.
    let scan = loop {
        let start = entries
            .last()
            .copied()
            .unwrap_or(IndexEntry { seq: base, pos: 0 });
        let s = scan_segment(&data, start, data_len).await?;
        if s.first_ok || entries.is_empty() {
            break s;
        }
        entries.pop();
    };
    let end_pos = scan.end_pos;
    let next_seq = scan.next_seq;
    if let Some(nb) = next_base {
        if next_seq != nb {
            return Err(io::Error::other(format!(
                "sealed segment {} ends at sequence {} but the next segment starts at {nb}: \
                 stored data is corrupt ({})",
                data_path.display(),
                next_seq.saturating_sub(1),
                scan.stop_reason
            )));
        }
    }
    if data_len > end_pos {
        // Cut the torn or padded tail so the file holds exactly the verified records.
        data.truncate(end_pos)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let index_keep = entries.len() * INDEX_ENTRY_BYTES;
    if index_len as usize != index_keep {
        index
            .truncate(index_keep as u64)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let sealed = next_base.is_some();
    let tail = tail_block(&data, end_pos).await?;
    let index_tail_start = index_keep - index_keep % index.alignment() as usize;
    let mut seg = Segment {
        base_seq: base,
        next_seq,
        data: Appender::new(end_pos, tail, data.alignment(), cfg.tail_cache_bytes),
        index_app: Appender::new(
            index_keep as u64,
            index_bytes[index_tail_start..index_keep].to_vec(),
            index.alignment(),
            0,
        ),
        index: entries,
        // Every segment starts closed, the active one too: the scan above made it whole, and
        // the first flush reopens it. Opening a store's logs thus costs no lasting descriptor.
        files: SegmentFiles::Closed,
        bytes_since_index: 0,
        max_timestamp_ns: scan.max_timestamp_ns,
        sealed,
        sealed_durable: sealed,
    };
    seg.bytes_since_index = end_pos - seg.index.last().map(|e| e.pos).unwrap_or(0);
    close_file(data).await;
    close_file(index).await;
    Ok(seg)
}

/// Closes a file now rather than on the executor's next I/O cycle, when nothing else holds it.
async fn close_file(file: Rc<DmaFile>) {
    if let Ok(f) = Rc::try_unwrap(file) {
        let _ = f.close().await;
    }
}

async fn tail_block(file: &DmaFile, len: u64) -> io::Result<Vec<u8>> {
    let start = len - len % file.alignment();
    if start == len {
        return Ok(Vec::new());
    }
    let bytes = appender::read_range(file, start, (len - start) as usize).await?;
    if bytes.len() as u64 != len - start {
        return Err(io::Error::other("segment tail block came back short"));
    }
    Ok(bytes)
}

struct Scan {
    next_seq: u64,
    end_pos: u64,
    max_timestamp_ns: i64,
    /// The frame at the start position decoded with the expected sequence.
    first_ok: bool,
    stop_reason: String,
}

/// Verifies frames from `start` on; stops at the first bad, zero or short frame.
async fn scan_segment(file: &DmaFile, start: IndexEntry, data_len: u64) -> io::Result<Scan> {
    const CHUNK_BYTES: usize = 1024 * 1024;
    let mut pos = start.pos;
    let mut expect = start.seq;
    let mut max_ts = 0i64;
    let mut first_ok = false;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_pos = pos;
    let stop_reason;
    loop {
        let off = (pos - buf_pos) as usize;
        match record::decode(&buf[off..]) {
            Ok((view, used)) => {
                if view.seq != expect {
                    stop_reason = format!("expected sequence {expect}, found {}", view.seq);
                    break;
                }
                first_ok = true;
                max_ts = max_ts.max(view.timestamp_ns);
                expect += 1;
                pos += used as u64;
            }
            Err(DecodeError::Incomplete { needed_bytes, .. }) => {
                if pos >= data_len {
                    stop_reason = "end of file".to_string();
                    break;
                }
                let have = buf.len() - off;
                if buf_pos + buf.len() as u64 >= data_len {
                    stop_reason = format!("torn frame at offset {pos}");
                    break;
                }
                let want = needed_bytes.max(CHUNK_BYTES).max(have + 1);
                let len = (want as u64).min(data_len - pos) as usize;
                buf = appender::read_range(file, pos, len).await?;
                buf_pos = pos;
                if buf.len() <= have {
                    stop_reason = format!("short read at offset {pos}");
                    break;
                }
            }
            Err(e) => {
                stop_reason = format!("{e} at offset {pos}");
                break;
            }
        }
    }
    Ok(Scan {
        next_seq: expect,
        end_pos: pos,
        max_timestamp_ns: max_ts,
        first_ok,
        stop_reason,
    })
}
