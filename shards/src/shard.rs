//! `Shard`: the handle a shard's code uses to reach the runtime.

use std::future::Future;
use std::io;
use std::rc::Rc;

use crate::clock::Clock;
use crate::config::RuntimeConfig;
use crate::envelope::{Incoming, ReplyToken};
use crate::error::{MeshError, OutboxFull};
use crate::links::ConnectedLinks;
use crate::mesh::Mesh;
use crate::metrics::Registry;
use crate::ownership::ShardId;
use crate::shutdown::{ShutdownHandle, ShutdownLocal};
use crate::ticker::Ticker;

struct Inner<M: Send + 'static> {
    id: ShardId,
    mesh: Rc<Mesh<M>>,
    ticker: Rc<Ticker>,
    metrics: Rc<Registry>,
    shutdown: Rc<ShutdownLocal>,
    shutdown_handle: ShutdownHandle,
}

/// One shard's runtime services: identity, cross-shard messaging, the ticker,
/// metrics and shutdown. Cheap to clone (an `Rc`); not `Send`, because
/// everything behind it belongs to this shard's thread.
///
/// `M` is the server's cross-shard message type.
pub struct Shard<M: Send + 'static> {
    inner: Rc<Inner<M>>,
}

impl<M: Send + 'static> Clone for Shard<M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<M: Send + 'static> Shard<M> {
    /// Wires up a shard inside its executor and spawns its background tasks
    /// (flushers, receivers, ticker driver, shutdown watcher).
    pub(crate) fn start(
        id: ShardId,
        config: &RuntimeConfig,
        links: ConnectedLinks<M>,
        clock: Clock,
        shutdown_handle: ShutdownHandle,
    ) -> io::Result<Self> {
        let metrics = Rc::new(Registry::new(config.metrics_series_max));
        let mesh = Mesh::start(
            id,
            links,
            config.outbox_messages_max,
            config.requests_max,
            &metrics,
        );
        let ticker = Ticker::new(config.tick_ms, clock);
        glommio::spawn_local(ticker.clone().drive()).detach();
        let shutdown = ShutdownLocal::start(&shutdown_handle)?;
        Ok(Self {
            inner: Rc::new(Inner {
                id,
                mesh,
                ticker,
                metrics,
                shutdown,
                shutdown_handle,
            }),
        })
    }

    /// This shard's index, `0..count()`. Assigned by the runtime, not taken
    /// from glommio (whose executor ids are process-wide counters).
    pub fn id(&self) -> ShardId {
        self.inner.id
    }

    /// Number of shards in this runtime.
    pub fn count(&self) -> usize {
        self.inner.mesh.shard_count()
    }

    /// Installs the function that receives every message and request sent
    /// to this shard (replacing any previous one). Nothing is delivered to
    /// this shard before the first call; until then peers' batches wait in
    /// the bounded channels.
    pub fn set_handler(&self, handler: impl Fn(ShardId, Incoming<M>) + 'static) {
        self.inner.mesh.set_handler(Rc::new(handler));
    }

    /// Queues a one-way message for shard `dest` (which may be this shard).
    /// Never blocks: everything queued for `dest` before the flusher runs
    /// goes as one batch. Messages from one shard to another arrive in the
    /// order they were sent. At the outbox cap the message is given back;
    /// shed load or wait with [`Shard::outbox_ready`].
    ///
    /// Panics if `dest >= count()`: a routing bug, not a runtime condition.
    pub fn send(&self, dest: ShardId, msg: M) -> Result<(), OutboxFull<M>> {
        self.inner.mesh.send(dest, msg)
    }

    /// As [`Shard::send`], but past the outbox cap instead of giving the message
    /// back, in order with every other send to `dest`. Only for messages that
    /// may be neither dropped nor reordered and whose number the sender bounds
    /// itself (the cap is what bounds everything else).
    pub fn send_uncapped(&self, dest: ShardId, msg: M) {
        self.inner.mesh.send_uncapped(dest, msg)
    }

    /// Sends a request to `dest` and waits at most `timeout_ms` for the
    /// reply. The request is queued by this call, in order with `send`s
    /// around it, not when the future is first polled. Prefer one-way
    /// messages where possible (platform.md §2: a cross-core round trip costs
    /// ~85 µs), and never hold a `RefCell` borrow across the `.await`.
    ///
    /// Panics if `dest >= count()`.
    pub fn request(
        &self,
        dest: ShardId,
        msg: M,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<M, MeshError>> + 'static {
        self.inner.mesh.request(dest, msg, timeout_ms)
    }

    /// Answers a request received by the handler. The reply travels in the
    /// batched stream back to the requesting shard. Replies are exempt from
    /// the outbox cap: they are bounded by the requesters' `requests_max`,
    /// and refusing one would only turn into a timeout elsewhere.
    pub fn reply(&self, token: ReplyToken, msg: M) {
        self.inner.mesh.reply(token, msg)
    }

    /// Resolves when the outbox to `dest` has room for at least one message.
    pub async fn outbox_ready(&self, dest: ShardId) {
        self.inner.mesh.outbox_ready(dest).await
    }

    /// Messages queued for `dest` and not yet flushed.
    pub fn outbox_len(&self, dest: ShardId) -> usize {
        self.inner.mesh.queued(dest)
    }

    /// Resolves once every outbox is empty and every taken batch has been
    /// handed to its channel (or delivered, for this shard). Used when
    /// draining at shutdown. Batches to this shard wait for a handler.
    pub async fn flush(&self) {
        self.inner.mesh.flush().await
    }

    /// Requests from this shard still waiting for a reply.
    pub fn pending_requests(&self) -> usize {
        self.inner.mesh.pending_requests()
    }

    /// This shard's ticker: arm deadlines on it instead of running timers.
    pub fn ticker(&self) -> &Rc<Ticker> {
        &self.inner.ticker
    }

    /// Milliseconds on the runtime's monotonic clock (same epoch on every
    /// shard). Pass this into sans-IO state machines as "now".
    pub fn now_ms(&self) -> u64 {
        self.inner.ticker.now_ms()
    }

    /// This shard's metrics registry.
    pub fn metrics(&self) -> &Rc<Registry> {
        &self.inner.metrics
    }

    /// Resolves once shutdown is requested (signal or
    /// [`ShutdownHandle::trigger`]); may be awaited by any number of tasks.
    pub fn shutdown_requested(&self) -> impl Future<Output = ()> + 'static {
        let shutdown = self.inner.shutdown.clone();
        async move { shutdown.wait().await }
    }

    /// True once shutdown was requested and this shard has noticed.
    pub fn is_shutdown_requested(&self) -> bool {
        self.inner.shutdown.is_requested()
    }

    /// The process-wide shutdown handle, so a shard can stop the runtime.
    pub fn shutdown_handle(&self) -> &ShutdownHandle {
        &self.inner.shutdown_handle
    }

    /// Breaks the handler ↔ shard reference cycle when the shard stops.
    pub(crate) fn stop(&self) {
        self.inner.mesh.clear_handler();
    }
}
