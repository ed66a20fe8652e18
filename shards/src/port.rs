//! `Port`: one plane's typed view of a [`Shard`].
//!
//! The server owns the cross-shard message type (an enum with one variant per plane). A
//! plane must not name it — layers point one way, and the plane should build and test
//! without the others — so it holds a `Port<Req, Rep>`: it sends `Req`s, answers with
//! `Rep`s, and receives `Incoming<Req>` from the server's mesh handler, which unwraps the
//! server's enum and calls the plane. The server builds the port with [`Shard::port`] from
//! `From`/`TryFrom` conversions between its enum and the plane's types.
//!
//! The trade-off: one dynamic call per send (the port erases the server's type), bought
//! for planes without a type parameter. Sends are batched per loop iteration anyway.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use crate::envelope::ReplyToken;
use crate::error::{MeshError, OutboxFull};
use crate::metrics::Registry;
use crate::ownership::ShardId;
use crate::shard::Shard;
use crate::shutdown::ShutdownHandle;
use crate::ticker::Ticker;

/// The answer to a [`Port::request`], boxed so planes can store it.
pub type PortReply<Rep> = Pin<Box<dyn Future<Output = Result<Rep, MeshError>>>>;

/// What a port needs from the shard, with the server's message type erased.
trait Erased<Req, Rep> {
    fn send(&self, dest: ShardId, msg: Req) -> Result<(), OutboxFull<Req>>;
    fn send_uncapped(&self, dest: ShardId, msg: Req);
    fn request(&self, dest: ShardId, msg: Req, timeout_ms: u64) -> PortReply<Rep>;
    fn reply(&self, token: ReplyToken, msg: Rep);
    fn outbox_ready(&self, dest: ShardId) -> Pin<Box<dyn Future<Output = ()>>>;
    fn shutdown_requested(&self) -> Pin<Box<dyn Future<Output = ()>>>;
}

struct Typed<M: Send + 'static>(Shard<M>);

impl<M, Req, Rep> Erased<Req, Rep> for Typed<M>
where
    M: Send + 'static + From<Req> + From<Rep>,
    Req: TryFrom<M, Error = M> + 'static,
    Rep: TryFrom<M, Error = M> + 'static,
{
    fn send(&self, dest: ShardId, msg: Req) -> Result<(), OutboxFull<Req>> {
        self.0.send(dest, M::from(msg)).map_err(|OutboxFull(m)| {
            // The message given back is the one just wrapped: unwrapping cannot fail.
            OutboxFull(Req::try_from(m).unwrap_or_else(|_| unreachable!("own message")))
        })
    }

    fn send_uncapped(&self, dest: ShardId, msg: Req) {
        self.0.send_uncapped(dest, M::from(msg))
    }

    fn request(&self, dest: ShardId, msg: Req, timeout_ms: u64) -> PortReply<Rep> {
        let reply = self.0.request(dest, M::from(msg), timeout_ms);
        Box::pin(async move {
            let answer = reply.await?;
            Rep::try_from(answer).map_err(|_| MeshError::UnexpectedReply)
        })
    }

    fn reply(&self, token: ReplyToken, msg: Rep) {
        self.0.reply(token, M::from(msg))
    }

    fn outbox_ready(&self, dest: ShardId) -> Pin<Box<dyn Future<Output = ()>>> {
        let shard = self.0.clone();
        Box::pin(async move { shard.outbox_ready(dest).await })
    }

    fn shutdown_requested(&self) -> Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(self.0.shutdown_requested())
    }
}

/// A plane's typed handle on its shard: identity, sends and requests of `Req`, replies of
/// `Rep`, and the shard's ticker, metrics and shutdown. Cheap to clone.
pub struct Port<Req: 'static, Rep: 'static> {
    id: ShardId,
    count: usize,
    ticker: Rc<Ticker>,
    metrics: Rc<Registry>,
    shutdown_handle: ShutdownHandle,
    mesh: Rc<dyn Erased<Req, Rep>>,
}

impl<Req, Rep> Clone for Port<Req, Rep> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            count: self.count,
            ticker: self.ticker.clone(),
            metrics: self.metrics.clone(),
            shutdown_handle: self.shutdown_handle.clone(),
            mesh: self.mesh.clone(),
        }
    }
}

impl<M: Send + 'static> Shard<M> {
    /// A typed port for one plane: `Req` and `Rep` are that plane's message and reply
    /// types, each a variant of the server's `M`.
    pub fn port<Req, Rep>(&self) -> Port<Req, Rep>
    where
        M: From<Req> + From<Rep>,
        Req: TryFrom<M, Error = M> + 'static,
        Rep: TryFrom<M, Error = M> + 'static,
    {
        Port {
            id: self.id(),
            count: self.count(),
            ticker: self.ticker().clone(),
            metrics: self.metrics().clone(),
            shutdown_handle: self.shutdown_handle().clone(),
            mesh: Rc::new(Typed(self.clone())),
        }
    }
}

impl<Req: 'static, Rep: 'static> Port<Req, Rep> {
    /// This shard's index, `0..count()`.
    pub fn id(&self) -> ShardId {
        self.id
    }

    /// Number of shards in this runtime.
    pub fn count(&self) -> usize {
        self.count
    }

    /// [`Shard::send`] for this plane's messages.
    pub fn send(&self, dest: ShardId, msg: Req) -> Result<(), OutboxFull<Req>> {
        assert!(dest < self.count, "shard {dest} out of range");
        self.mesh.send(dest, msg)
    }

    /// [`Shard::send_uncapped`] for this plane's messages.
    pub fn send_uncapped(&self, dest: ShardId, msg: Req) {
        assert!(dest < self.count, "shard {dest} out of range");
        self.mesh.send_uncapped(dest, msg)
    }

    /// [`Shard::request`] for this plane's messages; a reply of another plane's type is
    /// [`MeshError::UnexpectedReply`].
    pub fn request(&self, dest: ShardId, msg: Req, timeout_ms: u64) -> PortReply<Rep> {
        assert!(dest < self.count, "shard {dest} out of range");
        self.mesh.request(dest, msg, timeout_ms)
    }

    /// [`Shard::reply`] with this plane's reply type.
    pub fn reply(&self, token: ReplyToken, msg: Rep) {
        self.mesh.reply(token, msg)
    }

    /// Resolves when the outbox to `dest` has room for at least one message.
    pub async fn outbox_ready(&self, dest: ShardId) {
        self.mesh.outbox_ready(dest).await
    }

    /// This shard's ticker.
    pub fn ticker(&self) -> &Rc<Ticker> {
        &self.ticker
    }

    /// Milliseconds on the runtime's monotonic clock.
    pub fn now_ms(&self) -> u64 {
        self.ticker.now_ms()
    }

    /// This shard's metrics registry.
    pub fn metrics(&self) -> &Rc<Registry> {
        &self.metrics
    }

    /// Resolves once shutdown is requested.
    pub fn shutdown_requested(&self) -> impl Future<Output = ()> + 'static {
        self.mesh.shutdown_requested()
    }

    /// The process-wide shutdown handle.
    pub fn shutdown_handle(&self) -> &ShutdownHandle {
        &self.shutdown_handle
    }
}
