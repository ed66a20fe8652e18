//! Exchange metadata: one writer (shard 0), a read-only replica on every shard.
//!
//! Declare, delete, bind and unbind go to shard 0, which applies them to its table, appends
//! the table's durable part to `queue/meta/wal` (one record = the whole durable table, so
//! recovery reads only the last record), and sends the new table to every other shard
//! before it answers. Replies and the table travel in the same per-shard stream, so the
//! shard that asked routes with the new table as soon as it has the answer; other shards get
//! it within one mesh hop.

use crate::queue::broker::exchange::{Exchanges, ExchangesSnapshot};
use crate::queue::protocol::request::Binding;
use boltq_io::{LogRef, Record, Store};
use bytes::Bytes;
use std::collections::BTreeMap;

/// The shard that owns exchange metadata.
pub const META_SHARD: usize = 0;
pub const META_LOG: &str = "queue/meta/wal";

/// A change to the exchange table.
#[derive(Debug, Clone)]
pub enum ExchangeOp {
    Declare {
        name: String,
        kind: String,
        durable: bool,
    },
    Delete {
        name: String,
    },
    Bind(Binding),
    Unbind(Binding),
}

impl ExchangeOp {
    pub fn apply(&self, table: &mut Exchanges) -> Result<(), String> {
        match self {
            ExchangeOp::Declare {
                name,
                kind,
                durable,
            } => table.declare(name, kind, *durable),
            ExchangeOp::Delete { name } => table.delete(name),
            ExchangeOp::Bind(b) => table.bind(
                &b.exchange,
                &b.queue,
                &b.binding_key,
                &b.headers,
                b.match_all,
            ),
            ExchangeOp::Unbind(b) => table.unbind(&b.exchange, &b.queue, &b.binding_key),
        }
    }
}

/// Appends the durable part of `table` as one record; returns the journal position.
pub fn persist(store: &Store, log: &LogRef, table: &Exchanges) -> Result<u64, String> {
    let snapshot = table.snapshot().durable_only();
    let payload = serde_json::to_vec(&snapshot).map_err(|e| format!("encode exchanges: {e}"))?;
    let mut record = Record {
        payload: Bytes::from(payload),
        ..Default::default()
    };
    store
        .append(log, &mut record, boltq_io::store::now_ns())
        .map(|a| a.lsn)
        .map_err(|e| e.to_string())
}

/// The table as of the last record of the meta log (durable exchanges only), and drops the
/// records before it: each record holds the whole table.
pub async fn recover(store: &Store, log: &LogRef) -> Result<Exchanges, String> {
    let last = log.next_seq() - 1;
    if last < log.first_seq() {
        return Ok(Exchanges::new());
    }
    let records = store
        .read(log, last, 1, usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let record = records.first().ok_or("meta log lost its last record")?;
    let snapshot: ExchangesSnapshot = serde_json::from_slice(&record.payload)
        .map_err(|e| format!("meta log record {} does not decode: {e}", record.seq))?;
    store
        .truncate_before(log, last)
        .await
        .map_err(|e| e.to_string())?;
    Exchanges::restore(snapshot)
}

/// Headers map type used by routing.
pub type Headers = BTreeMap<String, String>;
