//! One TCP connection of the queue plane.
//!
//! Loop: read whatever arrived, decode every complete frame in it, dispatch each (local
//! commands answer at once; slot commands go to their owner), wait for all their replies in
//! request order (one durable wait covers them all: they share commit rounds), write every
//! reply with one write, the catch-up of durable subscribes with another, then any pushes
//! held meanwhile. Between requests the task also
//! wakes for pushes, so an idle subscriber gets its deliveries, and, while durable pushes
//! wait for the peer's acknowledgement, every `CONFIRM_POLL_MS` to confirm them
//! (`delivery.rs`), and at its deadlines: a frame begun must be completed within
//! `server.read_timeout`, and with an API key set AUTH must come within
//! `server.auth_timeout`; a connection past either is closed (issue 17: a client that
//! declared a 4 MiB frame and sent 10 bytes held its buffer forever).
//!
//! Before the first batch that names a queue is dispatched, the connection may move to the
//! shard that owns that queue (`affinity.rs`): `run` returns the socket and what it read,
//! and the owner serves it from there with `serve_handed_over`.

use super::affinity::{Affinity, HandedOver};
use super::delivery::{Confirmations, Tracked, CATCH_UP_CHUNK_BYTES, CONFIRM_POLL_MS};
use super::dispatch::{self, Carried, ConnState, Pending};
use super::extra::ExtraCommands;
use super::outbound::{Outbound, PUSH_BYTES_MAX};
use super::plane::Plane;
use super::push_acks::PUSHES_AWAITING_ACK_MAX;
use crate::queue::protocol::frame::{self, op, FrameError};
use boltq_io::listener::Conn;
use boltq_shards::ShardId;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Bytes asked of the socket per read. A frame may be larger (up to 4 MiB + 5); the buffer
/// grows to hold it, and never beyond that.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Most frames handled as one batch: bounds the requests one client has in flight.
const BATCH_FRAMES_MAX: usize = 1024;
/// Encoded replies a connection holds before writing them, while later replies of its
/// batch are still awaited. Replies are written as they go once this much is waiting, so a
/// pipelined batch of large replies (1,024 batch CONSUMEs or DLQ reads of up to 4 MiB
/// each) costs at most this plus one reply of encoded bytes, not the whole batch's (the
/// messages themselves are shared with the broker, which holds them anyway). Below it,
/// a batch's replies still leave in one write.
pub const REPLY_BUFFER_BYTES_MAX: usize = 256 * 1024;
/// How long a durable subscribe's catch-up waits after the replies it follows. Long enough
/// for a client that reads the `subscribed` reply and then attaches its handler (v1's Node
/// SDK) to have done so; it delays only subscribes that have something to catch up on, and
/// keeps order (nothing else is written to the connection meanwhile).
pub const CATCH_UP_AFTER_REPLY_MS: u64 = 20;

enum Wake {
    Read(std::io::Result<usize>),
    /// Complete frames are already buffered.
    Buffered,
    Pushes,
    /// Time to ask the socket what the peer has acknowledged, or a deadline of
    /// `ConnectionLimits` may have passed: the loop's top does both checks.
    Timer,
    Stop,
}

/// What one connection may hold and how long it may take over what it owes
/// (`server.read_timeout`, `server.auth_timeout`, `queue.subscriptions_per_connection_max`).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// From the first byte of a frame to its last.
    pub frame: Duration,
    /// From connecting to a successful AUTH, when the server requires one.
    pub auth: Duration,
    /// Distinct (topic, subscriber id) pairs one connection may subscribe.
    pub subscriptions_max: usize,
    /// `queue.connection_affinity`: a connection may move to the shard owning the queues
    /// it uses (`affinity.rs`).
    pub affinity: bool,
}

impl ConnectionLimits {
    /// The earliest deadline the connection is under now, and what it is for.
    fn next(
        &self,
        connected: Instant,
        awaits_auth: bool,
        frame_started: Option<Instant>,
    ) -> Option<(Instant, &'static str)> {
        let auth = awaits_auth.then(|| (connected + self.auth, "authenticate"));
        let frame = frame_started.map(|at| (at + self.frame, "complete a frame"));
        match (auth, frame) {
            (Some(a), Some(f)) => Some(if a.0 <= f.0 { a } else { f }),
            (a, f) => a.or(f),
        }
    }
}

/// When the loop must wake without input: the next confirmation poll while durable pushes
/// wait for the peer, or the connection's next deadline, whichever comes first.
fn next_timer(
    confirms: &Confirmations,
    deadline: Option<(Instant, &'static str)>,
) -> Option<Instant> {
    let poll = confirms
        .waiting()
        .then(|| Instant::now() + Duration::from_millis(CONFIRM_POLL_MS));
    let deadline = deadline.map(|(at, _)| at);
    match (poll, deadline) {
        (Some(p), Some(d)) => Some(p.min(d)),
        (p, d) => p.or(d),
    }
}

/// Serves `conn` until the client closes, breaks the protocol, or `stop` resolves. `extra`
/// serves the other planes' commands, when the server registered any (see `extra.rs`).
/// The connection may move to another shard before its first slot command
/// (`affinity.rs`); this task then waits, holding the connection's place under the
/// server's connection cap, until that shard reports it ended.
pub async fn serve(
    conn: Conn,
    plane: Rc<Plane>,
    extra: Option<ExtraCommands>,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let may_move = limits.affinity && !conn.is_tls() && plane.shard.count() > 1;
    let start = Start {
        connected: Instant::now(),
        unread: Vec::with_capacity(READ_CHUNK_BYTES),
        carried: None,
        affinity: Affinity::new(may_move),
    };
    let mut stop = std::pin::pin!(stop);
    // Boxed, so that a connection handed over leaves only this small future waiting here,
    // not the space its serving took.
    let Ended::HandedOver { dest, moved } =
        Box::pin(run(conn, start, &plane, extra, limits, stop.as_mut())).await
    else {
        return;
    };
    futures_lite::future::or(plane.hand_over(dest, moved), stop).await;
}

/// Serves a connection another shard accepted and handed over before it used any slot.
pub async fn serve_handed_over(
    moved: Box<HandedOver>,
    plane: Rc<Plane>,
    extra: Option<ExtraCommands>,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let HandedOver {
        socket,
        unread,
        carried,
        connected,
        origin,
    } = *moved;
    let start = Start {
        connected,
        unread,
        carried: Some(carried),
        // Once only: a connection is never bounced on.
        affinity: Affinity::new(false),
    };
    let conn = Conn::from_handed_over(socket);
    let mut stop = std::pin::pin!(stop);
    let ended = run(conn, start, &plane, extra, limits, stop.as_mut()).await;
    debug_assert!(matches!(ended, Ended::Closed));
    plane.handed_over_ended(origin);
}

/// How a connection's serving begins.
struct Start {
    connected: Instant,
    /// Bytes already read from the socket and not yet handled.
    unread: Vec<u8>,
    /// The connection's settings, when it moved here from another shard.
    carried: Option<Carried>,
    affinity: Affinity,
}

enum Ended {
    Closed,
    /// The connection is to be served by shard `dest` from now on.
    HandedOver {
        dest: ShardId,
        moved: HandedOver,
    },
}

async fn run(
    mut conn: Conn,
    start: Start,
    plane: &Rc<Plane>,
    extra: Option<ExtraCommands>,
    limits: ConnectionLimits,
    mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Ended {
    let Start {
        connected,
        unread: mut inbuf,
        carried,
        mut affinity,
    } = start;
    // When the first byte of the frame now partly in `inbuf` arrived.
    let mut frame_started: Option<Instant> = (!inbuf.is_empty()).then(Instant::now);
    let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let out = Rc::new(Outbound::for_peer(peer));
    // A connection handed over from another shard connected earlier than now.
    let connected_ms = out.since_ms.get();
    out.since_ms
        .set(connected_ms.saturating_sub(connected.elapsed().as_millis() as u64));
    let me = plane.register_conn(Rc::clone(&out));
    let mut state = ConnState::new(me, Rc::clone(&out), plane.requires_auth());
    if let Some(carried) = carried {
        state.carry_on(carried);
    }
    state.set_extra(extra);
    state.set_subscriptions_max(limits.subscriptions_max);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut outbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut tracked: Vec<Tracked> = Vec::new();
    'serve: loop {
        if out.overrun() {
            log::info!("closing a durable subscriber holding {PUSH_BYTES_MAX} bytes of unread pushes; it gets them again when it subscribes again");
            break;
        }
        if state.confirms.acks.over_limit() {
            log::info!("closing a subscriber holding more than {PUSHES_AWAITING_ACK_MAX} pushes it has not acknowledged; it gets them again when it subscribes again");
            break;
        }
        state.confirms.confirm(&conn, plane, me);
        let ticket = out.push_event.ticket();
        if out.has_pushes() {
            outbuf.clear();
            out.take_pushes(&mut outbuf, &mut tracked);
            if conn.write_all(&outbuf).await.is_err() {
                break;
            }
            state
                .confirms
                .written(&mut conn, std::mem::take(&mut tracked))
                .await;
            continue;
        }
        // Frames left over from the last batch (a batch stops at BATCH_FRAMES_MAX or at an
        // exchange barrier) are handled before waiting for more bytes.
        let have_frame = matches!(frame::decode(&inbuf), Ok(Some(_)) | Err(_));
        let deadline = limits.next(connected, state.awaits_auth(), frame_started);
        if let Some((at, owed)) = deadline {
            if !have_frame && at <= Instant::now() {
                log::debug!("closing a connection that did not {owed} in time");
                break;
            }
        }
        let wake = if have_frame {
            Wake::Buffered
        } else {
            futures_lite::future::or(
                async { Wake::Read(conn.read(&mut chunk).await) },
                futures_lite::future::or(
                    async {
                        out.push_event.wait(ticket).await;
                        Wake::Pushes
                    },
                    futures_lite::future::or(
                        async {
                            stop.as_mut().await;
                            Wake::Stop
                        },
                        async {
                            match next_timer(&state.confirms, deadline) {
                                Some(at) => {
                                    boltq_shards::sleep(
                                        at.saturating_duration_since(Instant::now()),
                                    )
                                    .await
                                }
                                None => futures_lite::future::pending::<()>().await,
                            }
                            Wake::Timer
                        },
                    ),
                ),
            )
            .await
        };
        match wake {
            Wake::Stop | Wake::Read(Ok(0)) => break,
            Wake::Read(Err(e)) => {
                log::debug!("closing a connection whose read failed: {e}");
                break;
            }
            Wake::Pushes | Wake::Timer => continue,
            Wake::Read(Ok(n)) => {
                let now = Instant::now();
                out.note_read(now);
                if inbuf.is_empty() {
                    frame_started = Some(now);
                }
                inbuf.extend_from_slice(&chunk[..n]);
            }
            Wake::Buffered => {}
        }
        if let Some(dest) = affinity.destination(plane, &inbuf) {
            match conn.hand_over() {
                Ok(socket) => {
                    let moved = HandedOver {
                        socket,
                        unread: inbuf,
                        carried: state.carried(),
                        connected,
                        origin: (plane.shard.id(), me.conn),
                    };
                    return Ended::HandedOver { dest, moved };
                }
                Err(back) => conn = back,
            }
        }
        // Decode and dispatch every complete frame; replies are awaited in order below.
        let mut pending: Vec<Pending> = Vec::new();
        let mut used_total = 0usize;
        let mut close_after = false;
        let mut exchange_change_in_batch = false;
        while pending.len() < BATCH_FRAMES_MAX {
            match frame::decode(&inbuf[used_total..]) {
                Ok(None) => break,
                Ok(Some((f, used))) => {
                    if f.code == op::PUBLISH_EXCHANGE && exchange_change_in_batch {
                        // Exchange changes are applied by shard 0; routing happens here, at
                        // dispatch. End the batch so the change is answered (and this
                        // shard's table updated) before this publish is routed.
                        break;
                    }
                    exchange_change_in_batch |=
                        (op::EXCHANGE_DECLARE..=op::UNBIND_QUEUE).contains(&f.code);
                    used_total += used;
                    let p = dispatch::dispatch(plane, &mut state, f);
                    let closes = p.closes_connection();
                    pending.push(p);
                    if closes {
                        close_after = true;
                        break;
                    }
                }
                Err(FrameError::TooLarge { payload_len }) => {
                    // v1: an oversize frame closes the connection without a reply.
                    log::debug!("closing a connection that sent a {payload_len}-byte frame");
                    close_after = true;
                    break;
                }
            }
        }
        inbuf.drain(..used_total);
        if inbuf.is_empty() {
            frame_started = None;
        } else if used_total > 0 {
            // What is left begins the next frame.
            frame_started = Some(Instant::now());
        }
        outbuf.clear();
        for p in pending {
            p.resolve(plane, &mut state, &mut outbuf).await;
            if outbuf.len() >= REPLY_BUFFER_BYTES_MAX {
                if conn.write_all(&outbuf).await.is_err() {
                    break 'serve;
                }
                outbuf.clear();
            }
        }
        if !outbuf.is_empty() && conn.write_all(&outbuf).await.is_err() {
            break 'serve;
        }
        if !state.catch_up.is_empty() {
            // Written a moment after the replies, not with them: v1's Node SDK attaches a
            // subscription's handler only once it has read the `subscribed` reply, and
            // pushes it reads together with that reply reach no handler.
            boltq_shards::sleep(Duration::from_millis(CATCH_UP_AFTER_REPLY_MS)).await;
            let (mut frames, mut tracked) = (Vec::new(), Vec::new());
            while let Some(front) = state.catch_up.front_mut() {
                frames.clear();
                front.encode_chunk(CATCH_UP_CHUNK_BYTES, &mut frames, &mut tracked);
                if front.is_done() {
                    state.catch_up.pop_front();
                }
                if conn.write_all(&frames).await.is_err() {
                    break 'serve;
                }
                state
                    .confirms
                    .written(&mut conn, std::mem::take(&mut tracked))
                    .await;
            }
        }
        if close_after {
            break;
        }
    }
    let _ = conn.flush().await;
    // A client that closed cleanly may have acknowledged pushes since the last look.
    state.confirms.confirm(&conn, plane, me);
    plane.unregister_conn(me);
    Ended::Closed
}
