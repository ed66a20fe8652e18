//! A log: a gap-free sequence of records in segments under one directory.
//!
//! The log is owned by one shard and mutated without locks. Appends are synchronous and land
//! in memory (the active segment's tail buffer); the shard journal makes them durable, and the
//! flusher writes them to the segment files later (see `store.rs`). Everything that awaits
//! I/O is split into plan (sync, under a borrow) → run (no borrow) → complete (sync).

use crate::appender::{self, Appender, WriteJob};
use crate::record::{self, DecodeError, Record};
use crate::segment::{self, IndexEntry, Segment, SegmentFiles, INDEX_ENTRY_BYTES};
use glommio::io::DmaFile;
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Sizes and limits of one log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Roll to a new segment when the next frame would pass this size.
    pub segment_bytes: u64,
    /// Bytes between sparse index entries; bounds the scan of a lookup.
    pub index_interval_bytes: u64,
    /// Recent bytes kept in memory after they are written, so tail reads skip the disk.
    pub tail_cache_bytes: usize,
    /// Remove the oldest sealed segments while the log holds more than this (0 = no limit).
    pub retention_bytes: u64,
    /// Remove sealed segments whose newest record is older than this (0 = no limit).
    pub retention_ms: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 64 * 1024 * 1024,
            index_interval_bytes: 4096,
            tail_cache_bytes: 64 * 1024,
            retention_bytes: 0,
            retention_ms: 0,
        }
    }
}

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
    pub async fn read(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        match self {
            FileSource::Open(f) => appender::read_range(f, pos, len).await,
            FileSource::Closed(path) => {
                let f = glommio::io::DmaFile::open(path)
                    .await
                    .map_err(|e| io::Error::other(format!("open {}: {e}", path.display())))?;
                let r = appender::read_range(&f, pos, len).await;
                let _ = f.close().await;
                r
            }
        }
    }
}

/// A segment's two files to fdatasync, with the positions the sync makes durable:
/// `(base_seq, data, index, data_upto, index_upto)`.
pub type SyncJob = (u64, Rc<DmaFile>, Rc<DmaFile>, u64, u64);

/// Which of a segment's two files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentFile {
    Data,
    Index,
}

/// One unit of flush work.
pub enum FlushJob {
    CreateFiles {
        base_seq: u64,
        dir: PathBuf,
    },
    /// The segment's files exist but were closed while idle; open them again by name. The
    /// appender still holds the partial tail block and the index its entries, so writing
    /// resumes at the aligned position it would have used anyway: nothing is read back.
    ReopenFiles {
        base_seq: u64,
        dir: PathBuf,
    },
    Write {
        base_seq: u64,
        part: SegmentFile,
        file: Rc<DmaFile>,
        job: WriteJob,
    },
    SyncSealed {
        base_seq: u64,
        data: Rc<DmaFile>,
        index: Rc<DmaFile>,
    },
}

pub struct Log {
    name: String,
    dir: PathBuf,
    cfg: LogConfig,
    /// Sorted by base; the last one takes appends.
    segments: Vec<Segment>,
    dir_durable: bool,
    /// The owner's clock at this log's latest file I/O; orders which idle logs give their
    /// files back first (least recently used).
    used_tick: u64,
}

impl Log {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn next_seq(&self) -> u64 {
        self.active().next_seq
    }

    pub fn first_seq(&self) -> u64 {
        self.segments[0].base_seq
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes()).sum()
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log always has a segment")
    }

    /// A log with no records, nothing on disk yet.
    pub fn new_empty(name: &str, dir: PathBuf, cfg: LogConfig) -> Log {
        let retain = cfg.tail_cache_bytes;
        Log {
            name: name.to_string(),
            dir,
            cfg,
            segments: vec![Segment::new_empty(1, retain)],
            dir_durable: false,
            used_tick: 0,
        }
    }

    /// Appends an encoded frame whose sequence is `next_seq()`, rolling first if it would
    /// overflow a non-empty active segment.
    pub fn append_frame(&mut self, seq: u64, timestamp_ns: i64, frame: &[u8]) {
        assert_eq!(seq, self.next_seq());
        let active = self.active();
        if !active.is_empty() && active.size_bytes() + frame.len() as u64 > self.cfg.segment_bytes {
            self.roll();
        }
        let interval = self.cfg.index_interval_bytes;
        self.active_mut()
            .append_frame(seq, timestamp_ns, frame, interval);
    }

    fn roll(&mut self) {
        let next = self.next_seq();
        self.active_mut().sealed = true;
        self.segments
            .push(Segment::new_empty(next, self.cfg.tail_cache_bytes));
    }

    pub fn needs_sync(&self) -> bool {
        self.segments.iter().any(|s| s.has_unsynced())
    }

    /// Whether `flush` or `sync` has anything to do (see `Segment::has_pending_io`).
    pub fn has_pending_io(&self) -> bool {
        self.segments.iter().any(|s| s.has_pending_io())
    }

    /// Descriptors this log's segments hold (2 per open segment; sealed durable segments and
    /// idle active ones hold none).
    pub fn open_file_count(&self) -> usize {
        self.segments.iter().map(|s| s.files.open_count()).sum()
    }

    pub fn used_tick(&self) -> u64 {
        self.used_tick
    }

    pub fn mark_used(&mut self, tick: u64) {
        self.used_tick = tick;
    }

    /// Closes the files of a log with no pending I/O and returns how many descriptors that
    /// gives back (0 when something is left to write or sync: those files stay). Nothing is
    /// lost: the files hold every written byte, synced, and the next flush reopens them.
    /// A read already running keeps its own handle to the file until it ends (glommio closes
    /// a dropped file on its next I/O cycle), so the count is exact a moment later.
    pub fn release_files(&mut self) -> usize {
        if self.has_pending_io() {
            return 0;
        }
        let mut released = 0;
        for seg in self.segments.iter_mut() {
            released += seg.files.open_count();
            if matches!(seg.files, SegmentFiles::Open { .. }) {
                seg.files = SegmentFiles::Closed;
            }
        }
        released
    }

    /// The next flush step, in file order: a segment's files are created only after every
    /// earlier segment is complete and synced, so a later segment on disk proves the earlier
    /// ones are whole.
    pub fn plan_flush(&mut self) -> Option<FlushJob> {
        let dir = self.dir.clone();
        for seg in self.segments.iter_mut() {
            if seg.sealed_durable {
                continue;
            }
            let (data, index) = match &seg.files {
                SegmentFiles::Open { data, index } => (Rc::clone(data), Rc::clone(index)),
                SegmentFiles::NotCreated => {
                    if seg.is_empty() && !seg.sealed {
                        return None; // nothing to put on disk yet
                    }
                    return Some(FlushJob::CreateFiles {
                        base_seq: seg.base_seq,
                        dir,
                    });
                }
                SegmentFiles::Closed => {
                    if !seg.has_pending_io() {
                        return None; // the active segment, idle and fully on disk
                    }
                    return Some(FlushJob::ReopenFiles {
                        base_seq: seg.base_seq,
                        dir,
                    });
                }
            };
            if let Some(job) = seg.data.plan_write() {
                return Some(FlushJob::Write {
                    base_seq: seg.base_seq,
                    part: SegmentFile::Data,
                    file: data,
                    job,
                });
            }
            if let Some(job) = seg.index_app.plan_write() {
                return Some(FlushJob::Write {
                    base_seq: seg.base_seq,
                    part: SegmentFile::Index,
                    file: index,
                    job,
                });
            }
            if seg.sealed {
                return Some(FlushJob::SyncSealed {
                    base_seq: seg.base_seq,
                    data,
                    index,
                });
            }
            return None; // the active segment is fully written
        }
        None
    }

    fn segment_mut(&mut self, base_seq: u64) -> Option<&mut Segment> {
        self.segments.iter_mut().find(|s| s.base_seq == base_seq)
    }

    /// Records a segment's files as open, after creating or reopening them.
    pub fn complete_open(&mut self, base_seq: u64, data: Rc<DmaFile>, index: Rc<DmaFile>) {
        self.dir_durable = true;
        if let Some(seg) = self.segment_mut(base_seq) {
            assert!(
                !matches!(seg.files, SegmentFiles::Open { .. }),
                "segment files opened twice"
            );
            seg.files = SegmentFiles::Open { data, index };
        }
    }

    /// Records a finished (`Some(end)`) or failed (`None`, planned again later) write.
    pub fn complete_write(&mut self, base_seq: u64, part: SegmentFile, end: Option<u64>) {
        if let Some(seg) = self.segment_mut(base_seq) {
            let app = match part {
                SegmentFile::Data => &mut seg.data,
                SegmentFile::Index => &mut seg.index_app,
            };
            match end {
                Some(end) => app.complete_write(end),
                None => app.abort_write(),
            }
        }
    }

    pub fn complete_sealed_sync(&mut self, base_seq: u64) {
        if let Some(seg) = self.segment_mut(base_seq) {
            let (d, i) = (seg.data.written(), seg.index_app.written());
            seg.data.complete_sync(d);
            seg.index_app.complete_sync(i);
            seg.sealed_durable = true;
            // Complete and durable: close both files; reads reopen on demand.
            seg.files = SegmentFiles::Closed;
        }
    }

    /// Files of the active segment that hold written but unsynced bytes, with the positions
    /// a sync will make durable.
    pub fn plan_sync(&self) -> Vec<SyncJob> {
        self.segments
            .iter()
            .filter(|s| s.has_unsynced())
            .filter_map(|s| match &s.files {
                SegmentFiles::Open { data, index } => Some((
                    s.base_seq,
                    Rc::clone(data),
                    Rc::clone(index),
                    s.data.written(),
                    s.index_app.written(),
                )),
                // Only segments without unsynced bytes are ever closed.
                SegmentFiles::NotCreated | SegmentFiles::Closed => None,
            })
            .collect()
    }

    pub fn complete_sync(&mut self, base_seq: u64, data_upto: u64, index_upto: u64) {
        if let Some(seg) = self.segment_mut(base_seq) {
            seg.data.complete_sync(data_upto);
            seg.index_app.complete_sync(index_upto);
        }
    }

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
            .clamp(64 * 1024, 1024 * 1024)
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

    /// Removes sealed, durable segments that hold only sequences below `seq` (a compaction
    /// point: the owner keeps a snapshot that covers them). Returns the files to delete. The
    /// first retained sequence becomes the base of the first remaining segment, which may be
    /// below `seq`: segments are removed whole, never cut.
    pub fn truncate_before(&mut self, seq: u64) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        while self.segments.len() >= 2
            && self.segments[0].sealed_durable
            && self.segments[0].next_seq <= seq
        {
            let seg = self.segments.remove(0);
            removed.push(segment::data_path(&self.dir, seg.base_seq));
            removed.push(segment::index_path(&self.dir, seg.base_seq));
        }
        removed
    }

    /// Removes sealed, durable segments past the retention limits; returns their files for
    /// the caller to delete. The active segment always stays, so `next_seq` never moves.
    pub fn apply_retention(&mut self, now_ns: i64) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        if self.cfg.retention_bytes == 0 && self.cfg.retention_ms == 0 {
            return removed; // each log carries its own policy; most have none
        }
        let age_limit_ns = self.cfg.retention_ms as i64 * 1_000_000;
        loop {
            if self.segments.len() < 2 || !self.segments[0].sealed_durable {
                break;
            }
            let total = self.size_bytes();
            let oldest = &self.segments[0];
            let over_bytes = self.cfg.retention_bytes > 0
                && total - oldest.size_bytes() >= self.cfg.retention_bytes;
            let over_age =
                self.cfg.retention_ms > 0 && now_ns - oldest.max_timestamp_ns > age_limit_ns;
            if !(over_bytes || over_age) {
                break;
            }
            let seg = self.segments.remove(0);
            removed.push(segment::data_path(&self.dir, seg.base_seq));
            removed.push(segment::index_path(&self.dir, seg.base_seq));
        }
        removed
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

// ---------------------------------------------------------------------------------------
// Opening and recovery.

/// Opens the log stored under `dir`, repairing a torn tail: the active segment is scanned
/// from its last verified index entry, every frame's checksum is checked, and the files are
/// truncated at the first bad, zero or short frame. A sealed segment that does not run
/// cleanly up to the next segment's base is reported as corruption (it was synced before the
/// next segment existed, so a crash cannot explain it).
pub async fn open_log(name: &str, dir: PathBuf, cfg: LogConfig) -> io::Result<Log> {
    let mut bases = list_segment_bases(&dir)?;
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

/// Creates a segment's two files and makes their directory entries durable.
pub async fn create_segment_files(
    dir: &Path,
    base_seq: u64,
) -> io::Result<(Rc<DmaFile>, Rc<DmaFile>)> {
    let fresh_dir = !dir.exists();
    if fresh_dir {
        // A new log: one mkdir, rare, on the flusher path, never on the append path.
        std::fs::create_dir_all(dir)?;
    }
    let data = appender::open_rw(&segment::data_path(dir, base_seq), true).await?;
    let index = appender::open_rw(&segment::index_path(dir, base_seq), true).await?;
    sync_dir(dir).await?;
    if fresh_dir {
        if let Some(parent) = dir.parent() {
            sync_dir(parent).await?;
        }
    }
    Ok((data, index))
}

/// Opens an existing segment's two files again, without creating or truncating them.
pub async fn reopen_segment_files(
    dir: &Path,
    base_seq: u64,
) -> io::Result<(Rc<DmaFile>, Rc<DmaFile>)> {
    let data = appender::open_rw(&segment::data_path(dir, base_seq), false).await?;
    let index = appender::open_rw(&segment::index_path(dir, base_seq), false).await?;
    Ok((data, index))
}

pub async fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = glommio::io::Directory::open(dir)
        .await
        .map_err(|e| io::Error::other(format!("open dir {}: {e}", dir.display())))?;
    d.sync()
        .await
        .map_err(|e| io::Error::other(format!("sync dir {}: {e}", dir.display())))?;
    d.close()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(())
}

/// Writes everything `log` holds in memory to its segment files (creating them as needed).
pub async fn flush(log: &RefCell<Log>) -> io::Result<()> {
    loop {
        let job = log.borrow_mut().plan_flush();
        let Some(job) = job else { return Ok(()) };
        match job {
            FlushJob::CreateFiles { base_seq, dir } => {
                let (d, i) = create_segment_files(&dir, base_seq).await?;
                log.borrow_mut().complete_open(base_seq, d, i);
            }
            FlushJob::ReopenFiles { base_seq, dir } => {
                let (d, i) = reopen_segment_files(&dir, base_seq).await?;
                log.borrow_mut().complete_open(base_seq, d, i);
            }
            FlushJob::Write {
                base_seq,
                part,
                file,
                job,
            } => {
                let r = job.run(&file).await;
                log.borrow_mut()
                    .complete_write(base_seq, part, r.as_ref().ok().copied());
                r?;
            }
            FlushJob::SyncSealed {
                base_seq,
                data,
                index,
            } => {
                data.fdatasync()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
                index
                    .fdatasync()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
                log.borrow_mut().complete_sealed_sync(base_seq);
            }
        }
    }
}

/// Syncs every segment file of `log` holding written but unsynced bytes.
pub async fn sync(log: &RefCell<Log>) -> io::Result<()> {
    let plan = log.borrow().plan_sync();
    for (base, data, index, data_upto, index_upto) in plan {
        data.fdatasync()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        index
            .fdatasync()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        log.borrow_mut().complete_sync(base, data_upto, index_upto);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn frame(seq: u64) -> Vec<u8> {
        let rec = Record {
            seq,
            timestamp_ns: 1,
            payload: bytes::Bytes::from(vec![seq as u8; 300]),
            ..Default::default()
        };
        let mut out = Vec::new();
        record::encode(&rec, &mut out).unwrap();
        out
    }

    fn run(
        f: impl FnOnce(PathBuf) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
            + Send
            + 'static,
    ) {
        let tmp = TempDir::new("log-unit");
        let dir = tmp.path().join("l");
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || f(dir))
            .expect("executor")
            .join()
            .expect("join");
    }

    #[test]
    fn idle_files_close_only_without_pending_io_and_reopen_on_the_next_flush() {
        run(|dir| {
            Box::pin(async move {
                crate::probe::warm_iopoll(dir.parent().unwrap())
                    .await
                    .unwrap();
                let cfg = LogConfig {
                    tail_cache_bytes: 0,
                    ..LogConfig::default()
                };
                let log = RefCell::new(Log::new_empty("l", dir.clone(), cfg.clone()));
                assert_eq!(log.borrow_mut().release_files(), 0, "nothing open yet");
                for seq in 1..=20 {
                    log.borrow_mut().append_frame(seq, 1, &frame(seq));
                }
                assert!(log.borrow().has_pending_io());
                flush(&log).await.unwrap();
                assert_eq!(log.borrow().open_file_count(), 2);
                assert_eq!(
                    log.borrow_mut().release_files(),
                    0,
                    "written but not synced: the files stay"
                );
                sync(&log).await.unwrap();
                assert!(!log.borrow().has_pending_io());
                assert_eq!(log.borrow_mut().release_files(), 2);
                assert_eq!(log.borrow().open_file_count(), 0);
                assert!(log.borrow_mut().plan_flush().is_none(), "idle: no reopen");

                log.borrow_mut().append_frame(21, 1, &frame(21));
                assert!(matches!(
                    log.borrow_mut().plan_flush(),
                    Some(FlushJob::ReopenFiles { base_seq: 1, .. })
                ));
                // That plan was only looked at: plan again for real.
                flush(&log).await.unwrap();
                sync(&log).await.unwrap();
                assert_eq!(log.borrow_mut().release_files(), 2);

                // Everything is on disk, whole, and a fresh open finds it without a repair.
                let reopened = open_log("l", dir, cfg).await.unwrap();
                assert_eq!(reopened.next_seq(), 22);
                assert_eq!(reopened.open_file_count(), 0, "opening holds no descriptor");
                let ReadStep::File {
                    file,
                    pos,
                    len,
                    mem_tail,
                    ..
                } = reopened.plan_read(1, 100, usize::MAX, 0).unwrap()
                else {
                    panic!("the active segment is read from its closed file");
                };
                assert!(matches!(file, FileSource::Closed(_)));
                let mut buf = file.read(pos, len).await.unwrap();
                buf.extend_from_slice(&mem_tail);
                let recs = decode_records(&buf, 1, 22, 100, usize::MAX).unwrap();
                assert_eq!(recs.len(), 21);
                assert_eq!(recs[20].payload, bytes::Bytes::from(vec![21u8; 300]));
            })
        });
    }
}
