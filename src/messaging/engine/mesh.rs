//! Messages of the stream engine between shards.
//!
//! Requests go to the owner of a partition (`owner_of_partition`) or, for topic creation,
//! to shard 0; one-way messages carry fan-out (inbox pointers) and tail notifications. All of
//! them travel in the shards' batched outboxes, so a burst of appends to a partition watched
//! from another shard costs one channel wake-up per loop iteration, not one per record.

use crate::messaging::cursor::CursorKey;
use crate::messaging::dedup::Coordinates;
use boltq_io::record::Record;

/// What a device or backend asks to append to one partition.
#[derive(Debug)]
pub struct AppendReq {
    pub topic: String,
    pub partition: u32,
    pub key: bytes::Bytes,
    /// Sorted by name; client headers already stripped of reserved names.
    pub headers: Vec<(bytes::Bytes, bytes::Bytes)>,
    pub payload: bytes::Bytes,
    /// Who asked: for topic-creation quotas and the dedup scope.
    pub user: String,
    /// `(conversation, client_msg_id)` when the send is idempotent.
    pub dedup: Option<(String, String)>,
    /// Inbox pointers to write after the conversation record (fan-out on write): sorted,
    /// distinct, valid ids; empty for fan-out on read and for plain publishes. Each pointer
    /// repeats the record's `fanout::POINTER_COPIED_HEADERS`.
    pub pointer_members: Vec<String>,
}

/// Where an append landed.
#[derive(Debug, Clone)]
pub struct AppendOk {
    pub coords: Coordinates,
    pub duplicate: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// The same idempotent send is still being appended: retry shortly.
    InFlight,
    /// A limit was hit (topic creation quota, dedup table full, storage backlog).
    Limited(String),
    /// Bad input the gateway could not catch (e.g. a record too large for storage).
    Invalid(String),
    /// Storage failed; the text is for the server log, not for clients.
    Internal(String),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::InFlight => write!(f, "duplicate send in flight, retry shortly"),
            StreamError::Limited(m) | StreamError::Invalid(m) | StreamError::Internal(m) => {
                write!(f, "{m}")
            }
        }
    }
}

/// A page of a partition, with its bounds at the time of the read.
#[derive(Debug)]
pub struct ReadOk {
    pub records: Vec<Record>,
    pub first_seq: u64,
    /// One past the last record that is durable (and therefore visible).
    pub next_seq: u64,
    /// `from` was below `first_seq`: retention removed it; `records` start at `first_seq`.
    pub gap: bool,
}

#[derive(Debug)]
pub enum StreamMsg {
    /// To the partition owner; answered with `StreamReply::Appended`.
    Append(Box<AppendReq>),
    /// To the partition owner; answered with `StreamReply::Read`. With `watch`, the owner
    /// also starts sending `Tail` notifications for this partition to the requesting shard.
    Read {
        topic: String,
        partition: u32,
        from: u64,
        records_max: usize,
        bytes_max: usize,
        watch: bool,
    },
    /// To the partition owner, one-way: the requesting shard has no subscriber left.
    Unwatch { topic: String, partition: u32 },
    /// Owner → watching shard, one-way: records that became durable.
    Tail {
        topic: String,
        partition: u32,
        records: Vec<Record>,
        first_seq: u64,
    },
    /// To the inbox partition owner: inbox pointers to append; answered with
    /// `StreamReply::Pointed` once they are written or given up.
    Pointers {
        topic: String,
        partition: u32,
        user: String,
        pointers: Vec<Vec<(bytes::Bytes, bytes::Bytes)>>,
    },
    /// To the cursor's partition owner; answered with `StreamReply::Committed`.
    Commit { key: CursorKey, seq: u64 },
    /// To the cursor's partition owner; answered with `StreamReply::Cursor`.
    CursorGet { key: CursorKey },
    /// To shard 0; answered with `StreamReply::Registered`.
    Register {
        topic: String,
        partitions: u32,
        user: String,
    },
    /// Shard 0 → every other shard, one-way: a topic now exists.
    Created { topic: String, partitions: u32 },
    /// To every shard; answered with `StreamReply::Stats`.
    Stats,
    /// To every shard; answered with `StreamReply::Partitions`: the bounds of the partitions
    /// of these `(topic, partition count)` that the shard owns (admin `/streams`).
    Partitions { topics: Vec<(String, u32)> },
    /// To the partition owner; answered with `StreamReply::Cursors` (admin
    /// `/streams/cursors`).
    Cursors {
        topic: String,
        partition: u32,
        group: String,
    },
}

/// One partition's bounds as its owner sees them (admin `/streams`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    pub topic: String,
    pub partition: u32,
    pub first_seq: u64,
    /// One past the newest durable record.
    pub next_seq: u64,
    /// Bytes of the partition's log on disk.
    pub bytes: u64,
}

/// One cursor group of one partition, with the partition's bounds when it exists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupCursors {
    /// `(member, position)`, sorted by member.
    pub members: Vec<(String, u64)>,
    /// `(first_seq, next_seq)`; `None` when the topic or partition does not exist.
    pub bounds: Option<(u64, u64)>,
}

#[derive(Debug)]
pub enum StreamReply {
    Appended(Result<AppendOk, StreamError>),
    Read(Result<ReadOk, StreamError>),
    Committed(Result<(), StreamError>),
    Cursor(Option<u64>),
    Registered(Result<u32, StreamError>),
    Stats(Box<super::stats::EngineStats>),
    Partitions(Vec<PartitionStats>),
    Cursors(Box<GroupCursors>),
    /// The pointers asked for are written, or given up (counted as failures there).
    Pointed,
}
