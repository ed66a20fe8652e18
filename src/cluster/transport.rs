//! The links between nodes (design §9): each node keeps one outbound TCP connection to
//! each peer and writes its replication batches (`wire.rs`) there; it accepts the peers'
//! connections on `cluster.raft_addr` and hands every batch it reads to its host.
//!
//! ```text
//! stream = hello frame*
//! hello  = magic "BQRAFT3\n" | from:u64 | to:u64       (the dialling node, the dialled one)
//!          | settings_len:u16 | settings               (the dialling node's shared
//!                                                        settings, shared_settings.rs)
//! frame  = len:u32 | kind:u8 | body                    (len counts kind and body,
//!                                                        ≤ wire::BATCH_BYTES_MAX + 1)
//! kind   = 1 raft batch (wire.rs) | 2 forwarded command | 3 its reply (forward.rs)
//!        | 4 the sender's member directory (directory.rs)
//!        | 5 presence and typing (`messaging::gateway::relay`; handed on undecoded, so
//!          a frame the gateway cannot read never closes the link)
//!        | 6 snapshot part | 7 snapshot end
//! part   = transfer:u64 | part:u32 | parts:u32 | bytes   (≤ SNAPSHOT_PART_BYTES)
//! end    = transfer:u64 | raft batch of one MsgSnapshot whose snapshot data is empty
//! ```
//!
//! **Snapshots travel in parts.** A slot's snapshot is its whole state, which may be far
//! larger than a frame (a queue of a million messages is a gigabyte): one larger than
//! `SNAPSHOT_PART_BYTES` is written as consecutive part frames, streamed from the
//! snapshot's own buffer (they are not held in the link's queue, whose bound they would
//! exceed), then an end frame with the raft message itself. The receiver joins the parts
//! of one connection in order and hands on the message with its data restored: raft sees
//! one snapshot message either way. Parts out of order, of another transfer, past
//! `SNAPSHOT_BYTES_MAX`, or an end without all its parts close the connection.
//!
//! Raft tolerates lost messages and retries on its own, so the links never block the
//! host: a batch for a peer that is down, or whose queue is full, is dropped and counted.
//! While a peer is unreachable the link waits between attempts (doubling from
//! `BACKOFF_MS_MIN` to `BACKOFF_MS_MAX`), idle, and drops what was queued for it: stale
//! heartbeats and appends are worth nothing once the peer is back. A snapshot message
//! is reported delivered or lost (`take_snapshot_reports`), since the leader sends that
//! follower nothing more until told.
//!
//! Both ends of a link have the kernel close it once the other side has not answered for
//! `LINK_UNRESPONSIVE_MS_MAX` (unacknowledged data, or unanswered keepalive probes while
//! idle): across a partition a connection would otherwise stay open, retransmitting ever
//! more rarely (towards two minutes apart), so a healed network would not carry the
//! link's traffic until the next retransmission — 8.6 s after a 47 s cut, measured — and
//! each cut would leave a dead inbound connection counted against
//! `INBOUND_CONNECTIONS_MAX`. Closed, the link reconnects within `BACKOFF_MS_MAX` of the
//! heal.
//!
//! With `server.tls` the links speak TLS: the dialling node checks that the peer's
//! certificate chains to the configured CA and names the peer's raft IP address, and
//! presents its own (the listener asks for it when it has a CA file: mTLS). The hello and
//! every frame travel inside the session.
//!
//! Inbound: a connection must say hello within `HELLO_TIMEOUT_MS` and name this node as
//! `to`; every message of a batch must come from the node the hello named (a peer speaks
//! for itself only). Anything else closes the connection with a log line. A peer whose
//! shared settings differ from this node's is refused the same way, with a warning that
//! names each setting (`admission.rs`). Not built: heartbeat coalescing per node pair.

use super::admission::Admission;
use super::directory::Directory;
use super::forward;
use super::shared_settings::{SharedSettings, SETTINGS_BYTES_MAX};
use super::wire::{self, SlotMessage};
use boltq_io::connect::connect_tcp;
use boltq_io::event::Event;
use boltq_io::listener::{Conn, Listener};
use boltq_shards::metrics::Counter;
use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use raft::prelude::MessageType;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub const HELLO_MAGIC: &[u8; 8] = b"BQRAFT3\n";
const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_REPLY: u8 = 3;
const KIND_DIRECTORY: u8 = 4;
const KIND_RELAY: u8 = 5;
const KIND_SNAPSHOT_PART: u8 = 6;
const KIND_SNAPSHOT_END: u8 = 7;

/// Snapshot data up to this size travels inside its raft batch; larger, in parts of this
/// size (well under a frame's limit, so a part never waits behind a frame's worth of
/// writes to be accepted).
pub const SNAPSHOT_PART_BYTES: usize = 4 * 1024 * 1024;
/// Largest snapshot a receiver joins: the most a group's raft log stores
/// (`image_log::SNAPSHOT_PARTS_MAX` parts of `image_log::SNAPSHOT_PART_BYTES`).
pub const SNAPSHOT_BYTES_MAX: u64 =
    super::image_log::SNAPSHOT_PARTS_MAX as u64 * super::image_log::SNAPSHOT_PART_BYTES as u64;
const SNAPSHOT_PART_HEADER_BYTES: usize = 8 + 4 + 4;

/// What a peer sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Raft(Vec<SlotMessage>),
    Forward(forward::Request),
    Reply(forward::Reply),
    Directory(Directory),
    /// A presence or typing frame for the gateway (`messaging::gateway::relay`).
    Relay(Bytes),
}
/// The hello's fixed part; the settings follow.
const HELLO_BYTES: usize = 8 + 8 + 8 + 2;
pub const HELLO_TIMEOUT_MS: u64 = 5_000;
pub const CONNECT_TIMEOUT_MS: u64 = 1_000;
pub const BACKOFF_MS_MIN: u64 = 50;
pub const BACKOFF_MS_MAX: u64 = 2_000;
/// How long a peer may leave written data unacknowledged, or keepalive probes unanswered,
/// before its link is closed and dialled again. Far above a round trip between hosts of
/// one site; a peer whose process stalls still has its kernel acknowledge.
pub const LINK_UNRESPONSIVE_MS_MAX: u64 = 3_000;
/// Bytes queued for one peer before new batches are dropped.
pub const LINK_QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Counters of one outbound link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub batches_sent: u64,
    pub batches_dropped: u64,
    pub connects: u64,
    pub connect_failures: u64,
}

/// Series in the node's metrics registry that the links also count into.
#[derive(Clone, Debug, Default)]
pub struct LinkCounters {
    /// Connections a link made (the first, and each after a close).
    pub connects: Counter,
    pub batches_dropped: Counter,
}

/// What a link writes to: the connection, or a TLS session over it.
type LinkStream = Box<dyn futures_lite::AsyncWrite + Unpin>;

/// A frame waiting to be written, with the slots of the snapshots it carries.
struct Frame {
    bytes: Vec<u8>,
    snapshots: Vec<u16>,
    /// A snapshot's data to stream as part frames before `bytes` (its end frame), and the
    /// transfer's number on this link.
    parts: Option<(u64, Bytes)>,
}

struct Link {
    from: u64,
    to: u64,
    addr: SocketAddr,
    queue: RefCell<VecDeque<Frame>>,
    queued_bytes: Cell<usize>,
    connected: Cell<bool>,
    wake: Event,
    stats: Cell<LinkStats>,
    counters: Rc<RefCell<LinkCounters>>,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// (slot, to, delivered) of snapshots written or lost, for the host.
    reports: Rc<RefCell<Vec<(u16, u64, bool)>>>,
    /// A frame written first on every connection (the member directory), so a peer that
    /// was down or new learns it at once rather than at the next gossip.
    greeting: Rc<RefCell<Option<Vec<u8>>>>,
    /// Numbers this link's snapshot transfers.
    transfers: Cell<u64>,
    /// This node's shared settings, encoded, for the hello.
    settings: Rc<[u8]>,
}

/// This node's outbound links, one per peer, each written by its own task.
pub struct Outbound {
    node_id: u64,
    links: BTreeMap<u64, Rc<Link>>,
    reports: Rc<RefCell<Vec<(u16, u64, bool)>>>,
    tasks: BTreeMap<u64, boltq_shards::Task<()>>,
    greeting: Rc<RefCell<Option<Vec<u8>>>>,
    counters: Rc<RefCell<LinkCounters>>,
    tls: Option<Arc<rustls::ClientConfig>>,
    settings: Rc<[u8]>,
}

impl Outbound {
    /// Starts a link from `node_id` to each of `peers` (id → address), over TLS with `tls`;
    /// each says hello with `settings`. Dropping the `Outbound` stops them.
    pub fn start(
        node_id: u64,
        peers: &BTreeMap<u64, SocketAddr>,
        tls: Option<Arc<rustls::ClientConfig>>,
        settings: &SharedSettings,
    ) -> Outbound {
        let mut out = Outbound {
            settings: settings.encode().into(),
            node_id,
            links: BTreeMap::new(),
            reports: Rc::new(RefCell::new(Vec::new())),
            tasks: BTreeMap::new(),
            greeting: Rc::default(),
            counters: Rc::default(),
            tls,
        };
        for (&to, &addr) in peers {
            out.add_peer(to, addr);
        }
        out
    }

    /// Starts a link to a node that joined; a known one keeps its link, unless its address
    /// changed (a member that rejoined elsewhere): then the old link stops.
    pub fn add_peer(&mut self, to: u64, addr: SocketAddr) {
        assert_ne!(to, self.node_id, "a node has no link to itself");
        if self.links.get(&to).is_some_and(|l| l.addr == addr) {
            return;
        }
        let link = Rc::new(Link {
            from: self.node_id,
            to,
            addr,
            queue: RefCell::new(VecDeque::new()),
            queued_bytes: Cell::new(0),
            connected: Cell::new(false),
            wake: Event::default(),
            stats: Cell::new(LinkStats::default()),
            counters: Rc::clone(&self.counters),
            tls: self.tls.clone(),
            reports: Rc::clone(&self.reports),
            greeting: Rc::clone(&self.greeting),
            transfers: Cell::new(0),
            settings: Rc::clone(&self.settings),
        });
        self.tasks
            .insert(to, boltq_shards::spawn(Rc::clone(&link).run()));
        self.links.insert(to, link);
    }

    /// Queues a batch for node `to`. Returns false when it was dropped (peer unknown,
    /// down, or its queue full); snapshots in it are then reported lost.
    pub fn send(&self, to: u64, batch: &[SlotMessage]) -> bool {
        let Some(link) = self.links.get(&to) else {
            let mut reports = self.reports.borrow_mut();
            reports.extend(
                snapshot_slots(batch)
                    .into_iter()
                    .map(|slot| (slot, to, false)),
            );
            return false;
        };
        let in_parts = |m: &SlotMessage| m.msg.get_snapshot().data.len() > SNAPSHOT_PART_BYTES;
        // The usual batch has no snapshot to send in parts, and is encoded as it is.
        let inline: std::borrow::Cow<[SlotMessage]> = if batch.iter().any(in_parts) {
            batch.iter().filter(|m| !in_parts(m)).cloned().collect()
        } else {
            batch.into()
        };
        let mut queued = true;
        for part in frames_within_limit(&inline) {
            let mut bytes = vec![KIND_RAFT];
            wire::encode(part, &mut bytes);
            queued &= link.enqueue(Frame {
                bytes,
                snapshots: snapshot_slots(part),
                parts: None,
            });
        }
        for m in batch.iter().filter(|m| in_parts(m)) {
            queued &= link.enqueue(snapshot_in_parts(link, m));
        }
        queued
    }

    /// Sends a command to node `to` to run (it leads the slot). False: dropped.
    pub fn send_forward(&self, to: u64, request: &forward::Request) -> bool {
        let mut bytes = vec![KIND_FORWARD];
        if let Err(e) = forward::encode_request(request, &mut bytes) {
            log::error!("not forwarded to node {to}: {e}");
            return false;
        }
        self.send_other(to, bytes)
    }

    /// Answers a command node `to` forwarded. False: dropped.
    pub fn send_reply(&self, to: u64, reply: &forward::Reply) -> bool {
        let mut bytes = vec![KIND_REPLY];
        forward::encode_reply(reply, &mut bytes);
        self.send_other(to, bytes)
    }

    /// Sends this node's member directory (`Directory::encode`d) to node `to`. False:
    /// dropped.
    pub fn send_directory(&self, to: u64, encoded: &[u8]) -> bool {
        let mut bytes = vec![KIND_DIRECTORY];
        bytes.extend_from_slice(encoded);
        self.send_other(to, bytes)
    }

    /// Sends a presence or typing frame (`messaging::gateway::relay`) to node `to`.
    /// False: dropped.
    pub fn send_relay(&self, to: u64, frame: &[u8]) -> bool {
        let mut bytes = Vec::with_capacity(1 + frame.len());
        bytes.push(KIND_RELAY);
        bytes.extend_from_slice(frame);
        self.send_other(to, bytes)
    }

    /// Sets the directory every link writes first when it connects.
    pub fn set_greeting(&self, directory: &Directory) {
        let mut bytes = vec![KIND_DIRECTORY];
        bytes.extend_from_slice(&directory.encode());
        *self.greeting.borrow_mut() = Some(bytes);
    }

    /// The peers this node has a link to.
    pub fn peers(&self) -> Vec<u64> {
        self.links.keys().copied().collect()
    }

    fn send_other(&self, to: u64, bytes: Vec<u8>) -> bool {
        if bytes.len() > wire::BATCH_BYTES_MAX + 1 {
            return false;
        }
        match self.links.get(&to) {
            Some(link) => link.enqueue(Frame {
                bytes,
                snapshots: Vec::new(),
                parts: None,
            }),
            None => false,
        }
    }

    /// Counts every link's connects and dropped batches into `counters` from now on.
    pub fn count_into(&self, counters: LinkCounters) {
        *self.counters.borrow_mut() = counters;
    }

    pub fn stats(&self, to: u64) -> Option<LinkStats> {
        self.links.get(&to).map(|l| l.stats.get())
    }

    /// Snapshots written to their peer's socket (delivered) or dropped since the last call.
    pub fn take_snapshot_reports(&self) -> Vec<(u16, u64, bool)> {
        std::mem::take(&mut *self.reports.borrow_mut())
    }

    /// Stops every link (what a crash does to them).
    pub fn close(&mut self) {
        self.links.clear();
        self.tasks.clear();
    }
}

impl Link {
    fn update(&self, f: impl FnOnce(&mut LinkStats)) {
        let before = self.stats.get();
        let mut stats = before;
        f(&mut stats);
        self.stats.set(stats);
        let counters = self.counters.borrow();
        counters.connects.add(stats.connects - before.connects);
        counters
            .batches_dropped
            .add(stats.batches_dropped - before.batches_dropped);
    }

    fn next_transfer(&self) -> u64 {
        let n = self.transfers.get() + 1;
        self.transfers.set(n);
        n
    }

    fn enqueue(&self, frame: Frame) -> bool {
        let len = frame.bytes.len();
        if !self.connected.get() || self.queued_bytes.get() + len > LINK_QUEUE_BYTES_MAX {
            self.drop_frame(frame);
            return false;
        }
        self.queued_bytes.set(self.queued_bytes.get() + len);
        self.queue.borrow_mut().push_back(frame);
        self.wake.notify();
        true
    }

    fn drop_frame(&self, frame: Frame) {
        self.update(|s| s.batches_dropped += 1);
        let mut reports = self.reports.borrow_mut();
        reports.extend(frame.snapshots.iter().map(|slot| (*slot, self.to, false)));
    }

    fn drop_queue(&self) {
        let frames: Vec<Frame> = self.queue.borrow_mut().drain(..).collect();
        self.queued_bytes.set(0);
        for frame in frames {
            self.drop_frame(frame);
        }
    }

    /// Connects, says hello, writes frames until the connection fails; then waits and
    /// starts over.
    async fn run(self: Rc<Self>) {
        let mut backoff_ms = BACKOFF_MS_MIN;
        loop {
            match self.connect().await {
                Ok(conn) => {
                    let connected_at = std::time::Instant::now();
                    self.update(|s| s.connects += 1);
                    self.connected.set(true);
                    let e = self.write_frames(conn).await;
                    // A connection the peer closes at once (it refused this node) must not
                    // be dialled again at once: only one that lived resets the backoff.
                    if connected_at.elapsed() >= Duration::from_millis(BACKOFF_MS_MAX) {
                        backoff_ms = BACKOFF_MS_MIN;
                    }
                    self.connected.set(false);
                    self.drop_queue();
                    log::info!(
                        "raft link {} → {} ({}) closed: {e}",
                        self.from,
                        self.to,
                        self.addr
                    );
                }
                Err(e) => {
                    self.update(|s| s.connect_failures += 1);
                    log::debug!("raft link {} → {} ({}): {e}", self.from, self.to, self.addr);
                }
            }
            boltq_shards::sleep(Duration::from_millis(backoff_ms)).await;
            backoff_ms = (backoff_ms * 2).min(BACKOFF_MS_MAX);
        }
    }

    async fn connect(&self) -> std::io::Result<LinkStream> {
        let conn = connect_tcp(self.addr, Duration::from_millis(CONNECT_TIMEOUT_MS)).await?;
        conn.close_when_unresponsive(Duration::from_millis(LINK_UNRESPONSIVE_MS_MAX))?;
        let mut conn: LinkStream = match &self.tls {
            None => Box::new(conn),
            Some(config) => Box::new(
                boltq_io::tls::connect_as_client(
                    Arc::clone(config),
                    rustls::pki_types::ServerName::IpAddress(self.addr.ip().into()),
                    &self.addr.to_string(),
                    conn,
                    Duration::from_millis(HELLO_TIMEOUT_MS),
                )
                .await?,
            ),
        };
        let mut hello = Vec::with_capacity(HELLO_BYTES + self.settings.len());
        hello.extend_from_slice(HELLO_MAGIC);
        hello.extend_from_slice(&self.from.to_le_bytes());
        hello.extend_from_slice(&self.to.to_le_bytes());
        let settings_len = u16::try_from(self.settings.len()).expect("≤ SETTINGS_BYTES_MAX");
        hello.extend_from_slice(&settings_len.to_le_bytes());
        hello.extend_from_slice(&self.settings);
        let greeting = self.greeting.borrow().clone();
        if let Some(frame) = greeting {
            hello.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            hello.extend_from_slice(&frame);
        }
        conn.write_all(&hello).await?;
        Ok(conn)
    }

    async fn write_frames(&self, mut conn: LinkStream) -> std::io::Error {
        let mut out = Vec::new();
        loop {
            let ticket = self.wake.ticket();
            let frames: Vec<Frame> = self.queue.borrow_mut().drain(..).collect();
            if frames.is_empty() {
                self.wake.wait(ticket).await;
                continue;
            }
            self.queued_bytes.set(0);
            out.clear();
            let written = async {
                for f in &frames {
                    if let Some((transfer, data)) = &f.parts {
                        // Parts go straight from the snapshot's buffer, after what was
                        // gathered before them.
                        conn.write_all(&out).await?;
                        out.clear();
                        write_parts(&mut conn, *transfer, data).await?;
                    }
                    out.extend_from_slice(&(f.bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(&f.bytes);
                }
                conn.write_all(&out).await?;
                conn.flush().await
            }
            .await;
            let delivered = written.is_ok();
            {
                let mut reports = self.reports.borrow_mut();
                for f in &frames {
                    reports.extend(f.snapshots.iter().map(|slot| (*slot, self.to, delivered)));
                }
            }
            match written {
                Ok(()) => self.update(|s| s.batches_sent += frames.len() as u64),
                Err(e) => {
                    self.update(|s| s.batches_dropped += frames.len() as u64);
                    return e;
                }
            }
        }
    }
}

/// The slots of the snapshot messages in `messages` (their delivery is reported).
fn snapshot_slots(messages: &[SlotMessage]) -> Vec<u16> {
    messages
        .iter()
        .filter(|m| m.msg.get_msg_type() == MessageType::MsgSnapshot)
        .map(|m| m.slot)
        .collect()
}

/// Splits a batch so each part encodes within `wire::BATCH_BYTES_MAX` (the receiver closes
/// the link on a larger frame): many groups catching up at once may each send appends of
/// up to `group::APPEND_BYTES_MAX`.
fn frames_within_limit(batch: &[SlotMessage]) -> Vec<&[SlotMessage]> {
    const SLACK_BYTES: usize = 256;
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, m) in batch.iter().enumerate() {
        let size = SLACK_BYTES
            + m.msg.get_context().len()
            + m.msg.get_snapshot().data.len()
            + m.msg
                .get_entries()
                .iter()
                .map(|e| e.data.len() + e.context.len() + SLACK_BYTES)
                .sum::<usize>();
        if i > start && bytes + size > wire::BATCH_BYTES_MAX / 2 {
            out.push(&batch[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    // An empty batch is a keepalive (`quiesce.rs`): one empty frame.
    if start < batch.len() || batch.is_empty() {
        out.push(&batch[start..]);
    }
    out
}

/// The frames of a snapshot larger than `SNAPSHOT_PART_BYTES`: its parts (streamed by the
/// writer) and an end frame holding the raft message without the data.
fn snapshot_in_parts(link: &Link, m: &SlotMessage) -> Frame {
    let mut bare = m.clone();
    let data = std::mem::take(&mut bare.msg.mut_snapshot().data);
    let transfer = link.next_transfer();
    let mut bytes = vec![KIND_SNAPSHOT_END];
    bytes.extend_from_slice(&transfer.to_le_bytes());
    wire::encode(std::slice::from_ref(&bare), &mut bytes);
    Frame {
        bytes,
        snapshots: vec![m.slot],
        parts: Some((transfer, data)),
    }
}

async fn write_parts(conn: &mut LinkStream, transfer: u64, data: &Bytes) -> std::io::Result<()> {
    let parts = data.len().div_ceil(SNAPSHOT_PART_BYTES);
    let parts = u32::try_from(parts).expect("a snapshot within SNAPSHOT_BYTES_MAX");
    for (part, chunk) in data.chunks(SNAPSHOT_PART_BYTES).enumerate() {
        let mut head = Vec::with_capacity(4 + 1 + SNAPSHOT_PART_HEADER_BYTES);
        let len = 1 + SNAPSHOT_PART_HEADER_BYTES + chunk.len();
        head.extend_from_slice(&(len as u32).to_le_bytes());
        head.push(KIND_SNAPSHOT_PART);
        head.extend_from_slice(&transfer.to_le_bytes());
        head.extend_from_slice(&(part as u32).to_le_bytes());
        head.extend_from_slice(&parts.to_le_bytes());
        conn.write_all(&head).await?;
        conn.write_all(chunk).await?;
    }
    Ok(())
}

/// Joins the snapshot part frames of one connection (kinds 6 and 7) into raft messages.
#[derive(Debug, Default)]
pub struct SnapshotJoiner {
    joining: Option<Joining>,
}

impl SnapshotJoiner {
    /// Takes a part frame (`None` back) or an end frame (the joined message back); an
    /// error for any other kind or a frame that does not continue the transfer.
    pub fn frame(&mut self, from: u64, kind: u8, body: Bytes) -> Result<Option<Incoming>, String> {
        match kind {
            KIND_SNAPSHOT_PART => join_part(&mut self.joining, from, &body).map(|()| None),
            KIND_SNAPSHOT_END => end_transfer(&mut self.joining, from, body).map(Some),
            kind => Err(format!(
                "node {from}: frame kind {kind} is not a snapshot part"
            )),
        }
    }
}

/// A snapshot being joined from the part frames of one connection.
#[derive(Debug)]
struct Joining {
    transfer: u64,
    parts: u32,
    next: u32,
    data: Vec<u8>,
}

/// Takes one part frame's body into `joining`: part 0 starts a transfer; any other must be
/// the next of the one under way.
fn join_part(joining: &mut Option<Joining>, from: u64, body: &[u8]) -> Result<(), String> {
    let Some((head, chunk)) = body.split_first_chunk::<SNAPSHOT_PART_HEADER_BYTES>() else {
        return Err(format!("node {from} sent a snapshot part cut short"));
    };
    let transfer = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let part = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let parts = u32::from_le_bytes(head[12..].try_into().expect("4 bytes"));
    if chunk.is_empty() || chunk.len() > SNAPSHOT_PART_BYTES || part >= parts {
        return Err(format!(
            "node {from} sent snapshot part {part} of {parts} with {} bytes",
            chunk.len()
        ));
    }
    if part == 0 {
        if let Some(j) = joining {
            return Err(format!(
                "node {from} started snapshot transfer {transfer} before ending {}",
                j.transfer
            ));
        }
        *joining = Some(Joining {
            transfer,
            parts,
            next: 0,
            data: Vec::new(),
        });
    }
    let j = match joining {
        Some(j) if j.transfer == transfer && j.parts == parts && j.next == part => j,
        _ => {
            return Err(format!(
                "node {from} sent part {part} of snapshot transfer {transfer} out of order"
            ))
        }
    };
    if (j.data.len() + chunk.len()) as u64 > SNAPSHOT_BYTES_MAX {
        return Err(format!(
            "node {from} sent a snapshot larger than {SNAPSHOT_BYTES_MAX} bytes"
        ));
    }
    j.data.extend_from_slice(chunk);
    j.next += 1;
    Ok(())
}

/// The raft message of an end frame with the data its parts carried.
fn end_transfer(joining: &mut Option<Joining>, from: u64, body: Bytes) -> Result<Incoming, String> {
    let Some(transfer) = body.first_chunk::<8>().map(|b| u64::from_le_bytes(*b)) else {
        return Err(format!("node {from} sent a snapshot end cut short"));
    };
    let j = match joining.take() {
        Some(j) if j.transfer == transfer && j.next == j.parts => j,
        _ => {
            return Err(format!(
                "node {from} ended snapshot transfer {transfer} without all its parts"
            ))
        }
    };
    let mut batch = wire::decode(body.slice(8..)).map_err(|e| format!("node {from}: {e}"))?;
    let [m] = batch.as_mut_slice() else {
        return Err(format!(
            "node {from} ended a snapshot transfer with {} messages",
            batch.len()
        ));
    };
    if m.msg.from != from
        || m.msg.get_msg_type() != MessageType::MsgSnapshot
        || !m.msg.get_snapshot().data.is_empty()
    {
        return Err(format!(
            "node {from} ended snapshot transfer {transfer} with another message"
        ));
    }
    m.msg.mut_snapshot().data = Bytes::from(j.data);
    Ok(Incoming::Raft(batch))
}

/// Where inbound frames go: `(from node, what it sent)`.
pub type Deliver = Rc<dyn Fn(u64, Incoming)>;

/// Most inbound connections one node keeps (peers reconnecting, or strangers waiting out
/// the hello timeout); more are closed at once.
pub const INBOUND_CONNECTIONS_MAX: usize = 256;

/// Why an inbound connection ended.
enum Closed {
    /// The peer's shared settings differ from this node's.
    Refused {
        from: u64,
        reason: String,
    },
    Error(String),
}

impl From<String> for Closed {
    fn from(e: String) -> Closed {
        Closed::Error(e)
    }
}

impl From<&str> for Closed {
    fn from(e: &str) -> Closed {
        Closed::Error(e.to_string())
    }
}

/// Accepts peers' connections for the node `admission` checks them for, and delivers what
/// they send, until the returned task is dropped (which also stops the connections'
/// readers).
pub fn serve(
    listener: Listener,
    admission: Rc<Admission>,
    deliver: Deliver,
) -> boltq_shards::Task<()> {
    let node_id = admission.node_id;
    boltq_shards::spawn(async move {
        let mut readers: Vec<(Rc<Cell<bool>>, boltq_shards::Task<()>)> = Vec::new();
        loop {
            let conn = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    log::warn!("raft listener of node {node_id}: {e}");
                    boltq_shards::sleep(Duration::from_millis(BACKOFF_MS_MIN)).await;
                    continue;
                }
            };
            readers.retain(|(done, _)| !done.get());
            if readers.len() >= INBOUND_CONNECTIONS_MAX {
                log::warn!(
                    "raft listener of node {node_id}: {INBOUND_CONNECTIONS_MAX} connections \
                     open already; one more closed"
                );
                continue;
            }
            let done = Rc::new(Cell::new(false));
            let deliver = Rc::clone(&deliver);
            let admission = Rc::clone(&admission);
            let finished = Rc::clone(&done);
            let task = boltq_shards::spawn(async move {
                read_peer(conn, &admission, deliver).await;
                finished.set(true);
            });
            readers.push((done, task));
        }
    })
}

async fn read_peer(mut conn: Conn, admission: &Admission, deliver: Deliver) {
    let peer = conn
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    match read_frames(&mut conn, admission, &deliver).await {
        Ok(()) => {}
        Err(Closed::Refused { from, reason }) => admission.refused(from, &peer, &reason),
        Err(Closed::Error(e)) => log::info!(
            "raft connection from {peer} to node {} closed: {e}",
            admission.node_id
        ),
    }
}

/// Reads the hello: the dialling node's id and its shared settings.
async fn read_hello(conn: &mut Conn, node_id: u64) -> Result<(u64, SharedSettings), String> {
    let mut hello = [0u8; HELLO_BYTES];
    conn.read_exact(&mut hello)
        .await
        .map_err(|e| format!("reading the hello: {e}"))?;
    let (from, settings_len) = check_hello(&hello, node_id)?;
    let mut settings = vec![0u8; settings_len];
    conn.read_exact(&mut settings)
        .await
        .map_err(|e| format!("reading node {from}'s settings: {e}"))?;
    let settings =
        SharedSettings::decode(&settings).map_err(|e| format!("node {from}'s hello: {e}"))?;
    Ok((from, settings))
}

async fn read_frames(
    conn: &mut Conn,
    admission: &Admission,
    deliver: &Deliver,
) -> Result<(), Closed> {
    let (from, settings) = boltq_shards::timeout(
        Duration::from_millis(HELLO_TIMEOUT_MS),
        read_hello(conn, admission.node_id),
    )
    .await
    .ok_or("no hello in time")??;
    admission
        .admit(from, &settings)
        .map_err(|reason| Closed::Refused { from, reason })?;
    // After the hello: a TLS connection has its socket at hand once the handshake is done.
    conn.close_when_unresponsive(Duration::from_millis(LINK_UNRESPONSIVE_MS_MAX))
        .map_err(|e| format!("node {from}: {e}"))?;
    let mut joiner = SnapshotJoiner::default();
    loop {
        let mut len = [0u8; 4];
        conn.read_exact(&mut len)
            .await
            .map_err(|e| format!("node {from}: {e}"))?;
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > wire::BATCH_BYTES_MAX + 1 {
            return Err(Closed::Error(format!(
                "node {from} sent a frame of {len} bytes (limit {})",
                wire::BATCH_BYTES_MAX + 1
            )));
        }
        let mut body = vec![0u8; len];
        conn.read_exact(&mut body)
            .await
            .map_err(|e| format!("node {from}: {e}"))?;
        let kind = body[0];
        let body = Bytes::from(body);
        if kind == KIND_SNAPSHOT_PART || kind == KIND_SNAPSHOT_END {
            if let Some(joined) = joiner.frame(from, kind, body.slice(1..))? {
                deliver(from, joined);
            }
            continue;
        }
        deliver(from, decode_frame(from, body)?);
    }
}

/// One frame's kind and body, checked: a raft message must come from the node that said
/// hello (a peer speaks for itself only).
fn decode_frame(from: u64, frame: Bytes) -> Result<Incoming, String> {
    let body = frame.slice(1..);
    match frame[0] {
        KIND_RAFT => {
            let batch = wire::decode(body).map_err(|e| format!("node {from}: {e}"))?;
            if let Some(m) = batch.iter().find(|m| m.msg.from != from) {
                return Err(format!(
                    "node {from} sent a message from node {}",
                    m.msg.from
                ));
            }
            Ok(Incoming::Raft(batch))
        }
        KIND_FORWARD => forward::decode_request(body)
            .map(Incoming::Forward)
            .map_err(|e| format!("node {from}: {e}")),
        KIND_REPLY => forward::decode_reply(body)
            .map(Incoming::Reply)
            .map_err(|e| format!("node {from}: {e}")),
        KIND_DIRECTORY => Directory::decode(body)
            .map(Incoming::Directory)
            .map_err(|e| format!("node {from}: {e}")),
        KIND_RELAY => Ok(Incoming::Relay(body)),
        kind => Err(format!("node {from} sent a frame of kind {kind}")),
    }
}

/// The dialling node's id and the length of its settings, if the hello is ours,
/// addressed to `node_id` and within the limits.
fn check_hello(hello: &[u8; HELLO_BYTES], node_id: u64) -> Result<(u64, usize), String> {
    if &hello[..8] != HELLO_MAGIC {
        return Err("not a raft link (bad hello)".into());
    }
    let from = u64::from_le_bytes(hello[8..16].try_into().expect("8 bytes"));
    let to = u64::from_le_bytes(hello[16..24].try_into().expect("8 bytes"));
    if from == 0 || from == node_id {
        return Err(format!("hello from node id {from}"));
    }
    if to != node_id {
        return Err(format!(
            "node {from} dialled node {to}, but this is node {node_id}"
        ));
    }
    let settings_len = usize::from(u16::from_le_bytes([hello[24], hello[25]]));
    if settings_len > SETTINGS_BYTES_MAX {
        return Err(format!(
            "node {from} sent settings of {settings_len} bytes (limit {SETTINGS_BYTES_MAX})"
        ));
    }
    Ok((from, settings_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::listener::SharedListener;
    use raft::prelude::Message;

    fn run<F: std::future::Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        boltq_shards::block_on("transport-test", move || Box::pin(f())).unwrap();
    }

    fn heartbeat(from: u64, to: u64) -> SlotMessage {
        let mut msg = Message {
            from,
            to,
            term: 3,
            ..Message::default()
        };
        msg.set_msg_type(MessageType::MsgHeartbeat);
        SlotMessage { slot: 5, msg }
    }

    type Delivered = Rc<RefCell<Vec<(u64, Incoming)>>>;

    /// Node 1 listening, with what it was delivered.
    fn listen() -> (SharedListener, boltq_shards::Task<()>, Delivered) {
        let (shared, serving, got, _) = listen_with(SharedSettings::default());
        (shared, serving, got)
    }

    /// Node 1 listening with `settings`, with what it was delivered and its admission.
    fn listen_with(
        settings: SharedSettings,
    ) -> (
        SharedListener,
        boltq_shards::Task<()>,
        Delivered,
        Rc<Admission>,
    ) {
        let shared = SharedListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = Listener::for_shard(&shared, None).unwrap();
        let got = Rc::new(RefCell::new(Vec::new()));
        let sink = Rc::clone(&got);
        let deliver: Deliver = Rc::new(move |from, batch| sink.borrow_mut().push((from, batch)));
        let admission = Rc::new(Admission::new(1, settings));
        let serving = serve(listener, Rc::clone(&admission), deliver);
        (shared, serving, got, admission)
    }

    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            boltq_shards::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    fn hello(from: u64, to: u64) -> Vec<u8> {
        hello_with(from, to, &[])
    }

    fn hello_with(from: u64, to: u64, settings: &[u8]) -> Vec<u8> {
        let mut h = HELLO_MAGIC.to_vec();
        h.extend_from_slice(&from.to_le_bytes());
        h.extend_from_slice(&to.to_le_bytes());
        h.extend_from_slice(&(settings.len() as u16).to_le_bytes());
        h.extend_from_slice(settings);
        h
    }

    fn frame(batch: &[SlotMessage]) -> Vec<u8> {
        let mut body = vec![KIND_RAFT];
        wire::encode(batch, &mut body);
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// A listening node 1 and node 2's links to it, connected.
    async fn connected() -> (SharedListener, boltq_shards::Task<()>, Delivered, Outbound) {
        let (shared, serving, got) = listen();
        let peers = BTreeMap::from([(1, shared.local_addr().unwrap())]);
        let out = Outbound::start(2, &peers, None, &SharedSettings::default());
        until("the link to connect", || {
            out.stats(1).unwrap().connects == 1
        })
        .await;
        (shared, serving, got, out)
    }

    /// Writes `bytes` on a new connection and says whether the listener closed it (a read
    /// returns end of stream) within two seconds.
    async fn closed_after(addr: SocketAddr, bytes: &[u8]) -> bool {
        let mut conn = connect_tcp(addr, Duration::from_secs(1)).await.unwrap();
        conn.write_all(bytes).await.unwrap();
        let mut buf = [0u8; 1];
        matches!(
            boltq_shards::timeout(Duration::from_secs(2), conn.read(&mut buf)).await,
            Some(Ok(0)) | Some(Err(_))
        )
    }

    #[test]
    fn the_directory_greets_every_connection_and_travels_on_its_own() {
        use crate::cluster::directory::{Member, Role};
        run(|| async {
            let (shared, _serving, got) = listen();
            let peers = BTreeMap::from([(1, shared.local_addr().unwrap())]);
            let mut out = Outbound::start(2, &BTreeMap::new(), None, &SharedSettings::default());
            let directory = Directory::new([Member {
                name: "n2".into(),
                addr: "127.0.0.1:9".into(),
                role: Role::Voter,
                version: 4,
                tcp_addr: "127.0.0.1:8".into(),
                http_addr: String::new(),
            }]);
            out.set_greeting(&directory);
            out.add_peer(1, peers[&1]);
            until("the greeting", || got.borrow().len() == 1).await;
            assert_eq!(got.borrow()[0], (2, Incoming::Directory(directory.clone())));
            assert!(out.send_directory(1, &directory.encode()));
            until("the directory sent", || got.borrow().len() == 2).await;
            assert_eq!(got.borrow()[1], (2, Incoming::Directory(directory)));
        });
    }

    #[test]
    fn batches_reach_the_peer_in_order() {
        run(|| async {
            let (_shared, _serving, got, out) = connected().await;
            for _ in 0..10 {
                assert!(out.send(1, &[heartbeat(2, 1), heartbeat(2, 1)]));
            }
            let request = forward::Request {
                id: 9,
                slot: 5,
                asked: forward::Asked::Command(forward::SlotCommand::Queue(
                    crate::queue::broker::Command::Tick { now_ns: 3 },
                )),
            };
            assert!(out.send_forward(1, &request));
            let reply = forward::Reply {
                id: 9,
                answer: forward::Answer::NotLeader(Some(3)),
            };
            assert!(out.send_reply(1, &reply));
            // Relayed presence is handed on as it came, undecoded.
            assert!(out.send_relay(1, b"\x01anything"));
            until("ten batches, a request, a reply and a relay", || {
                got.borrow().len() == 13
            })
            .await;
            let got = got.borrow();
            assert!(got[..10]
                .iter()
                .all(|(from, b)| *from == 2 && matches!(b, Incoming::Raft(b) if b.len() == 2)));
            assert_eq!(got[10], (2, Incoming::Forward(request)));
            assert_eq!(got[11], (2, Incoming::Reply(reply)));
            let relayed = Bytes::from_static(b"\x01anything");
            assert_eq!(got[12], (2, Incoming::Relay(relayed)));
            assert_eq!(out.stats(1).unwrap().batches_sent, 13);
        });
    }

    #[test]
    fn a_down_peer_costs_dropped_batches_and_a_lost_snapshot_report_not_a_stall() {
        run(|| async {
            // Nothing listens there.
            let addr = {
                let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                probe.local_addr().unwrap()
            };
            let out = Outbound::start(
                2,
                &BTreeMap::from([(1, addr)]),
                None,
                &SharedSettings::default(),
            );
            let mut snapshot = heartbeat(2, 1);
            snapshot.msg.set_msg_type(MessageType::MsgSnapshot);
            assert!(!out.send(1, &[snapshot]));
            assert_eq!(out.take_snapshot_reports(), vec![(5, 1, false)]);
            until("a failed connect", || {
                out.stats(1).unwrap().connect_failures >= 2
            })
            .await;
            let stats = out.stats(1).unwrap();
            assert_eq!((stats.connects, stats.batches_dropped), (0, 1));
        });
    }

    #[test]
    fn strangers_wrong_addresses_oversized_frames_and_forged_senders_are_closed() {
        run(|| async {
            let (shared, _serving, got) = listen();
            let addr = shared.local_addr().unwrap();
            assert!(
                closed_after(addr, b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxx").await,
                "not a hello"
            );
            assert!(
                closed_after(addr, &hello(2, 7)).await,
                "dialled another node"
            );
            assert!(closed_after(addr, &hello(1, 1)).await, "its own id");
            let mut oversized = hello(2, 1);
            oversized.extend_from_slice(&((wire::BATCH_BYTES_MAX + 2) as u32).to_le_bytes());
            assert!(closed_after(addr, &oversized).await, "oversized frame");
            let mut forged = hello(2, 1);
            forged.extend_from_slice(&frame(&[heartbeat(3, 1)]));
            assert!(
                closed_after(addr, &forged).await,
                "a message from another node"
            );
            let mut damaged = hello(2, 1);
            damaged.extend_from_slice(&[4, 0, 0, 0, KIND_RAFT, 9, 9, 9]);
            assert!(closed_after(addr, &damaged).await, "an undecodable batch");
            let mut unknown = hello(2, 1);
            unknown.extend_from_slice(&[2, 0, 0, 0, 9, 0]);
            assert!(closed_after(addr, &unknown).await, "an unknown frame kind");
            let mut empty = hello(2, 1);
            empty.extend_from_slice(&[0, 0, 0, 0]);
            assert!(closed_after(addr, &empty).await, "an empty frame");
            let mut too_long = hello(2, 1);
            let at = too_long.len() - 2;
            too_long[at..].copy_from_slice(&((SETTINGS_BYTES_MAX + 1) as u16).to_le_bytes());
            too_long.extend_from_slice(&vec![b'a'; SETTINGS_BYTES_MAX + 1]);
            assert!(
                closed_after(addr, &too_long).await,
                "settings past their limit"
            );
            let mut bad_settings = hello_with(2, 1, b"NOT A SETTING\n");
            bad_settings.extend_from_slice(&frame(&[heartbeat(2, 1)]));
            assert!(
                closed_after(addr, &bad_settings).await,
                "undecodable settings"
            );
            assert!(got.borrow().is_empty(), "nothing was delivered");
            // And a well-behaved peer is still served.
            let mut good = hello(2, 1);
            good.extend_from_slice(&frame(&[heartbeat(2, 1)]));
            let mut conn = connect_tcp(addr, Duration::from_secs(1)).await.unwrap();
            conn.write_all(&good).await.unwrap();
            until("the good batch", || got.borrow().len() == 1).await;
        });
    }

    /// A peer whose shared settings differ is refused before anything it sends is
    /// delivered; one that differs only in settings this node does not name is served,
    /// and so is a link from a node with the same settings.
    #[test]
    fn a_peer_whose_shared_settings_differ_is_refused() {
        run(|| async {
            let ours = SharedSettings::new([("queue.capacity", "100"), ("server.shards", "2")]);
            let (shared, _serving, got, admission) = listen_with(ours.clone());
            let addr = shared.local_addr().unwrap();
            let differing = SharedSettings::new([("queue.capacity", "5"), ("server.shards", "2")]);
            let mut refused = hello_with(2, 1, &differing.encode());
            refused.extend_from_slice(&frame(&[heartbeat(2, 1)]));
            assert!(closed_after(addr, &refused).await, "differing settings");
            assert!(
                got.borrow().is_empty(),
                "nothing of a refused peer is delivered"
            );
            assert_eq!(
                admission.refused_peers(),
                [(2, "queue.capacity = 100 here, 5 there".to_string())],
                "the refusal is reported with why"
            );
            let newer = SharedSettings::new([
                ("queue.capacity", "100"),
                ("server.shards", "2"),
                ("some.later.setting", "x"),
            ]);
            let mut accepted = hello_with(3, 1, &newer.encode());
            accepted.extend_from_slice(&frame(&[heartbeat(3, 1)]));
            let mut conn = connect_tcp(addr, Duration::from_secs(1)).await.unwrap();
            conn.write_all(&accepted).await.unwrap();
            until("the batch of a peer naming one more setting", || {
                got.borrow().len() == 1
            })
            .await;
            // Node 2 again, now with this node's settings (its config fixed): it links, and
            // is no longer reported refused.
            let peers = BTreeMap::from([(1, addr)]);
            let out = Outbound::start(2, &peers, None, &ours);
            until("the link to connect", || {
                out.stats(1).unwrap().connects == 1
            })
            .await;
            until("the link's batch", || {
                out.send(1, &[heartbeat(2, 1)]);
                got.borrow().len() > 1
            })
            .await;
            assert!(admission.refused_peers().is_empty());
        });
    }

    /// A link the peer closes at once is dialled again after a growing pause, not at once:
    /// a refused node must not hammer its peers.
    #[test]
    fn a_link_closed_at_once_backs_off() {
        run(|| async {
            let differing = SharedSettings::new([("server.shards", "4")]);
            let (shared, _serving, _got, _) =
                listen_with(SharedSettings::new([("server.shards", "2")]));
            let peers = BTreeMap::from([(1, shared.local_addr().unwrap())]);
            let out = Outbound::start(2, &peers, None, &differing);
            let started = std::time::Instant::now();
            while started.elapsed() < Duration::from_millis(3_000) {
                out.send(1, &[heartbeat(2, 1)]);
                boltq_shards::sleep(Duration::from_millis(20)).await;
            }
            // Without backing off: a connect every ~BACKOFF_MS_MIN plus the time to notice
            // the close, dozens in 3 s; with it, 50 + 100 + ... + 1,600 ms ≈ 3.1 s: ≤ 6.
            let connects = out.stats(1).unwrap().connects;
            assert!((1..=6).contains(&connects), "{connects} connections in 3 s");
        });
    }

    fn snapshot_message(from: u64, to: u64, data: Vec<u8>) -> SlotMessage {
        let mut m = heartbeat(from, to);
        m.msg.set_msg_type(MessageType::MsgSnapshot);
        m.msg.mut_snapshot().mut_metadata().index = 40;
        m.msg.mut_snapshot().mut_metadata().term = 3;
        // As decoded: the membership present, if empty.
        m.msg.mut_snapshot().mut_metadata().mut_conf_state();
        m.msg.mut_snapshot().data = data.into();
        m
    }

    /// A snapshot far larger than a frame (a slot holding a big queue) reaches the peer
    /// whole, in parts, with the smaller messages of its batch, and is reported delivered.
    /// Before, encoding it panicked the sending node ("field larger than a batch").
    #[test]
    fn a_snapshot_larger_than_a_frame_arrives_whole_in_parts() {
        run(|| async {
            let (_shared, _serving, got, out) = connected().await;
            let data: Vec<u8> = (0..wire::BATCH_BYTES_MAX + 3 * SNAPSHOT_PART_BYTES + 7)
                .map(|i| (i % 251) as u8)
                .collect();
            let big = snapshot_message(2, 1, data.clone());
            let small = snapshot_message(2, 1, vec![7; 100]);
            assert!(out.send(1, &[heartbeat(2, 1), big.clone(), small.clone()]));
            until("the batch and the snapshot", || got.borrow().len() == 2).await;
            assert_eq!(
                got.borrow()[0],
                (2, Incoming::Raft(vec![heartbeat(2, 1), small.clone()]))
            );
            assert_eq!(got.borrow()[1], (2, Incoming::Raft(vec![big])));
            let reports = RefCell::new(Vec::new());
            until("both snapshots reported", || {
                reports.borrow_mut().extend(out.take_snapshot_reports());
                reports.borrow().len() == 2
            })
            .await;
            assert_eq!(reports.into_inner(), vec![(5, 1, true), (5, 1, true)]);
        });
    }

    /// Part frames that do not make up one snapshot close the connection, and nothing of
    /// them is delivered: parts out of order, a second transfer before the first ended,
    /// an end without all its parts, an end whose message is not a bare snapshot, a part
    /// larger than a part may be.
    #[test]
    fn snapshot_parts_that_do_not_make_up_one_snapshot_are_closed() {
        fn part(transfer: u64, part: u32, parts: u32, chunk: &[u8]) -> Vec<u8> {
            let mut f = Vec::new();
            let len = 1 + SNAPSHOT_PART_HEADER_BYTES + chunk.len();
            f.extend_from_slice(&(len as u32).to_le_bytes());
            f.push(KIND_SNAPSHOT_PART);
            f.extend_from_slice(&transfer.to_le_bytes());
            f.extend_from_slice(&part.to_le_bytes());
            f.extend_from_slice(&parts.to_le_bytes());
            f.extend_from_slice(chunk);
            f
        }
        fn end(transfer: u64, m: &SlotMessage) -> Vec<u8> {
            let mut body = vec![KIND_SNAPSHOT_END];
            body.extend_from_slice(&transfer.to_le_bytes());
            wire::encode(std::slice::from_ref(m), &mut body);
            let mut f = (body.len() as u32).to_le_bytes().to_vec();
            f.extend_from_slice(&body);
            f
        }
        run(|| async {
            let (shared, _serving, got) = listen();
            let addr = shared.local_addr().unwrap();
            let bare = snapshot_message(2, 1, Vec::new());
            let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
                ("a part before part 0", vec![part(1, 1, 2, b"ab")]),
                (
                    "parts out of order",
                    vec![part(1, 0, 3, b"ab"), part(1, 2, 3, b"cd")],
                ),
                (
                    "a part of another transfer",
                    vec![part(1, 0, 2, b"ab"), part(2, 1, 2, b"cd")],
                ),
                (
                    "a second transfer before the first ended",
                    vec![part(1, 0, 2, b"ab"), part(2, 0, 2, b"cd")],
                ),
                (
                    "an end without all parts",
                    vec![part(1, 0, 2, b"ab"), end(1, &bare)],
                ),
                ("an end of no transfer", vec![end(4, &bare)]),
                (
                    "an end whose message is not a snapshot",
                    vec![part(1, 0, 1, b"ab"), end(1, &heartbeat(2, 1))],
                ),
                (
                    "an end whose snapshot carries data",
                    vec![
                        part(1, 0, 1, b"ab"),
                        end(1, &snapshot_message(2, 1, vec![1])),
                    ],
                ),
                (
                    "an end from another node",
                    vec![
                        part(1, 0, 1, b"ab"),
                        end(1, &snapshot_message(3, 1, Vec::new())),
                    ],
                ),
                (
                    "a part larger than a part",
                    vec![part(1, 0, 1, &vec![0; SNAPSHOT_PART_BYTES + 1])],
                ),
                ("an empty part", vec![part(1, 0, 1, b"")]),
                ("part beyond parts", vec![part(1, 2, 2, b"ab")]),
            ];
            for (what, frames) in cases {
                let mut bytes = hello(2, 1);
                for f in frames {
                    bytes.extend_from_slice(&f);
                }
                assert!(closed_after(addr, &bytes).await, "{what}");
            }
            assert!(got.borrow().is_empty(), "nothing was delivered");
            // Well-formed parts are joined.
            let mut good = hello(2, 1);
            good.extend_from_slice(&part(5, 0, 2, b"ab"));
            good.extend_from_slice(&part(5, 1, 2, b"c"));
            good.extend_from_slice(&end(5, &bare));
            let mut conn = connect_tcp(addr, Duration::from_secs(1)).await.unwrap();
            conn.write_all(&good).await.unwrap();
            until("the joined snapshot", || got.borrow().len() == 1).await;
            let joined = snapshot_message(2, 1, b"abc".to_vec());
            assert_eq!(got.borrow()[0], (2, Incoming::Raft(vec![joined])));
        });
    }
}
