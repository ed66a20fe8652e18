//! Moving a log's in-memory tail to its segment files and syncing them, planned under a
//! borrow and run without one; and giving back the files of an idle log.

use super::Log;
use crate::appender::{self, WriteJob};
use crate::segment::{self, Segment, SegmentFiles};
use glommio::io::DmaFile;
use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

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

impl Log {
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
            seg.data.release_spare_capacity();
            seg.index_app.release_spare_capacity();
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
    use crate::log::{decode_records, open_log, FileSource, LogConfig, ReadStep};
    use crate::record::{self, Record};
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
            .spawn(move || async move {
                crate::probe::warm_iopoll(dir.parent().unwrap())
                    .await
                    .unwrap();
                f(dir).await
            })
            .expect("executor")
            .join()
            .expect("join");
    }

    /// A snapshot is stored as 1 MiB chunk records and recovery reads them in bulk: one
    /// step fetches several whole chunks. With steps capped at 1 MiB no chunk fitted one,
    /// so each was fetched three times over (startup of a 1,000,000 × 1 KiB queue read its
    /// 731 MB snapshot in 1.1–1.7 s; 0.7 s since).
    #[test]
    fn a_bulk_read_fetches_several_snapshot_chunks_per_step() {
        run(|dir| {
            Box::pin(async move {
                const CHUNK_BYTES: usize = 1024 * 1024;
                let log = RefCell::new(Log::new_empty("l", dir.clone(), LogConfig::default()));
                for seq in 1..=12 {
                    let rec = Record {
                        seq,
                        timestamp_ns: 1,
                        payload: bytes::Bytes::from(vec![seq as u8; CHUNK_BYTES]),
                        ..Default::default()
                    };
                    let mut frame = Vec::new();
                    record::encode(&rec, &mut frame).unwrap();
                    log.borrow_mut().append_frame(seq, 1, &frame);
                }
                flush(&log).await.unwrap();
                sync(&log).await.unwrap();
                log.borrow_mut().release_files();
                let reopened = open_log("l", dir, LogConfig::default()).await.unwrap();
                let ReadStep::File { file, pos, len, .. } =
                    reopened.plan_read(1, usize::MAX, usize::MAX, 0).unwrap()
                else {
                    panic!("read from the file");
                };
                let buf = file.read(pos, len).await.unwrap();
                let recs = decode_records(&buf, 1, 13, usize::MAX, usize::MAX).unwrap();
                assert!(
                    recs.len() >= 4,
                    "{} whole chunks in a {len}-byte step",
                    recs.len()
                );
                assert_eq!(recs[3].payload.len(), CHUNK_BYTES);
            })
        });
    }

    #[test]
    fn a_sealed_segment_on_disk_keeps_no_write_buffer() {
        run(|dir| {
            Box::pin(async move {
                let cfg = LogConfig {
                    segment_bytes: 256 * 1024,
                    tail_cache_bytes: 0,
                    ..LogConfig::default()
                };
                let log = RefCell::new(Log::new_empty("l", dir.clone(), cfg));
                // ~2,000 frames of ~330 bytes: two sealed segments and an active one, each
                // buffered whole before the one flush.
                for seq in 1..=2_000 {
                    log.borrow_mut().append_frame(seq, 1, &frame(seq));
                }
                flush(&log).await.unwrap();
                sync(&log).await.unwrap();
                let l = log.borrow();
                let (sealed, active) = l.segments.split_at(l.segments.len() - 1);
                assert!(sealed.len() >= 2, "{} sealed segments", sealed.len());
                for seg in sealed {
                    assert!(seg.sealed_durable);
                    let held = seg.data.held_capacity_bytes() + seg.index_app.held_capacity_bytes();
                    assert!(
                        held <= 2 * 4096,
                        "sealed segment {} holds {held} bytes",
                        seg.base_seq
                    );
                }
                assert!(
                    active[0].data.held_capacity_bytes() >= 64 * 1024,
                    "the active segment keeps its buffer for the appends to come"
                );
            })
        });
    }

    #[test]
    fn idle_files_close_only_without_pending_io_and_reopen_on_the_next_flush() {
        run(|dir| {
            Box::pin(async move {
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
                let buf = [&file.read(pos, len).await.unwrap()[..], &mem_tail].concat();
                let recs = decode_records(&buf, 1, 22, 100, usize::MAX).unwrap();
                assert_eq!(recs.len(), 21);
                assert_eq!(recs[20].payload, bytes::Bytes::from(vec![21u8; 300]));
            })
        });
    }
}
