//! A shard's storage: its journal and every log it owns.
//!
//! The append path is synchronous and allocation-light: encode the record once, copy the
//! frame into the log's tail and into the journal, return `(seq, lsn)`. Callers reply after
//! `wait_durable(lsn)`; many appends share one commit round. A checkpoint task writes the
//! logs' tails into their own segment files in the background, syncs them, and then trims the
//! journal behind them; it runs only while there is something to write, so an idle shard
//! never wakes up.

use crate::durability::Durability;
use crate::event::Event;
use crate::file_budget::{self, Candidate, FileBudget, OPEN_SEGMENT_FILES_MAX_DEFAULT};
use crate::journal::Journal;
use crate::log::{self, Log, LogConfig, ReadError, ReadStep};
use crate::record::{self, EncodeError, Record, FLAG_EPHEMERAL};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// Share of `journal_backlog_bytes_max`, in percent, that background writers (snapshots)
/// may fill; the rest stays for the clients' appends (see `Store::wait_for_background_room`).
pub const BACKGROUND_BACKLOG_PERCENT: u64 = 25;
/// Framing a background append adds to its payload in the journal, bounded from above: the
/// record header, two entry headers and a log name declaration.
const BACKGROUND_ENTRY_SLACK_BYTES: u64 = 1024;

/// Room an append keeps in its journal entry beyond the record frame (the entry's own
/// header and the declaration of the log's name).
const JOURNAL_ENTRY_SLACK_BYTES: usize = 1024;

/// Smallest journal file in which any record the codec accepts fits (`append` refuses a
/// frame above half a file less `JOURNAL_ENTRY_SLACK_BYTES`): twice the largest frame plus
/// slack, rounded up to the 4 KiB direct-I/O alignment. With journal files at least this
/// large no append is ever refused for its size, so a caller that changes its state before
/// appending (a broker applying a command) is never left ahead of its log by a large
/// record.
pub const JOURNAL_FILE_BYTES_FOR_ANY_RECORD: u64 =
    (2 * (record::FRAME_BYTES_MAX + JOURNAL_ENTRY_SLACK_BYTES) as u64).next_multiple_of(4096);

/// Storage settings of a shard.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    pub durability: Durability,
    pub journal_file_bytes: u64,
    /// Start a checkpoint once this many bytes were appended since the last one.
    pub checkpoint_bytes: u64,
    /// Start a checkpoint this long after the first append following the last one.
    pub checkpoint_interval_ms: u64,
    /// Refuse appends while this many bytes await the journal (a stalled disk must not turn
    /// into unbounded memory).
    pub journal_backlog_bytes_max: u64,
    /// Descriptors this shard's segment files may hold; past it, idle logs close theirs
    /// (see `file_budget.rs`). At least `OPEN_SEGMENT_FILES_MIN`.
    pub open_segment_files_max: usize,
    pub log: LogConfig,
}

impl StoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            data_dir: data_dir.into(),
            durability: Durability::Always,
            journal_file_bytes: 64 * 1024 * 1024,
            checkpoint_bytes: 64 * 1024 * 1024,
            checkpoint_interval_ms: 2_000,
            journal_backlog_bytes_max: 256 * 1024 * 1024,
            open_segment_files_max: OPEN_SEGMENT_FILES_MAX_DEFAULT,
            log: LogConfig::default(),
        }
    }
}

pub fn logs_root(data_dir: &Path) -> PathBuf {
    data_dir.join("logs")
}

pub fn journal_dir(data_dir: &Path, shard: usize) -> PathBuf {
    data_dir.join("journal").join(format!("{shard:04}"))
}

#[derive(Debug)]
pub enum AppendError {
    Encode(EncodeError),
    /// Ephemeral records are never persisted.
    Ephemeral,
    /// The journal holds `journal_backlog_bytes_max` unsynced bytes; retry after
    /// `Store::wait_for_room`.
    Backlogged {
        backlog_bytes: u64,
    },
    /// The record is larger than one journal file can take (half of `journal_file_bytes`).
    TooLargeForJournal {
        frame_bytes: usize,
        limit_bytes: usize,
    },
    /// The journal failed; the store accepts no more appends.
    Failed(String),
}

impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Encode(e) => write!(f, "{e}"),
            Self::Ephemeral => write!(f, "ephemeral records cannot be appended to a log"),
            Self::Backlogged { backlog_bytes } => {
                write!(f, "storage is behind by {backlog_bytes} bytes; retry later")
            }
            Self::TooLargeForJournal {
                frame_bytes,
                limit_bytes,
            } => write!(
                f,
                "record of {frame_bytes} bytes exceeds the {limit_bytes}-byte limit set by storage.journal_file_bytes"
            ),
            Self::Failed(e) => write!(f, "storage failed: {e}"),
        }
    }
}

impl std::error::Error for AppendError {}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    /// Journal position to pass to [`Store::wait_durable`].
    pub lsn: u64,
}

/// A log owned by this shard. Cheap to clone.
#[derive(Clone)]
pub struct LogRef {
    handle: u32,
    log: Rc<RefCell<Log>>,
}

impl LogRef {
    pub fn next_seq(&self) -> u64 {
        self.log.borrow().next_seq()
    }

    pub fn first_seq(&self) -> u64 {
        self.log.borrow().first_seq()
    }

    pub fn name(&self) -> String {
        self.log.borrow().name().to_string()
    }

    pub fn segment_count(&self) -> usize {
        self.log.borrow().segment_count()
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.borrow().size_bytes()
    }
}

pub struct Store {
    cfg: StoreConfig,
    journal: Rc<Journal>,
    logs: RefCell<HashMap<String, LogRef>>,
    next_handle: Cell<u32>,
    /// Bytes appended since the last checkpoint started.
    dirty_bytes: Cell<u64>,
    dirty_since: Cell<Option<std::time::Instant>>,
    checkpoint_wake: Event,
    checkpoint_done: Event,
    checkpoints: Cell<u64>,
    /// Scratch for encoding, reused so the append path does not allocate.
    scratch: RefCell<Vec<u8>>,
    closing: Cell<bool>,
    checkpoint_running: Cell<bool>,
    /// Reads that may be about to open a closed segment file by path. Retention defers
    /// unlinking while any is in flight: glommio's open panics if the file vanishes between
    /// its open and its statfs.
    reads_in_flight: Rc<Cell<usize>>,
    /// Segment files removed from their logs, waiting for no read to be in flight.
    pending_removals: RefCell<Vec<PathBuf>>,
    /// Descriptors held by the logs' segment files, against `open_segment_files_max`.
    file_budget: RefCell<FileBudget>,
}

/// Counts a read as in flight for as long as it lives.
struct ReadGuard(Rc<Cell<usize>>);

impl ReadGuard {
    fn new(count: &Rc<Cell<usize>>) -> ReadGuard {
        count.set(count.get() + 1);
        ReadGuard(Rc::clone(count))
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Store {
    /// Opens this shard's storage. The iopoll probe must already have run on this executor,
    /// and recovery must already have replayed and removed old journals.
    pub async fn open(cfg: StoreConfig, shard: usize) -> io::Result<Rc<Store>> {
        file_budget::check_limit(cfg.open_segment_files_max)?;
        let file_budget = RefCell::new(FileBudget::new(cfg.open_segment_files_max));
        std::fs::create_dir_all(logs_root(&cfg.data_dir))?;
        let journal = Journal::start(
            journal_dir(&cfg.data_dir, shard),
            cfg.journal_file_bytes,
            cfg.durability,
        )
        .await?;
        let store = Rc::new(Store {
            cfg,
            journal,
            logs: RefCell::new(HashMap::new()),
            next_handle: Cell::new(1),
            dirty_bytes: Cell::new(0),
            dirty_since: Cell::new(None),
            checkpoint_wake: Event::default(),
            checkpoint_done: Event::default(),
            checkpoints: Cell::new(0),
            scratch: RefCell::new(Vec::with_capacity(64 * 1024)),
            closing: Cell::new(false),
            checkpoint_running: Cell::new(false),
            reads_in_flight: Rc::new(Cell::new(0)),
            pending_removals: RefCell::new(Vec::new()),
            file_budget,
        });
        glommio::spawn_local(Rc::clone(&store).checkpoint_loop()).detach();
        Ok(store)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.get()
    }

    /// Descriptors the logs' segment files hold now (reads open sealed or idle segments for
    /// the length of one read, outside this count).
    pub fn open_segment_files(&self) -> usize {
        self.file_budget.borrow().open()
    }

    /// Opens (recovering its tail) or creates the log `name`.
    pub async fn open_log(&self, name: &str) -> io::Result<LogRef> {
        self.open_log_with(name, self.cfg.log.clone()).await
    }

    /// Like [`Store::open_log`] with settings of its own (the messaging plane's partitions
    /// have their own segment size and retention). The settings of the first open win.
    pub async fn open_log_with(&self, name: &str, cfg: LogConfig) -> io::Result<LogRef> {
        validate_log_name(name)?;
        if let Some(l) = self.logs.borrow().get(name) {
            return Ok(l.clone());
        }
        let dir = logs_root(&self.cfg.data_dir).join(name);
        let log = log::open_log(name, dir, cfg).await?;
        let mut logs = self.logs.borrow_mut();
        if let Some(l) = logs.get(name) {
            return Ok(l.clone()); // opened concurrently; keep the first
        }
        let handle = self.next_handle.get();
        self.next_handle.set(handle + 1);
        let r = LogRef {
            handle,
            log: Rc::new(RefCell::new(log)),
        };
        logs.insert(name.to_string(), r.clone());
        Ok(r)
    }

    /// Bytes held by every open log (segments on disk and tails in memory).
    pub fn size_bytes(&self) -> u64 {
        self.logs.borrow().values().map(|l| l.size_bytes()).sum()
    }

    /// Names of every log this store has open.
    pub fn open_log_names(&self) -> Vec<String> {
        self.logs.borrow().keys().cloned().collect()
    }

    /// Appends `record` to `log`: assigns the next sequence (and `now_ns` if the timestamp is
    /// 0), stores it in memory and in the journal. Visible to readers at once; durable once
    /// `wait_durable(lsn)` returns.
    pub fn append(
        &self,
        log: &LogRef,
        record: &mut Record,
        now_ns: i64,
    ) -> Result<Appended, AppendError> {
        self.check_room()?;
        self.append_unchecked(log, record, now_ns)
    }

    /// As [`Store::append`], also past the backlog limit (a failed or closing store still
    /// refuses): for records that can neither wait nor be refused because their change is
    /// applied already and is not the client's to retry — time passing, a closed
    /// connection's disconnect. They are small and few (a tick per slot per timer wake, a
    /// disconnect per closed connection), so the backlog overshoots its limit by little.
    /// Refused at a full backlog, such a change stayed in memory and never reached the log.
    pub fn append_past_backlog(
        &self,
        log: &LogRef,
        record: &mut Record,
        now_ns: i64,
    ) -> Result<Appended, AppendError> {
        match self.check_room() {
            Ok(()) | Err(AppendError::Backlogged { .. }) => {}
            Err(e) => return Err(e),
        }
        self.append_unchecked(log, record, now_ns)
    }

    fn append_unchecked(
        &self,
        log: &LogRef,
        record: &mut Record,
        now_ns: i64,
    ) -> Result<Appended, AppendError> {
        if record.flags & FLAG_EPHEMERAL != 0 {
            return Err(AppendError::Ephemeral);
        }
        let mut l = log.log.borrow_mut();
        record.seq = l.next_seq();
        if record.timestamp_ns == 0 {
            record.timestamp_ns = now_ns;
        }
        let mut scratch = self.scratch.borrow_mut();
        scratch.clear();
        record::encode(record, &mut scratch).map_err(AppendError::Encode)?;
        let limit = self.journal.entry_bytes_max() - JOURNAL_ENTRY_SLACK_BYTES;
        if scratch.len() > limit {
            return Err(AppendError::TooLargeForJournal {
                frame_bytes: scratch.len(),
                limit_bytes: limit,
            });
        }
        l.append_frame(record.seq, record.timestamp_ns, &scratch);
        let lsn = self.journal.append(log.handle, l.name(), &scratch);
        self.note_dirty(scratch.len() as u64);
        Ok(Appended {
            seq: record.seq,
            lsn,
        })
    }

    fn note_dirty(&self, bytes: u64) {
        let before = self.dirty_bytes.get();
        self.dirty_bytes.set(before + bytes);
        if before == 0 {
            self.dirty_since.set(Some(std::time::Instant::now()));
            self.checkpoint_wake.notify();
        } else if before < self.cfg.checkpoint_bytes && before + bytes >= self.cfg.checkpoint_bytes
        {
            self.checkpoint_wake.notify();
        }
    }

    pub async fn wait_durable(&self, lsn: u64) -> io::Result<()> {
        self.journal.wait_durable(lsn).await
    }

    /// Whether an append now would be accepted: callers that change state before appending
    /// (a broker applying a command) ask first, so a refused append never leaves memory
    /// ahead of the log.
    pub fn check_room(&self) -> Result<(), AppendError> {
        if self.closing.get() {
            return Err(AppendError::Failed(
                "storage is closed (shutting down)".into(),
            ));
        }
        if let Some(f) = self.journal.failure() {
            return Err(AppendError::Failed(f));
        }
        let backlog = self.journal.backlog_bytes();
        if backlog >= self.cfg.journal_backlog_bytes_max {
            return Err(AppendError::Backlogged {
                backlog_bytes: backlog,
            });
        }
        Ok(())
    }

    /// Resolves once `lsn` is covered by an fdatasync whatever `durability` says (for v1's
    /// confirm mode, which promised an fsync before the reply).
    pub async fn wait_synced(&self, lsn: u64) -> io::Result<()> {
        self.journal.wait_synced(lsn).await
    }

    /// As [`Store::append`], but a journal with no room yet (its backlog at
    /// `journal_backlog_bytes_max`) is waited for instead of refused, which slows the caller
    /// to the disk's pace. Nothing awaits between the wait and the append, so the append
    /// finds the room the wait saw; a caller may build its record right after the wait
    /// (`wait_for_room` alone) when the record must say "the value now".
    pub async fn append_when_room(
        &self,
        log: &LogRef,
        record: &mut Record,
        now_ns: i64,
    ) -> Result<Appended, AppendError> {
        self.wait_for_room()
            .await
            .map_err(|e| AppendError::Failed(e.to_string()))?;
        self.append(log, record, now_ns)
    }

    /// Waits until the journal backlog is below its limit.
    pub async fn wait_for_room(&self) -> io::Result<()> {
        let max = self.cfg.journal_backlog_bytes_max;
        self.wait_for_backlog(|backlog| backlog < max).await
    }

    /// Waits until a background writer (a snapshot) may append `bytes` more: its appends
    /// keep the journal backlog within `BACKGROUND_BACKLOG_PERCENT` of the limit, so a large
    /// snapshot written at once can never fill the journal and get the clients' appends
    /// refused with "storage is behind" (measured: 132,672 refused publishes in a 10 s
    /// publish-only run whose growing queue was snapshotted in one burst). An append larger
    /// than the whole share waits for an empty backlog and then goes alone.
    ///
    /// It also waits, within `journal::BACKGROUND_SPARE_WAIT_MS_MAX`, until the append
    /// would not make a commit round create the next journal file inline
    /// (`Journal::wait_for_background_file_room`).
    pub async fn wait_for_background_room(&self, bytes: u64) -> io::Result<()> {
        let share = self.cfg.journal_backlog_bytes_max * BACKGROUND_BACKLOG_PERCENT / 100;
        self.wait_for_backlog(|backlog| backlog == 0 || backlog + bytes <= share)
            .await?;
        // The record's and the entries' framing, and a log declaration, on top.
        let entry_bytes = bytes + BACKGROUND_ENTRY_SLACK_BYTES;
        self.journal
            .wait_for_background_file_room(entry_bytes)
            .await;
        Ok(())
    }

    async fn wait_for_backlog(&self, fits: impl Fn(u64) -> bool) -> io::Result<()> {
        while !fits(self.journal.backlog_bytes()) {
            let lsn = self.journal.appended();
            // Waiting for everything queued now bounds the wait to one or two rounds.
            self.journal.wait_durable(lsn).await?;
            if !self.journal.durability().waits_for_sync() {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
        }
        Ok(())
    }

    /// Reads up to `max_records` records from `from` (0 = the first retained), stopping once
    /// `max_bytes` of key+payload were gathered (at least one record is returned if any).
    pub async fn read(
        &self,
        log: &LogRef,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, ReadError> {
        let _in_flight = ReadGuard::new(&self.reads_in_flight);
        let mut from = if from == 0 { log.first_seq() } else { from };
        let mut out: Vec<Record> = Vec::new();
        let mut bytes = 0usize;
        let mut hint_bytes = 0usize;
        loop {
            let left_records = max_records - out.len();
            let left_bytes = max_bytes.saturating_sub(bytes).max(1);
            if left_records == 0 || bytes >= max_bytes {
                break;
            }
            let step = log
                .log
                .borrow()
                .plan_read(from, left_records, left_bytes, hint_bytes);
            let got = match step {
                Err(e) if out.is_empty() => return Err(e),
                Err(_) => break, // return what was read; the next read reports the error
                Ok(ReadStep::End) => break,
                Ok(ReadStep::Records(r)) => r,
                Ok(ReadStep::File {
                    file,
                    pos,
                    len,
                    mem_tail,
                    end_seq,
                }) => {
                    let read = file.read(pos, len).await.map_err(ReadError::Io)?;
                    let joined: Vec<u8>;
                    let buf: &[u8] = if read.len() == len && !mem_tail.is_empty() {
                        joined = [&read[..], &mem_tail].concat();
                        &joined
                    } else {
                        &read
                    };
                    let r = log::decode_records(buf, from, end_seq, left_records, left_bytes)
                        .map_err(|(seq, detail)| ReadError::Corrupt { seq, detail })?;
                    if r.is_empty() {
                        // The next frame did not fit: read more next time.
                        if hint_bytes >= record::FRAME_BYTES_MAX * 2 {
                            return Err(ReadError::Io(io::Error::other(format!(
                                "no decodable record at sequence {from}"
                            ))));
                        }
                        hint_bytes = (buf.len() * 2).max(128 * 1024);
                        continue;
                    }
                    r
                }
            };
            if got.is_empty() {
                break;
            }
            hint_bytes = 0;
            from = got.last().expect("non-empty").seq + 1;
            bytes += got
                .iter()
                .map(|r| r.payload.len() + r.key.len())
                .sum::<usize>();
            out.extend(got);
        }
        Ok(out)
    }

    /// Writes every log's tail to its segments, syncs them, and trims the journal behind.
    pub async fn checkpoint(&self) -> io::Result<()> {
        while self.checkpoint_running.get() {
            let t = self.checkpoint_done.ticket();
            if !self.checkpoint_running.get() {
                break;
            }
            self.checkpoint_done.wait(t).await;
        }
        self.checkpoint_running.set(true);
        let result = self.checkpoint_inner().await;
        self.checkpoint_running.set(false);
        self.checkpoint_done.notify();
        result
    }

    async fn checkpoint_inner(&self) -> io::Result<()> {
        // Everything appended before `upto` is in some log's memory now; once every log is
        // flushed and synced, the journal below `upto` is redundant.
        let upto = self.journal.appended();
        self.dirty_bytes.set(0);
        self.dirty_since.set(None);
        let logs: Vec<LogRef> = self.logs.borrow().values().cloned().collect();
        for log in &logs {
            self.flush_log(log).await?;
        }
        self.journal.trim_below(upto).await?;
        self.apply_retention(&logs).await?;
        self.checkpoints.set(self.checkpoints.get() + 1);
        Ok(())
    }

    /// Writes and syncs one log's tail, counting the files that opens or closes, then keeps
    /// the store within its open-files budget. Idle logs are skipped: no I/O, no use.
    async fn flush_log(&self, log: &LogRef) -> io::Result<()> {
        let before = {
            let l = log.log.borrow();
            if !l.has_pending_io() {
                return Ok(());
            }
            l.open_file_count()
        };
        let result = match log::flush(&log.log).await {
            Ok(()) => log::sync(&log.log).await,
            Err(e) => Err(e),
        };
        let after = log.log.borrow().open_file_count();
        let tick = self.file_budget.borrow_mut().record_use(before, after);
        log.log.borrow_mut().mark_used(tick);
        if self.file_budget.borrow().over_limit() {
            self.close_idle_files();
        }
        result
    }

    /// Closes the files of idle logs, least recently used first, down to the budget's
    /// low-water mark. Synchronous: closing needs no I/O on our side (glommio closes dropped
    /// files on its next cycle), and no log is borrowed across an await.
    fn close_idle_files(&self) {
        let logs: Vec<LogRef> = self.logs.borrow().values().cloned().collect();
        let mut counted = 0usize;
        let mut candidates = Vec::new();
        for (i, log) in logs.iter().enumerate() {
            let l = log.log.borrow();
            let files = l.open_file_count();
            counted += files;
            if files > 0 && !l.has_pending_io() {
                candidates.push(Candidate {
                    key: i,
                    used_tick: l.used_tick(),
                    files,
                });
            }
        }
        let mut budget = self.file_budget.borrow_mut();
        debug_assert_eq!(counted, budget.open(), "open-files count drifted");
        for i in budget.choose_victims(candidates) {
            let closed = logs[i].log.borrow_mut().release_files();
            budget.record_closed(closed);
        }
    }

    async fn apply_retention(&self, logs: &[LogRef]) -> io::Result<()> {
        let now_ns = now_ns();
        for log in logs {
            let victims = log.log.borrow_mut().apply_retention(now_ns);
            self.pending_removals.borrow_mut().extend(victims);
        }
        self.remove_pending_files().await
    }

    /// Drops whole segments of `log` below `seq` once they are durable (see
    /// `Log::truncate_before`); the unlinks wait, like retention's, for reads in flight.
    /// Segments still only in memory or in the journal stay until a checkpoint made them
    /// durable; calling again after the next checkpoint removes them.
    pub async fn truncate_before(&self, log: &LogRef, seq: u64) -> io::Result<()> {
        let victims = log.log.borrow_mut().truncate_before(seq);
        self.pending_removals.borrow_mut().extend(victims);
        self.remove_pending_files().await
    }

    /// Restarts `log` at `seq`, past its end: every record below goes (reads from below get
    /// `Truncated`), and the next append is `seq`. Durable when it returns, whatever the
    /// durability policy: the new start is written as a marker and synced before anything
    /// is removed (`log::restart`). For a copy whose missing records its source no longer
    /// has (retention); an error when `seq` is not past the end.
    pub async fn restart_log_at(&self, log: &LogRef, seq: u64) -> io::Result<()> {
        let (dir, next) = {
            let l = log.log.borrow();
            (l.dir().to_path_buf(), l.next_seq())
        };
        if seq <= next {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a restart at {seq} is not past the log's end ({next})"),
            ));
        }
        log::restart::write_marker(&dir, seq).await?;
        // Not while a checkpoint flushes: it counts the log's open files before and after
        // its writes, and the segments must not change under it. From here to the restart
        // nothing awaits, so none starts in between. (The caller is the log's only writer
        // meanwhile, so its end is still below `seq`: `restart_at` asserts it.)
        while self.checkpoint_running.get() {
            let t = self.checkpoint_done.ticket();
            if !self.checkpoint_running.get() {
                break;
            }
            self.checkpoint_done.wait(t).await;
        }
        let (victims, closed) = log.log.borrow_mut().restart_at(seq);
        self.file_budget.borrow_mut().record_closed(closed);
        self.pending_removals.borrow_mut().extend(victims);
        self.remove_pending_files().await
    }

    /// Unlinks removed segment files once no read is in flight: reads that start from now
    /// on cannot name them (their segments are gone from the logs).
    async fn remove_pending_files(&self) -> io::Result<()> {
        if self.reads_in_flight.get() == 0 {
            let victims: Vec<PathBuf> = self.pending_removals.borrow_mut().drain(..).collect();
            for path in victims {
                remove_file(&path).await?;
            }
        }
        Ok(())
    }

    /// Runs retention now (tests and admin); normally it runs after each checkpoint.
    pub async fn run_retention(&self) -> io::Result<()> {
        let logs: Vec<LogRef> = self.logs.borrow().values().cloned().collect();
        self.apply_retention(&logs).await
    }

    async fn checkpoint_loop(self: Rc<Self>) {
        loop {
            let ticket = self.checkpoint_wake.ticket();
            if self.closing.get() {
                break;
            }
            let Some(since) = self.dirty_since.get() else {
                self.checkpoint_wake.wait(ticket).await;
                continue;
            };
            if self.dirty_bytes.get() < self.cfg.checkpoint_bytes {
                let due = since + Duration::from_millis(self.cfg.checkpoint_interval_ms);
                let now = std::time::Instant::now();
                if due > now {
                    // Sleep until due, or until enough bytes arrive to checkpoint sooner.
                    let wait = self.checkpoint_wake.wait(ticket);
                    let sleep = glommio::timer::sleep(due - now);
                    futures_lite::future::or(wait, sleep).await;
                    continue;
                }
            }
            if let Err(e) = self.checkpoint().await {
                ::log::error!("checkpoint failed: {e}; the journal keeps everything meanwhile");
                glommio::timer::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    /// Stops all background work without writing anything more, as a crash would: the
    /// journal and segments stay as they are on disk. For crash-recovery tests.
    pub async fn halt(&self) {
        self.closing.set(true);
        self.checkpoint_wake.notify();
        while self.checkpoint_running.get() {
            let t = self.checkpoint_done.ticket();
            if !self.checkpoint_running.get() {
                break;
            }
            self.checkpoint_done.wait(t).await;
        }
        self.journal.halt().await;
    }

    /// Makes everything durable in the segments and removes the journal: after a clean
    /// close, a restart replays nothing.
    pub async fn close(&self) -> io::Result<()> {
        self.closing.set(true);
        self.checkpoint_wake.notify();
        let lsn = self.journal.appended();
        let _ = self.journal.wait_durable(lsn).await;
        self.checkpoint().await?;
        self.journal.close_and_remove().await
    }
}

/// Unlinks a file through the ring (no blocking syscall on the shard).
async fn remove_file(path: &Path) -> io::Result<()> {
    let f = glommio::io::DmaFile::open(path)
        .await
        .map_err(|e| io::Error::other(format!("open {}: {e}", path.display())))?;
    f.remove()
        .await
        .map_err(|e| io::Error::other(format!("remove {}: {e}", path.display())))?;
    let _ = f.close().await;
    Ok(())
}

/// Log names are relative paths under `<data_dir>/logs`: `/`-separated components of
/// `[A-Za-z0-9._%-]`, none empty or starting with `.` (so no `..` escapes the root).
pub fn validate_log_name(name: &str) -> io::Result<()> {
    let bad = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid log name {name:?}: {why}"),
        ))
    };
    if name.is_empty() || name.len() > 255 {
        return bad("length must be 1..=255 bytes");
    }
    for comp in name.split('/') {
        if comp.is_empty() || comp.starts_with('.') {
            return bad("empty component or component starting with '.'");
        }
        if !comp
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'%'))
        {
            return bad("allowed characters are A-Z a-z 0-9 . _ - % and / between components");
        }
    }
    Ok(())
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_names() {
        for ok in ["queue/slot-001", "a", "streams/chat.direct.alice%3Abob/3"] {
            validate_log_name(ok).unwrap();
        }
        for bad in [
            "", "/a", "a/", "a//b", "../x", "a/../b", ".hidden", "a b", "a\\b", "é",
        ] {
            assert!(validate_log_name(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
