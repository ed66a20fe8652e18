//! Errors of the runtime and of cross-shard messaging.

use std::fmt;

use crate::ownership::ShardId;

/// Why the shards could not start or did not finish cleanly. Every variant
/// that concerns one shard names it, because "a shard failed" is useless at
/// 3 a.m.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// The configuration is out of bounds.
    InvalidConfig(String),
    /// The memlock limit is below what io_uring needs; no shard was started.
    MemlockTooLow {
        /// Current soft RLIMIT_MEMLOCK in bytes.
        limit_bytes: u64,
        /// The minimum glommio accepts.
        required_bytes: u64,
    },
    /// The OS refused to tell which CPUs we may run on.
    NoCpus(String),
    /// A shard's thread or executor could not be created.
    ShardStart {
        /// Failing shard.
        shard: ShardId,
        /// OS or glommio message.
        reason: String,
    },
    /// A shard's cross-shard channels were not all connected in time.
    MeshConnectTimeout {
        /// Failing shard.
        shard: ShardId,
        /// The configured bound.
        timeout_ms: u64,
    },
    /// A shard's code panicked.
    ShardPanicked {
        /// Failing shard.
        shard: ShardId,
        /// The panic payload, when it was a string.
        message: String,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::InvalidConfig(reason) => write!(f, "invalid runtime config: {reason}"),
            RuntimeError::MemlockTooLow {
                limit_bytes,
                required_bytes,
            } => write!(
                f,
                "memlock limit is {limit_bytes} bytes but io_uring needs at least \
                 {required_bytes}; raise it (ulimit -l {} or LimitMEMLOCK= in systemd)",
                required_bytes / 1024
            ),
            RuntimeError::NoCpus(reason) => write!(f, "cannot list usable CPUs: {reason}"),
            RuntimeError::ShardStart { shard, reason } => {
                write!(f, "shard {shard} failed to start: {reason}")
            }
            RuntimeError::MeshConnectTimeout { shard, timeout_ms } => write!(
                f,
                "shard {shard} could not connect its cross-shard channels within {timeout_ms} ms"
            ),
            RuntimeError::ShardPanicked { shard, message } => {
                write!(f, "shard {shard} panicked: {message}")
            }
        }
    }
}

impl std::error::Error for RuntimeError {}

/// Why a cross-shard request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeshError {
    /// The outbox to the destination is at its cap; the request was not sent.
    /// The caller should shed load (answer "busy") or wait with
    /// [`crate::Shard::outbox_ready`].
    OutboxFull {
        /// Destination shard.
        dest: ShardId,
    },
    /// Too many requests from this shard are awaiting replies.
    TooManyRequests,
    /// No reply arrived in time (the destination is slow, gone, or dropped
    /// the [`crate::ReplyToken`]).
    Timeout {
        /// Destination shard.
        dest: ShardId,
        /// The bound that expired.
        timeout_ms: u64,
    },
    /// The reply was not of the type the requesting plane expects (a routing bug in the
    /// server's mesh handler).
    UnexpectedReply,
}

impl fmt::Display for MeshError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeshError::OutboxFull { dest } => write!(f, "outbox to shard {dest} is full"),
            MeshError::TooManyRequests => write!(f, "too many cross-shard requests in flight"),
            MeshError::Timeout { dest, timeout_ms } => {
                write!(f, "shard {dest} did not reply within {timeout_ms} ms")
            }
            MeshError::UnexpectedReply => write!(f, "reply of an unexpected type"),
        }
    }
}

impl std::error::Error for MeshError {}

/// Returned by [`crate::Shard::send`] when the destination's outbox is at its
/// cap; gives the message back so nothing is silently lost.
#[derive(Debug, PartialEq, Eq)]
pub struct OutboxFull<M>(pub M);

impl<M> fmt::Display for OutboxFull<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cross-shard outbox is full")
    }
}

impl<M: fmt::Debug> std::error::Error for OutboxFull<M> {}
