//! The gateway scenarios' event loop: one thread per `--cpus` CPU, each driving thousands
//! of WebSocket devices over non-blocking sockets and epoll.
//!
//! Why one loop per thread rather than [`boltq::client::gateway::GatewayClient`] per
//! thread: 10,000 devices would be 10,000 threads (stacks, and a scheduler switching between
//! them on the one core the generator has), and a blocked thread cannot both wait for its
//! `sent` and notice a `record` for another device. Here a device is a small struct (its
//! sockets' buffers are the kernel's; receive bytes go through one per-thread buffer and a
//! device keeps only an incomplete frame), and the open-loop schedule of every device sits
//! in one timer heap, so a loop turn costs what happened, not how many devices exist.
//!
//! A device's life: connect (non-blocking, at most `--connect-concurrency` over all threads
//! in progress, so a 10,000-device start does not overflow the server's accept backlog) →
//! upgrade → `hello` → `welcome` → subscribes and prime sends (setup) → ready. The thread
//! reports setup done, waits for every thread, then runs the scenario: sends on schedule or
//! closed loop, deliveries checked for order and counted, and in `reconnect` the abrupt
//! disconnect, the writes while away, and the resume.
//!
//! Requests on one connection are answered in order (gateway protocol §2.2), so each device
//! keeps a FIFO of what it has in flight and checks every reply's id against its head.

use super::super::engine::WorkerPlan;
use super::super::poll::{self, now_ns, Epoll, Timer};
use super::super::size_dist::{xorshift, SizeDist};
use super::super::stats::{Counters, Hists, Op, Series, Shared, MERGE_EVERY_NS};
use super::super::transport::Stream;
use super::proto::{self, Inbound, SendTemplate, Stamp, StampKind};
use super::ws::{self, opcode, Url};
use boltq::client::TlsSession;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};

/// Bytes read per `read` call into the thread's receive buffer.
const READ_CHUNK_BYTES: usize = 256 * 1024;
/// Longest the loop sleeps without looking at the run's flags.
const IDLE_WAIT_MS: u64 = 20;
/// How often requests are checked against `--request-timeout-secs`.
const TIMEOUT_SCAN_NS: u64 = 100_000_000;
const TIMER_TOKEN: u64 = u64::MAX;

/// One simulated device (or, in `reconnect`, one connection of the writer user).
pub struct DeviceSpec {
    /// Global index, written into the stamps of what this device sends.
    pub index: u32,
    pub device: String,
    /// HS256 token for this device's user.
    pub token: String,
    /// Topics to subscribe to, and whether each is the user's inbox (pointer records).
    pub subs: Vec<(String, bool)>,
    /// Conversations (indices into [`GwRun::templates`]) this device sends to, round-robin.
    pub targets: Vec<usize>,
    /// Conversations this device sends one unmeasured message to during setup.
    pub primes: Vec<usize>,
    /// `reconnect`: a device that goes away and comes back (not a writer). In setup it
    /// commits past its conversation's prime, so it resumes right after it.
    pub roams: bool,
    /// Open loop: offset of the first send (spreads devices over the interval).
    pub phase_ns: u64,
}

/// `reconnect`'s shape.
pub struct ReconnectPlan {
    /// Devices that go away and resume.
    pub devices: u64,
    /// Messages written to each of them while away.
    pub away: u64,
}

/// What every thread of one gateway run shares.
pub struct GwRun {
    pub url: Url,
    pub addr: SocketAddr,
    /// `wss://`: the TLS settings every device's session starts from.
    pub tls: Option<Arc<TlsSession>>,
    pub templates: Vec<SendTemplate>,
    /// Payload sizes, drawn per send from the device's PRNG.
    pub sizes: SizeDist,
    /// Filler for the largest size ([`proto::filler_b64`]).
    pub filler_b64: String,
    /// Open loop: nanoseconds between one device's sends; `None` = closed loop.
    pub interval_ns: Option<u64>,
    /// Sends in flight per sending device.
    pub depth: usize,
    /// Devices in connect/upgrade/hello/setup at once, per thread.
    pub connect_concurrency: usize,
    pub reconnect: Option<ReconnectPlan>,
    /// Deliveries each acknowledged send must produce (other members subscribed to it).
    pub recipients: u64,
    /// Whether senders are subscribed to what they send to (and so get an echo each).
    pub echoes: bool,
    /// Inbox pointer records each send (prime sends too) must produce, when devices
    /// subscribe to their inboxes; 0 otherwise.
    pub pointers_per_send: u64,
    pub counters: GwCounters,
}

/// Counts beyond [`Counters`].
#[derive(Default)]
pub struct GwCounters {
    /// A sender's own message coming back on its subscription.
    pub echoes: AtomicU64,
    /// Records at or below the subscription's last seq (repeated).
    pub duplicates: AtomicU64,
    /// Sequence numbers skipped within a subscription (lost records).
    pub holes: AtomicU64,
    /// Inbox pointer records received.
    pub pointers: AtomicU64,
    pub prime_sent: AtomicU64,
    pub prime_acked: AtomicU64,
    /// Prime messages received by anyone (setup traffic, not counted as deliveries).
    pub prime_deliveries: AtomicU64,
    /// `sent` replies with `duplicate: true` (the server's dedup window merged a send).
    pub sent_duplicates: AtomicU64,
    /// `reconnect`: welcomes that resumed the session, and those that did not.
    pub resumed: AtomicU64,
    pub not_resumed: AtomicU64,
    /// `reconnect`: devices that received everything written while they were away.
    pub caught_up: AtomicU64,
    /// `reconnect`: devices disconnected so far.
    pub disconnected: AtomicU64,
    /// `reconnect`: when the mass reconnect started (0 = not yet).
    pub reconnect_start_ns: AtomicU64,
    /// `reconnect`: when the last device caught up.
    pub last_caught_up_ns: AtomicU64,
}

impl GwRun {
    /// Every acknowledged send has produced every delivery, echo and pointer it must.
    pub fn all_delivered(&self, shared: &Shared) -> bool {
        let c = &self.counters;
        let published = shared.counters.published();
        let all_sends = published + Counters::get(&c.prime_acked);
        Counters::get(&shared.counters.delivered) >= published * self.recipients
            && (!self.echoes || Counters::get(&c.echoes) >= published)
            && Counters::get(&c.pointers) >= all_sends * self.pointers_per_send
    }
}

// ---- one device --------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a connect slot.
    Queued,
    Connecting,
    Upgrading,
    Hello,
    /// Subscribes, primes and (reconnect) the commit outstanding.
    Setup,
    Ready,
    /// `reconnect`: disconnected on purpose, waiting for the mass reconnect.
    Away,
    Done,
}

impl Phase {
    /// Holding one of the thread's connect slots.
    fn holds_slot(self) -> bool {
        matches!(
            self,
            Phase::Connecting | Phase::Upgrading | Phase::Hello | Phase::Setup
        )
    }
}

struct Pending {
    op: Op,
    id: u64,
    /// Latency is measured from here (the intended send time in open loop).
    start: u64,
    /// When it was written; request timeouts count from here.
    written: u64,
    prime: bool,
}

struct Sub {
    topic: String,
    inbox: bool,
    /// Last seq received; set from the subscribe `ack` (its `from_seq` - 1).
    last_seq: Option<u64>,
}

struct Device {
    spec: DeviceSpec,
    stream: Option<Stream>,
    phase: Phase,
    /// Second connection of a `reconnect` device: hello presents the resume token.
    reconnecting: bool,
    upgrade_key: String,
    out: Vec<u8>,
    out_pos: usize,
    want_write: bool,
    /// Received bytes not yet a complete frame (usually empty).
    rx: Vec<u8>,
    /// A fragmented message being assembled.
    frag: Vec<u8>,
    frag_open: bool,
    inflight: VecDeque<Pending>,
    next_id: u64,
    subs: Vec<Sub>,
    setup_pending: u32,
    /// `reconnect` setup: waiting for its conversation's prime, to commit past it.
    need_prime: bool,
    resume: Option<String>,
    seq: u64,
    next_due: u64,
    scheduled: bool,
    sends_inflight: usize,
    done_sending: bool,
    sender_counted: bool,
    away_received: u64,
    rng: u64,
}

impl Device {
    fn new(spec: DeviceSpec) -> Device {
        let subs = spec
            .subs
            .iter()
            .map(|(topic, inbox)| Sub {
                topic: topic.clone(),
                inbox: *inbox,
                last_seq: None,
            })
            .collect();
        Device {
            rng: 0x2545_f491_4f6c_dd1d ^ (u64::from(spec.index) + 1).wrapping_mul(0x9e37_79b9),
            spec,
            stream: None,
            phase: Phase::Queued,
            reconnecting: false,
            upgrade_key: String::new(),
            out: Vec::new(),
            out_pos: 0,
            want_write: false,
            rx: Vec::new(),
            frag: Vec::new(),
            frag_open: false,
            inflight: VecDeque::new(),
            next_id: 0,
            subs,
            setup_pending: 0,
            need_prime: false,
            resume: None,
            seq: 0,
            next_due: 0,
            scheduled: false,
            sends_inflight: 0,
            done_sending: false,
            sender_counted: false,
            away_received: 0,
        }
    }

    fn sends(&self) -> bool {
        !self.spec.targets.is_empty()
    }

    fn random(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Frames `json` as a masked text message into the output buffer.
    fn queue_text(&mut self, json: &[u8]) {
        let mask = (self.random() as u32).to_ne_bytes();
        ws::encode_client_frame(opcode::TEXT, json, mask, &mut self.out);
    }

    /// Queues a send to conversation `conv` (the next sequence number, a size drawn from the
    /// run's distribution, `kind` and `start` in its stamp) and expects its `sent`; `json` is
    /// the worker's scratch buffer. Returns the payload size.
    fn queue_send(
        &mut self,
        run: &GwRun,
        json: &mut Vec<u8>,
        conv: usize,
        kind: StampKind,
        start: u64,
        now: u64,
    ) -> usize {
        self.seq += 1;
        let id = self.take_id();
        let stamp = Stamp {
            kind,
            sender: self.spec.index,
            seq: self.seq,
            sent_ns: start,
        };
        json.clear();
        let size = run.sizes.sample(&mut self.rng) as usize;
        run.templates[conv].write(json, &stamp, size, &run.filler_b64, &self.spec.device, id);
        self.queue_text(json);
        self.inflight.push_back(Pending {
            op: Op::Send,
            id,
            start,
            written: now,
            prime: kind == StampKind::Prime,
        });
        size
    }

    /// Queues a request written with id `id` (from [`Device::take_id`]) and expects its reply.
    fn request(&mut self, op: Op, id: u64, json: &str, now: u64) {
        self.queue_text(json.as_bytes());
        self.inflight.push_back(Pending {
            op,
            id,
            start: now,
            written: now,
            prime: false,
        });
    }
}

// ---- the loop ----------------------------------------------------------------------------------

/// Per-thread measurements, merged into [`Shared`] now and then.
struct Local {
    hists: Hists,
    /// Samples that started before this are not recorded (setup, warm-up).
    record_from: u64,
}

impl Local {
    fn record(&mut self, s: Series, start_ns: u64, now: u64) {
        if start_ns >= self.record_from {
            self.hists.record(s, now.saturating_sub(start_ns));
        }
    }
}

/// Runs one loop thread: set up its devices (reporting the outcome on `ready`), wait at
/// `go`, then run the scenario until its devices are done or the drain deadline passes.
pub fn run_worker(
    plan: WorkerPlan<DeviceSpec>,
    run: Arc<GwRun>,
    shared: Arc<Shared>,
    ready: mpsc::Sender<Result<(), String>>,
    go: Arc<Barrier>,
) {
    if let Some(cpu) = plan.cpu {
        if let Err(e) = super::super::cpus::pin_current_thread(&[cpu]) {
            let _ = ready.send(Err(format!("cannot pin a thread to CPU {cpu}: {e}")));
            go.wait();
            return;
        }
    }
    let mut worker = match Worker::new(plan.conns, &run, &shared) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(format!("generator: {e}")));
            go.wait();
            return;
        }
    };
    let setup = worker.setup();
    let _ = ready.send(setup);
    go.wait();
    if shared.stopped() && shared.drain_deadline() == 0 {
        return; // setup failed somewhere: the run is called off.
    }
    if let Err(e) = worker.run() {
        shared.error(None, &format!("generator: {e}"), 1);
    }
}

struct Worker<'a> {
    devs: Vec<Device>,
    run: &'a GwRun,
    shared: &'a Shared,
    local: Local,
    epoll: Epoll,
    timer: Timer,
    /// Devices waiting for a connect slot.
    queue: VecDeque<usize>,
    slots_used: usize,
    /// Open-loop schedule: (due, device).
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    scratch: Vec<u8>,
    json: Vec<u8>,
    live: usize,
    setup_left: usize,
    setup_error: Option<String>,
    running: bool,
    saw_stop: bool,
    disconnected: bool,
    writers_started: bool,
    reconnect_started: bool,
}

impl<'a> Worker<'a> {
    fn new(specs: Vec<DeviceSpec>, run: &'a GwRun, shared: &'a Shared) -> io::Result<Worker<'a>> {
        let epoll = Epoll::new()?;
        let timer = Timer::new()?;
        epoll.add(timer.fd(), TIMER_TOKEN, libc::EPOLLIN as u32)?;
        let devs: Vec<Device> = specs.into_iter().map(Device::new).collect();
        let n = devs.len();
        Ok(Worker {
            devs,
            run,
            shared,
            local: Local {
                hists: Hists::default(),
                record_from: u64::MAX,
            },
            epoll,
            timer,
            queue: (0..n).collect(),
            slots_used: 0,
            heap: BinaryHeap::new(),
            scratch: vec![0; READ_CHUNK_BYTES],
            json: Vec::with_capacity(4096),
            live: n,
            setup_left: n,
            setup_error: None,
            running: false,
            saw_stop: false,
            disconnected: false,
            writers_started: false,
            reconnect_started: false,
        })
    }

    /// Connects every device and runs its setup; Err names the first device that failed.
    fn setup(&mut self) -> Result<(), String> {
        let mut last_scan = now_ns();
        loop {
            let now = now_ns();
            self.start_connects(now);
            if let Some(e) = self.setup_error.take() {
                return Err(e);
            }
            if self.setup_left == 0 {
                return Ok(());
            }
            if now - last_scan >= TIMEOUT_SCAN_NS {
                self.scan_timeouts(now);
                last_scan = now;
            }
            self.poll(IDLE_WAIT_MS as i32)
                .map_err(|e| format!("generator: {e}"))?;
        }
    }

    fn run(&mut self) -> io::Result<()> {
        self.running = true;
        self.local.record_from = self.shared.warmup_end();
        let start = now_ns();
        for i in 0..self.devs.len() {
            let d = &mut self.devs[i];
            d.next_due = start + d.spec.phase_ns;
            if !d.sends() {
                d.done_sending = true;
            }
        }
        if self.run.reconnect.is_none() {
            for i in 0..self.devs.len() {
                self.fill(i, start);
                self.flush(i);
            }
        }
        let mut last_scan = start;
        let mut last_merge = start;
        loop {
            let now = now_ns();
            if now >= self.shared.drain_deadline() {
                self.abandon_all();
                break;
            }
            if !self.saw_stop && self.shared.stopped() {
                self.saw_stop = true;
                for i in 0..self.devs.len() {
                    self.fill(i, now);
                }
            }
            if self.run.reconnect.is_some() {
                self.advance_reconnect(now);
            }
            while let Some(&Reverse((due, i))) = self.heap.peek() {
                if due > now {
                    break;
                }
                self.heap.pop();
                self.devs[i].scheduled = false;
                self.fill(i, now);
                self.flush(i);
            }
            self.start_connects(now);
            if now - last_scan >= TIMEOUT_SCAN_NS {
                self.scan_timeouts(now);
                last_scan = now;
            }
            if now - last_merge >= MERGE_EVERY_NS {
                self.merge();
                last_merge = now;
            }
            if self.finished() {
                break;
            }
            if let Some(&Reverse((due, _))) = self.heap.peek() {
                self.timer.arm(due)?;
            }
            let until_deadline_ms = self.shared.drain_deadline().saturating_sub(now) / 1_000_000;
            self.poll(until_deadline_ms.min(IDLE_WAIT_MS) as i32)?;
        }
        for i in 0..self.devs.len() {
            self.close(i);
        }
        self.merge();
        Ok(())
    }

    /// Whether this thread's part of the run is over.
    fn finished(&mut self) -> bool {
        if self.live == 0 {
            return true;
        }
        if self.run.reconnect.is_some() {
            return false; // devices finish one by one, when caught up
        }
        self.shared.senders_live.load(Ordering::Relaxed) == 0 && self.run.all_delivered(self.shared)
    }

    fn merge(&mut self) {
        self.shared
            .hists
            .lock()
            .unwrap()
            .drain_into(&mut self.local.hists);
    }

    fn poll(&mut self, timeout_ms: i32) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
        let n = self.epoll.wait(&mut events, timeout_ms)?.len();
        for ev in &events[..n] {
            let (token, flags) = (ev.u64, ev.events);
            if token == TIMER_TOKEN {
                self.timer.consume();
                continue;
            }
            let i = token as usize;
            match self.devs[i].phase {
                Phase::Done | Phase::Away | Phase::Queued => continue,
                Phase::Connecting => {
                    self.on_connected(i);
                    continue;
                }
                _ => {}
            }
            if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                self.receive(i);
            }
            if flags & libc::EPOLLOUT as u32 != 0 {
                self.flush(i);
            }
        }
        Ok(())
    }

    // ---- connecting ------------------------------------------------------------------------

    fn start_connects(&mut self, now: u64) {
        while self.slots_used < self.run.connect_concurrency {
            let Some(i) = self.queue.pop_front() else {
                return;
            };
            self.start_connect(i, now);
        }
    }

    fn start_connect(&mut self, i: usize, now: u64) {
        self.slots_used += 1;
        let d = &mut self.devs[i];
        d.phase = Phase::Connecting;
        let id = d.take_id();
        d.inflight.push_back(Pending {
            op: Op::Hello,
            id,
            start: now,
            written: now,
            prime: false,
        });
        Counters::add(&self.shared.counters.sent[Op::Hello as usize], 1);
        let opened = poll::connect_nonblocking(&self.run.addr).and_then(|s| {
            s.set_nodelay(true)?;
            let flags = (libc::EPOLLIN | libc::EPOLLOUT) as u32;
            self.epoll.add(s.as_raw_fd(), i as u64, flags)?;
            Ok(s)
        });
        match opened {
            Ok(s) => self.devs[i].stream = Some(Stream::Plain(s)),
            Err(e) => self.fail(i, &format!("io: connect: {}", e.kind())),
        }
    }

    fn on_connected(&mut self, i: usize) {
        let d = &mut self.devs[i];
        let err = d.stream.as_ref().map(|s| s.socket().take_error());
        match err {
            Some(Ok(None)) => {}
            Some(Ok(Some(e))) | Some(Err(e)) => {
                return self.fail(i, &format!("io: connect: {}", e.kind()));
            }
            None => return,
        }
        if let Some(session) = &self.run.tls {
            if let Some(Stream::Plain(sock)) = d.stream.take() {
                // The handshake runs as the upgrade request is flushed and the answer read.
                match Stream::start_tls(sock, session) {
                    Ok(s) => d.stream = Some(s),
                    Err(e) => return self.fail(i, &format!("tls: {e}")),
                }
            }
        }
        let mut random = [0u8; 16];
        random[..8].copy_from_slice(&d.random().to_ne_bytes());
        random[8..].copy_from_slice(&d.random().to_ne_bytes());
        d.upgrade_key = ws::upgrade_key(random);
        let request = ws::upgrade_request(&self.run.url, &d.spec.token, &d.upgrade_key);
        d.out.extend_from_slice(&request);
        d.phase = Phase::Upgrading;
        d.want_write = true; // registered for EPOLLOUT while connecting
        self.flush(i);
    }

    // ---- bytes in and out ------------------------------------------------------------------

    /// Writes what is queued; on a full socket, asks epoll for writability.
    fn flush(&mut self, i: usize) {
        let d = &mut self.devs[i];
        let Some(stream) = d.stream.as_mut() else {
            return;
        };
        while d.out_pos < d.out.len() {
            match stream.write(&d.out[d.out_pos..]) {
                Ok(0) => return self.fail(i, "io: connection closed while writing"),
                Ok(n) => d.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(i, &format!("io: {}", e.kind())),
            }
        }
        if d.out_pos == d.out.len() {
            d.out.clear();
            d.out_pos = 0;
            // TLS: records the socket did not take yet (never for plain sockets).
            match stream.flush_records() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return self.fail(i, &format!("io: {}", e.kind())),
            }
        }
        let pending = d.out_pos < d.out.len() || stream.wants_write();
        if pending != d.want_write {
            let mut flags = libc::EPOLLIN as u32;
            if pending {
                flags |= libc::EPOLLOUT as u32;
            }
            let fd = stream.socket().as_raw_fd();
            d.want_write = pending;
            if let Err(e) = self.epoll.modify(fd, i as u64, flags) {
                self.fail(i, &format!("io: epoll: {}", e.kind()));
            }
        }
    }

    fn receive(&mut self, i: usize) {
        let mut scratch = std::mem::take(&mut self.scratch);
        while let Some(stream) = self.devs[i].stream.as_mut() {
            match stream.read(&mut scratch) {
                Ok(0) => {
                    self.fail(i, "io: connection closed by the server");
                    break;
                }
                Ok(n) => {
                    if !self.consume(i, &scratch[..n]) || n < scratch.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    // What the TLS session refused (a certificate, a bad record): named.
                    self.fail(i, &format!("tls: {e}"));
                    break;
                }
                Err(e) => {
                    self.fail(i, &format!("io: {}", e.kind()));
                    break;
                }
            }
        }
        self.scratch = scratch;
        self.flush(i);
    }

    /// Handles bytes just read; false if the device failed.
    fn consume(&mut self, i: usize, bytes: &[u8]) -> bool {
        let d = &mut self.devs[i];
        if d.phase == Phase::Upgrading {
            d.rx.extend_from_slice(bytes);
            match ws::check_upgrade_answer(&d.rx, &d.upgrade_key) {
                Ok(None) => return true,
                Ok(Some(head)) => {
                    d.rx.drain(..head);
                    d.phase = Phase::Hello;
                    let hello = proto::hello(d.inflight[0].id, &d.spec.device, d.resume.as_deref());
                    d.queue_text(hello.as_bytes());
                    let rest = std::mem::take(&mut d.rx);
                    return self.frames(i, &rest);
                }
                Err(e) => {
                    self.fail(i, &e);
                    return false;
                }
            }
        }
        if d.rx.is_empty() {
            self.frames(i, bytes)
        } else {
            let mut buf = std::mem::take(&mut d.rx);
            buf.extend_from_slice(bytes);
            self.frames(i, &buf)
        }
    }

    /// Handles the complete frames in `buf` and keeps the incomplete rest; false if the
    /// device failed.
    fn frames(&mut self, i: usize, buf: &[u8]) -> bool {
        let mut used = 0;
        while self.devs[i].phase != Phase::Done {
            match ws::decode_server_frame(&buf[used..]) {
                Ok(None) => {
                    self.devs[i].rx.extend_from_slice(&buf[used..]);
                    return true;
                }
                Ok(Some((frame, n))) => {
                    used += n;
                    self.frame(i, frame);
                }
                Err(e) => {
                    self.fail(i, &format!("protocol: {e}"));
                    return false;
                }
            }
        }
        false
    }

    fn frame(&mut self, i: usize, f: ws::Frame<'_>) {
        let d = &mut self.devs[i];
        match f.opcode {
            opcode::PING => {
                let mask = (d.random() as u32).to_ne_bytes();
                ws::encode_client_frame(opcode::PONG, f.payload, mask, &mut d.out);
            }
            opcode::PONG => {}
            opcode::CLOSE => {
                let (code, reason) = ws::close_code(f.payload);
                self.fail(i, &format!("closed by the server: {code} {reason}"));
            }
            opcode::CONTINUATION => {
                if !d.frag_open {
                    return self.fail(i, "protocol: continuation without a first fragment");
                }
                if d.frag.len() + f.payload.len() > ws::MESSAGE_BYTES_MAX {
                    return self.fail(i, "protocol: fragmented message too large");
                }
                d.frag.extend_from_slice(f.payload);
                if f.fin {
                    let msg = std::mem::take(&mut d.frag);
                    d.frag_open = false;
                    self.message(i, &msg);
                }
            }
            _ => {
                if d.frag_open {
                    return self.fail(i, "protocol: new message inside a fragmented one");
                }
                if f.fin {
                    self.message(i, f.payload);
                } else {
                    d.frag.extend_from_slice(f.payload);
                    d.frag_open = true;
                }
            }
        }
    }

    // ---- gateway frames --------------------------------------------------------------------

    fn message(&mut self, i: usize, bytes: &[u8]) {
        let now = now_ns();
        let m = match proto::parse(bytes) {
            Ok(m) => m,
            Err(e) => return self.fail(i, &format!("protocol: {e}")),
        };
        match m.op.as_ref() {
            "record" if m.id.is_none() => self.on_record(i, &m, now),
            "sent" => self.on_sent(i, &m, now),
            "ack" => self.on_ack(i, &m),
            "welcome" => self.on_welcome(i, &m, now),
            "error" => self.on_error(i, &m, now),
            "gap" => self.shared.error(None, "server: history_gap", 1),
            "pong" => {}
            other => {
                let why = format!("protocol: unexpected {other:?} frame");
                self.shared.error(None, &why, 1);
            }
        }
    }

    /// The request a reply answers: the head of the FIFO, whose id must match.
    fn pop_reply(&mut self, i: usize, m: &Inbound<'_>) -> Option<Pending> {
        let d = &mut self.devs[i];
        let id = proto::numeric_id(m.id.as_deref());
        match d.inflight.front() {
            Some(p) if Some(p.id) == id => d.inflight.pop_front(),
            front => {
                let why = format!(
                    "protocol: {} with id {:?} while waiting for {:?}",
                    m.op,
                    m.id,
                    front.map(|p| p.id)
                );
                self.fail(i, &why);
                None
            }
        }
    }

    fn on_welcome(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        Counters::add(&self.shared.counters.acknowledged[Op::Hello as usize], 1);
        self.local.record(Series::Hello, p.start, now);
        let d = &mut self.devs[i];
        d.resume = m.token.clone();
        if d.reconnecting {
            if m.resumed {
                Counters::add(&self.run.counters.resumed, 1);
                return self.become_ready(i, now);
            }
            Counters::add(&self.run.counters.not_resumed, 1);
            self.shared
                .error(None, "resume refused (a fresh session)", 1);
        }
        self.start_setup(i, now);
    }

    /// Subscribes (and, first time round, primes).
    fn start_setup(&mut self, i: usize, now: u64) {
        let d = &mut self.devs[i];
        d.phase = Phase::Setup;
        let mut subscribes = 0;
        for s in 0..d.subs.len() {
            let id = d.take_id();
            // Inboxes, and the conversations of roaming devices, from their start: a
            // pointer or prime written before this subscribe (by another device) must
            // arrive too.
            let from = (d.subs[s].inbox || d.spec.roams).then_some(1);
            let frame = proto::subscribe(id, &d.subs[s].topic, from);
            d.request(Op::Subscribe, id, &frame, now);
            subscribes += 1;
        }
        Counters::add(
            &self.shared.counters.sent[Op::Subscribe as usize],
            subscribes,
        );
        d.setup_pending = subscribes as u32;
        if !d.reconnecting {
            for k in 0..d.spec.primes.len() {
                let conv = d.spec.primes[k];
                d.queue_send(self.run, &mut self.json, conv, StampKind::Prime, now, now);
                d.setup_pending += 1;
                Counters::add(&self.run.counters.prime_sent, 1);
            }
            if d.spec.roams {
                d.need_prime = true;
                d.setup_pending += 1;
            }
        }
        self.maybe_ready(i, now);
    }

    fn maybe_ready(&mut self, i: usize, now: u64) {
        if self.devs[i].phase == Phase::Setup && self.devs[i].setup_pending == 0 {
            self.become_ready(i, now);
        }
    }

    fn become_ready(&mut self, i: usize, now: u64) {
        let d = &mut self.devs[i];
        if d.phase.holds_slot() {
            self.slots_used -= 1;
        }
        d.phase = Phase::Ready;
        if !self.running {
            self.setup_left -= 1;
        } else {
            self.check_caught_up(i, now);
            self.fill(i, now);
        }
    }

    fn on_ack(&mut self, i: usize, m: &Inbound<'_>) {
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        let now = now_ns();
        match p.op {
            Op::Subscribe => {
                Counters::add(
                    &self.shared.counters.acknowledged[Op::Subscribe as usize],
                    1,
                );
                let d = &mut self.devs[i];
                let topic = m.topic.as_deref().unwrap_or("");
                if let Some(s) = d.subs.iter_mut().find(|s| s.topic == topic) {
                    if s.last_seq.is_none() {
                        s.last_seq = Some(m.from_seq.unwrap_or(1).saturating_sub(1));
                    }
                }
            }
            Op::Commit => {
                Counters::add(&self.shared.counters.acknowledged[Op::Commit as usize], 1);
            }
            other => {
                let why = format!("protocol: ack for a {} request", other.name());
                return self.fail(i, &why);
            }
        }
        let d = &mut self.devs[i];
        d.setup_pending = d.setup_pending.saturating_sub(1);
        self.maybe_ready(i, now);
    }

    fn on_sent(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        if m.sent.as_ref().is_some_and(|s| s.duplicate) {
            Counters::add(&self.run.counters.sent_duplicates, 1);
        }
        if p.prime {
            Counters::add(&self.run.counters.prime_acked, 1);
            let d = &mut self.devs[i];
            d.setup_pending = d.setup_pending.saturating_sub(1);
            return self.maybe_ready(i, now);
        }
        Counters::add(&self.shared.counters.acknowledged[Op::Send as usize], 1);
        self.local.record(Series::Send, p.start, now);
        self.devs[i].sends_inflight -= 1;
        self.fill(i, now);
    }

    fn on_error(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let kind = m
            .error
            .as_ref()
            .map(|e| e.kind())
            .unwrap_or_else(|| "server: error without a body".into());
        if m.id.is_none() {
            return self.shared.error(None, &kind, 1);
        }
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        if p.op == Op::Send && !p.prime {
            self.shared.error(Some(Op::Send), &kind, 1);
            self.devs[i].sends_inflight -= 1;
            return self.fill(i, now);
        }
        // A setup step was refused: the device cannot take part.
        self.devs[i].inflight.push_front(p);
        self.fail(i, &kind);
    }

    fn on_record(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let topic = m.topic.as_deref().unwrap_or("");
        let Some(s) = self.devs[i].subs.iter().position(|s| s.topic == topic) else {
            let why = format!("protocol: record for a topic not subscribed ({topic})");
            return self.shared.error(None, &why, 1);
        };
        let run = self.run;
        let c = &run.counters;
        let roaming = run.reconnect.is_some();
        let (mut delivered, mut echoes, mut primes) = (0u64, 0u64, 0u64);
        let mut commit_at = None;
        for r in &m.records {
            let d = &mut self.devs[i];
            let sub = &mut d.subs[s];
            let last = sub.last_seq.unwrap_or(r.seq.saturating_sub(1));
            if r.seq <= last {
                Counters::add(&c.duplicates, 1);
                continue;
            }
            if r.seq > last + 1 {
                Counters::add(&c.holes, r.seq - last - 1);
            }
            sub.last_seq = Some(r.seq);
            if sub.inbox {
                Counters::add(&c.pointers, 1);
                continue;
            }
            let stamp = r.payload.as_deref().and_then(Stamp::from_payload_b64);
            let Some(stamp) = stamp else {
                self.shared
                    .error(None, "protocol: record without a bench stamp", 1);
                continue;
            };
            match stamp.kind {
                StampKind::Prime => {
                    primes += 1;
                    if d.need_prime {
                        d.need_prime = false;
                        commit_at = Some(r.seq + 1);
                    }
                }
                StampKind::Measured if stamp.sender == d.spec.index => echoes += 1,
                StampKind::Measured => {
                    delivered += 1;
                    if !roaming {
                        self.local.record(Series::Delivery, stamp.sent_ns, now);
                    }
                    if d.reconnecting {
                        d.away_received += 1;
                    }
                }
            }
        }
        Counters::add(&self.shared.counters.delivered, delivered);
        Counters::add(&c.echoes, echoes);
        Counters::add(&c.prime_deliveries, primes);
        if let Some(seq) = commit_at {
            // The position a roaming device resumes from: everything up to its prime.
            let d = &mut self.devs[i];
            let id = d.take_id();
            let frame = proto::commit(id, topic, seq);
            d.request(Op::Commit, id, &frame, now);
            Counters::add(&self.shared.counters.sent[Op::Commit as usize], 1);
        }
        self.check_caught_up(i, now);
    }

    // ---- sending -----------------------------------------------------------------------------

    /// Queues as many sends as the device's window, schedule and the run allow.
    fn fill(&mut self, i: usize, now: u64) {
        let d = &mut self.devs[i];
        if d.phase != Phase::Ready || d.done_sending {
            return self.sender_done_check(i);
        }
        let writer = self.run.reconnect.is_some();
        if writer && !self.writers_started {
            return;
        }
        let shared = self.shared;
        let (mut sent, mut bytes) = (0u64, 0u64);
        while d.sends_inflight < self.run.depth {
            if writer {
                let total =
                    self.run.reconnect.as_ref().map_or(0, |r| r.away) * d.spec.targets.len() as u64;
                if d.seq >= total {
                    d.done_sending = true;
                    break;
                }
            } else if shared.stopped() {
                d.done_sending = true;
                if let Some(interval) = self.run.interval_ns {
                    // Scheduled before the stop but never sent: report, don't hide.
                    let stop = shared.stop_ns.load(Ordering::Relaxed);
                    if d.next_due < stop {
                        let missed = (stop - d.next_due) / interval + 1;
                        Counters::add(&shared.counters.unsent_scheduled, missed);
                    }
                }
                break;
            }
            let start = match self.run.interval_ns {
                Some(interval) if !writer => {
                    if d.next_due > now {
                        if !d.scheduled {
                            d.scheduled = true;
                            self.heap.push(Reverse((d.next_due, i)));
                        }
                        break;
                    }
                    let t = d.next_due;
                    d.next_due += interval;
                    t
                }
                _ => now,
            };
            if !writer && !shared.claim_send() {
                d.done_sending = true;
                break;
            }
            let conv = d.spec.targets[d.seq as usize % d.spec.targets.len()];
            let size = d.queue_send(
                self.run,
                &mut self.json,
                conv,
                StampKind::Measured,
                start,
                now,
            );
            bytes += size as u64;
            if self.run.interval_ns.is_some() && !writer {
                self.local.record(Series::SendLag, start, now);
            }
            d.sends_inflight += 1;
            sent += 1;
        }
        let counters = &shared.counters;
        Counters::add(&counters.sent[Op::Send as usize], sent);
        Counters::add(&counters.payload_messages, sent);
        Counters::add(&counters.payload_bytes, bytes);
        self.sender_done_check(i);
    }

    /// A sender that will send nothing more and has every reply: one fewer live sender.
    /// Writers (`reconnect`) then close; chat devices stay to receive.
    fn sender_done_check(&mut self, i: usize) {
        let d = &mut self.devs[i];
        if !d.sends() || d.sender_counted || !d.done_sending || d.sends_inflight > 0 {
            return;
        }
        d.sender_counted = true;
        self.shared.senders_live.fetch_sub(1, Ordering::Relaxed);
        if self.run.reconnect.is_some() && !d.spec.roams {
            self.close(i);
        }
    }

    // ---- reconnect -----------------------------------------------------------------------------

    /// Drives `reconnect`'s phases: every roaming device drops its connection abruptly;
    /// once all threads have, the writers write; once every write is acknowledged, every
    /// roaming device reconnects with its resume token.
    fn advance_reconnect(&mut self, now: u64) {
        let run = self.run;
        let Some(plan) = run.reconnect.as_ref() else {
            return;
        };
        let c = &run.counters;
        if !self.disconnected {
            self.disconnected = true;
            let mut n = 0;
            for i in 0..self.devs.len() {
                if self.devs[i].spec.roams && self.devs[i].phase == Phase::Ready {
                    self.drop_abruptly(i);
                    n += 1;
                }
            }
            Counters::add(&c.disconnected, n);
        }
        if !self.writers_started && Counters::get(&c.disconnected) >= plan.devices {
            self.writers_started = true;
            for i in 0..self.devs.len() {
                if !self.devs[i].spec.roams {
                    self.fill(i, now);
                    self.flush(i);
                }
            }
        }
        if self.writers_started
            && !self.reconnect_started
            && self.shared.senders_live.load(Ordering::Relaxed) == 0
        {
            self.reconnect_started = true;
            let _ =
                c.reconnect_start_ns
                    .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
            for i in 0..self.devs.len() {
                if self.devs[i].phase == Phase::Away {
                    self.devs[i].reconnecting = true;
                    self.devs[i].phase = Phase::Queued;
                    self.queue.push_back(i);
                }
            }
        }
    }

    /// Closes with a RST and no Close frame: a phone that lost its network.
    fn drop_abruptly(&mut self, i: usize) {
        let d = &mut self.devs[i];
        if let Some(s) = d.stream.take() {
            let _ = self.epoll.delete(s.socket().as_raw_fd());
            let _ = poll::reset_on_close(s.socket().as_raw_fd());
        }
        d.phase = Phase::Away;
        d.out.clear();
        d.out_pos = 0;
        d.want_write = false;
        d.rx.clear();
        d.frag.clear();
        d.frag_open = false;
    }

    fn check_caught_up(&mut self, i: usize, now: u64) {
        let run = self.run;
        let Some(plan) = run.reconnect.as_ref() else {
            return;
        };
        let d = &self.devs[i];
        if !d.reconnecting || d.phase != Phase::Ready || d.away_received < plan.away {
            return;
        }
        let c = &run.counters;
        Counters::add(&c.caught_up, 1);
        c.last_caught_up_ns.fetch_max(now, Ordering::Relaxed);
        let start = c.reconnect_start_ns.load(Ordering::Relaxed);
        self.local.record(Series::CatchUp, start, now);
        self.close(i);
    }

    // ---- endings -------------------------------------------------------------------------------

    /// Closes a device that is done (without counting anything).
    fn close(&mut self, i: usize) {
        let d = &mut self.devs[i];
        if d.phase == Phase::Done {
            return;
        }
        if d.phase.holds_slot() {
            self.slots_used -= 1;
        }
        if let Some(s) = d.stream.take() {
            let _ = self.epoll.delete(s.socket().as_raw_fd());
            let _ = s.socket().shutdown(std::net::Shutdown::Both);
        }
        d.phase = Phase::Done;
        self.live -= 1;
        if !d.sender_counted && d.sends() && self.running {
            d.sender_counted = true;
            self.shared.senders_live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The device broke: during setup that fails the run; later, what it had in flight
    /// counts as errors of kind `why`.
    fn fail(&mut self, i: usize, why: &str) {
        let d = &mut self.devs[i];
        if d.phase == Phase::Done {
            return;
        }
        if !self.running {
            let name = d.spec.device.clone();
            self.setup_error
                .get_or_insert_with(|| format!("device {name}: {why}"));
        } else {
            self.shared
                .error(None, &format!("connection lost ({why})"), 1);
        }
        self.give_up(i, why);
    }

    /// Counts what device `i` still waits for as errors of kind `why`, then closes it.
    fn give_up(&mut self, i: usize, why: &str) {
        let d = &mut self.devs[i];
        for p in d.inflight.drain(..) {
            if p.prime {
                self.shared.error(None, why, 1);
            } else {
                self.shared.error(Some(p.op), why, 1);
            }
        }
        d.sends_inflight = 0;
        d.done_sending = true;
        if !self.running && d.phase != Phase::Done {
            // Setup is over for this device either way; the run will be called off.
            self.setup_left = self.setup_left.saturating_sub(1);
        }
        self.close(i);
    }

    /// A request unanswered for `--request-timeout-secs` ends its device.
    fn scan_timeouts(&mut self, now: u64) {
        let limit = self.shared.request_timeout_ns;
        for i in 0..self.devs.len() {
            let late = self.devs[i]
                .inflight
                .front()
                .is_some_and(|p| now.saturating_sub(p.written) > limit);
            if late {
                self.fail(i, "timeout: no reply within --request-timeout-secs");
            }
        }
    }

    /// The drain deadline passed: whatever is still outstanding is a timeout.
    fn abandon_all(&mut self) {
        for i in 0..self.devs.len() {
            if self.devs[i].phase != Phase::Done {
                self.give_up(i, "timeout: no reply before the drain deadline");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// The server side of one WebSocket connection, for scripting a misbehaving gateway.
    struct FakeConn {
        s: TcpStream,
    }

    impl FakeConn {
        /// Accepts one connection on `l` and answers its upgrade.
        fn accept(l: &TcpListener) -> FakeConn {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut b = [0u8; 1];
                s.read_exact(&mut b).unwrap();
                head.push(b[0]);
            }
            let text = String::from_utf8(head).unwrap();
            let key = text
                .lines()
                .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                .unwrap();
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                ws::accept_for(key)
            );
            s.write_all(answer.as_bytes()).unwrap();
            FakeConn { s }
        }

        /// Reads one (masked) client frame as JSON.
        fn read(&mut self) -> Value {
            let mut h = [0u8; 2];
            self.s.read_exact(&mut h).unwrap();
            assert_eq!(h[1] & 0x80, 0x80, "client frames are masked");
            let len = match h[1] & 0x7F {
                126 => {
                    let mut b = [0u8; 2];
                    self.s.read_exact(&mut b).unwrap();
                    u16::from_be_bytes(b) as usize
                }
                127 => panic!("unexpectedly large frame"),
                n => n as usize,
            };
            let mut mask = [0u8; 4];
            self.s.read_exact(&mut mask).unwrap();
            let mut body = vec![0u8; len];
            self.s.read_exact(&mut body).unwrap();
            body.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b ^= mask[i & 3]);
            serde_json::from_slice(&body).unwrap()
        }

        fn frame(op: u8, payload: &[u8]) -> Vec<u8> {
            let mut out = vec![0x80 | op];
            if payload.len() < 126 {
                out.push(payload.len() as u8);
            } else {
                out.push(126);
                out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            }
            out.extend_from_slice(payload);
            out
        }

        fn send_all(&mut self, frames: &[Vec<u8>]) {
            self.s.write_all(&frames.concat()).unwrap();
        }
    }

    fn text(v: Value) -> Vec<u8> {
        FakeConn::frame(opcode::TEXT, v.to_string().as_bytes())
    }

    fn gw_run(addr: SocketAddr) -> GwRun {
        GwRun {
            url: ws::parse_url(&format!("ws://{addr}/ws")).unwrap(),
            addr,
            templates: vec![SendTemplate::new("direct", "a:b")],
            tls: None,
            sizes: SizeDist::Fixed(24),
            filler_b64: proto::filler_b64(24),
            interval_ns: None,
            depth: 1,
            connect_concurrency: 4,
            reconnect: None,
            recipients: 1,
            echoes: false,
            pointers_per_send: 0,
            counters: GwCounters::default(),
        }
    }

    fn listener_device(topic: &str) -> DeviceSpec {
        DeviceSpec {
            index: 0,
            device: "dev0".into(),
            token: "t".into(),
            subs: vec![(topic.to_string(), false)],
            targets: Vec::new(),
            primes: Vec::new(),
            roams: false,
            phase_ns: 0,
        }
    }

    fn record_b64(sender: u32, seq: u64) -> String {
        use base64::Engine as _;
        let stamp = Stamp {
            kind: StampKind::Measured,
            sender,
            seq,
            sent_ns: 1,
        };
        base64::engine::general_purpose::STANDARD.encode(stamp.encode())
    }

    /// A record arriving twice counts as a duplicate, a skipped seq as a hole; neither is
    /// a delivery.
    #[test]
    fn repeated_and_skipped_records_are_counted() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let run = gw_run(l.local_addr().unwrap());
        let shared = Shared::new(None, 0, 10_000_000_000);
        let server = std::thread::spawn(move || {
            let mut c = FakeConn::accept(&l);
            let hello = c.read();
            assert_eq!(
                (&hello["op"], &hello["device_id"]),
                (&json!("hello"), &json!("dev0"))
            );
            c.send_all(&[text(json!({"op":"welcome","id":hello["id"],"token":"S.x"}))]);
            let sub = c.read();
            assert_eq!(sub["topic"], "chat.direct.a:b");
            let rec = |seq: u64| json!({"seq": seq, "payload": record_b64(7, seq)});
            c.send_all(&[
                text(json!({"op":"ack","id":sub["id"],"topic":"chat.direct.a:b","from_seq":5})),
                text(json!({"op":"record","topic":"chat.direct.a:b",
                            "records":[rec(5), rec(7), rec(7), rec(4)]})),
            ]);
            c
        });
        let mut w = Worker::new(vec![listener_device("chat.direct.a:b")], &run, &shared).unwrap();
        w.setup().unwrap();
        let _conn = server.join().unwrap();
        // Setup is done at the ack; the records came in the same read.
        let c = &run.counters;
        assert_eq!(Counters::get(&shared.counters.delivered), 2, "seq 5 and 7");
        assert_eq!(Counters::get(&c.holes), 1, "seq 6 never came");
        assert_eq!(Counters::get(&c.duplicates), 2, "7 again, then 4");
        assert_eq!(shared.counters.errors_total(), 0);
    }

    /// A gateway that closes during setup fails the run, naming the device and the code.
    #[test]
    fn a_close_during_setup_names_the_device_and_code() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let run = gw_run(l.local_addr().unwrap());
        let shared = Shared::new(None, 0, 10_000_000_000);
        let server = std::thread::spawn(move || {
            let mut c = FakeConn::accept(&l);
            let _hello = c.read();
            let mut close = 4003u16.to_be_bytes().to_vec();
            close.extend_from_slice(b"unsupported protocol version");
            c.send_all(&[FakeConn::frame(opcode::CLOSE, &close)]);
            c
        });
        let mut w = Worker::new(vec![listener_device("t")], &run, &shared).unwrap();
        let e = w.setup().unwrap_err();
        let _conn = server.join().unwrap();
        assert!(e.contains("dev0"), "{e}");
        assert!(e.contains("closed by the server: 4003"), "{e}");
        // The hello was sent and never answered: an error of its kind.
        assert_eq!(
            Counters::get(&shared.counters.errors[Op::Hello as usize]),
            1
        );
    }

    /// A reply whose id is not the oldest request's breaks the connection (replies come in
    /// request order); a ping is answered with a pong carrying its payload.
    #[test]
    fn replies_out_of_order_fail_and_pings_are_answered() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let run = gw_run(l.local_addr().unwrap());
        let shared = Shared::new(None, 0, 10_000_000_000);
        let server = std::thread::spawn(move || {
            let mut c = FakeConn::accept(&l);
            let hello = c.read();
            c.send_all(&[
                FakeConn::frame(opcode::PING, b"p1"),
                text(json!({"op":"welcome","id":hello["id"]})),
            ]);
            // The pong comes before the subscribe (frames leave in order).
            let mut h = [0u8; 2];
            c.s.read_exact(&mut h).unwrap();
            assert_eq!((h[0], h[1] & 0x7F), (0x80 | opcode::PONG, 2));
            let mut rest = [0u8; 6];
            c.s.read_exact(&mut rest).unwrap();
            let pong: Vec<u8> = rest[4..]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ rest[i & 3])
                .collect();
            assert_eq!(pong, b"p1");
            let _sub = c.read();
            c.send_all(&[text(json!({"op":"ack","id":"999"}))]);
            c
        });
        let mut w = Worker::new(vec![listener_device("t")], &run, &shared).unwrap();
        let e = w.setup().unwrap_err();
        let _conn = server.join().unwrap();
        assert!(e.contains("ack with id Some(\"999\")"), "{e}");
    }
}
