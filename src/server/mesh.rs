//! The one cross-shard message type, and the handler that hands each message to its plane.
//!
//! Only the server names `ShardMsg`: each plane holds a typed `Port` of its shard (built
//! here from the conversions below) and receives its own message type from [`MeshRouter`].

use crate::cache::service::{CacheAnswer, CacheOp, CacheService};
use crate::messaging::engine::mesh::{StreamMsg, StreamReply};
use crate::messaging::engine::Engine;
use crate::messaging::gateway::{GatewayCtx, GatewayMsg};
use crate::queue::server::mesh::{QueueMsg, QueueReply};
use crate::queue::server::plane::Plane;
use boltq_shards::{Incoming, ReplyToken, ShardId};
use std::rc::Rc;

/// Messages between shards, one variant family per plane.
///
/// The large variant (a queue command) is also the common one, so it stays unboxed:
/// boxing would add a heap allocation per cross-shard command, and batches already carry
/// these by value in one `Vec`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ShardMsg {
    Queue(QueueMsg),
    QueueReply(QueueReply),
    Cache(CacheOp),
    CacheAnswer(CacheAnswer),
    Stream(StreamMsg),
    StreamReply(StreamReply),
    Gateway(GatewayMsg),
}

/// `From` and `TryFrom` between one variant of [`ShardMsg`] and its plane's type: what
/// `Shard::port` needs to build that plane's port.
macro_rules! plane_variant {
    ($variant:ident, $plane_type:ty) => {
        impl From<$plane_type> for ShardMsg {
            fn from(msg: $plane_type) -> ShardMsg {
                ShardMsg::$variant(msg)
            }
        }

        impl TryFrom<ShardMsg> for $plane_type {
            type Error = ShardMsg;

            fn try_from(msg: ShardMsg) -> Result<Self, ShardMsg> {
                match msg {
                    ShardMsg::$variant(m) => Ok(m),
                    other => Err(other),
                }
            }
        }
    };
}

plane_variant!(Queue, QueueMsg);
plane_variant!(QueueReply, QueueReply);
plane_variant!(Cache, CacheOp);
plane_variant!(CacheAnswer, CacheAnswer);
plane_variant!(Stream, StreamMsg);
plane_variant!(StreamReply, StreamReply);
plane_variant!(Gateway, GatewayMsg);

/// The planes running on one shard, as the mesh handler reaches them.
pub struct MeshRouter {
    pub queue: Rc<Plane>,
    pub cache: Option<Rc<CacheService>>,
    pub engine: Option<Rc<Engine>>,
    pub gateway: Option<Rc<GatewayCtx>>,
}

impl MeshRouter {
    /// Unwraps `incoming` into its plane's message type and hands it to that plane.
    pub fn route(&self, from: ShardId, incoming: Incoming<ShardMsg>) {
        let (msg, token) = match incoming {
            Incoming::Message(msg) => (msg, None),
            Incoming::Request { msg, token } => (msg, Some(token)),
        };
        match msg {
            ShardMsg::Queue(m) => self.queue.on_mesh(rewrap(m, token)),
            ShardMsg::Cache(op) => match &self.cache {
                Some(cache) => cache.on_mesh(rewrap(op, token)),
                None => unexpected(token),
            },
            ShardMsg::Stream(m) => match &self.engine {
                Some(e) => e.on_mesh(from, rewrap(m, token)),
                None => log::warn!("messaging message while the plane is off"),
            },
            ShardMsg::Gateway(m) => match &self.gateway {
                Some(g) => g.on_mesh(rewrap(m, token)),
                None => log::warn!("gateway message while the gateway is off"),
            },
            // Replies travel back to their requester inside the runtime; one reaching a
            // handler is a routing bug.
            ShardMsg::QueueReply(_) | ShardMsg::CacheAnswer(_) | ShardMsg::StreamReply(_) => {
                unexpected(token)
            }
        }
    }
}

/// The plane's view of an incoming message: a request keeps its reply token.
fn rewrap<T>(msg: T, token: Option<ReplyToken>) -> Incoming<T> {
    match token {
        Some(token) => Incoming::Request { msg, token },
        None => Incoming::Message(msg),
    }
}

/// Logs a message no plane on this shard takes; a request's token is dropped, so its
/// sender times out.
fn unexpected(token: Option<ReplyToken>) {
    match token {
        Some(token) => {
            log::error!("mesh: unexpected request from shard {}", token.origin());
            drop(token);
        }
        None => log::error!("mesh: unexpected message"),
    }
}
