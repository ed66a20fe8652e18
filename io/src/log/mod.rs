//! A log: a gap-free sequence of records in segments under one directory.
//!
//! The log is owned by one shard and mutated without locks. Appends are synchronous and land
//! in memory (the active segment's tail buffer); the shard journal makes them durable, and the
//! flusher writes them to the segment files later (see `store.rs`). Everything that awaits
//! I/O is split into plan (sync, under a borrow) → run (no borrow) → complete (sync).//!
//! Where each step lives: `flush` writes and syncs segment files, `read` plans and decodes
//! reads, `open` recovers a log from disk, `retention` drops old segments.

mod flush;
mod open;
mod read;
pub mod restart;
mod retention;

pub use flush::{
    create_segment_files, flush, reopen_segment_files, sync, sync_dir, FlushJob, SegmentFile,
    SyncJob,
};
pub use open::open_log;
pub use read::{decode_records, FileSource, ReadError, ReadStep};

use crate::segment::Segment;
use std::path::{Path, PathBuf};

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
}
