//! What an outbound frame carries, borrowed from wherever the caller holds it.

use crate::messaging::presence::PresenceState;
use boltq_io::record::{Record, RecordView};
use bytes::Bytes;

/// Headers of an outbound record or signal, in whichever form the caller holds them, so
/// the delivery path never copies them into another shape first. Bytes that are not UTF-8
/// are written lossily (U+FFFD), as the `key` is.
#[derive(Debug, Clone, Copy)]
pub enum HeadersOut<'a> {
    /// A header block as `boltq_io::record` stores it (validated by `record::decode`; a
    /// malformed tail would simply end the object).
    Block(&'a [u8]),
    /// An owned record's headers.
    Bytes(&'a [(Bytes, Bytes)]),
    /// Headers held as text.
    Text(&'a [(String, String)]),
}

impl HeadersOut<'_> {
    pub const NONE: HeadersOut<'static> = HeadersOut::Text(&[]);

    pub fn is_empty(&self) -> bool {
        match self {
            Self::Block(b) => b.is_empty(),
            Self::Bytes(p) => p.is_empty(),
            Self::Text(p) => p.is_empty(),
        }
    }

    pub(super) fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        match *self {
            Self::Block(block) => {
                let view = RecordView {
                    seq: 0,
                    timestamp_ns: 0,
                    flags: 0,
                    epoch: 0,
                    key: &[],
                    headers_raw: block,
                    payload: &[],
                };
                view.headers().for_each(|(k, v)| f(k, v));
            }
            Self::Bytes(pairs) => pairs.iter().for_each(|(k, v)| f(k, v)),
            Self::Text(pairs) => pairs
                .iter()
                .for_each(|(k, v)| f(k.as_bytes(), v.as_bytes())),
        }
    }

    /// Upper bound on the bytes these headers take in the output, for reserving.
    pub(super) fn raw_len(&self) -> usize {
        match self {
            Self::Block(b) => b.len(),
            Self::Bytes(p) => p.iter().map(|(k, v)| k.len() + v.len() + 6).sum(),
            Self::Text(p) => p.iter().map(|(k, v)| k.len() + v.len() + 6).sum(),
        }
    }
}

/// One record of a `record` frame (§2.3 Record). `topic` and `partition` come from the
/// frame.
#[derive(Debug, Clone, Copy)]
pub struct RecordOut<'a> {
    pub seq: u64,
    pub timestamp_ns: i64,
    pub key: &'a [u8],
    pub headers: HeadersOut<'a>,
    pub payload: &'a [u8],
}

impl<'a> RecordOut<'a> {
    pub fn from_view(view: &RecordView<'a>) -> Self {
        RecordOut {
            seq: view.seq,
            timestamp_ns: view.timestamp_ns,
            key: view.key,
            headers: HeadersOut::Block(view.headers_raw),
            payload: view.payload,
        }
    }

    pub fn from_record(record: &'a Record) -> Self {
        RecordOut {
            seq: record.seq,
            timestamp_ns: record.timestamp_ns,
            key: &record.key,
            headers: HeadersOut::Bytes(&record.headers),
            payload: &record.payload,
        }
    }
}

/// The `sent` object of a `sent` frame (§2.5.5).
#[derive(Debug, Clone, Copy)]
pub struct SentOut<'a> {
    /// 32 lowercase hex characters.
    pub message_id: &'a str,
    /// This request's value (omitted when empty).
    pub client_msg_id: &'a str,
    pub topic: &'a str,
    pub partition: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
    /// A dedup hit: the original coordinates, nothing written.
    pub duplicate: bool,
}

/// The `published` object of a `published` frame (§18 G28).
#[derive(Debug, Clone, Copy)]
pub struct PublishedOut<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
}

/// The `signal` object of a `signal` frame (§2.3 Signal).
#[derive(Debug, Clone, Copy)]
pub struct SignalOut<'a> {
    /// `typing.<conversation>`.
    pub topic: &'a str,
    pub sender: &'a str,
    /// `typing` / `stop_typing`; omitted when empty.
    pub kind: &'a str,
    pub headers: HeadersOut<'a>,
    pub payload: &'a [u8],
    pub at_ns: i64,
}

/// The `presence` object of a `presence_event` frame (§2.3 Presence).
#[derive(Debug, Clone, Copy)]
pub struct PresenceOut<'a> {
    pub user_id: &'a str,
    /// Omitted when empty.
    pub device_id: &'a str,
    pub state: PresenceState,
    /// Aggregate: any device of the user still bound.
    pub online: bool,
    pub at_ns: i64,
}
