//! Startup recovery: replay every shard journal into the logs' own segments.
//!
//! Runs before any shard serves. Journals of every shard directory are replayed, whatever the
//! shard count was when they were written, so a restart with another shard count needs
//! nothing more. Replay is idempotent: a record whose sequence a log already holds is skipped,
//! so a crash during recovery simply repeats it. Replay of a shard's journal stops at its
//! first bad entry: the commit protocol acknowledges a round only after everything before it
//! was synced, so nothing acknowledged can lie beyond a torn or zero entry.

use crate::file_budget::{self, FileBudget, OPEN_SEGMENT_FILES_MAX_DEFAULT};
use crate::journal::{self, parse_journal_file_name};
use crate::journal_entry::{self, EntryError, EntryKind};
use crate::log::{self, Log, LogConfig};
use crate::record;
use crate::store::{logs_root, validate_log_name};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// What recovery did, for the startup log line and for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub journal_files: usize,
    pub records_replayed: u64,
    pub records_already_present: u64,
    pub logs_touched: usize,
    /// Shard journals whose replay stopped at a damaged entry before the end of the data.
    pub torn_tails: Vec<String>,
}

/// Replays and then deletes every journal under `<data_dir>/journal`, holding at most
/// `OPEN_SEGMENT_FILES_MAX_DEFAULT` segment files open (see [`recover_within`]).
pub async fn recover(data_dir: &Path, cfg: &LogConfig) -> io::Result<RecoveryReport> {
    recover_within(data_dir, cfg, OPEN_SEGMENT_FILES_MAX_DEFAULT).await
}

/// Like [`recover`], with a limit on the segment files held open: a journal that touched
/// more logs than that would otherwise open two files per log until the end.
pub async fn recover_within(
    data_dir: &Path,
    cfg: &LogConfig,
    open_segment_files_max: usize,
) -> io::Result<RecoveryReport> {
    file_budget::check_limit(open_segment_files_max)?;
    let mut budget = FileBudget::new(open_segment_files_max);
    let mut report = RecoveryReport::default();
    let root = data_dir.join("journal");
    let shard_dirs = sorted_dirs(&root)?;
    let mut logs: HashMap<String, RefCell<Log>> = HashMap::new();
    let mut replayed_files = Vec::new();
    for shard_dir in shard_dirs {
        let files = journal_files(&shard_dir)?;
        for (_, path) in files {
            report.journal_files += 1;
            // Startup only: a plain sequential read is the fastest way to scan a file once.
            let bytes = read_written_prefix(&path)?;
            let stopped = replay_file(&bytes, data_dir, cfg, &mut logs, &mut report).await?;
            replayed_files.push(path.clone());
            for log in logs.values() {
                flush_within(log, &mut budget, false).await?;
            }
            if let Some(reason) = stopped {
                report
                    .torn_tails
                    .push(format!("{}: {reason}", path.display()));
                break; // nothing acknowledged lies past a damaged entry of this shard
            }
        }
    }
    for log in logs.values() {
        flush_within(log, &mut budget, true).await?;
    }
    report.logs_touched = logs.len();
    // Only now, with every replayed record synced in its segment, may the journals go.
    for path in replayed_files {
        std::fs::remove_file(&path)?;
    }
    for dir in sorted_dirs(&root)? {
        for (_, path) in journal_files(&dir)? {
            std::fs::remove_file(path)?; // empty pre-zeroed spares past a torn tail
        }
    }
    if root.exists() {
        std::fs::File::open(&root)?.sync_all()?;
    }
    Ok(report)
}

/// Writes `log`'s replayed tail (and syncs it when `sync`). Once the budget is used up the
/// log is synced and its files closed at once; that costs an fdatasync per log per journal
/// file, but only past the limit, and recovery holds a bounded number of descriptors.
async fn flush_within(log: &RefCell<Log>, budget: &mut FileBudget, sync: bool) -> io::Result<()> {
    let before = log.borrow().open_file_count();
    log::flush(log).await?;
    let after = log.borrow().open_file_count();
    budget.record_use(before, after);
    let over = budget.over_limit();
    if sync || over {
        log::sync(log).await?;
    }
    if over {
        let closed = log.borrow_mut().release_files();
        budget.record_closed(closed);
    }
    Ok(())
}

/// Replays one journal file; returns why it stopped early, if it did.
async fn replay_file(
    bytes: &[u8],
    data_dir: &Path,
    cfg: &LogConfig,
    logs: &mut HashMap<String, RefCell<Log>>,
    report: &mut RecoveryReport,
) -> io::Result<Option<String>> {
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let (entry, used) = match journal_entry::decode_entry(&bytes[at..]) {
            Ok(x) => x,
            Err(EntryError::Zero) => return Ok(None),
            Err(e) => return Ok(Some(format!("{e} at offset {at}"))),
        };
        at += used;
        match entry.kind {
            EntryKind::Declare => {
                let name = std::str::from_utf8(entry.data)
                    .map_err(|_| io::Error::other("journal declares a non-UTF-8 log name"))?;
                validate_log_name(name)?;
                names.insert(entry.log, name.to_string());
            }
            EntryKind::Append => {
                let name = names.get(&entry.log).ok_or_else(|| {
                    io::Error::other(format!(
                        "journal appends to undeclared log handle {}",
                        entry.log
                    ))
                })?;
                if !logs.contains_key(name) {
                    let dir = logs_root(data_dir).join(name);
                    let log = log::open_log(name, dir, cfg.clone()).await?;
                    logs.insert(name.clone(), RefCell::new(log));
                }
                let log = logs.get(name).expect("inserted");
                apply_frame(log, entry.data, report)?;
            }
        }
    }
    Ok(None)
}

fn apply_frame(log: &RefCell<Log>, frame: &[u8], report: &mut RecoveryReport) -> io::Result<()> {
    let (view, used) = record::decode(frame)
        .map_err(|e| io::Error::other(format!("journal holds an undecodable record: {e}")))?;
    if used != frame.len() {
        return Err(io::Error::other(
            "journal entry holds trailing bytes after its record",
        ));
    }
    let mut l = log.borrow_mut();
    let next = l.next_seq();
    if view.seq < next {
        report.records_already_present += 1;
        return Ok(());
    }
    if view.seq > next {
        return Err(io::Error::other(format!(
            "log {}: journal holds sequence {} but the log ends before {next}: a gap",
            l.name(),
            view.seq
        )));
    }
    l.append_frame(view.seq, view.timestamp_ns, frame);
    report.records_replayed += 1;
    Ok(())
}

/// Reads a journal file up to the end of its written entries: pre-zeroed files are mostly
/// zeros, and reading them whole would make every restart read `journal_file_bytes` per
/// shard. Stops at the first zero header; on a damaged entry keeps what was read so the
/// replay reports the damage.
fn read_written_prefix(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    const CHUNK_BYTES: usize = 1024 * 1024;
    let mut file = std::fs::File::open(path)?;
    let mut buf: Vec<u8> = Vec::new();
    let mut at = 0usize;
    loop {
        match journal_entry::decode_entry(&buf[at..]) {
            Ok((_, used)) => {
                at += used;
                continue;
            }
            Err(EntryError::Zero) => {
                buf.truncate(at + journal_entry::ENTRY_HEADER_BYTES);
                return Ok(buf);
            }
            Err(EntryError::Incomplete) => {}
            Err(_) => return Ok(buf),
        }
        let old = buf.len();
        buf.resize(old + CHUNK_BYTES, 0);
        let n = file.read(&mut buf[old..])?;
        buf.truncate(old + n);
        if n == 0 {
            return Ok(buf);
        }
    }
}

fn sorted_dirs(root: &Path) -> io::Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e?;
        if e.file_type()?.is_dir() {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

fn journal_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Some(base) = e.file_name().to_str().and_then(parse_journal_file_name) {
            out.push((base, journal::journal_file_path(dir, base)));
        }
    }
    out.sort();
    Ok(out)
}
