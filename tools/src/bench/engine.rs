//! The generator's event loop: one thread per CPU, each driving its share of the connections
//! with non-blocking std sockets and epoll.
//!
//! Pipelined raw frames rather than the request/reply [`boltq::client::Client`]: the protocol
//! pairs replies with requests by order, so a connection keeps a FIFO of what it has in
//! flight and can have `depth` requests outstanding without correlation ids. One write per
//! loop iteration carries every request a connection has ready, so pipelining also batches
//! syscalls. Setup steps (AUTH, SUBSCRIBE) are done blocking before the loop starts.

use super::poll::{now_ns, Epoll, Timer};
use super::size_dist::{xorshift, SizeDist};
use super::stats::{Counters, Hists, Op, Series, Shared, MERGE_EVERY_NS};
use super::transport::Stream;
use super::wire::{self, Template};
use boltq::queue::protocol::frame::{self, op, status, FrameError, HEADER_BYTES};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

/// Bound on connecting and on each blocking setup reply.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Receive buffer per connection; grows (up to one maximal frame) only for larger frames.
const RX_BUF_BYTES: usize = 256 * 1024;
/// Longest the loop sleeps without looking at the run's flags (stop, deadlines).
const IDLE_WAIT_MS: i32 = 20;
const TIMER_TOKEN: u64 = u64::MAX;
/// First byte of a TLS alert record.
const TLS_ALERT: u8 = 0x15;

/// What one connection does.
pub enum RoleSpec {
    Producer(ProducerSpec),
    Consumer(ConsumerSpec),
    /// SUBSCRIBE once, then receive pushes.
    Subscriber {
        topic: String,
        sub_id: String,
    },
}

pub struct ConnSpec {
    pub role: RoleSpec,
    /// Requests in flight (ignored by subscribers, which send nothing after subscribing).
    pub depth: usize,
}

pub struct ProducerSpec {
    pub op: Op,
    /// `templates[target][priority slot]`.
    pub templates: Arc<Vec<Vec<Template>>>,
    /// Cumulative weights of the priority slots (one slot: always slot 0).
    pub priority_cumulative: Arc<Vec<u32>>,
    /// Payload sizes, drawn per message from this connection's PRNG.
    pub sizes: Arc<SizeDist>,
    /// Filler for the largest size ([`wire::filler`]).
    pub filler: Arc<Vec<u8>>,
    /// Open loop: nanoseconds between this connection's sends; `None` = closed loop.
    pub interval_ns: Option<u64>,
    /// Offset of this connection's first scheduled send (spreads connections in time).
    pub phase_ns: u64,
    /// Target this connection starts at; it then goes round-robin.
    pub first_target: usize,
    /// Stay on `first_target` instead of going round-robin.
    pub one_target: bool,
    pub seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumeMode {
    /// Keep consuming while producers run, then until everything published was consumed.
    Follow,
    /// Consume until this many messages were consumed over all connections.
    Target(u64),
    /// Consume until this connection gets an EMPTY reply.
    UntilEmpty,
}

pub struct ConsumerSpec {
    /// One complete CONSUME frame per queue.
    pub frames: Arc<Vec<Vec<u8>>>,
    pub first_queue: usize,
    /// Stay on `first_queue` instead of going round-robin.
    pub one_queue: bool,
    pub mode: ConsumeMode,
    /// Record end-to-end latency from the payload stamps (off when they are stale, as for
    /// messages prefilled before the run).
    pub record_e2e: bool,
    /// One ACK with `ids` per CONSUME reply (`--ack-many`).
    pub ack_many: bool,
}

/// Where and how a worker connects.
#[derive(Clone)]
pub struct Target {
    pub addr: String,
    pub api_key: Option<String>,
    /// `--tls`: the session settings every connection starts from.
    pub tls: Option<Arc<boltq::client::TlsSession>>,
}

/// One loop thread's share of a run: its CPU and its connections.
pub struct WorkerPlan<C = ConnSpec> {
    pub cpu: Option<usize>,
    pub conns: Vec<C>,
}

// ---- connection state ----------------------------------------------------------------------

struct Producer {
    spec: ProducerSpec,
    rng: u64,
    seq: u64,
    next_due: u64,
    done_sending: bool,
}

struct Consumer {
    spec: ConsumerSpec,
    next_queue: usize,
    /// ACK frames waiting for a free slot in the window, back to back; `ack_lens` says where
    /// each ends. Acks go before new CONSUMEs so un-acked messages stay bounded.
    ack_bytes: Vec<u8>,
    ack_pos: usize,
    ack_lens: VecDeque<usize>,
    saw_empty: bool,
}

struct Subscriber {
    last_seq: Option<u64>,
    delivered: u64,
}

enum Role {
    Producer(Producer),
    Consumer(Consumer),
    Subscriber(Subscriber),
}

struct Conn {
    stream: Stream,
    role: Role,
    depth: usize,
    /// Requests awaiting their reply, oldest first: kind, the time latency is measured from
    /// (the intended send time in open loop) and the time it was actually written.
    inflight: VecDeque<(Op, u64, u64)>,
    out: Vec<u8>,
    out_pos: usize,
    want_write: bool,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    finished: bool,
}

/// Per-thread measurements, merged into [`Shared`] now and then.
struct Local {
    hists: Hists,
    warmup_end: u64,
}

impl Local {
    fn record(&mut self, s: Series, start_ns: u64, now: u64) {
        if start_ns >= self.warmup_end {
            self.hists.record(s, now.saturating_sub(start_ns));
        }
    }
}

// ---- setup ---------------------------------------------------------------------------------

fn connect(target: &Target) -> Result<TcpStream, String> {
    let addrs = target
        .addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", target.addr))?;
    let mut last = format!("no address for {}", target.addr);
    for a in addrs {
        match TcpStream::connect_timeout(&a, SETUP_TIMEOUT) {
            Ok(s) => {
                // Pipelined requests are written as soon as they are ready; Nagle would hold
                // small ones back waiting for an ACK.
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    Err(last)
}

/// One blocking request → reply on a fresh connection (setup only; nothing pipelined yet).
fn blocking_call(s: &mut Stream, code: u8, body: &str) -> Result<(u8, Vec<u8>), String> {
    s.write_all(&wire::frame(code, body))
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if buf.starts_with(&[TLS_ALERT, 0x03]) {
            // A TLS listener answers plaintext with an alert record.
            return Err("the server answered with a TLS alert: it expects TLS (--tls)".into());
        }
        if let Some((f, _)) = frame::decode(&buf).map_err(|e| e.to_string())? {
            return Ok((f.code, f.payload.to_vec()));
        }
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn open(spec: ConnSpec, target: &Target) -> Result<Conn, String> {
    let sock = connect(target)?;
    sock.set_read_timeout(Some(SETUP_TIMEOUT))
        .and_then(|_| sock.set_write_timeout(Some(SETUP_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut stream =
        Stream::new(sock, target.tls.as_deref()).map_err(|e| format!("{}: {e}", target.addr))?;
    // Every connection proves before the run that the server speaks the protocol to it
    // (AUTH, else PING), so a wrong port or a TLS mismatch is a setup error, not run errors.
    let (what, code, body) = match target.api_key.as_deref().filter(|k| !k.is_empty()) {
        Some(key) => (
            "AUTH",
            op::AUTH,
            format!("{{\"api_key\":{}}}", wire::json_str(key)),
        ),
        None => ("PING", op::PING, "{}".to_string()),
    };
    let (code, payload) = blocking_call(&mut stream, code, &body)
        .map_err(|e| format!("{what} on {}: {e}", target.addr))?;
    if code != status::OK {
        return Err(format!("{what} refused: {}", wire::error_text(&payload)));
    }
    let role = match spec.role {
        RoleSpec::Producer(p) => Role::Producer(Producer {
            rng: p.seed | 1,
            seq: 0,
            next_due: 0,
            done_sending: false,
            spec: p,
        }),
        RoleSpec::Consumer(c) => Role::Consumer(Consumer {
            next_queue: c.first_queue,
            ack_bytes: Vec::new(),
            ack_pos: 0,
            ack_lens: VecDeque::new(),
            saw_empty: false,
            spec: c,
        }),
        RoleSpec::Subscriber { topic, sub_id } => {
            let body = format!(
                "{{\"durable\":false,\"id\":{},\"topic\":{}}}",
                wire::json_str(&sub_id),
                wire::json_str(&topic)
            );
            let (code, payload) = blocking_call(&mut stream, op::CONSUME, &body)?;
            if code != status::OK {
                return Err(format!(
                    "SUBSCRIBE {topic}/{sub_id} refused: {}",
                    wire::error_text(&payload)
                ));
            }
            Role::Subscriber(Subscriber {
                last_seq: None,
                delivered: 0,
            })
        }
    };
    stream
        .socket()
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    Ok(Conn {
        stream,
        role,
        depth: spec.depth.max(1),
        inflight: VecDeque::new(),
        out: Vec::with_capacity(64 * 1024),
        out_pos: 0,
        want_write: false,
        rx: vec![0; RX_BUF_BYTES],
        rx_start: 0,
        rx_end: 0,
        finished: false,
    })
}

// ---- the loop ------------------------------------------------------------------------------

/// Runs one worker thread: connect (reporting the outcome on `ready`), wait at `go`, then
/// drive the connections until every one of them has finished.
pub fn run_worker(
    plan: WorkerPlan,
    target: Target,
    shared: Arc<Shared>,
    ready: mpsc::Sender<Result<(), String>>,
    go: Arc<Barrier>,
) {
    if let Some(cpu) = plan.cpu {
        if let Err(e) = super::cpus::pin_current_thread(&[cpu]) {
            let _ = ready.send(Err(format!("cannot pin a thread to CPU {cpu}: {e}")));
            go.wait();
            return;
        }
    }
    let mut conns = Vec::with_capacity(plan.conns.len());
    let mut failure = None;
    for spec in plan.conns {
        match open(spec, &target) {
            Ok(c) => conns.push(c),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let _ = ready.send(match failure {
        Some(e) => Err(e),
        None => Ok(()),
    });
    go.wait();
    if shared.stopped() && shared.drain_deadline() == 0 {
        return; // setup failed somewhere: the run is called off.
    }
    if let Err(e) = Worker::new(conns, &shared).and_then(|mut w| w.run()) {
        shared.error(None, &format!("generator: {e}"), 1);
    }
}

struct Worker<'a> {
    conns: Vec<Conn>,
    shared: &'a Shared,
    local: Local,
    epoll: Epoll,
    timer: Timer,
    start_ns: u64,
}

impl<'a> Worker<'a> {
    fn new(conns: Vec<Conn>, shared: &'a Shared) -> io::Result<Worker<'a>> {
        let epoll = Epoll::new()?;
        let timer = Timer::new()?;
        epoll.add(timer.fd(), TIMER_TOKEN, libc::EPOLLIN as u32)?;
        for (i, c) in conns.iter().enumerate() {
            epoll.add(
                c.stream.socket().as_raw_fd(),
                i as u64,
                libc::EPOLLIN as u32,
            )?;
        }
        let start_ns = now_ns();
        let mut w = Worker {
            conns,
            shared,
            local: Local {
                hists: Hists::default(),
                warmup_end: shared.warmup_end(),
            },
            epoll,
            timer,
            start_ns,
        };
        for c in &mut w.conns {
            if let Role::Producer(p) = &mut c.role {
                p.next_due = start_ns + p.spec.phase_ns;
            }
        }
        Ok(w)
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut last_merge = self.start_ns;
        loop {
            let now = now_ns();
            if now >= self.shared.drain_deadline() {
                self.abandon_all();
                break;
            }
            let mut next_due = u64::MAX;
            let mut live = 0usize;
            for i in 0..self.conns.len() {
                if self.conns[i].finished {
                    continue;
                }
                if self.conns[i]
                    .inflight
                    .front()
                    .is_some_and(|r| now.saturating_sub(r.2) > self.shared.request_timeout_ns)
                {
                    // A server that stopped answering (hung or crashed shard) must end the
                    // run with errors, not hang a run bounded only by a message count.
                    self.give_up(i, "timeout: no reply within --request-timeout-secs");
                    continue;
                }
                self.fill(i, now);
                self.flush(i)?;
                self.check_finished(i);
                let c = &self.conns[i];
                if !c.finished {
                    live += 1;
                    if let Role::Producer(p) = &c.role {
                        let window_open = c.inflight.len() < c.depth;
                        if p.spec.interval_ns.is_some() && !p.done_sending && window_open {
                            next_due = next_due.min(p.next_due);
                        }
                    }
                }
            }
            if live == 0 {
                break;
            }
            if now - last_merge >= MERGE_EVERY_NS {
                self.merge();
                last_merge = now;
            }
            if next_due != u64::MAX {
                self.timer.arm(next_due)?;
            }
            // Bounded in u64 first: the deadline is u64::MAX while the run is in full swing.
            let until_deadline_ms = self.shared.drain_deadline().saturating_sub(now) / 1_000_000;
            let timeout = until_deadline_ms.min(IDLE_WAIT_MS as u64) as i32;
            let n = self.epoll.wait(&mut events, timeout)?.len();
            for &ev in &events[..n] {
                if ev.u64 == TIMER_TOKEN {
                    self.timer.consume();
                    continue;
                }
                let i = ev.u64 as usize;
                if self.conns[i].finished {
                    continue;
                }
                let flags = ev.events;
                if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                    self.receive(i);
                }
            }
        }
        self.merge();
        Ok(())
    }

    fn merge(&mut self) {
        self.shared
            .hists
            .lock()
            .unwrap()
            .drain_into(&mut self.local.hists);
    }

    /// Queues as many requests as the connection's window, schedule and the run allow.
    fn fill(&mut self, i: usize, now: u64) {
        let shared = self.shared;
        let c = &mut self.conns[i];
        match &mut c.role {
            Role::Producer(p) => {
                let (mut sent, mut bytes) = (0u64, 0u64);
                while c.inflight.len() < c.depth && !p.done_sending {
                    if shared.stopped() {
                        p.done_sending = true;
                        if let Some(interval) = p.spec.interval_ns {
                            // Scheduled before the stop but never sent: report, don't hide.
                            let stop = shared.stop_ns.load(Ordering::Relaxed);
                            if p.next_due < stop {
                                let missed = (stop - p.next_due) / interval + 1;
                                Counters::add(&shared.counters.unsent_scheduled, missed);
                            }
                        }
                        break;
                    }
                    let start = match p.spec.interval_ns {
                        Some(interval) => {
                            if p.next_due > now {
                                break;
                            }
                            let t = p.next_due;
                            p.next_due += interval;
                            t
                        }
                        None => now,
                    };
                    if !shared.claim_send() {
                        p.done_sending = true;
                        break;
                    }
                    let targets = &p.spec.templates;
                    let step = if p.spec.one_target { 0 } else { p.seq as usize };
                    let target = (p.spec.first_target + step) % targets.len();
                    let slot = pick_slot(&p.spec.priority_cumulative, &mut p.rng);
                    let size = p.spec.sizes.sample(&mut p.rng) as usize;
                    targets[target][slot].write(&mut c.out, start, p.seq, size, &p.spec.filler);
                    p.seq += 1;
                    c.inflight.push_back((p.spec.op, start, now));
                    sent += 1;
                    bytes += size as u64;
                }
                let counters = &shared.counters;
                Counters::add(&counters.sent[p.spec.op as usize], sent);
                Counters::add(&counters.payload_messages, sent);
                Counters::add(&counters.payload_bytes, bytes);
            }
            Role::Consumer(k) => {
                let (mut consumes, mut acks) = (0u64, 0u64);
                while c.inflight.len() < c.depth {
                    if let Some(len) = k.ack_lens.pop_front() {
                        let end = k.ack_pos + len;
                        c.out.extend_from_slice(&k.ack_bytes[k.ack_pos..end]);
                        k.ack_pos = end;
                        c.inflight.push_back((Op::Ack, now, now));
                        acks += 1;
                    } else if may_consume(k, shared) {
                        let frames = &k.spec.frames;
                        c.out
                            .extend_from_slice(&frames[k.next_queue % frames.len()]);
                        if !k.spec.one_queue {
                            k.next_queue = k.next_queue.wrapping_add(1);
                        }
                        c.inflight.push_back((Op::Consume, now, now));
                        consumes += 1;
                    } else {
                        break;
                    }
                }
                if k.ack_lens.is_empty() {
                    k.ack_bytes.clear();
                    k.ack_pos = 0;
                }
                Counters::add(&shared.counters.sent[Op::Consume as usize], consumes);
                Counters::add(&shared.counters.sent[Op::Ack as usize], acks);
            }
            Role::Subscriber(_) => {}
        }
    }

    /// Writes what is queued; on a full socket, asks epoll for writability.
    fn flush(&mut self, i: usize) -> io::Result<()> {
        let c = &mut self.conns[i];
        while c.out_pos < c.out.len() {
            match c.stream.write(&c.out[c.out_pos..]) {
                Ok(0) => {
                    self.fail(i, "io: connection closed while writing");
                    return Ok(());
                }
                Ok(n) => c.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(i, &format!("io: {}", e.kind()));
                    return Ok(());
                }
            }
        }
        let c = &mut self.conns[i];
        if c.out_pos == c.out.len() {
            c.out.clear();
            c.out_pos = 0;
            // TLS: records the socket did not take yet (never for plain sockets).
            match c.stream.flush_records() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    self.fail(i, &format!("io: {}", e.kind()));
                    return Ok(());
                }
            }
        }
        let c = &mut self.conns[i];
        let pending = c.out_pos < c.out.len() || c.stream.wants_write();
        if pending != c.want_write {
            let mut flags = libc::EPOLLIN as u32;
            if pending {
                flags |= libc::EPOLLOUT as u32;
            }
            self.epoll
                .modify(c.stream.socket().as_raw_fd(), i as u64, flags)?;
            c.want_write = pending;
        }
        Ok(())
    }

    /// Reads what arrived and handles every complete frame.
    fn receive(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            if c.rx_end == c.rx.len() {
                if c.rx_start > 0 {
                    c.rx.copy_within(c.rx_start..c.rx_end, 0);
                    c.rx_end -= c.rx_start;
                    c.rx_start = 0;
                } else {
                    // One frame larger than the buffer: grow to hold it (bounded by the
                    // frame limit, which decoding enforces).
                    let len = c.rx.len();
                    c.rx.resize(len * 2, 0);
                }
            }
            let (end, cap) = (c.rx_end, c.rx.len());
            match c.stream.read(&mut c.rx[end..cap]) {
                Ok(0) => {
                    self.fail(i, "io: connection closed by the server");
                    return;
                }
                Ok(n) => {
                    c.rx_end += n;
                    if !self.handle_frames(i) {
                        return;
                    }
                    // A full read may mean more is waiting; a short one means the socket is
                    // drained (level-triggered epoll reports anything that arrives later).
                    if end + n < cap {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(i, &format!("io: {}", e.kind()));
                    return;
                }
            }
        }
    }

    /// Handles the complete frames in the receive buffer; false if the connection failed.
    fn handle_frames(&mut self, i: usize) -> bool {
        let now = now_ns();
        let shared = self.shared;
        loop {
            let c = &mut self.conns[i];
            let decoded = frame::decode(&c.rx[c.rx_start..c.rx_end]);
            let (f, used) = match decoded {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(FrameError::TooLarge { payload_len }) => {
                    let why = format!("protocol: reply frame of {payload_len} bytes");
                    self.fail(i, &why);
                    return false;
                }
            };
            let (code, payload) = (f.code, &c.rx[c.rx_start + HEADER_BYTES..c.rx_start + used]);
            let handled = match &mut c.role {
                Role::Subscriber(s) => {
                    on_push(s, code, payload, shared, &mut self.local, now);
                    Ok(())
                }
                role => match c.inflight.pop_front() {
                    Some((op, start, _)) => {
                        on_reply(role, op, start, code, payload, shared, &mut self.local, now);
                        Ok(())
                    }
                    None => Err("protocol: a frame arrived with no request outstanding"),
                },
            };
            c.rx_start += used;
            if let Err(why) = handled {
                self.fail(i, why);
                return false;
            }
        }
        let c = &mut self.conns[i];
        if c.rx_start == c.rx_end {
            c.rx_start = 0;
            c.rx_end = 0;
        }
        true
    }

    fn check_finished(&mut self, i: usize) {
        let shared = self.shared;
        let c = &mut self.conns[i];
        let done = match &c.role {
            Role::Producer(p) => p.done_sending && c.inflight.is_empty(),
            Role::Consumer(k) => {
                c.inflight.is_empty() && k.ack_lens.is_empty() && !may_consume(k, shared)
            }
            Role::Subscriber(s) => {
                shared.senders_live.load(Ordering::Relaxed) == 0
                    && s.delivered >= shared.counters.published()
            }
        };
        if done {
            self.finish(i);
        }
    }

    fn finish(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.finished {
            return;
        }
        c.finished = true;
        let _ = self.epoll.delete(c.stream.socket().as_raw_fd());
        let _ = c.stream.socket().shutdown(std::net::Shutdown::Both);
        if matches!(c.role, Role::Producer(_)) {
            self.shared.senders_live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The connection broke: what it had in flight can never be answered.
    fn fail(&mut self, i: usize, why: &str) {
        let c = &mut self.conns[i];
        if c.finished {
            return;
        }
        self.shared
            .error(None, &format!("connection lost ({why})"), 1);
        self.give_up(i, why);
    }

    /// Counts what connection `i` still waits for as errors of kind `why`, then finishes it.
    fn give_up(&mut self, i: usize, why: &str) {
        let shared = self.shared;
        let c = &mut self.conns[i];
        for (op, _, _) in c.inflight.drain(..) {
            shared.error(Some(op), why, 1);
        }
        if let Role::Consumer(k) = &mut c.role {
            if !k.ack_lens.is_empty() {
                let n = k.ack_lens.len() as u64;
                k.ack_lens.clear();
                shared.error(None, "consumed but never acked (run ended)", n);
            }
        }
        if let Role::Producer(p) = &mut c.role {
            p.done_sending = true;
        }
        self.finish(i);
    }

    /// The drain deadline passed: whatever is still outstanding is a timeout.
    fn abandon_all(&mut self) {
        for i in 0..self.conns.len() {
            if !self.conns[i].finished {
                self.give_up(i, "timeout: no reply before the drain deadline");
            }
        }
    }
}

fn pick_slot(cumulative: &[u32], rng: &mut u64) -> usize {
    if cumulative.len() <= 1 {
        return 0;
    }
    let total = *cumulative.last().unwrap() as u64;
    let r = (xorshift(rng) % total) as u32;
    cumulative.iter().position(|&c| r < c).unwrap_or(0)
}

fn may_consume(k: &Consumer, shared: &Shared) -> bool {
    match k.spec.mode {
        ConsumeMode::Follow => {
            let c = &shared.counters;
            shared.senders_live.load(Ordering::Relaxed) > 0
                || Counters::get(&c.consumed) < c.published()
        }
        ConsumeMode::Target(n) => !shared.stopped() && Counters::get(&shared.counters.consumed) < n,
        ConsumeMode::UntilEmpty => !shared.stopped() && !k.saw_empty,
    }
}

#[allow(clippy::too_many_arguments)]
fn on_reply(
    role: &mut Role,
    op: Op,
    start: u64,
    code: u8,
    payload: &[u8],
    shared: &Shared,
    local: &mut Local,
    now: u64,
) {
    let counters = &shared.counters;
    match code {
        status::OK => {
            if let (Op::Consume, Role::Consumer(k)) = (op, &mut *role) {
                let mut n = 0u64;
                let mut ids: Vec<&[u8]> = Vec::new();
                let ack_many = k.spec.ack_many;
                let ok = wire::for_each_consumed(payload, |d| {
                    n += 1;
                    if let Some(id) = d.id {
                        if ack_many {
                            ids.push(id);
                        } else {
                            let before = k.ack_bytes.len();
                            wire::ack_frame(id, &mut k.ack_bytes);
                            k.ack_lens.push_back(k.ack_bytes.len() - before);
                        }
                    }
                    if let (true, Some((sent, _))) = (k.spec.record_e2e, d.stamp) {
                        local.record(Series::EndToEnd, sent, now);
                    }
                });
                if !ids.is_empty() {
                    let before = k.ack_bytes.len();
                    wire::ack_many_frame(&ids, &mut k.ack_bytes);
                    k.ack_lens.push_back(k.ack_bytes.len() - before);
                }
                Counters::add(&counters.consumed, n);
                if !ok {
                    shared.error(Some(op), "protocol: malformed CONSUME reply", 1);
                    return;
                }
                local.record(Series::Consume, start, now);
            } else if op.is_publish() {
                local.record(Series::Publish, start, now);
            } else if op == Op::Ack {
                local.record(Series::Ack, start, now);
                Counters::add(&counters.acked_messages, wire::acked_count(payload));
            }
            Counters::add(&counters.acknowledged[op as usize], 1);
        }
        status::EMPTY if op == Op::Consume => {
            if let Role::Consumer(k) = role {
                k.saw_empty = true;
            }
            Counters::add(&counters.acknowledged[op as usize], 1);
            Counters::add(&counters.empty, 1);
        }
        status::ERROR => {
            let kind = wire::error_kind(&wire::error_text(payload));
            shared.error(Some(op), &format!("server: {kind}"), 1);
        }
        status::NOT_LEADER => shared.error(Some(op), "server: not leader", 1),
        other => shared.error(
            Some(op),
            &format!("protocol: unexpected status 0x{other:02x}"),
            1,
        ),
    }
}

fn on_push(
    s: &mut Subscriber,
    code: u8,
    payload: &[u8],
    shared: &Shared,
    local: &mut Local,
    now: u64,
) {
    let message = (code == status::OK)
        .then(|| wire::read_message(payload))
        .flatten();
    let Some(m) = message else {
        shared.error(None, "protocol: unexpected frame on a subscriber", 1);
        return;
    };
    s.delivered += 1;
    Counters::add(&shared.counters.delivered, 1);
    if let Some((sent, seq)) = m.stamp {
        local.record(Series::Delivery, sent, now);
        // One publisher, so each subscriber must see strictly increasing sequence numbers;
        // anything else is a duplicate or a reordering.
        if s.last_seq.is_some_and(|last| seq <= last) {
            Counters::add(&shared.counters.out_of_order, 1);
        }
        s.last_seq = Some(seq);
    }
}
