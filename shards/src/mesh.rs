//! Cross-shard messaging on one shard: sending through the outboxes,
//! flushing batches into the channels, receiving and dispatching batches,
//! and matching replies to requests.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::rc::Rc;
use std::time::Duration;

use futures_lite::future;
use glommio::channels::shared_channel::{ConnectedReceiver, ConnectedSender};
use glommio::timer::Timer;

use crate::envelope::{Batch, Envelope, Incoming, ReplyToken};
use crate::error::{MeshError, OutboxFull};
use crate::links::ConnectedLinks;
use crate::metrics::{Counter, Histogram, Registry};
use crate::notify::{wait_until, WaitList};
use crate::outbox::Outboxes;
use crate::ownership::ShardId;
use crate::pending::PendingReplies;

/// Receives every message and request sent to this shard, with the sender's
/// shard id. Synchronous on purpose: it runs inside the delivery loop, so it
/// should apply the message to local state or spawn a task, never block.
pub type Handler<M> = Rc<dyn Fn(ShardId, Incoming<M>)>;

/// Per-destination traffic counters.
struct DestStats {
    messages_sent: Counter,
    batches_sent: Counter,
    messages_dropped: Counter,
}

struct Stats {
    per_dest: Vec<DestStats>,
    batch_messages: Histogram,
    late_replies: Counter,
}

impl Stats {
    fn new(shard_count: usize, metrics: &Registry) -> Self {
        let per_dest = (0..shard_count)
            .map(|dest| {
                let dest = dest.to_string();
                let labels = [("dest", dest.as_str())];
                DestStats {
                    messages_sent: metrics.counter("boltq_mesh_messages_sent_total", &labels),
                    batches_sent: metrics.counter("boltq_mesh_batches_sent_total", &labels),
                    messages_dropped: metrics.counter("boltq_mesh_messages_dropped_total", &labels),
                }
            })
            .collect();
        Self {
            per_dest,
            batch_messages: metrics.histogram("boltq_mesh_batch_messages", &[]),
            late_replies: metrics.counter("boltq_mesh_late_replies_total", &[]),
        }
    }
}

/// One shard's side of the mesh.
pub(crate) struct Mesh<M: Send + 'static> {
    shard: ShardId,
    shard_count: usize,
    outboxes: Outboxes<M>,
    pending: PendingReplies<M>,
    handler: RefCell<Option<Handler<M>>>,
    handler_installed: WaitList,
    stats: Stats,
}

impl<M: Send + 'static> Mesh<M> {
    /// Sets up this shard's mesh and spawns its tasks: one flusher per
    /// destination (so one full channel never holds up the others) and one
    /// receiver per peer (so each sender's batches are handled in order).
    pub(crate) fn start(
        shard: ShardId,
        links: ConnectedLinks<M>,
        outbox_messages_max: usize,
        requests_max: usize,
        metrics: &Registry,
    ) -> Rc<Self> {
        let shard_count = links.senders.len();
        assert!(shard < shard_count && links.receivers.len() == shard_count);
        let mesh = Rc::new(Self {
            shard,
            shard_count,
            outboxes: Outboxes::new(shard_count, outbox_messages_max),
            pending: PendingReplies::new(requests_max),
            handler: RefCell::new(None),
            handler_installed: WaitList::default(),
            stats: Stats::new(shard_count, metrics),
        });
        for (dest, sender) in links.senders.into_iter().enumerate() {
            match sender {
                Some(sender) => {
                    glommio::spawn_local(flush_remote(mesh.clone(), dest, sender)).detach();
                }
                None => {
                    assert_eq!(dest, shard);
                    glommio::spawn_local(flush_local(mesh.clone())).detach();
                }
            }
        }
        for (from, receiver) in links.receivers.into_iter().enumerate() {
            if let Some(receiver) = receiver {
                glommio::spawn_local(receive(mesh.clone(), from, receiver)).detach();
            }
        }
        mesh
    }

    pub(crate) fn shard_count(&self) -> usize {
        self.shard_count
    }

    pub(crate) fn set_handler(&self, handler: Handler<M>) {
        *self.handler.borrow_mut() = Some(handler);
        self.handler_installed.wake_all();
    }

    /// Drops the handler, which usually holds a `Shard` and so forms a
    /// reference cycle with this mesh; called when the shard stops.
    pub(crate) fn clear_handler(&self) {
        let handler = self.handler.borrow_mut().take();
        drop(handler);
    }

    fn has_handler(&self) -> bool {
        self.handler.borrow().is_some()
    }

    pub(crate) fn send(&self, dest: ShardId, msg: M) -> Result<(), OutboxFull<M>> {
        self.check_dest(dest);
        self.outboxes
            .push(dest, Envelope::Message(msg))
            .map_err(|envelope| match envelope {
                Envelope::Message(msg) => OutboxFull(msg),
                _ => unreachable!("push returns what it was given"),
            })
    }

    pub(crate) fn send_uncapped(&self, dest: ShardId, msg: M) {
        self.check_dest(dest);
        self.outboxes.push_uncapped(dest, Envelope::Message(msg));
    }

    pub(crate) fn reply(&self, token: ReplyToken, msg: M) {
        self.check_dest(token.origin);
        let envelope = Envelope::Reply {
            request_id: token.request_id,
            msg,
        };
        self.outboxes.push_uncapped(token.origin, envelope);
    }

    /// Queues the request now (so it is ordered with sends made before and
    /// after this call) and returns the wait for its reply.
    pub(crate) fn request(
        self: &Rc<Self>,
        dest: ShardId,
        msg: M,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<M, MeshError>> + 'static {
        self.check_dest(dest);
        let queued = self.begin_request(dest, msg);
        let mesh = self.clone();
        async move {
            let request_id = queued?;
            let _forget = ForgetOnDrop {
                mesh: &mesh,
                request_id,
            };
            let reply = async { Ok(poll_fn(|cx| mesh.pending.poll_reply(request_id, cx)).await) };
            let timeout = async {
                Timer::new(Duration::from_millis(timeout_ms)).await;
                Err(MeshError::Timeout { dest, timeout_ms })
            };
            future::or(reply, timeout).await
        }
    }

    fn begin_request(&self, dest: ShardId, msg: M) -> Result<u64, MeshError> {
        if !self.outboxes.has_room(dest) {
            return Err(MeshError::OutboxFull { dest });
        }
        let request_id = self.pending.begin().ok_or(MeshError::TooManyRequests)?;
        let pushed = self
            .outboxes
            .push(dest, Envelope::Request { request_id, msg });
        assert!(pushed.is_ok(), "room was checked above");
        Ok(request_id)
    }

    pub(crate) async fn outbox_ready(&self, dest: ShardId) {
        self.check_dest(dest);
        self.outboxes.ready(dest).await;
    }

    pub(crate) async fn flush(&self) {
        self.outboxes.flush().await;
    }

    pub(crate) fn pending_requests(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn queued(&self, dest: ShardId) -> usize {
        self.check_dest(dest);
        self.outboxes.queued(dest)
    }

    fn check_dest(&self, dest: ShardId) {
        assert!(
            dest < self.shard_count,
            "shard {dest} does not exist (shard_count = {})",
            self.shard_count
        );
    }

    fn record_sent(&self, dest: ShardId, messages: usize) {
        let stats = &self.stats.per_dest[dest];
        stats.batches_sent.inc();
        stats.messages_sent.add(messages as u64);
        self.stats.batch_messages.record(messages as u64);
    }

    /// Dispatches one batch in order: replies complete local requests,
    /// everything else goes to the handler. The handler is cloned out of its
    /// cell first, so it may send, reply, or even replace itself.
    fn deliver(&self, from: ShardId, batch: Batch<M>) {
        let handler = self.handler.borrow().clone();
        let Some(handler) = handler else {
            // Only after `clear_handler`, when the shard is stopping.
            log::debug!(
                "shard {}: batch from {from} dropped while stopping",
                self.shard
            );
            return;
        };
        for envelope in batch {
            match envelope {
                Envelope::Message(msg) => handler(from, Incoming::Message(msg)),
                Envelope::Request { request_id, msg } => {
                    let token = ReplyToken {
                        origin: from,
                        request_id,
                    };
                    handler(from, Incoming::Request { msg, token });
                }
                Envelope::Reply { request_id, msg } => {
                    if !self.pending.complete(request_id, msg) {
                        self.stats.late_replies.inc();
                    }
                }
            }
        }
    }
}

struct ForgetOnDrop<'a, M: Send + 'static> {
    mesh: &'a Mesh<M>,
    request_id: u64,
}

impl<M: Send + 'static> Drop for ForgetOnDrop<'_, M> {
    fn drop(&mut self) {
        self.mesh.pending.forget(self.request_id);
    }
}

/// Moves batches for one remote destination into its channel. Awaiting a
/// full channel is the backpressure: the outbox fills meanwhile, up to its cap.
async fn flush_remote<M: Send + 'static>(
    mesh: Rc<Mesh<M>>,
    dest: ShardId,
    sender: ConnectedSender<Batch<M>>,
) {
    loop {
        let batch = mesh.outboxes.next_batch(dest).await;
        let messages = batch.len();
        match sender.send(batch).await {
            Ok(()) => mesh.record_sent(dest, messages),
            Err(e) => {
                // The destination stopped (shutdown or crash); its owner's
                // state is gone with it, so there is nobody left to deliver to.
                log::debug!(
                    "shard {} -> {dest}: {messages} messages dropped: {e}",
                    mesh.shard
                );
                mesh.stats.per_dest[dest]
                    .messages_dropped
                    .add(messages as u64);
            }
        }
        mesh.outboxes.batch_done(dest);
    }
}

/// Delivers batches a shard sent to itself, without a channel, once a
/// handler exists.
async fn flush_local<M: Send + 'static>(mesh: Rc<Mesh<M>>) {
    let shard = mesh.shard;
    loop {
        let batch = mesh.outboxes.next_batch(shard).await;
        wait_until(&mesh.handler_installed, || mesh.has_handler()).await;
        mesh.record_sent(shard, batch.len());
        mesh.deliver(shard, batch);
        mesh.outboxes.batch_done(shard);
        glommio::yield_if_needed().await;
    }
}

/// Delivers one peer's batches in arrival order. Reads nothing until a
/// handler is installed, so early batches wait in the (bounded) channel.
async fn receive<M: Send + 'static>(
    mesh: Rc<Mesh<M>>,
    from: ShardId,
    receiver: ConnectedReceiver<Batch<M>>,
) {
    wait_until(&mesh.handler_installed, || mesh.has_handler()).await;
    while let Some(batch) = receiver.recv().await {
        mesh.deliver(from, batch);
        // A big batch is handled in one go; give other tasks a turn after it.
        glommio::yield_if_needed().await;
    }
    log::debug!("shard {}: channel from shard {from} closed", mesh.shard);
}
