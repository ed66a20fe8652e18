//! What travels between shards, and what a receiving handler sees.

use crate::ownership::ShardId;

/// One message inside a cross-shard batch. Requests and replies travel in the
/// same per-destination stream as one-way messages, so a reply can never
/// overtake a message sent before it.
#[derive(Debug)]
pub(crate) enum Envelope<M> {
    /// A one-way message for the destination's handler.
    Message(M),
    /// A request; the destination's handler answers with [`crate::Shard::reply`].
    Request { request_id: u64, msg: M },
    /// An answer to a request this shard sent; never shown to the handler.
    Reply { request_id: u64, msg: M },
}

/// Everything bound for one destination during one flush, sent as one channel
/// item: waking another core costs the same for one message as for a batch.
pub(crate) type Batch<M> = Vec<Envelope<M>>;

/// A message as the destination's handler receives it.
#[derive(Debug)]
pub enum Incoming<M> {
    /// A one-way message.
    Message(M),
    /// A request: answer it with [`crate::Shard::reply`] and this token. A token
    /// that is dropped unanswered makes the requester time out.
    Request {
        /// The request payload.
        msg: M,
        /// Where the answer goes.
        token: ReplyToken,
    },
}

/// Says where the answer to one request goes. Not `Clone`: one request gets
/// at most one answer. Plain data, so a handler may keep it while the work
/// that produces the answer completes (for example a durable write).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an unanswered request makes the caller wait for its timeout"]
pub struct ReplyToken {
    pub(crate) origin: ShardId,
    pub(crate) request_id: u64,
}

impl ReplyToken {
    /// The shard that sent the request (and will receive the reply).
    pub fn origin(&self) -> ShardId {
        self.origin
    }
}
