//! Snapshots of a slot's broker, so its command log can be compacted.
//!
//! A snapshot is written to the slot's `snap` log as chunk records (each at most
//! `CHUNK_BYTES`): key = the snapshot's number, headers `part`, `parts` and `wal_seq` (the
//! last command the snapshot includes). It is taken synchronously between two commands, so
//! it is exactly the state after `wal_seq`. Once every chunk is durable, the command log
//! below `wal_seq + 1` and older snapshots may go; both are removed a whole segment at a
//! time, so a crash at any step leaves either the previous complete snapshot with every
//! command after it, or the new one.
//!
//! Recovery reads the snap log, restores the newest snapshot whose chunks are all present,
//! and replays the command log from `wal_seq + 1`.

use crate::queue::broker::{Broker, BrokerConfig, BrokerSnapshot};
use boltq_io::{LogRef, Record, Store};
use bytes::Bytes;
use std::collections::BTreeMap;

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

/// Serialises a snapshot (off the shard's event loop: see `plane::maybe_snapshot`).
pub fn encode(snapshot: &BrokerSnapshot) -> Result<Vec<u8>, String> {
    serde_json::to_vec(snapshot).map_err(|e| format!("encode snapshot: {e}"))
}

/// Appends a serialised snapshot as chunk records, each once the journal has room for it
/// in the background share (`Store::wait_for_background_room`), so the clients' commands
/// interleave with the chunks instead of being refused behind them. `wal_seq` is the last
/// command the snapshot includes (it was taken between two commands, so it is exactly that
/// state); the command log keeps everything after it until the snapshot is durable.
pub async fn write(
    store: &Store,
    snap: &LogRef,
    body: &[u8],
    wal_seq: u64,
    number: u64,
) -> Result<Written, String> {
    assert!(!body.is_empty(), "a serialised snapshot is at least `{{}}`");
    let parts = body.len().div_ceil(CHUNK_BYTES);
    let first_chunk_seq = snap.next_seq();
    let mut lsn = 0;
    for (i, chunk) in body.chunks(CHUNK_BYTES).enumerate() {
        let mut record = Record {
            key: Bytes::from(number.to_string()),
            headers: vec![
                (Bytes::from_static(b"part"), Bytes::from(i.to_string())),
                (Bytes::from_static(b"parts"), Bytes::from(parts.to_string())),
                (
                    Bytes::from_static(b"wal_seq"),
                    Bytes::from(wal_seq.to_string()),
                ),
            ],
            payload: Bytes::copy_from_slice(chunk),
            ..Default::default()
        };
        store
            .wait_for_background_room(chunk.len() as u64)
            .await
            .map_err(|e| e.to_string())?;
        lsn = store
            .append(snap, &mut record, boltq_io::store::now_ns())
            .map_err(|e| e.to_string())?
            .lsn;
    }
    Ok(Written {
        lsn,
        first_chunk_seq,
        wal_seq,
        bytes: body.len() as u64,
    })
}

/// The newest complete snapshot in the snap log: the restored broker, the last command it
/// includes, its number and size. `None` when there is none.
pub async fn load_newest(
    store: &Store,
    snap: &LogRef,
    cfg: &BrokerConfig,
) -> Result<Option<(Broker, u64, u64, u64)>, String> {
    let records = store
        .read(snap, 0, usize::MAX, usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    // number → (parts, wal_seq, chunks by part)
    let mut found: BTreeMap<u64, (usize, u64, BTreeMap<usize, Bytes>)> = BTreeMap::new();
    for r in records {
        let number: u64 = parse(&r.key)?;
        let header = |name: &[u8]| -> Result<u64, String> {
            let (_, v) = r
                .headers
                .iter()
                .find(|(k, _)| k.as_ref() == name)
                .ok_or_else(|| format!("snapshot chunk {} lacks a header", r.seq))?;
            parse(v)
        };
        let (part, parts, wal_seq) = (header(b"part")?, header(b"parts")?, header(b"wal_seq")?);
        let entry = found
            .entry(number)
            .or_insert_with(|| (parts as usize, wal_seq, BTreeMap::new()));
        entry.2.insert(part as usize, r.payload);
    }
    let newest = found.into_iter().rev().find(|(_, (parts, _, chunks))| {
        chunks.len() == *parts && (0..*parts).all(|p| chunks.contains_key(&p))
    });
    let Some((number, (_, wal_seq, chunks))) = newest else {
        return Ok(None);
    };
    let mut body = Vec::new();
    for chunk in chunks.values() {
        body.extend_from_slice(chunk);
    }
    let snapshot: BrokerSnapshot = serde_json::from_slice(&body)
        .map_err(|e| format!("snapshot {number} does not decode: {e}"))?;
    let broker = Broker::try_restore(snapshot, cfg.clone())?;
    Ok(Some((broker, wal_seq, number, body.len() as u64)))
}

fn parse(bytes: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "snapshot chunk has a malformed number".to_string())
}
