//! Restarting a log at a later sequence: every record below it goes at once, as retention
//! would have removed them, and the next append takes that sequence. A node's copy of a
//! replicated stream partition does this when the records it lacks were removed by its
//! peers' retention (`messaging::engine::replicated`): its own older records would sit
//! before a gap that no reader can cross, and the cluster has let them go.
//!
//! Crash safety: the new start is made durable first, as a marker file ([`MARKER_FILE`],
//! the sequence in decimal) written under a temporary name, synced, renamed into place and
//! the directory synced; only then are the old segments' files removed. Opening a log
//! honours the marker: segments below it are ones an interrupted restart had not removed
//! yet, and are removed; with none left, the log is empty and starts at the marker. The
//! journal may still hold records below the marker: replay skips them as present, since
//! they lie below the log's end. The marker stays (a later restart replaces it): segments
//! below it never come back, so it says nothing wrong.
//!
use super::{sync_dir, Log, LogConfig};
use crate::segment::{self, Segment, SegmentFiles};
use glommio::io::BufferedFile;
use std::io;
use std::path::{Path, PathBuf};

/// The marker's file name in a log's directory.
pub const MARKER_FILE: &str = "restart";
/// Longest marker a reader accepts (a u64 in decimal is at most 20 digits).
const MARKER_BYTES_MAX: usize = 32;

/// The sequence a log was restarted at, if its directory holds a marker; an error for a
/// marker that is not one (a damaged file is never guessed past).
pub async fn read_marker(dir: &Path) -> io::Result<Option<u64>> {
    let path = dir.join(MARKER_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let fail = |e: glommio::GlommioError<()>| io::Error::other(format!("{}: {e}", path.display()));
    let f = BufferedFile::open(&path).await.map_err(fail)?;
    // One byte past the limit, so an overlong marker is seen as such.
    let bytes = f.read_at(0, MARKER_BYTES_MAX + 1).await.map_err(fail)?;
    let parsed = parse_marker(&bytes);
    f.close().await.map_err(fail)?;
    parsed
        .map(Some)
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// A marker's sequence: decimal digits without leading zeros for a number ≥ 1, then at
/// most one newline, in at most `MARKER_BYTES_MAX` bytes — what [`write_marker`] writes
/// (or that without its newline), and nothing else.
pub fn parse_marker(bytes: &[u8]) -> Result<u64, String> {
    let digits = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let valid = bytes.len() <= MARKER_BYTES_MAX
        && digits.first().is_some_and(|&d| d != b'0')
        && digits.iter().all(u8::is_ascii_digit);
    let seq = valid
        .then(|| std::str::from_utf8(digits).ok()?.parse::<u64>().ok())
        .flatten()
        .filter(|&seq| seq > 0);
    seq.ok_or_else(|| "restart marker is not a sequence number".to_string())
}

/// Makes `seq` the durable start of the log in `dir` (creating the directory if needed):
/// written under a temporary name, synced, renamed into place, the directory synced.
pub async fn write_marker(dir: &Path, seq: u64) -> io::Result<()> {
    assert!(seq > 0, "sequences start at 1");
    let fresh_dir = !dir.exists();
    if fresh_dir {
        // A log never written yet: one mkdir, as a segment's first files do.
        std::fs::create_dir_all(dir)?;
    }
    let tmp = dir.join(format!("{MARKER_FILE}.tmp"));
    let fail = |e: glommio::GlommioError<()>| io::Error::other(format!("{}: {e}", tmp.display()));
    let f = BufferedFile::create(&tmp).await.map_err(fail)?;
    f.write_at(format!("{seq}\n").into_bytes(), 0)
        .await
        .map_err(fail)?;
    f.fdatasync().await.map_err(fail)?;
    f.close().await.map_err(fail)?;
    glommio::io::rename(&tmp, dir.join(MARKER_FILE))
        .await
        .map_err(fail)?;
    sync_dir(dir).await?;
    if fresh_dir {
        if let Some(parent) = dir.parent() {
            sync_dir(parent).await?;
        }
    }
    Ok(())
}

/// Removes the segment files below `start` (what a restart interrupted by a crash left)
/// and returns the bases that remain.
pub async fn drop_bases_below(dir: &Path, bases: Vec<u64>, start: u64) -> io::Result<Vec<u64>> {
    let (below, kept): (Vec<u64>, Vec<u64>) = bases.into_iter().partition(|&b| b < start);
    for base in below {
        for path in [
            segment::data_path(dir, base),
            segment::index_path(dir, base),
        ] {
            // A segment whose index a crash left uncreated has its data file alone.
            if path.exists() {
                glommio::io::remove(&path)
                    .await
                    .map_err(|e| io::Error::other(format!("remove {}: {e}", path.display())))?;
            }
        }
    }
    Ok(kept)
}

impl Log {
    /// A log with no records that starts at `first_seq`, nothing on disk yet.
    pub fn new_empty_at(name: &str, dir: PathBuf, cfg: LogConfig, first_seq: u64) -> Log {
        assert!(first_seq > 0, "sequences start at 1");
        let mut log = Log::new_empty(name, dir, cfg);
        log.segments = vec![Segment::new_empty(first_seq, log.cfg.tail_cache_bytes)];
        log
    }

    /// Drops every segment and starts empty at `seq` (past the log's end; the marker must
    /// be durable first: [`write_marker`]). Returns the files to remove and how many
    /// descriptors the dropped segments held (flush work already under way finds its
    /// segment gone and changes nothing).
    pub fn restart_at(&mut self, seq: u64) -> (Vec<PathBuf>, usize) {
        assert!(
            seq > self.next_seq(),
            "a restart moves the log's end forward"
        );
        let mut files = Vec::new();
        let mut open = 0;
        for seg in &self.segments {
            open += seg.files.open_count();
            // A segment whose files a flush is creating right now leaves them behind; the
            // next open removes them (they lie below the marker).
            if !matches!(seg.files, SegmentFiles::NotCreated) {
                files.push(segment::data_path(&self.dir, seg.base_seq));
                files.push(segment::index_path(&self.dir, seg.base_seq));
            }
        }
        self.segments = vec![Segment::new_empty(seq, self.cfg.tail_cache_bytes)];
        // The new segment's files are created, and the directory synced, by the next flush.
        self.dir_durable = false;
        assert_eq!(self.next_seq(), seq);
        assert_eq!(self.first_seq(), seq);
        (files, open)
    }
}
