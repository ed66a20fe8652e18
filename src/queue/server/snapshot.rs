//! Snapshots of a slot's broker, so its command log can be compacted.
//!
//! A snapshot is written to the slot's `snap` log as chunk records (each at most
//! `CHUNK_BYTES`): key = the snapshot's number, headers `part`, `parts`, `wal_seq` (the
//! last command the snapshot includes) and `first_seq` (the snap-log sequence of its part 0,
//! its identity: chunks of one snapshot sit at `first_seq + part`). It is taken synchronously
//! between two commands, so it is exactly the state after `wal_seq`. Once every chunk is
//! fdatasync'ed (whatever `storage.fsync` says), the command log below `wal_seq + 1` and
//! older snapshots may go; both are removed a whole segment at a time, so a crash at any
//! step leaves either the previous complete snapshot with every command after it, or the
//! new one.
//!
//! Numbers never repeat, across crashes too: the next one follows the highest number of any
//! chunk in the log, complete or not, since a snapshot cut short by a crash keeps its chunks
//! until a later snapshot is durable. Recovery restores the newest snapshot whose chunks are
//! all present and all carry the same identity (a number shared by two snapshots, as older
//! versions could write, is refused rather than merged), and replays the command log from
//! `wal_seq + 1`.

use super::packed_ready;
use crate::queue::broker::{Broker, BrokerConfig, BrokerSnapshot};
use boltq_io::{LogRef, Record, Store};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::io::Read;

/// Largest chunk of a serialised snapshot in one record (well inside the 8 MiB body limit
/// and half a minimum-size journal file).
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Where a durable snapshot sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Journal position of its last chunk.
    pub lsn: u64,
    /// Sequence of its first chunk in the snap log (older records may go).
    pub first_chunk_seq: u64,
    /// Last command included; the command log may drop everything before `wal_seq + 1`.
    pub wal_seq: u64,
    pub bytes: u64,
}

/// The first bytes of a snapshot body whose structures are MessagePack maps, fields by
/// name ([`encode_named`]).
pub const NAMED_MAGIC: &[u8; 8] = b"BQSNAP1\n";
/// The first bytes of a snapshot body whose structures are MessagePack arrays, fields in
/// the order the types declare them, as builds of 2026-12-07 wrote it (read, no longer
/// written). A body with no magic is the JSON older versions wrote (read too).
pub const POSITIONAL_MAGIC: &[u8; 8] = b"BQSNAP2\n";
/// The first bytes of a body laid out as [`POSITIONAL_MAGIC`]'s, its queues' ready
/// messages packed ([`packed_ready`]; [`encode`]). A new magic, so that a build knowing
/// only `BQSNAP2` refuses such a body by its magic, and no reader relies on a length check
/// deep inside it to tell the two layouts apart.
pub const PACKED_MAGIC: &[u8; 8] = b"BQSNAP3\n";

/// Serialises a snapshot (off the shard's event loop: see `slot::maybe_snapshot`), fields
/// by position: without a name before every field of every message, a restart reads a
/// body of 1 KiB messages 25 % faster from its chunks and it is 13 % smaller
/// (docs/benchmarks.md "Snapshots without field names"). The price is a rule: a field
/// added to a snapshot type later goes last, with `#[serde(default)]`, and no field is
/// ever skipped when written (a reader counts positions).
///
/// Queues' ready messages, most of a large snapshot, are packed in the command log's
/// binary message layout ([`packed_ready`]): a body of 1 KiB messages loads from its chunks
/// in 0.54× the time of serde field by field (docs/benchmarks.md "Ready messages packed").
///
/// Trade-off: MessagePack through serde, not an archive read in place (rkyv, the design's
/// format): a payload is copied once on write and once on read, but every snapshot type
/// keeps its one serde definition, and older named and JSON snapshots still load.
pub fn encode(mut snapshot: BrokerSnapshot) -> Result<Vec<u8>, String> {
    let mut out = body_buffer(&snapshot, PACKED_MAGIC);
    snapshot.queues.iter_mut().for_each(packed_ready::pack);
    rmp_serde::encode::write(&mut out, &snapshot).map_err(|e| format!("encode snapshot: {e}"))?;
    Ok(out)
}

/// Serialises a snapshot with fields by name, which builds before 2026-12-07 read too: a
/// cluster's snapshots travel to members that may run such a build during a rolling
/// upgrade, and one that cannot read its leader's snapshot stops.
pub fn encode_named(snapshot: &BrokerSnapshot) -> Result<Vec<u8>, String> {
    let mut out = body_buffer(snapshot, NAMED_MAGIC);
    rmp_serde::encode::write_named(&mut out, snapshot)
        .map_err(|e| format!("encode snapshot: {e}"))?;
    Ok(out)
}

/// A buffer holding `magic`, sized up front for the body: growing a buffer of hundreds of
/// MiB by doubling copies it again and again (measured: a fifth of the encoding time).
fn body_buffer(snapshot: &BrokerSnapshot, magic: &[u8; 8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(magic.len() + size_estimate(snapshot));
    out.extend_from_slice(magic);
    out
}

/// Whether `head` is the magic of a MessagePack body, in any layout: serde's derived
/// readers take a structure as a map by name or as an array by position alike, so all
/// decode through the same call.
fn is_binary(head: &[u8]) -> bool {
    head == NAMED_MAGIC || head == POSITIONAL_MAGIC || head == PACKED_MAGIC
}

/// A decoded snapshot as it is held in memory: packed ready messages back in `ready`.
fn unpacked(mut snapshot: BrokerSnapshot) -> BrokerSnapshot {
    snapshot.queues.iter_mut().for_each(packed_ready::unpack);
    snapshot
}

/// About the bytes `encode` writes: payloads and headers plus a per-message allowance for
/// the fields around them.
fn size_estimate(s: &BrokerSnapshot) -> usize {
    let per = |m: &crate::queue::message::Message| {
        m.payload.len()
            + m.topic.len()
            + m.headers()
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 256
    };
    let messages = s.queues.iter().flat_map(|q| q.ready.iter().map(|r| &r.msg));
    let messages = messages
        .chain(s.waiting.iter().map(|w| &w.msg))
        .chain(s.pending.iter().map(|p| &p.msg))
        .chain(s.dead_letters.iter().flat_map(|d| d.messages.iter()))
        .chain(
            s.durable_subscriptions
                .iter()
                .flat_map(|d| d.backlog.iter().chain(d.unconfirmed.iter())),
        );
    messages.map(per).sum::<usize>() + 4096
}

/// Reads a snapshot body written by [`encode`] or [`encode_named`], or the JSON of older
/// versions.
pub fn decode(body: &[u8]) -> Result<BrokerSnapshot, String> {
    match body.split_first_chunk::<8>() {
        Some((head, packed)) if is_binary(head) => rmp_serde::from_slice(packed),
        _ => return serde_json::from_slice(body).map_err(|e| e.to_string()),
    }
    .map(unpacked)
    .map_err(|e| e.to_string())
}

/// [`decode`] of a body read in turn from `body`, so a snapshot's chunks are decoded where
/// they lie ([`Chunks`]) instead of being joined first: joining a body of a GiB copied it
/// into fresh memory, a third of a large slot's start (most of it the kernel clearing the
/// pages), and held it beside the chunks. A body already in one piece (a cluster snapshot)
/// goes through [`decode`]: reading borrows its payloads where this copies each one
/// through the reader's buffer first.
pub fn decode_from(mut body: impl Read) -> Result<BrokerSnapshot, String> {
    let mut head = Vec::with_capacity(NAMED_MAGIC.len());
    body.by_ref()
        .take(NAMED_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| e.to_string())?;
    if is_binary(&head) {
        rmp_serde::from_read(body)
            .map(unpacked)
            .map_err(|e| e.to_string())
    } else {
        serde_json::from_reader(head.as_slice().chain(body)).map_err(|e| e.to_string())
    }
}

/// A snapshot body as the chunks it was written in, read front to back; each chunk is
/// freed once read past, so the chunks and the state they decode into are never all held
/// twice.
pub struct Chunks {
    chunks: VecDeque<Bytes>,
}

impl Chunks {
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Chunks {
        Chunks {
            chunks: chunks.into_iter().collect(),
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(front) = self.chunks.front_mut() {
            if front.is_empty() {
                self.chunks.pop_front();
                continue;
            }
            let n = buf.len().min(front.len());
            buf[..n].copy_from_slice(&front[..n]);
            bytes::Buf::advance(front, n);
            return Ok(n);
        }
        Ok(0)
    }
}

/// Appends a serialised snapshot as chunk records, each at `pacer`'s rate and once the
/// journal has room for it in the background share (`Store::wait_for_background_room`),
/// so the clients' commands interleave with the chunks instead of being refused behind
/// them (and their fdatasyncs do not wait for a burst of chunks). `wal_seq` is the last
/// command the snapshot includes (it was taken between two commands, so it is exactly that
/// state); the command log keeps everything after it until the snapshot is synced.
/// `number` must be above every number in the snap log (`Loaded::last_number`).
pub async fn write(
    store: &Store,
    pacer: &super::pacer::Pacer,
    snap: &LogRef,
    body: &[u8],
    wal_seq: u64,
    number: u64,
) -> Result<Written, String> {
    assert!(!body.is_empty(), "a serialised snapshot is at least `{{}}`");
    let parts = body.len().div_ceil(CHUNK_BYTES);
    let id = Identity {
        parts: parts as u64,
        wal_seq,
        first_seq: snap.next_seq(),
    };
    let mut lsn = 0;
    for (i, chunk) in body.chunks(CHUNK_BYTES).enumerate() {
        pacer.take(chunk.len() as u64).await;
        store
            .wait_for_background_room(chunk.len() as u64)
            .await
            .map_err(|e| e.to_string())?;
        let mut record = chunk_record(number, i as u64, &id, chunk);
        let appended = store
            .append(snap, &mut record, boltq_io::store::now_ns())
            .map_err(|e| e.to_string())?;
        if appended.seq != id.first_seq + i as u64 {
            // Only one snapshot of a slot is written at a time; a reader would refuse this one.
            return Err(format!(
                "snapshot {number} chunk {i} landed at seq {}, not {}",
                appended.seq,
                id.first_seq + i as u64
            ));
        }
        lsn = appended.lsn;
    }
    Ok(Written {
        lsn,
        first_chunk_seq: id.first_seq,
        wal_seq,
        bytes: body.len() as u64,
    })
}

/// Drops what a written snapshot replaces: the commands it includes and the older
/// snapshots. Only after its chunks are fdatasync'ed, whatever `storage.fsync` says: under
/// `interval` and `never` `wait_durable` returns at once, and a crash after the truncation
/// but before the chunks reached the disk would leave the slot with neither.
pub async fn compact(
    store: &Store,
    wal: &LogRef,
    snap: &LogRef,
    written: &Written,
) -> Result<(), String> {
    store
        .wait_synced(written.lsn)
        .await
        .map_err(|e| e.to_string())?;
    store
        .truncate_before(wal, written.wal_seq + 1)
        .await
        .map_err(|e| e.to_string())?;
    store
        .truncate_before(snap, written.first_chunk_seq)
        .await
        .map_err(|e| e.to_string())
}

/// What every chunk of one snapshot carries; chunks that disagree belong to different
/// snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    parts: u64,
    wal_seq: u64,
    /// Snap-log sequence of part 0.
    first_seq: u64,
}

fn chunk_record(number: u64, part: u64, id: &Identity, chunk: &[u8]) -> Record {
    let header = |name: &'static [u8], value: u64| {
        (Bytes::from_static(name), Bytes::from(value.to_string()))
    };
    Record {
        key: Bytes::from(number.to_string()),
        headers: vec![
            header(b"part", part),
            header(b"parts", id.parts),
            header(b"wal_seq", id.wal_seq),
            header(b"first_seq", id.first_seq),
        ],
        payload: Bytes::copy_from_slice(chunk),
        ..Default::default()
    }
}

/// The newest complete snapshot of a slot.
pub struct Restored {
    pub broker: Broker,
    /// Last command it includes.
    pub wal_seq: u64,
    pub number: u64,
    pub bytes: u64,
}

/// What the snap log holds at startup.
pub struct Loaded {
    /// `None` when no snapshot is complete.
    pub restored: Option<Restored>,
    /// Highest number of any chunk, complete snapshot or not: the next snapshot takes a
    /// higher one, so it never shares a number with one a crash cut short.
    pub last_number: u64,
}

/// One snapshot number's chunks as read back.
struct Gathered {
    id: Identity,
    chunks: BTreeMap<u64, Bytes>,
    /// Some chunk disagrees with the others (another identity, a part out of range or
    /// twice, a chunk away from `first_seq + part`): never restored.
    mixed: bool,
}

/// Reads the snap log: the newest complete snapshot, restored, and the highest number used.
pub async fn load_newest(
    store: &Store,
    snap: &LogRef,
    cfg: &BrokerConfig,
) -> Result<Loaded, String> {
    let records = store
        .read(snap, 0, usize::MAX, usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let mut found: BTreeMap<u64, Gathered> = BTreeMap::new();
    for r in records {
        let number: u64 = parse(&r.key)?;
        let header = |name: &[u8]| -> Result<Option<u64>, String> {
            r.headers
                .iter()
                .find(|(k, _)| k.as_ref() == name)
                .map(|(_, v)| parse(v))
                .transpose()
        };
        let required = |name: &[u8]| -> Result<u64, String> {
            header(name)?.ok_or_else(|| format!("snapshot chunk {} lacks a header", r.seq))
        };
        let part = required(b"part")?;
        let (parts, wal_seq) = (required(b"parts")?, required(b"wal_seq")?);
        // Chunks written before `first_seq` existed: their writer put them at consecutive
        // sequences too, so `seq - part` is the same for every chunk of one snapshot.
        let first_seq = match header(b"first_seq")? {
            Some(first) => Some(first),
            None => r.seq.checked_sub(part),
        };
        let in_place = first_seq.and_then(|f| f.checked_add(part)) == Some(r.seq);
        let id = Identity {
            parts,
            wal_seq,
            first_seq: first_seq.unwrap_or(0),
        };
        let entry = found.entry(number).or_insert_with(|| Gathered {
            id,
            chunks: BTreeMap::new(),
            mixed: false,
        });
        let duplicate = entry.chunks.insert(part, r.payload).is_some();
        if !in_place || entry.id != id || part >= parts || duplicate {
            entry.mixed = true;
        }
    }
    let last_number = found.keys().next_back().copied().unwrap_or(0);
    for (number, g) in &found {
        if g.mixed {
            log::warn!(
                "snapshot {number} of {} mixes chunks of different snapshots; not used",
                snap.name()
            );
        }
    }
    let newest = found
        .into_iter()
        .rev()
        .find(|(_, g)| !g.mixed && g.chunks.len() as u64 == g.id.parts);
    let Some((number, g)) = newest else {
        return Ok(Loaded {
            restored: None,
            last_number,
        });
    };
    let bytes = g.chunks.values().map(|c| c.len() as u64).sum();
    let snapshot = decode_from(Chunks::new(g.chunks.into_values()))
        .map_err(|e| format!("snapshot {number} does not decode: {e}"))?;
    let broker = Broker::try_restore(snapshot, cfg.clone())?;
    Ok(Loaded {
        restored: Some(Restored {
            broker,
            wal_seq: g.id.wal_seq,
            number,
            bytes,
        }),
        last_number,
    })
}

fn parse(bytes: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "snapshot chunk has a malformed number".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::broker::Command;
    use crate::queue::message::IdGenerator;
    use crate::queue::server::pacer::Pacer;
    use boltq_io::testutil::{open_store, TempDir};

    fn unpaced() -> Pacer {
        Pacer::new(0)
    }
    use boltq_io::{Durability, StoreConfig};
    use std::path::Path;
    use std::rc::Rc;

    const SNAP: &str = "queue/slot-001/snap";
    const WAL: &str = "queue/slot-001/wal";

    fn run<F: std::future::Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        boltq_shards::block_on("snapshot-test", move || Box::pin(f())).unwrap();
    }

    fn config(dir: &Path, durability: Durability) -> StoreConfig {
        let mut c = StoreConfig::new(dir);
        c.durability = durability;
        c.journal_file_bytes = 4 * 1024 * 1024;
        c.log.segment_bytes = 4096;
        c
    }

    /// Stops the store as a crash would (nothing more is written) and opens it again.
    async fn crash(store: Rc<Store>, c: &StoreConfig) -> Rc<Store> {
        store.halt().await;
        drop(store);
        open_store(c).await
    }

    /// A broker holding `n` messages in queue `q`.
    fn broker(n: u8) -> Broker {
        let mut ids = IdGenerator::new([n; 7]);
        let mut b = Broker::new(BrokerConfig::default());
        for i in 0..n {
            let mut msg = crate::queue::server::wal::tests::message("q");
            msg.id = ids.next(0);
            msg.payload = Bytes::from(vec![i; 16]);
            b.apply(&Command::Publish { msg });
        }
        b
    }

    fn body(b: &Broker) -> Vec<u8> {
        encode(b.snapshot()).unwrap()
    }

    async fn load(store: &Store) -> Loaded {
        let snap = store.open_log(SNAP).await.unwrap();
        load_newest(store, &snap, &BrokerConfig::default())
            .await
            .unwrap()
    }

    /// Appends `chunks` as one snapshot's records, the way `write` does, optionally without
    /// the `first_seq` header (as versions before it wrote them).
    async fn append_chunks(
        store: &Store,
        number: u64,
        wal_seq: u64,
        parts: u64,
        chunks: &[&[u8]],
        legacy: bool,
    ) {
        let snap = store.open_log(SNAP).await.unwrap();
        let id = Identity {
            parts,
            wal_seq,
            first_seq: snap.next_seq(),
        };
        let mut lsn = 0;
        for (part, chunk) in chunks.iter().enumerate() {
            let mut r = chunk_record(number, part as u64, &id, chunk);
            if legacy {
                r.headers.retain(|(k, _)| k.as_ref() != b"first_seq");
            }
            lsn = store.append(&snap, &mut r, 1).unwrap().lsn;
        }
        store.wait_synced(lsn).await.unwrap();
    }

    fn assert_restored(loaded: &Loaded, want: &Broker, wal_seq: u64) {
        let r = loaded.restored.as_ref().expect("a complete snapshot");
        assert_eq!(r.wal_seq, wal_seq, "the snapshot's own last command");
        assert_eq!(r.broker.snapshot(), want.snapshot(), "exactly its state");
    }

    /// A snapshot of a random command sequence: every kind of state (ready, waiting,
    /// pending, dead letters, durable registrations with backlogs and unconfirmed pushes).
    fn random_snapshot(seed: u64) -> BrokerSnapshot {
        use crate::queue::broker::tests::gen::{random_config, Gen, Rng, Step};
        let cfg = random_config(&mut Rng::new(seed));
        let mut gen = Gen::new(seed, &cfg);
        let mut b = Broker::new(cfg);
        for _ in 0..300 {
            if let Step::Cmd(cmd) = gen.step(&[]) {
                b.apply(&cmd);
            }
        }
        b.snapshot()
    }

    #[test]
    fn packed_positional_named_and_older_json_bodies_decode_to_the_same_snapshot() {
        for seed in 0..40 {
            let snapshot = random_snapshot(seed);
            let binary = encode(snapshot.clone()).unwrap();
            assert!(binary.starts_with(PACKED_MAGIC));
            assert_eq!(decode(&binary).unwrap(), snapshot, "seed {seed}");
            let mut positional = POSITIONAL_MAGIC.to_vec();
            rmp_serde::encode::write(&mut positional, &snapshot).unwrap();
            assert_eq!(
                decode(&positional).unwrap(),
                snapshot,
                "seed {seed}: BQSNAP2"
            );
            let named = encode_named(&snapshot).unwrap();
            assert!(named.starts_with(NAMED_MAGIC));
            assert_eq!(decode(&named).unwrap(), snapshot, "seed {seed}: named");
            let json = serde_json::to_vec(&snapshot).unwrap();
            assert_eq!(decode(&json).unwrap(), snapshot, "seed {seed}: older JSON");
            assert!(
                binary.len() < named.len() && named.len() < json.len(),
                "seed {seed}: positional, then named, is the smaller"
            );
        }
    }

    /// Builds before 2026-12-07 left out of named bodies the fields at their defaults (no
    /// exchanges, no shared payloads, no idle timer); such bodies still decode.
    #[test]
    fn named_bodies_of_older_builds_without_their_default_fields_decode() {
        fn drop_defaults(v: &mut serde_json::Value) {
            const OMITTED: [&str; 5] = [
                "exchanges",
                "shared_payloads",
                "idle_timer",
                "backlog_shared",
                "unconfirmed_shared",
            ];
            match v {
                serde_json::Value::Object(map) => {
                    map.retain(|k, v| {
                        let default = v.is_null() || v.as_array().is_some_and(|a| a.is_empty());
                        !(OMITTED.contains(&k.as_str()) && default)
                    });
                    map.values_mut().for_each(drop_defaults);
                }
                serde_json::Value::Array(items) => items.iter_mut().for_each(drop_defaults),
                _ => {}
            }
        }
        let mut dropped = 0;
        for seed in 0..20 {
            let snapshot = random_snapshot(seed);
            let mut old = serde_json::to_value(&snapshot).unwrap();
            let before = old.to_string().len();
            drop_defaults(&mut old);
            dropped += before - old.to_string().len();
            let mut body = NAMED_MAGIC.to_vec();
            body.extend(rmp_serde::to_vec_named(&old).unwrap());
            assert_eq!(decode(&body).unwrap(), snapshot, "seed {seed}");
        }
        assert!(dropped > 0, "no field was left out: the test shows nothing");
    }

    /// A body read from its chunks, cut anywhere (inside the magic, inside a message, one
    /// byte at a time, empty chunks between), decodes as the whole body does, in every
    /// format.
    #[test]
    fn a_body_decodes_from_its_chunks_wherever_they_are_cut() {
        use crate::queue::broker::tests::gen::Rng;
        let mut rng = Rng::new(7);
        for seed in 0..20 {
            let snapshot = random_snapshot(seed);
            for body in [
                encode(snapshot.clone()).unwrap(),
                encode_named(&snapshot).unwrap(),
                serde_json::to_vec(&snapshot).unwrap(),
            ] {
                for _ in 0..5 {
                    let mut chunks = Vec::new();
                    let mut rest = &body[..];
                    while !rest.is_empty() {
                        let cut = match rng.below(4) {
                            0 => 1,
                            1 => 0,
                            _ => 1 + rng.below(rest.len() as u64) as usize,
                        };
                        let (chunk, after) = rest.split_at(cut.min(rest.len()));
                        chunks.push(Bytes::copy_from_slice(chunk));
                        rest = after;
                    }
                    let decoded = decode_from(Chunks::new(chunks)).unwrap();
                    assert_eq!(decoded, snapshot, "seed {seed}");
                }
            }
        }
    }

    /// Truncated, flipped and extended bodies get an error (or a snapshot the restore
    /// judges), never a panic.
    #[test]
    fn damaged_bodies_are_refused_without_panicking() {
        use crate::queue::broker::tests::gen::Rng;
        let good = encode(random_snapshot(7)).unwrap();
        let mut rng = Rng::new(99);
        let mut refused = 0;
        for _ in 0..20_000 {
            let mut body = good.clone();
            match rng.below(3) {
                0 => body.truncate(rng.below(body.len() as u64) as usize),
                1 => {
                    for _ in 0..1 + rng.below(4) {
                        let at = rng.below(body.len() as u64) as usize;
                        body[at] ^= 1 << rng.below(8);
                    }
                }
                _ => {
                    let at = rng.below(body.len() as u64) as usize;
                    body.insert(at, rng.below(256) as u8);
                }
            }
            // Read from chunks, as a start reads it, the body decodes exactly as in one piece.
            let from_chunks = decode_from(Chunks::new(
                body.chunks(1 + rng.below(64) as usize)
                    .map(Bytes::copy_from_slice),
            ));
            assert_eq!(from_chunks.as_ref().ok(), decode(&body).as_ref().ok());
            match decode(&body) {
                Err(_) => refused += 1,
                Ok(s) => {
                    if Broker::try_restore(s, BrokerConfig::default()).is_err() {
                        refused += 1;
                    }
                }
            }
        }
        assert!(
            refused > 10_000,
            "most damage is noticed: {refused} of 20000"
        );
    }

    /// Issue 13 item 3: a snapshot cut short by a crash keeps its number, so the next one
    /// must take a higher number; sharing it got both merged (or refused) at the next start.
    #[test]
    fn a_snapshot_cut_short_by_a_crash_never_shares_its_number() {
        let tmp = TempDir::new("snapnum");
        let c = config(tmp.path(), Durability::Always);
        run(move || async move {
            let mut store = open_store(&c).await;
            let snap = store.open_log(SNAP).await.unwrap();
            let first = broker(1);
            write(
                &store,
                &unpaced(),
                &snap,
                &body(&first),
                1,
                load(&store).await.last_number + 1,
            )
            .await
            .unwrap();
            // The next snapshot gets one chunk of two out before the crash.
            let half = load(&store).await.last_number + 1;
            append_chunks(&store, half, 5, 2, &[b"{\"half"], false).await;
            store = crash(store, &c).await;
            let loaded = load(&store).await;
            assert_restored(&loaded, &first, 1);
            assert_eq!(loaded.last_number, half, "the cut-short number counts");
            // The snapshot after the restart, as the plane numbers it.
            let snap = store.open_log(SNAP).await.unwrap();
            let third = broker(3);
            let number = loaded.last_number + 1;
            let w = write(&store, &unpaced(), &snap, &body(&third), 9, number)
                .await
                .unwrap();
            store.wait_synced(w.lsn).await.unwrap();
            store = crash(store, &c).await;
            let loaded = load(&store).await;
            assert_restored(&loaded, &third, 9);
            assert_eq!(loaded.restored.as_ref().unwrap().number, number);
            store.close().await.unwrap();
        });
    }

    /// Two snapshots under one number (as versions before unique numbers could leave) are
    /// refused, not merged: a merge restored the newer state with the older `wal_seq`, so
    /// the commands in between were applied twice.
    #[test]
    fn chunks_of_two_snapshots_with_one_number_are_never_merged() {
        for legacy in [true, false] {
            let tmp = TempDir::new("snapmix");
            let c = config(tmp.path(), Durability::Always);
            run(move || async move {
                let store = open_store(&c).await;
                let first = broker(1);
                append_chunks(&store, 1, 1, 1, &[&body(&first)], legacy).await;
                let second = body(&broker(2));
                let (a, b) = second.split_at(second.len() / 2);
                append_chunks(&store, 2, 5, 2, &[a], legacy).await;
                append_chunks(&store, 2, 9, 2, &[a, b], legacy).await;
                let loaded = load(&store).await;
                assert_restored(&loaded, &first, 1);
                assert_eq!(loaded.last_number, 2);
                store.close().await.unwrap();
            });
        }
    }

    /// Snapshots written before chunks carried `first_seq` still load.
    #[test]
    fn a_snapshot_without_first_seq_headers_still_loads() {
        let tmp = TempDir::new("snaplegacy");
        let c = config(tmp.path(), Durability::Always);
        run(move || async move {
            let store = open_store(&c).await;
            let want = broker(2);
            let all = body(&want);
            let (a, b) = all.split_at(all.len() / 3);
            append_chunks(&store, 4, 7, 2, &[a, b], true).await;
            let loaded = load(&store).await;
            assert_restored(&loaded, &want, 7);
            assert_eq!(loaded.last_number, 4);
            store.close().await.unwrap();
        });
    }

    /// Issue 13 item 4: under `interval` and `never` the command log was truncated as soon
    /// as the chunks were buffered; a crash before they reached the disk left neither.
    #[test]
    fn compaction_truncates_only_after_the_snapshot_is_synced_under_every_policy() {
        for durability in [
            Durability::Never,
            Durability::Interval {
                interval_ms: 10_000,
            },
            Durability::Always,
        ] {
            let tmp = TempDir::new("snapsync");
            let c = config(tmp.path(), durability);
            run(move || async move {
                let mut store = open_store(&c).await;
                let wal = store.open_log(WAL).await.unwrap();
                for i in 0..200u64 {
                    let mut r = Record {
                        payload: Bytes::from(vec![i as u8; 100]),
                        ..Default::default()
                    };
                    store.append(&wal, &mut r, 1).unwrap();
                }
                // The commands reach their own segments, so truncation can drop them.
                store.checkpoint().await.unwrap();
                let state = broker(3);
                let snap = store.open_log(SNAP).await.unwrap();
                let w = write(&store, &unpaced(), &snap, &body(&state), 200, 1)
                    .await
                    .unwrap();
                compact(&store, &wal, &snap, &w).await.unwrap();
                assert!(wal.first_seq() > 1, "{durability:?}: the log was truncated");
                assert!(
                    store.journal().synced() >= w.lsn,
                    "{durability:?}: truncated before the snapshot was synced"
                );
                store = crash(store, &c).await;
                assert_restored(&load(&store).await, &state, 200);
                store.close().await.unwrap();
            });
        }
    }
}
