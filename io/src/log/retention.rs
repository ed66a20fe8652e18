//! Dropping a log's oldest segments: by a compaction point the owner chose, or by the
//! log's size and age limits. Only whole, sealed and durable segments go.

use super::Log;
use crate::segment;
use std::path::PathBuf;

impl Log {
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
