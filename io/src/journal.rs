//! The shard journal: one write-ahead file sequence per shard, shared by every log the shard
//! owns, with group commit.
//!
//! Appends are synchronous: they copy the entry into the active file's tail buffer and return
//! its end position (the LSN). One commit task turns whatever queued into ONE coalesced
//! aligned write per file plus ONE fdatasync, then acknowledges every LSN up to there, and
//! starts the next round at once with whatever queued meanwhile. So a commit round costs one
//! fdatasync whether one log or thousands appended during it (design.md §5).
//!
//! Files are `<base_pos>.journal`, each `file_bytes` long and pre-zeroed before use (an
//! extending write costs a metadata journal commit per fdatasync; platform.md §5), covering
//! positions `[base, base + file_bytes)`. An entry never spans files. Files entirely below
//! the last checkpoint are deleted by `trim_below`.

use crate::appender::{self, Appender};
use crate::durability::Durability;
use crate::event::Event;
use crate::journal_entry::{self, EntryKind};
use glommio::io::DmaFile;
use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// Smallest journal file. An entry must fit in half a file (see [`Journal::entry_bytes_max`]).
pub const JOURNAL_FILE_BYTES_MIN: u64 = 1024 * 1024;

/// Bytes of zeros written per request while pre-zeroing a journal file. Each request
/// completes only when the shard next looks at its rings, every few milliseconds on a busy
/// shard: at 1 MiB a 64 MiB file took 0.6–1.1 s to zero during a fill at full speed, about
/// as long as the clients took to fill the active file, so rolls found no spare.
const ZERO_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Share of a journal file a background writer (a snapshot) may fill while the next file
/// is not pre-zeroed yet; the rest is left to the clients' appends. Without it, a large
/// snapshot written in bulk rolled a 64 MiB file every ~0.1 s, faster than the next one
/// was zeroed, and each commit round that had to create and zero a file inline held every
/// client's reply (measured: publishing fell to ~900/s for a second while a 700 MB
/// snapshot was written).
pub const BACKGROUND_FILE_PERCENT: u64 = 75;

/// Longest a background writer waits for the next file to be pre-zeroed: a spare that
/// cannot be made (its error is logged) must not stop the writer for good.
pub const BACKGROUND_SPARE_WAIT_MS_MAX: u64 = 2_000;

/// How often a waiting background writer looks again (the active file may also roll).
const BACKGROUND_POLL_MS: u64 = 5;

pub fn journal_file_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.journal"))
}

pub fn parse_journal_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".journal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

struct JournalFile {
    base: u64,
    app: Appender,
    file: Option<Rc<DmaFile>>,
    /// Log handles declared in this file so far.
    declared: HashSet<u32>,
}

struct State {
    /// Oldest first; the last takes appends.
    files: VecDeque<JournalFile>,
    /// A pre-zeroed file ready to become the next one: (base, file).
    spare: Option<(u64, Rc<DmaFile>)>,
    /// The file being pre-zeroed now, if any.
    spare_in_progress: Option<u64>,
    /// The file the commit task is making itself (found no spare for it), if any: the
    /// spare maker must not make it too.
    opening_inline: Option<u64>,
    /// Everything below is durable under the journal's policy.
    durable: u64,
    /// Everything below is covered by an fdatasync (equal to `durable` under `Always`).
    synced: u64,
    /// A caller asked for an fdatasync up to here, whatever the policy (v1's confirm mode).
    sync_requested: u64,
    failure: Option<String>,
    closing: bool,
}

pub struct Journal {
    dir: PathBuf,
    file_bytes: u64,
    durability: Durability,
    st: RefCell<State>,
    /// Wakes the commit task.
    work: Event,
    /// Wakes tasks waiting for durability.
    durable_event: Event,
    commit_rounds: Cell<u64>,
    /// Commit rounds that ended with an fdatasync (all of them under `always`).
    syncs: Cell<u64>,
    /// Files the commit task had to create and zero itself, holding its round meanwhile.
    files_created_inline: Cell<u64>,
    stopped: Event,
    running: Cell<bool>,
    /// Notified when a spare file finishes being made.
    spare_done: Event,
    /// Set by `halt`: stop at once, write nothing more (crash simulation in tests).
    halted: Cell<bool>,
}

impl Journal {
    /// Creates an empty journal in `dir` (which must hold no journal files: recovery replays
    /// and deletes them before a shard starts) and starts its commit task.
    pub async fn start(
        dir: PathBuf,
        file_bytes: u64,
        durability: Durability,
    ) -> io::Result<Rc<Journal>> {
        assert!(file_bytes.is_multiple_of(4096));
        assert!(file_bytes >= JOURNAL_FILE_BYTES_MIN);
        std::fs::create_dir_all(&dir)?;
        let first = prezeroed_file(&dir, 0, file_bytes).await?;
        let journal = Rc::new(Journal {
            dir,
            file_bytes,
            durability,
            st: RefCell::new(State {
                files: VecDeque::from([JournalFile {
                    base: 0,
                    app: Appender::new(0, Vec::new(), first.alignment(), 0),
                    file: Some(first),
                    declared: HashSet::new(),
                }]),
                spare: None,
                spare_in_progress: None,
                opening_inline: None,
                durable: 0,
                synced: 0,
                sync_requested: 0,
                failure: None,
                closing: false,
            }),
            work: Event::default(),
            durable_event: Event::default(),
            commit_rounds: Cell::new(0),
            syncs: Cell::new(0),
            files_created_inline: Cell::new(0),
            stopped: Event::default(),
            running: Cell::new(true),
            halted: Cell::new(false),
            spare_done: Event::default(),
        });
        glommio::spawn_local(Rc::clone(&journal).commit_loop()).detach();
        glommio::spawn_local(Rc::clone(&journal).prepare_spare()).detach();
        Ok(journal)
    }

    /// Waits until a background append of about `entry_bytes` leaves the clients' appends
    /// room: it fits within [`BACKGROUND_FILE_PERCENT`] of the active file, or the next
    /// file is pre-zeroed already (then rolling into it costs nothing). At most
    /// [`BACKGROUND_SPARE_WAIT_MS_MAX`].
    pub async fn wait_for_background_file_room(&self, entry_bytes: u64) {
        let deadline =
            std::time::Instant::now() + Duration::from_millis(BACKGROUND_SPARE_WAIT_MS_MAX);
        while !self.background_fits(entry_bytes) && std::time::Instant::now() < deadline {
            let ticket = self.spare_done.ticket();
            let poll = glommio::timer::sleep(Duration::from_millis(BACKGROUND_POLL_MS));
            futures_lite::future::or(self.spare_done.wait(ticket), poll).await;
        }
    }

    fn background_fits(&self, entry_bytes: u64) -> bool {
        let st = self.st.borrow();
        let active = st.files.back().expect("active file");
        let limit = self.file_bytes / 100 * BACKGROUND_FILE_PERCENT;
        let next = active.base + self.file_bytes;
        st.closing
            || st.failure.is_some()
            || active.app.end() + entry_bytes <= limit
            || st.spare.as_ref().is_some_and(|(base, _)| *base == next)
    }

    /// Largest entry (declare + append) an append may produce: half a file, so that any
    /// entry fits in an empty file with room to spare.
    pub fn entry_bytes_max(&self) -> usize {
        (self.file_bytes / 2) as usize
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Position one past the last appended entry.
    pub fn appended(&self) -> u64 {
        self.appended_locked(&self.st.borrow())
    }

    pub fn durable(&self) -> u64 {
        self.st.borrow().durable
    }

    /// Position covered by an fdatasync.
    pub fn synced(&self) -> u64 {
        self.st.borrow().synced
    }

    pub fn commit_rounds(&self) -> u64 {
        self.commit_rounds.get()
    }

    /// fdatasyncs of the journal file (commit rounds that synced).
    pub fn syncs(&self) -> u64 {
        self.syncs.get()
    }

    /// Files the commit task found not pre-zeroed and made itself (each held a round).
    pub fn files_created_inline(&self) -> u64 {
        self.files_created_inline.get()
    }

    /// Bytes appended but not yet durable: the caller's measure for backpressure.
    pub fn backlog_bytes(&self) -> u64 {
        self.appended() - self.durable()
    }

    pub fn failure(&self) -> Option<String> {
        self.st.borrow().failure.clone()
    }

    /// Appends one record frame of log `handle` (named `name`, declared in each file on first
    /// use). Returns the LSN to wait for.
    pub fn append(&self, handle: u32, name: &str, frame: &[u8]) -> u64 {
        let mut st = self.st.borrow_mut();
        assert!(
            !st.closing,
            "append to a closing journal: the store refuses appends once it closes"
        );
        let needed = journal_entry::entry_len(frame.len()) + journal_entry::entry_len(name.len());
        let file_bytes = self.file_bytes;
        let active = st.files.back().expect("active file");
        if active.app.end() + needed as u64 > file_bytes {
            let base = active.base + file_bytes;
            st.files.push_back(JournalFile {
                base,
                app: Appender::new(0, Vec::new(), 4096, 0),
                file: None,
                declared: HashSet::new(),
            });
        }
        let active = st.files.back_mut().expect("active file");
        let mut scratch = Vec::with_capacity(needed);
        if active.declared.insert(handle) {
            journal_entry::encode_entry(EntryKind::Declare, handle, name.as_bytes(), &mut scratch);
        }
        journal_entry::encode_entry(EntryKind::Append, handle, frame, &mut scratch);
        active.app.append(&scratch);
        let lsn = active.base + active.app.end();
        drop(st);
        self.work.notify();
        lsn
    }

    /// Resolves once `lsn` is durable under the journal's policy (at once for `Interval` and
    /// `Never`, whose appends are acknowledged when buffered), or with the journal's failure.
    pub async fn wait_durable(&self, lsn: u64) -> io::Result<()> {
        if !self.durability.waits_for_sync() {
            return self.check_failure();
        }
        loop {
            let ticket = self.durable_event.ticket();
            self.check_failure()?;
            if self.st.borrow().durable >= lsn {
                return Ok(());
            }
            self.durable_event.wait(ticket).await;
        }
    }

    /// Resolves once `lsn` is covered by an fdatasync, whatever the durability policy: for
    /// callers that promise more than the policy (v1's confirm mode fsyncs before replying).
    pub async fn wait_synced(&self, lsn: u64) -> io::Result<()> {
        if self.durability.waits_for_sync() {
            return self.wait_durable(lsn).await;
        }
        {
            let mut st = self.st.borrow_mut();
            st.sync_requested = st.sync_requested.max(lsn);
        }
        self.work.notify();
        loop {
            let ticket = self.durable_event.ticket();
            self.check_failure()?;
            if self.st.borrow().synced >= lsn {
                return Ok(());
            }
            self.durable_event.wait(ticket).await;
        }
    }

    fn sync_wanted(&self) -> bool {
        let st = self.st.borrow();
        st.sync_requested > st.synced
    }

    fn check_failure(&self) -> io::Result<()> {
        match &self.st.borrow().failure {
            Some(f) => Err(io::Error::other(format!("journal failed earlier: {f}"))),
            None => Ok(()),
        }
    }

    /// Commit rounds until closed: write every file's pending bytes, sync, acknowledge.
    async fn commit_loop(self: Rc<Self>) {
        let mut last_sync = std::time::Instant::now();
        loop {
            let ticket = self.work.ticket();
            if self.halted.get() {
                break;
            }
            let (target, closing) = {
                let st = self.st.borrow();
                (self.appended_locked(&st), st.closing)
            };
            if target == self.durable() && !self.sync_wanted() {
                if closing {
                    break;
                }
                self.work.wait(ticket).await;
                continue;
            }
            if let Durability::Interval { interval_ms } = self.durability {
                let due = last_sync + Duration::from_millis(interval_ms);
                let now = std::time::Instant::now();
                if due > now && !closing && !self.sync_wanted() {
                    // Sleep out the interval, but wake for a close or a sync request.
                    let ticket = self.work.ticket();
                    let sleep = glommio::timer::sleep(due - now);
                    futures_lite::future::or(sleep, self.work.wait(ticket)).await;
                    if !self.st.borrow().closing
                        && !self.sync_wanted()
                        && std::time::Instant::now() < due
                    {
                        continue; // woken by an append: keep gathering until due
                    }
                }
            }
            let target = self.appended();
            let sync = self.durability != Durability::Never || self.sync_wanted();
            if let Err(e) = self.commit_round(target, sync).await {
                log::error!("journal {} commit failed: {e}", self.dir.display());
                self.st.borrow_mut().failure = Some(e.to_string());
                self.durable_event.notify();
                break;
            }
            last_sync = std::time::Instant::now();
            self.commit_rounds.set(self.commit_rounds.get() + 1);
            if sync {
                self.syncs.set(self.syncs.get() + 1);
            }
            {
                let mut st = self.st.borrow_mut();
                st.durable = target;
                if sync {
                    st.synced = target;
                }
            }
            self.durable_event.notify();
        }
        self.running.set(false);
        self.stopped.notify();
    }

    /// After `close_and_remove` there is no file left: everything appended was durable.
    fn appended_locked(&self, st: &State) -> u64 {
        st.files.back().map_or(st.durable, |f| f.base + f.app.end())
    }

    /// Writes everything below `target` and, when `sync`, fdatasyncs every file holding
    /// written but unsynced bytes.
    async fn commit_round(&self, target: u64, sync: bool) -> io::Result<()> {
        let bases: Vec<u64> = {
            let st = self.st.borrow();
            st.files
                .iter()
                .filter(|f| f.base < target && f.app.written() < f.app.end())
                .map(|f| f.base)
                .collect()
        };
        for base in bases {
            let file = self.ensure_file(base).await?;
            loop {
                let job = {
                    let mut st = self.st.borrow_mut();
                    let f = st.files.iter_mut().find(|f| f.base == base).expect("file");
                    if f.base + f.app.written() >= target {
                        break;
                    }
                    f.app.plan_write()
                };
                let Some(job) = job else { break };
                let end = job.run(&file).await?;
                let mut st = self.st.borrow_mut();
                let active_base = st.files.back().expect("active file").base;
                let f = st.files.iter_mut().find(|f| f.base == base).expect("file");
                f.app.complete_write(end);
                if f.base != active_base && f.app.written() == f.app.end() {
                    // A full file takes no more appends: keep none of its buffer.
                    f.app.release_spare_capacity();
                }
            }
        }
        if sync {
            let touched: Vec<(u64, Rc<DmaFile>)> = {
                let st = self.st.borrow();
                st.files
                    .iter()
                    .filter(|f| f.app.synced() < f.app.written())
                    .filter_map(|f| Some((f.base, f.file.clone()?)))
                    .collect()
            };
            for (base, file) in &touched {
                file.fdatasync()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
                let mut st = self.st.borrow_mut();
                let f = st.files.iter_mut().find(|f| f.base == *base).expect("file");
                let w = f.app.written();
                f.app.complete_sync(w);
            }
        }
        Ok(())
    }

    /// The open file for `base`: the spare when it matches (waiting for it when it is being
    /// made), else a newly made one.
    async fn ensure_file(&self, base: u64) -> io::Result<Rc<DmaFile>> {
        if let Some(f) = self.file_of(base) {
            return Ok(f);
        }
        let spare = loop {
            let ticket = self.spare_done.ticket();
            let (spare, being_made) = {
                let mut st = self.st.borrow_mut();
                let spare = match st.spare.take() {
                    Some((b, f)) if b == base => Some(f),
                    other => {
                        st.spare = other;
                        None
                    }
                };
                (spare, st.spare_in_progress == Some(base))
            };
            if spare.is_some() || !being_made {
                break spare;
            }
            // Never make the file a second time beside the spare maker: both write to the
            // one path, and its zeros could land over records this task wrote meanwhile.
            self.spare_done.wait(ticket).await;
        };
        // The spare was taken (or is not the one wanted): make the next.
        self.work.notify();
        let file = match spare {
            Some(f) => f,
            None => {
                log::warn!("journal file {base} was not pre-zeroed in time; creating it inline");
                self.files_created_inline
                    .set(self.files_created_inline.get() + 1);
                self.st.borrow_mut().opening_inline = Some(base);
                let made = prezeroed_file(&self.dir, base, self.file_bytes).await;
                self.st.borrow_mut().opening_inline = None;
                made?
            }
        };
        {
            let mut st = self.st.borrow_mut();
            let f = st.files.iter_mut().find(|f| f.base == base).expect("file");
            f.file = Some(Rc::clone(&file));
        }
        Ok(file)
    }

    fn file_of(&self, base: u64) -> Option<Rc<DmaFile>> {
        self.st
            .borrow()
            .files
            .iter()
            .find(|f| f.base == base)
            .and_then(|f| f.file.clone())
    }

    /// The file the commit task opens next: the oldest one that takes appends but is not
    /// open yet, else the one after the active file. Appends run ahead of the commit task
    /// (by up to the journal's backlog), so under a fast writer the newest file can be one
    /// or more files past the one being written. Making the spare for the file after the
    /// newest one then replaced the spare the commit task was about to open, and every
    /// roll of a fill at full speed created its file inline (a fill of 1,000,000 × 1 KiB
    /// with fsync `never`: 13–15 files, each holding a commit round while 64 MiB were
    /// zeroed, and up to 68,000 publishes refused as "storage is behind").
    /// A file the commit task is making itself is skipped: two writers on one path could
    /// put zeros over records already written.
    fn next_file_base(&self, st: &State) -> u64 {
        let unopened = |f: &&JournalFile| f.file.is_none() && st.opening_inline != Some(f.base);
        match st.files.iter().find(unopened) {
            Some(unopened) => unopened.base,
            None => st.files.back().expect("active file").base + self.file_bytes,
        }
    }

    /// Keeps one pre-zeroed file ready for the commit task's next roll
    /// ([`Journal::next_file_base`]), so a roll never waits for zeroing. Runs once per
    /// roll; idle otherwise.
    async fn prepare_spare(self: Rc<Self>) {
        loop {
            let ticket = self.work.ticket();
            let next_base = {
                let st = self.st.borrow();
                if st.closing {
                    break;
                }
                let want = self.next_file_base(&st);
                let have = st.spare.as_ref().map(|(b, _)| *b);
                if have == Some(want) || st.spare_in_progress.is_some() || st.failure.is_some() {
                    None
                } else {
                    Some(want)
                }
            };
            match next_base {
                None => self.work.wait(ticket).await,
                Some(base) => {
                    self.st.borrow_mut().spare_in_progress = Some(base);
                    let made = prezeroed_file(&self.dir, base, self.file_bytes).await;
                    let failed = {
                        let mut st = self.st.borrow_mut();
                        st.spare_in_progress = None;
                        match made {
                            Ok(f) => {
                                st.spare = Some((base, f));
                                None
                            }
                            Err(e) => Some(e),
                        }
                    };
                    self.spare_done.notify();
                    if let Some(e) = failed {
                        log::warn!("journal: pre-zeroing the next file failed: {e}");
                        self.work.wait(ticket).await;
                    }
                }
            }
        }
    }

    /// Deletes every file that lies entirely below `pos` (never the active one).
    pub async fn trim_below(&self, pos: u64) -> io::Result<()> {
        loop {
            let victim = {
                let mut st = self.st.borrow_mut();
                if st.files.len() < 2 {
                    break;
                }
                let f = &st.files[0];
                if f.base + self.file_bytes > pos || f.app.written() < f.app.end() {
                    break;
                }
                st.files.pop_front().expect("checked")
            };
            let path = journal_file_path(&self.dir, victim.base);
            if let Some(file) = victim.file {
                file.remove()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
            } else {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(())
    }

    /// Waits until no spare file is being made, so nothing creates files after close.
    async fn wait_spare_settled(&self) {
        loop {
            let t = self.spare_done.ticket();
            if self.st.borrow().spare_in_progress.is_none() {
                return;
            }
            self.spare_done.wait(t).await;
        }
    }

    /// Stops the commit task without writing anything more, leaving the files as a crash
    /// would. For crash-recovery tests inside one process.
    pub async fn halt(&self) {
        self.halted.set(true);
        self.st.borrow_mut().closing = true;
        self.work.notify();
        self.wait_spare_settled().await;
        while self.running.get() {
            let t = self.stopped.ticket();
            if !self.running.get() {
                break;
            }
            self.stopped.wait(t).await;
        }
    }

    /// Commits what is queued, stops the commit task and removes every journal file.
    /// Called by the store after it made every log durable in its own segments.
    pub async fn close_and_remove(&self) -> io::Result<()> {
        {
            self.st.borrow_mut().closing = true;
        }
        self.work.notify();
        while self.running.get() {
            let t = self.stopped.ticket();
            if !self.running.get() {
                break;
            }
            self.stopped.wait(t).await;
        }
        self.wait_spare_settled().await;
        let files: Vec<JournalFile> = self.st.borrow_mut().files.drain(..).collect();
        let spare = self.st.borrow_mut().spare.take();
        for f in files {
            if let Some(file) = f.file {
                file.remove()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
            }
        }
        if let Some((_, file)) = spare {
            file.remove()
                .await
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        self.check_failure()
    }
}

/// Creates `<base>.journal` filled with zeros and synced, so commits never extend the file.
async fn prezeroed_file(dir: &Path, base: u64, file_bytes: u64) -> io::Result<Rc<DmaFile>> {
    let path = journal_file_path(dir, base);
    let file = appender::open_rw(&path, true).await?;
    let mut pos = 0u64;
    while pos < file_bytes {
        let len = (file_bytes - pos).min(ZERO_CHUNK_BYTES as u64) as usize;
        let mut buf = file.alloc_dma_buffer(len);
        buf.as_bytes_mut().fill(0);
        let n = file
            .write_at(buf, pos)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        if n != len {
            return Err(io::Error::other(
                "short write while pre-zeroing a journal file",
            ));
        }
        pos += len as u64;
    }
    file.fdatasync()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    crate::log::sync_dir(dir).await?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::future::Future;

    /// Runs `test` on an executor with a journal of the smallest files in a fresh directory.
    fn with_journal<F, Fut>(durability: Durability, test: F)
    where
        F: FnOnce(Rc<Journal>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let tmp = TempDir::new("journal-unit");
        let dir = tmp.path().join("j");
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                crate::probe::warm_iopoll(dir.parent().unwrap())
                    .await
                    .unwrap();
                let journal = Journal::start(dir, JOURNAL_FILE_BYTES_MIN, durability)
                    .await
                    .unwrap();
                test(journal).await;
            })
            .expect("executor")
            .join()
            .expect("join");
    }

    /// Waits until the journal holds a pre-zeroed spare.
    async fn until_spare_ready(journal: &Journal) {
        while journal.st.borrow().spare.is_none() {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A background append may fill up to `BACKGROUND_FILE_PERCENT` of the active file on
    /// its own; past that it waits for the next file to be pre-zeroed, so that the
    /// clients' commit rounds never create one inline because of it, and gives up waiting
    /// after `BACKGROUND_SPARE_WAIT_MS_MAX`.
    #[test]
    fn a_background_append_past_three_quarters_of_a_file_waits_for_the_next_file() {
        with_journal(Durability::Never, |journal| async move {
            let file_bytes = JOURNAL_FILE_BYTES_MIN;
            let spare_ready = |j: &Journal| j.st.borrow().spare.is_some();
            until_spare_ready(&journal).await;
            // Hold the next spare back, as a slow disk would.
            {
                let mut st = journal.st.borrow_mut();
                st.spare = None;
                st.spare_in_progress = Some(file_bytes);
            }
            let chunk = 64 * 1024;
            assert!(journal.background_fits(file_bytes / 2));
            let frame = vec![1u8; 16 * 1024];
            while journal.st.borrow().files.back().unwrap().app.end() < file_bytes / 10 * 7 {
                journal.append(1, "l", &frame);
            }
            assert!(journal.background_fits(chunk / 16), "below three quarters");
            assert!(!journal.background_fits(chunk), "past three quarters");
            let waited = std::time::Instant::now();
            journal.wait_for_background_file_room(chunk).await;
            let waited = waited.elapsed();
            assert!(
                waited >= Duration::from_millis(BACKGROUND_SPARE_WAIT_MS_MAX),
                "{waited:?}"
            );
            // Once the next file is zeroed, the writer goes on at once.
            journal.st.borrow_mut().spare_in_progress = None;
            journal.work.notify();
            let waited = std::time::Instant::now();
            journal.wait_for_background_file_room(chunk).await;
            assert!(spare_ready(&journal));
            assert!(waited.elapsed() < Duration::from_millis(BACKGROUND_SPARE_WAIT_MS_MAX));
            assert!(journal.background_fits(file_bytes));
        });
    }

    /// Appends run ahead of the commit task: once they have rolled into a file the task has
    /// not opened yet, the spare is that file (not the one after it), and the task opens it
    /// without making a file itself.
    #[test]
    fn the_spare_is_the_file_the_commit_task_opens_next_when_appends_ran_ahead() {
        with_journal(Durability::Never, |journal| async move {
            let file_bytes = JOURNAL_FILE_BYTES_MIN;
            until_spare_ready(&journal).await;
            // Into the second file without yielding: the commit task has written nothing.
            let frame = vec![3u8; 16 * 1024];
            let mut lsn = 0;
            while lsn < file_bytes + file_bytes / 4 {
                lsn = journal.append(1, "l", &frame);
            }
            {
                let st = journal.st.borrow();
                assert_eq!(st.files.back().unwrap().base, file_bytes);
                assert!(st.files.back().unwrap().file.is_none(), "not opened yet");
                assert_eq!(journal.next_file_base(&st), file_bytes);
            }
            // A file the commit task is making itself is never the spare's.
            {
                let mut st = journal.st.borrow_mut();
                st.opening_inline = Some(file_bytes);
                assert_eq!(journal.next_file_base(&st), 2 * file_bytes);
                st.opening_inline = None;
            }
            while journal.durable() < lsn {
                glommio::timer::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(journal.files_created_inline(), 0);
            // Then the spare moves on to the file after the active one.
            while journal.st.borrow().spare.as_ref().map(|(b, _)| *b) != Some(2 * file_bytes) {
                glommio::timer::sleep(Duration::from_millis(5)).await;
            }
        });
    }

    /// A roll into the file being pre-zeroed waits for it: making it a second time beside
    /// the spare maker would have two writers on one file, whose zeros could land over the
    /// records written meanwhile.
    #[test]
    fn a_roll_into_the_file_being_zeroed_waits_for_it_instead_of_making_it_again() {
        with_journal(Durability::Always, |journal| async move {
            let file_bytes = JOURNAL_FILE_BYTES_MIN;
            until_spare_ready(&journal).await;
            // As if the next file were still being zeroed.
            {
                let mut st = journal.st.borrow_mut();
                st.spare = None;
                st.spare_in_progress = Some(file_bytes);
            }
            let frame = vec![4u8; 16 * 1024];
            let mut lsn = 0;
            while lsn < file_bytes + file_bytes / 4 {
                lsn = journal.append(1, "l", &frame);
            }
            glommio::timer::sleep(Duration::from_millis(200)).await;
            assert!(journal.durable() < lsn, "the roll waits for the file");
            assert_eq!(journal.files_created_inline(), 0);
            // The zeroing ends: the commit task goes on with that file.
            journal.st.borrow_mut().spare_in_progress = None;
            journal.work.notify();
            journal.wait_durable(lsn).await.unwrap();
            assert_eq!(journal.files_created_inline(), 0);
        });
    }

    #[test]
    fn a_full_journal_file_keeps_no_write_buffer() {
        with_journal(Durability::Always, |journal| async move {
            // 3 MiB in one round: three full files and an active one.
            let frame = vec![5u8; 16 * 1024];
            let mut lsn = 0;
            for _ in 0..200 {
                lsn = journal.append(1, "l", &frame);
            }
            journal.wait_durable(lsn).await.unwrap();
            let st = journal.st.borrow();
            let full: Vec<&JournalFile> = st.files.iter().take(st.files.len() - 1).collect();
            assert!(full.len() >= 3, "{} full files", full.len());
            for f in full {
                let held = f.app.held_capacity_bytes();
                assert!(held <= 4096, "full file {} holds {held} bytes", f.base);
            }
        });
    }
}
