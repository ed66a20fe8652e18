//! One gateway connection: the request loop, the single writer, liveness and token expiry.
//!
//! Requests are handled one at a time in arrival order (a send's `sent` is answered before
//! the next request is read), and reading stops while the outbound queue is full, so a
//! pipelining client is slowed, never dropped, by the server's own replies.

use super::frame::{self, ErrorCode};
use super::outbound::{Out, Outbound, WRITE_BATCH_BYTES_MAX};
use super::progress::{Metered, SendProgress};
use super::session::SubKey;
use super::GatewayCtx;
use crate::messaging::identity::principal::Principal;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use async_tungstenite::tungstenite::{Error as WsError, Message};
use async_tungstenite::WebSocketStream;
use boltq_io::listener::Conn;
use boltq_shards::Task;
use futures_lite::StreamExt;
use futures_util::SinkExt;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Bytes asked of the socket per read. It is also the buffer an idle connection keeps
/// posted to the kernel, so it is small: chat frames are small, and a large frame only
/// costs more reads.
pub const READ_CHUNK_BYTES: usize = 1024;
/// How long queued frames may take to leave at close.
pub const CLOSE_DRAIN_MS: u64 = 2_000;
/// How long a `hello` may take after the upgrade.
pub const HELLO_TIMEOUT_MS: u64 = 10_000;

/// The socket as the WebSocket layer sees it: writes report the bytes the kernel accepted,
/// which is how a slow consumer is told from a slow but reading one.
type Socket = Metered<Conn>;

pub struct Connection {
    pub id: u64,
    pub gw: Rc<GatewayCtx>,
    pub principal: RefCell<Principal>,
    pub out: Rc<Outbound>,
    /// Session id once `hello` succeeded.
    pub session: RefCell<Option<String>>,
    pub device: RefCell<String>,
    pub subs: RefCell<HashMap<super::session::SubKey, Task<()>>>,
    /// (user, device) once presence is bound (not for the anonymous principal).
    pub presence: RefCell<Option<(String, String)>>,
    /// Typing topics this connection listens to (implicit on its first `typing` there).
    pub typing: RefCell<BTreeSet<String>>,
    last_inbound: Cell<Instant>,
}

impl Connection {
    pub fn send_frame(&self, text: String) {
        self.gw.stats.borrow_mut().frames_out += 1;
        self.out.push(Message::Text(text.into()), None);
    }

    pub fn send_error(&self, id: &str, code: ErrorCode, message: &str) {
        let retryable = matches!(code, ErrorCode::Internal);
        self.send_frame(super::text(|o| {
            frame::error(o, id, code, message, retryable)
        }));
    }

    pub fn user(&self) -> String {
        self.principal.borrow().user_id.clone()
    }
}

fn ws_config(read_limit: usize) -> WebSocketConfig {
    // Small buffers: an idle connection must cost little (design.md §7). The write buffer
    // holds one batch of frames until its flush (see `write_loop`); written out, it keeps
    // the capacity of the largest batch the connection had.
    WebSocketConfig::default()
        .read_buffer_size(READ_CHUNK_BYTES)
        .write_buffer_size(WRITE_BATCH_BYTES_MAX)
        .max_message_size(Some(read_limit))
        .max_frame_size(Some(read_limit))
}

type Receiver = async_tungstenite::WebSocketReceiver<Socket>;
type Sender = async_tungstenite::WebSocketSender<Socket>;

/// Opens the WebSocket on an upgraded `conn` and starts its writer; returns the connection's
/// life (the request loop and the close) for the caller to spawn as a task of its own.
///
/// Trade-off: two steps rather than one task from the upgrade on. A task is sized for its
/// largest moment and keeps its arguments for its whole life, so a single task would carry
/// the socket, the principal and the handshake's state (about 1.5 KB) through days of idle
/// connection; the task that runs [`run`] holds three handles.
pub async fn open(
    conn: Conn,
    leftover: Vec<u8>,
    principal: Principal,
    gw: Rc<GatewayCtx>,
) -> impl std::future::Future<Output = ()> {
    let progress = Rc::new(SendProgress::default());
    let ws = WebSocketStream::from_partially_read(
        Metered::new(conn, Rc::clone(&progress)),
        leftover,
        Role::Server,
        Some(ws_config(gw.settings.read_limit_bytes)),
    )
    .await;
    let (sender, receiver) = ws.split();
    let id = gw.next_conn_id();
    let out = Rc::new(Outbound::new(
        gw.settings.send_buffer_frames,
        gw.settings.send_buffer_bytes,
    ));
    let c = Rc::new(Connection {
        id,
        gw: Rc::clone(&gw),
        principal: RefCell::new(principal),
        out: Rc::clone(&out),
        session: RefCell::new(None),
        device: RefCell::new(String::new()),
        subs: RefCell::new(HashMap::new()),
        presence: RefCell::new(None),
        typing: RefCell::new(BTreeSet::new()),
        last_inbound: Cell::new(Instant::now()),
    });
    gw.conns.borrow_mut().insert(id, Rc::clone(&out));
    gw.stats.borrow_mut().connections += 1;
    let writer = boltq_shards::spawn(write_loop(sender, Rc::clone(&c), progress));
    run(c, receiver, writer)
}

/// Serves the connection's requests until it ends, then closes it.
async fn run(c: Rc<Connection>, mut receiver: Receiver, writer: Task<Sender>) {
    read_loop(&mut receiver, &c).await;
    // Boxed: a connection closes once; its idle task should not carry the close's space.
    Box::pin(close(c, receiver, writer)).await;
}

/// Leaves presence and subscriptions, lets the writer drain and send the close frame, and
/// shuts the socket.
async fn close(c: Rc<Connection>, receiver: Receiver, writer: Task<Sender>) {
    let out = Rc::clone(&c.out);
    teardown(&c).await;
    // The writer drains what is queued (≤ CLOSE_DRAIN_MS) and sends the close frame.
    if !out.is_closing() {
        out.close(1000, "", true);
    }
    let sender = boltq_shards::timeout(Duration::from_millis(CLOSE_DRAIN_MS + 500), writer).await;
    if let Some(sender) = sender {
        if let Ok(ws) = WebSocketStream::reunite(sender, receiver) {
            // A peer that stopped reading still has our last write posted to the kernel;
            // shut the socket so it is released now, not when that write completes.
            ws.get_ref().get_ref().abort().await;
        }
    }
    c.gw.conns.borrow_mut().remove(&c.id);
}

/// Reads requests until the connection ends, and keeps its clocks: a ping (and presence
/// heartbeat) every [`ping_interval`], the close of a client silent past its deadline, and
/// the close at token expiry whether or not the client sends anything (spec/messaging-edge.md
/// §19 decision 2). The clocks live here rather than in tasks of their own: an idle
/// connection then costs one task for reading and one for writing.
async fn read_loop(receiver: &mut Receiver, c: &Rc<Connection>) {
    let pong_timeout = c.gw.settings.pong_timeout;
    let ping_every = ping_interval(c);
    let mut next_ping = Instant::now() + ping_every;
    let expires_at = token_expiry(c);
    loop {
        // Backpressure: do not take new requests while replies cannot leave. No deadline
        // here: the writer closes a client whose socket stops taking bytes.
        if !c.out.has_room() && !c.out.wait_room().await {
            return;
        }
        let now = Instant::now();
        if expires_at.is_some_and(|at| now >= at) {
            expire(c);
            return;
        }
        if now >= next_ping {
            if c.out.is_closing() {
                return;
            }
            c.out.push(Message::Ping(Vec::new().into()), None);
            super::ops::heartbeat(c);
            next_ping = now + ping_every;
        }
        let deadline = if c.session.borrow().is_none() {
            Duration::from_millis(HELLO_TIMEOUT_MS)
        } else {
            pong_timeout
        };
        let silent_until = c.last_inbound.get().checked_add(deadline);
        let wake_at = [silent_until, Some(next_ping), expires_at]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(next_ping);
        let wait = wake_at.saturating_duration_since(now);
        let next = boltq_shards::timeout(wait, receiver.next());
        let done = async {
            loop {
                let t = c.out.done.ticket();
                if c.out.finished() || c.out.closing().is_some() {
                    return None;
                }
                c.out.done.wait(t).await;
            }
        };
        let item = match futures_lite::future::or(next, done).await {
            None if c.out.finished() || c.out.closing().is_some() => return,
            // A clock is due: the top of the loop acts on a ping or the expiry.
            None if silent_until.is_none_or(|at| Instant::now() < at) => continue,
            None => {
                c.out.close(4010, "liveness timeout", false);
                return;
            }
            Some(None) => return, // the client went away
            Some(Some(item)) => item,
        };
        c.last_inbound.set(Instant::now());
        // Borrowed, not copied: the decoder copies out what the request keeps.
        let bytes: &[u8] = match &item {
            Ok(Message::Text(t)) => t.as_bytes(),
            Ok(Message::Binary(b)) => b,
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
            Ok(Message::Close(_)) => return,
            Err(WsError::Capacity(_)) => {
                c.out.close(1009, "message too large", false);
                return;
            }
            Err(WsError::Utf8(_)) => {
                c.out.close(1007, "invalid UTF-8", false);
                return;
            }
            Err(_) => return,
        };
        c.gw.stats.borrow_mut().frames_in += 1;
        let decoded = frame::decode_request(bytes);
        // The frame's buffer is not kept while the request runs.
        drop(item);
        let request = match decoded {
            Ok(r) => r,
            Err(e) => {
                c.send_error(&e.id, ErrorCode::BadRequest, &e.message);
                continue;
            }
        };
        if c.session.borrow().is_none() {
            // Boxed: a request's future (membership HTTP calls, appends) is large, and an idle
            // connection should not carry its space while it waits for the next frame.
            if !Box::pin(super::ops::hello_first(c, request)).await {
                return;
            }
            continue;
        }
        Box::pin(super::ops::handle(c, request)).await;
        if c.out.is_closing() {
            return;
        }
    }
}

/// Closes a client whose socket accepted no bytes for `slow_consumer_timeout` while data
/// waited; its session stays resumable from what it did receive. Queued frames are
/// dropped: they could not leave anyway, and the writer then tries the close frame.
pub fn slow_consumer(c: &Connection) {
    if c.out.is_closing() {
        return;
    }
    c.gw.stats.borrow_mut().slow_client_drops += 1;
    c.out.close(
        frame::close::SLOW_CONSUMER,
        frame::close::SLOW_CONSUMER_REASON,
        false,
    );
}

/// Writes queued frames until the connection closes; returns the sending half so the
/// socket can be shut down.
///
/// Each wake-up takes what is queued as one batch: the frames are encoded into the
/// WebSocket layer's write buffer without flushing, and the flush writes them in one go.
/// The batch and its marks live in vectors kept across wake-ups while frames keep coming,
/// so a steady stream of batches allocates nothing here; they are dropped when the
/// connection goes idle.
///
/// A batch has no overall deadline: a device that reads slowly but steadily keeps its
/// connection however long the batch takes. What ends it is the socket accepting no byte
/// for `slow_consumer_timeout` while the batch waits (issue 17): the client is then a
/// slow consumer, closed with 1008 if the close frame can still get out within
/// `CLOSE_DRAIN_MS`, else dropped without one.
async fn write_loop(mut sender: Sender, c: Rc<Connection>, progress: Rc<SendProgress>) -> Sender {
    let stall_after = c.gw.settings.slow_consumer_timeout;
    let out = Rc::clone(&c.out);
    let mut batch: Vec<Out> = Vec::new();
    let mut marks: Vec<(SubKey, u64)> = Vec::new();
    loop {
        let t = out.has_work.ticket();
        if out.pop_batch(&mut batch, WRITE_BATCH_BYTES_MAX) > 0 {
            c.gw.stats.borrow_mut().writes_out += 1;
            // The batch waits from now: the time the writer sat idle before it is not the
            // device's fault.
            progress.restart();
            // Boxed: the write and its stall clock exist only while a batch is written, so
            // an idle connection's task does not carry their size.
            let written = Box::pin(write_unless_stalled(
                &mut sender,
                &mut batch,
                &mut marks,
                &progress,
                stall_after,
            ))
            .await;
            batch.clear();
            match written {
                Some(Ok(())) => {
                    advance_positions(&c, &mut marks);
                    continue;
                }
                Some(Err(_)) => break,
                None => {
                    // Part of the batch may be unsent: positions stay where the last
                    // complete batch left them, so a resume re-sends rather than skips.
                    marks.clear();
                    if out.is_closing() {
                        // Stuck while draining for another close: give up on the socket.
                        break;
                    }
                    slow_consumer(&c);
                    // The closing branch below tries the close frame. It goes after what
                    // the WebSocket layer still buffers of this batch, so it only leaves
                    // if the device reads again within CLOSE_DRAIN_MS.
                    continue;
                }
            }
        }
        if let Some((code, reason)) = out.closing() {
            // Boxed for the same reason: a connection closes once.
            Box::pin(send_close(&mut sender, code, reason)).await;
            break;
        }
        // Going idle: an idle connection keeps no batch buffers (memory per connection is
        // budgeted); a busy one reuses them from wake-up to wake-up.
        batch = Vec::new();
        marks = Vec::new();
        out.release_idle_buffer();
        out.has_work.wait(t).await;
    }
    out.finish();
    sender
}

/// Writes the batch, or gives up once the socket has accepted no byte for `stall_after`
/// (`None`). The write is polled first, so a write that completes as the deadline passes
/// counts as progress.
async fn write_unless_stalled(
    sender: &mut Sender,
    batch: &mut Vec<Out>,
    marks: &mut Vec<(SubKey, u64)>,
    progress: &SendProgress,
    stall_after: Duration,
) -> Option<Result<(), WsError>> {
    let write = write_batch(sender, batch, marks);
    futures_lite::future::or(async { Some(write.await) }, async {
        progress.stalled(stall_after).await;
        None
    })
    .await
}

/// Sends the close frame, giving it `CLOSE_DRAIN_MS` to leave.
async fn send_close(sender: &mut Sender, code: u16, reason: String) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    let _ = boltq_shards::timeout(
        Duration::from_millis(CLOSE_DRAIN_MS),
        sender.close(Some(frame)),
    )
    .await;
}

/// Feeds the batch's frames to the socket's write buffer in order and flushes once,
/// collecting the subscription marks the batch carries into `marks`. The batch is at most
/// `WRITE_BATCH_BYTES_MAX` (or one frame); the caller watches the socket's progress.
async fn write_batch(
    sender: &mut Sender,
    batch: &mut Vec<Out>,
    marks: &mut Vec<(SubKey, u64)>,
) -> Result<(), WsError> {
    for item in batch.drain(..) {
        marks.extend(item.mark);
        sender.feed(item.msg).await?;
    }
    sender.flush().await
}

/// A batch reached the socket: its subscriptions continue after what it carried, so a
/// resume starts there (positions advance only for what was written).
fn advance_positions(c: &Connection, marks: &mut Vec<(SubKey, u64)>) {
    let session = c.session.borrow();
    let Some(sid) = session.as_ref() else {
        marks.clear();
        return;
    };
    let mut sessions = c.gw.sessions.borrow_mut();
    for (key, next) in marks.drain(..) {
        sessions.advance(sid, c.id, &key, next);
    }
}

/// Pings every third of the pong timeout through the writer; the read loop enforces the
/// deadline (any inbound frame re-arms it). Each ping also refreshes the presence
/// heartbeat, so the tick is at most a third of `presence.ttl` too: a live socket's
/// session never expires between two heartbeats.
/// How often a connection is pinged and its presence refreshed: well inside both the
/// client's pong deadline and the presence TTL.
fn ping_interval(c: &Connection) -> Duration {
    let ttl = c.gw.ephemeral.settings.borrow().presence_ttl;
    (c.gw.settings.pong_timeout / 3)
        .min(ttl / 3)
        .max(Duration::from_millis(100))
}

/// When the connection's token expires (plus leeway), if it does.
fn token_expiry(c: &Connection) -> Option<Instant> {
    let exp_s = c.principal.borrow().expires_at_s?;
    let at_s = exp_s.saturating_add(c.gw.settings.leeway_s);
    let left_s = at_s.saturating_sub(super::now_s()).max(0) as u64;
    Some(Instant::now() + Duration::from_secs(left_s))
}

/// Tells the client its token expired and closes the connection.
fn expire(c: &Connection) {
    c.send_error(
        "",
        ErrorCode::Unauthenticated,
        "token expired, reconnect with a fresh token",
    );
    c.out.close(1008, "token expired", true);
}

async fn teardown(c: &Rc<Connection>) {
    super::ops::leave_ephemeral(c);
    let subs: Vec<_> = c.subs.borrow_mut().drain().collect();
    for (key, task) in subs {
        drop(task);
        super::subscription::release(&c.gw, &key);
    }
    if let Some(sid) = c.session.borrow().as_ref() {
        c.gw.sessions
            .borrow_mut()
            .detach(sid, c.id, boltq_io::store::now_ns());
    }
}
