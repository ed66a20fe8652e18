//! Torn-write recovery: damage the on-disk tail of a log segment or of a shard journal with
//! std::fs while no store is open, then recover + reopen and check what survives.
//!
//! The contract under test (log.rs `open_log`, recovery.rs): recovery keeps every record
//! before the first damaged, short or zero frame, drops that frame and everything after it,
//! continues sequence numbers from the last good record, and leaves the files in a state that
//! a later clean close and reopen reads back unchanged. Journal damage that is not plain
//! end-of-data zeros is reported in `RecoveryReport::torn_tails`.
//!
//! Every case runs in three executor lifetimes (write → damage with std::fs → recover and
//! check → close → reopen and check) so that no glommio task can touch the files while the
//! test damages them.

use boltq_io::journal_entry::{self, EntryError, EntryKind};
use boltq_io::log::LogConfig;
use boltq_io::record::{self, DecodeError, FRAME_HEADER_BYTES};
use boltq_io::recovery::{recover, RecoveryReport};
use boltq_io::store::{journal_dir, logs_root};
use boltq_io::testutil::{Rng, TempDir};
use boltq_io::{Durability, LogRef, Record, Store, StoreConfig};
use bytes::Bytes;
use std::fs::OpenOptions;
use std::future::Future;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

// ---------------------------------------------------------------------------------------
// Shared helpers.

/// Runs `f` on a fresh glommio executor and returns its output. Each phase of a test gets
/// its own executor: when it returns, every detached store task is gone with it.
fn on_executor<T, Fut>(f: impl FnOnce() -> Fut + Send + 'static) -> T
where
    T: Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(f)
        .expect("executor")
        .join()
        .expect("join")
}

fn config(dir: &Path, index_interval_bytes: u64) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.durability = Durability::Always;
    c.journal_file_bytes = 1024 * 1024;
    // No background checkpoints: each test decides exactly what reaches the segments
    // (close() or an explicit checkpoint()) and what stays only in the journal (halt()).
    c.checkpoint_bytes = u64::MAX / 4;
    c.checkpoint_interval_ms = 3_600_000;
    c.log = LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes,
        tail_cache_bytes: 4096,
        retention_bytes: 0,
        retention_ms: 0,
    };
    c
}

/// warm_iopoll → recover → Store::open, the startup order every shard uses.
async fn open_store(c: &StoreConfig) -> (Rc<Store>, RecoveryReport) {
    boltq_io::probe::warm_iopoll(&c.data_dir)
        .await
        .expect("iopoll probe");
    let report = recover(&c.data_dir, &c.log).await.expect("recover");
    assert!(
        no_journal_files(&c.data_dir),
        "recovery removes every journal it replayed (and the spares past a torn tail)"
    );
    let store = Store::open(c.clone(), 0).await.expect("open store");
    (store, report)
}

/// Payload of record `seq` of log number `log`: unique content and a length that varies
/// between 100 and ~1 KiB, so frames straddle 4 KiB blocks at many different offsets.
fn payload(log: usize, seq: u64) -> Bytes {
    let len = 100 + (seq * 7919 + log as u64 * 31) % 900;
    let mut v = format!("log{log}:seq{seq}:").into_bytes();
    v.resize(len as usize, (seq % 251) as u8 ^ log as u8);
    Bytes::from(v)
}

fn key(seq: u64) -> Bytes {
    Bytes::from(format!("k{}", seq % 13))
}

async fn append_one(store: &Store, log: &LogRef, log_no: usize, seq: u64) -> u64 {
    let mut rec = Record {
        key: key(seq),
        payload: payload(log_no, seq),
        ..Default::default()
    };
    let a = store
        .append(log, &mut rec, 1_000_000 + seq as i64)
        .expect("append");
    assert_eq!(a.seq, seq, "append got an unexpected sequence");
    a.lsn
}

/// Reads the whole log and checks it holds exactly records `1..=last` with the expected
/// content.
async fn check_contents(store: &Store, log: &LogRef, log_no: usize, last: u64, what: &str) {
    assert_eq!(
        log.next_seq(),
        last + 1,
        "{what}: next_seq of {}",
        log.name()
    );
    let recs = store
        .read(log, 0, usize::MAX, usize::MAX)
        .await
        .unwrap_or_else(|e| panic!("{what}: read {}: {e}", log.name()));
    assert_eq!(
        recs.len() as u64,
        last,
        "{what}: record count of {}",
        log.name()
    );
    for (i, r) in recs.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(r.seq, seq, "{what}: sequence order of {}", log.name());
        assert_eq!(r.payload, payload(log_no, seq), "{what}: payload of #{seq}");
        assert_eq!(r.key, key(seq), "{what}: key of #{seq}");
        assert_eq!(
            r.timestamp_ns,
            1_000_000 + seq as i64,
            "{what}: timestamp of #{seq}"
        );
    }
}

/// A frame (record or journal entry) found by scanning a file: where it starts and ends.
#[derive(Debug, Clone, Copy)]
struct Frame {
    start: u64,
    len: u64,
    /// Record sequence for segment frames; 0 for journal entries.
    seq: u64,
}

impl Frame {
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

fn write_at(path: &Path, pos: u64, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(path).expect("open");
    f.seek(SeekFrom::Start(pos)).expect("seek");
    f.write_all(bytes).expect("write");
    f.sync_all().expect("sync");
}

fn flip_byte(path: &Path, pos: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[pos as usize] ^= 0x5A;
    write_at(path, pos, &bytes[pos as usize..pos as usize + 1]);
}

fn truncate(path: &Path, len: u64) {
    let f = OpenOptions::new().write(true).open(path).expect("open");
    f.set_len(len).expect("truncate");
    f.sync_all().expect("sync");
}

fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Garbage that gets past the cheap checks: a nonzero header with an in-range length (so
/// recovery has to read and checksum a "body") followed by random bytes. Plain random bytes
/// would almost always stop at the length check alone.
fn plausible_garbage(seed: u64, len: usize, body_len: u32) -> Vec<u8> {
    let mut g = random_bytes(seed, len);
    g[4..8].copy_from_slice(&body_len.to_le_bytes());
    g
}

// ---------------------------------------------------------------------------------------
// Segment tail damage.

const SEG_LOG: &str = "torn/seg";

/// How the active segment's tail is damaged, and what that must cost.
#[derive(Debug, Clone, Copy)]
enum SegDamage {
    /// Garbage written right after the last record (over the zero padding and beyond the
    /// padded block). Nothing is lost.
    GarbageAfter,
    /// 8 KiB of zeros right after the last record. Nothing is lost.
    ZerosAfter,
    /// The file cut in the middle of the last frame's body: the last record is lost.
    TruncateMidFrame,
    /// The file cut inside the last frame's 8-byte header: the last record is lost.
    TruncateMidHeader,
    /// One byte of the last record's body flipped (checksum mismatch): the last record is lost.
    FlipInLastBody,
    /// The last two records overwritten in place with zeros (blocks that never landed, with
    /// the file length intact): both are lost, although the later one's index entry (if it
    /// has one) still points inside the file.
    ZeroLastTwoRecords,
    /// A well-formed frame (valid checksum) with a sequence that does not follow the last
    /// record, e.g. stale bytes of an older file. Nothing is lost; the stray frame is dropped.
    StaleFrameAfter,
}

struct SegCase {
    damage: SegDamage,
    /// 1 puts an index entry on every record (so the damaged record's own index entry must be
    /// distrusted and dropped); 4096 is the default sparse index.
    index_interval_bytes: u64,
    /// Stop appending right after a segment roll, so the active segment holds exactly one
    /// record: when that one is damaged the segment is left empty.
    single_record_active: bool,
}

/// Appends until at least `min_records` are in and, if asked, until a roll has just
/// happened; closes cleanly. Returns the number of records.
async fn write_segment_log(c: StoreConfig, min_records: u64, stop_after_roll: bool) -> u64 {
    let (store, _) = open_store(&c).await;
    let log = store.open_log(SEG_LOG).await.unwrap();
    let mut seq = 0;
    let mut lsn = 0;
    loop {
        let before = log.segment_count();
        seq += 1;
        lsn = lsn.max(append_one(&store, &log, 0, seq).await);
        let rolled = log.segment_count() > before;
        if seq >= min_records && (!stop_after_roll || rolled) {
            break;
        }
        assert!(seq < 10_000, "no segment roll happened");
    }
    store.wait_durable(lsn).await.unwrap();
    store.close().await.expect("clean close");
    seq
}

fn segment_files(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .expect("log dir")
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let base = boltq_io::segment::parse_data_file_name(&name)?;
            Some((base, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// Scans a segment file from offset 0 the way a reader would and returns its frames. Stops
/// at the zero padding a direct-I/O write leaves after the last record.
fn scan_segment_file(path: &Path) -> Vec<Frame> {
    let bytes = std::fs::read(path).expect("read segment");
    let mut at = 0usize;
    let mut out = Vec::new();
    loop {
        match record::decode(&bytes[at..]) {
            Ok((view, used)) => {
                out.push(Frame {
                    start: at as u64,
                    len: used as u64,
                    seq: view.seq,
                });
                at += used;
            }
            Err(DecodeError::Zero) | Err(DecodeError::Incomplete { .. }) => break,
            Err(e) => panic!("undamaged segment {} at {at}: {e}", path.display()),
        }
    }
    out
}

fn no_journal_files(data_dir: &Path) -> bool {
    let dir = journal_dir(data_dir, 0);
    match std::fs::read_dir(&dir) {
        Err(_) => true,
        Ok(rd) => !rd
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .any(|n| n.ends_with(".journal")),
    }
}

/// Damages the active segment; returns (records that must survive, file length after repair).
fn damage_segment(path: &Path, frames: &[Frame], damage: SegDamage, n: u64) -> (u64, u64) {
    let last = *frames.last().expect("a record in the active segment");
    assert_eq!(last.seq, n, "the active segment ends with the last record");
    match damage {
        SegDamage::GarbageAfter => {
            // Longer than one 4 KiB block: bytes past the block the next write pads must be
            // removed by recovery's truncation, not merely overwritten.
            write_at(path, last.end(), &plausible_garbage(11, 5000, 700));
            (n, last.end())
        }
        SegDamage::ZerosAfter => {
            write_at(path, last.end(), &[0u8; 8192]);
            (n, last.end())
        }
        SegDamage::TruncateMidFrame => {
            truncate(path, last.start + last.len / 2);
            (n - 1, last.start)
        }
        SegDamage::TruncateMidHeader => {
            truncate(path, last.start + FRAME_HEADER_BYTES as u64 / 2 + 1);
            (n - 1, last.start)
        }
        SegDamage::FlipInLastBody => {
            let body_mid = last.start + FRAME_HEADER_BYTES as u64 + (last.len - 8) / 2;
            flip_byte(path, body_mid);
            (n - 1, last.start)
        }
        SegDamage::ZeroLastTwoRecords => {
            let prev = frames[frames.len() - 2];
            write_at(
                path,
                prev.start,
                &vec![0u8; (last.end() - prev.start) as usize],
            );
            (n - 2, prev.start)
        }
        SegDamage::StaleFrameAfter => {
            let mut stale = Vec::new();
            let rec = Record {
                seq: n + 7,
                timestamp_ns: 5,
                payload: Bytes::from_static(b"stale bytes from an older file"),
                ..Default::default()
            };
            record::encode(&rec, &mut stale).unwrap();
            write_at(path, last.end(), &stale);
            (n, last.end())
        }
    }
}

fn run_segment_case(case: SegCase) {
    let tmp = TempDir::new("torn-seg");
    let c = config(tmp.path(), case.index_interval_bytes);
    let what = format!(
        "{:?} (index every {} B, single-record active segment: {})",
        case.damage, case.index_interval_bytes, case.single_record_active
    );

    // 1. Write ~140 KiB (three 64 KiB segments) and close cleanly.
    let c1 = c.clone();
    let single = case.single_record_active;
    let n = on_executor(move || write_segment_log(c1, 250, single));
    assert!(
        no_journal_files(&c.data_dir),
        "a clean close removes the journal"
    );

    // 2. Damage the active (highest-base) segment while nothing is open.
    let log_dir = logs_root(&c.data_dir).join(SEG_LOG);
    let segs = segment_files(&log_dir);
    assert!(
        segs.len() >= 2,
        "{what}: expected a sealed and an active segment"
    );
    let (active_base, active_path) = segs.last().unwrap().clone();
    let frames = scan_segment_file(&active_path);
    assert_eq!(frames[0].seq, active_base);
    if single {
        assert_eq!(frames.len(), 1, "{what}: active segment holds one record");
    } else {
        assert!(frames.len() >= 3, "{what}: active segment holds records");
    }
    let (kept, repaired_len) = damage_segment(&active_path, &frames, case.damage, n);

    // 3. Recover and reopen: exactly `kept` records, the next append gets kept + 1.
    let c2 = c.clone();
    let what2 = what.clone();
    let path2 = active_path.clone();
    on_executor(move || async move {
        let (store, report) = open_store(&c2).await;
        assert_eq!(report.records_replayed, 0, "{what2}: nothing to replay");
        assert!(report.torn_tails.is_empty(), "{what2}: no journal left");
        let log = store.open_log(SEG_LOG).await.unwrap();
        assert_eq!(
            std::fs::metadata(&path2).unwrap().len(),
            repaired_len,
            "{what2}: the damaged tail is cut off the file at open"
        );
        check_contents(&store, &log, 0, kept, &format!("{what2}, after repair")).await;
        let lsn = append_one(&store, &log, 0, kept + 1).await;
        store.wait_durable(lsn).await.unwrap();
        check_contents(&store, &log, 0, kept + 1, &format!("{what2}, after append")).await;
        store.close().await.expect("clean close after repair");
    });

    // 4. A clean reopen sees the same log, and the file scans cleanly to the new record.
    let c3 = c.clone();
    let what3 = what.clone();
    on_executor(move || async move {
        let (store, report) = open_store(&c3).await;
        assert_eq!(report, RecoveryReport::default(), "{what3}: clean restart");
        let log = store.open_log(SEG_LOG).await.unwrap();
        check_contents(&store, &log, 0, kept + 1, &format!("{what3}, after reopen")).await;
        store.close().await.unwrap();
    });
    let frames = scan_segment_file(&active_path);
    assert_eq!(
        frames.last().map(|f| f.seq),
        Some(kept + 1),
        "{what}: the active segment ends with the record appended after repair"
    );
}

fn run_segment_damage(damage: SegDamage, index_interval_bytes: u64, single_record_active: bool) {
    run_segment_case(SegCase {
        damage,
        index_interval_bytes,
        single_record_active,
    });
}

#[test]
fn segment_garbage_after_last_record_is_dropped() {
    run_segment_damage(SegDamage::GarbageAfter, 4096, false);
}

#[test]
fn segment_zeros_after_last_record_are_dropped() {
    run_segment_damage(SegDamage::ZerosAfter, 4096, false);
}

#[test]
fn segment_half_written_last_record_is_dropped() {
    run_segment_damage(SegDamage::TruncateMidFrame, 4096, false);
    run_segment_damage(SegDamage::TruncateMidHeader, 4096, false);
}

#[test]
fn segment_last_record_with_bad_checksum_is_dropped() {
    run_segment_damage(SegDamage::FlipInLastBody, 4096, false);
}

#[test]
fn segment_stale_frame_with_wrong_sequence_is_dropped() {
    run_segment_damage(SegDamage::StaleFrameAfter, 4096, false);
}

/// The only record of the active segment is damaged: the segment is left empty (its base
/// is the next sequence) and the next append lands in it.
#[test]
fn segment_damaged_sole_record_leaves_an_empty_active_segment() {
    run_segment_damage(SegDamage::TruncateMidFrame, 4096, true);
    run_segment_damage(SegDamage::FlipInLastBody, 4096, true);
}

#[test]
fn segment_last_two_records_zeroed_in_place_are_dropped() {
    run_segment_damage(SegDamage::ZeroLastTwoRecords, 4096, false);
}

/// An index entry on every record, so the damaged records have index entries of their own
/// that still point inside the file. When the bytes at the last entry do not decode as the
/// record it names, recovery must fall back to earlier entries (zeroing two records
/// catches a recovery that trusts the last entry and only checks from there). The index
/// file also spans several 512-byte blocks, so reopen has to rebuild the index appender's
/// partial block at the file's real direct-I/O alignment.
#[test]
fn segment_damage_under_a_dense_index() {
    for damage in [
        SegDamage::GarbageAfter,
        SegDamage::ZerosAfter,
        SegDamage::TruncateMidFrame,
        SegDamage::FlipInLastBody,
        SegDamage::ZeroLastTwoRecords,
    ] {
        run_segment_damage(damage, 1, false);
    }
    run_segment_damage(SegDamage::FlipInLastBody, 1, true);
}

// ---------------------------------------------------------------------------------------
// Journal tail damage.

const JOURNAL_LOGS: [&str; 2] = ["torn/j-a", "torn/j-b"];
const JOURNAL_APPENDS: u64 = 60;

/// The i-th append (0-based) goes to log `i % 2` with sequence `i / 2 + 1`.
fn journal_append_target(i: u64) -> (usize, u64) {
    ((i % 2) as usize, i / 2 + 1)
}

/// Appends `JOURNAL_APPENDS` records round-robin over two logs, all acknowledged
/// (`wait_durable`), with an explicit checkpoint after the first `checkpoint_after` (0 =
/// none), then crashes (`halt`): the records after the checkpoint exist only in the journal.
async fn write_journal_then_crash(c: StoreConfig, checkpoint_after: u64) {
    let (store, _) = open_store(&c).await;
    let mut logs = Vec::new();
    for name in JOURNAL_LOGS {
        logs.push(store.open_log(name).await.unwrap());
    }
    let mut lsn = 0;
    for i in 0..JOURNAL_APPENDS {
        let (log_no, seq) = journal_append_target(i);
        lsn = append_one(&store, &logs[log_no], log_no, seq).await;
        if i + 1 == checkpoint_after {
            store.wait_durable(lsn).await.unwrap();
            store.checkpoint().await.unwrap();
        }
    }
    store.wait_durable(lsn).await.unwrap();
    store.halt().await;
}

/// Scans a journal file from its start; returns its Append entries in order (Declare
/// entries are checked and skipped).
fn scan_journal_file(path: &Path) -> Vec<Frame> {
    let bytes = std::fs::read(path).expect("read journal");
    let mut at = 0usize;
    let mut appends = Vec::new();
    let mut declares = 0;
    loop {
        match journal_entry::decode_entry(&bytes[at..]) {
            Ok((e, used)) => {
                match e.kind {
                    EntryKind::Declare => declares += 1,
                    EntryKind::Append => appends.push(Frame {
                        start: at as u64,
                        len: used as u64,
                        seq: 0,
                    }),
                }
                at += used;
            }
            Err(EntryError::Zero) => break,
            Err(e) => panic!("undamaged journal {} at {at}: {e}", path.display()),
        }
    }
    assert_eq!(declares, JOURNAL_LOGS.len(), "each log declared once");
    appends
}

#[derive(Debug, Clone, Copy)]
enum JournalDamage {
    /// 8 KiB of zeros after the last entry: indistinguishable from the pre-zeroed rest of
    /// the file. Nothing lost, nothing reported.
    ZerosAfter,
    /// Garbage after the last entry (a torn write of a round that was never acknowledged).
    /// Nothing lost; reported.
    GarbageAfter,
    /// The file cut in the middle of the last entry. The last append is lost; reported.
    TruncateMidLastEntry,
    /// The second half of the last entry reads back as zeros (a sector that never landed).
    /// The last append is lost; reported.
    ZeroSecondHalfOfLastEntry,
    /// One byte flipped inside the last entry. The last append is lost; reported.
    FlipInLastEntry,
    /// One byte flipped inside the entry of append `JOURNAL_APPENDS / 2`: replay keeps the
    /// appends before it and stops there; reported.
    FlipInMiddleEntry,
}

/// Damages the journal; returns (appends that must survive, whether a torn tail is reported).
fn damage_journal(path: &Path, appends: &[Frame], damage: JournalDamage) -> (u64, bool) {
    let n = appends.len() as u64;
    let last = *appends.last().unwrap();
    match damage {
        JournalDamage::ZerosAfter => {
            write_at(path, last.end(), &[0u8; 8192]);
            (n, false)
        }
        JournalDamage::GarbageAfter => {
            write_at(path, last.end(), &plausible_garbage(23, 3000, 900));
            (n, true)
        }
        JournalDamage::TruncateMidLastEntry => {
            truncate(path, last.start + last.len / 2);
            (n - 1, true)
        }
        JournalDamage::ZeroSecondHalfOfLastEntry => {
            let half = last.len / 2;
            write_at(
                path,
                last.start + half,
                &vec![0u8; (last.len - half) as usize],
            );
            (n - 1, true)
        }
        JournalDamage::FlipInLastEntry => {
            flip_byte(path, last.start + last.len - 3);
            (n - 1, true)
        }
        JournalDamage::FlipInMiddleEntry => {
            let mid = appends[(n / 2) as usize];
            flip_byte(path, mid.start + mid.len / 2);
            (n / 2, true)
        }
    }
}

/// Records of log `log_no` among the first `appends` appends of the round-robin order.
fn journal_log_len(appends: u64, log_no: usize) -> u64 {
    (0..appends)
        .filter(|&i| journal_append_target(i).0 == log_no)
        .count() as u64
}

fn run_journal_case(damage: JournalDamage, checkpoint_after: u64) {
    let tmp = TempDir::new("torn-journal");
    let c = config(tmp.path(), 4096);
    let what = format!("{damage:?} (checkpoint after {checkpoint_after})");

    // 1. Acknowledged appends, then a crash: the journal stays on disk.
    let c1 = c.clone();
    on_executor(move || write_journal_then_crash(c1, checkpoint_after));

    // 2. Damage the first journal file (the one holding every entry; any later file is the
    //    empty pre-zeroed spare).
    let jdir = journal_dir(&c.data_dir, 0);
    let jpath = boltq_io::journal::journal_file_path(&jdir, 0);
    let appends = scan_journal_file(&jpath);
    assert_eq!(appends.len() as u64, JOURNAL_APPENDS, "{what}: entries");
    let (kept_by_journal, reported) = damage_journal(&jpath, &appends, damage);
    // Records made durable in the segments by the checkpoint survive whatever the journal
    // holds; past that, exactly the journal prefix before the damage survives.
    let kept = kept_by_journal.max(checkpoint_after);

    // 3. Recover: the prefix before the damage is replayed, the damage is reported.
    let c2 = c.clone();
    let what2 = what.clone();
    let jname = jpath.file_name().unwrap().to_str().unwrap().to_string();
    let damage_at = if reported {
        // Where replay must stop: the first damaged entry (or the garbage after the last).
        appends
            .get(kept_by_journal as usize)
            .map(|f| f.start)
            .unwrap_or(appends.last().unwrap().end())
    } else {
        0
    };
    on_executor(move || async move {
        let (store, report) = open_store(&c2).await;
        assert_eq!(
            report.records_replayed,
            kept - checkpoint_after,
            "{what2}: records replayed from the journal"
        );
        if reported {
            assert_eq!(report.torn_tails.len(), 1, "{what2}: {report:?}");
            let t = &report.torn_tails[0];
            assert!(
                t.contains(&jname) && t.contains(&format!("offset {damage_at}")),
                "{what2}: torn tail names the file and the offset {damage_at}: {t}"
            );
        } else {
            assert!(report.torn_tails.is_empty(), "{what2}: {report:?}");
        }
        for (log_no, name) in JOURNAL_LOGS.iter().enumerate() {
            let log = store.open_log(name).await.unwrap();
            let len = journal_log_len(kept, log_no);
            check_contents(&store, &log, log_no, len, &format!("{what2}, recovered")).await;
            let lsn = append_one(&store, &log, log_no, len + 1).await;
            store.wait_durable(lsn).await.unwrap();
        }
        store.close().await.expect("clean close after recovery");
    });

    // 4. A clean restart replays nothing and reads the same logs.
    let c3 = c.clone();
    on_executor(move || async move {
        let (store, report) = open_store(&c3).await;
        assert_eq!(report, RecoveryReport::default(), "{what}: clean restart");
        for (log_no, name) in JOURNAL_LOGS.iter().enumerate() {
            let log = store.open_log(name).await.unwrap();
            let len = journal_log_len(kept, log_no) + 1;
            check_contents(&store, &log, log_no, len, &format!("{what}, reopened")).await;
        }
        store.close().await.unwrap();
    });
}

#[test]
fn journal_zeros_after_last_entry_lose_nothing() {
    run_journal_case(JournalDamage::ZerosAfter, 0);
}

#[test]
fn journal_garbage_after_last_entry_is_reported_and_dropped() {
    run_journal_case(JournalDamage::GarbageAfter, 0);
}

#[test]
fn journal_half_written_last_entry_is_dropped() {
    run_journal_case(JournalDamage::TruncateMidLastEntry, 0);
    run_journal_case(JournalDamage::ZeroSecondHalfOfLastEntry, 0);
}

#[test]
fn journal_last_entry_with_bad_checksum_is_dropped() {
    run_journal_case(JournalDamage::FlipInLastEntry, 0);
}

#[test]
fn journal_damage_mid_data_keeps_every_entry_before_it() {
    run_journal_case(JournalDamage::FlipInMiddleEntry, 0);
}

/// With half the records checkpointed into the segments, damage to the journal's last entry
/// still costs only that entry: the checkpointed records come from the segments (replay
/// skips them as already present) and the rest from the journal.
#[test]
fn journal_damage_after_a_checkpoint_keeps_segments_and_journal_prefix() {
    run_journal_case(JournalDamage::FlipInLastEntry, JOURNAL_APPENDS / 2);
    run_journal_case(JournalDamage::TruncateMidLastEntry, JOURNAL_APPENDS / 2);
}
