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
//!
//! Where each step lives: `device` is one device's state, `connect`, `socket` (bytes and
//! WebSocket frames), `replies` (the gateway's messages), `send`, `reconnect` and `endings`
//! are the worker's steps; this file holds the run's shared settings and the loop itself.

mod connect;
mod device;
mod endings;
mod reconnect;
mod replies;
mod send;
mod socket;
#[cfg(test)]
mod tests;

use super::super::engine::WorkerPlan;
use super::super::poll::{now_ns, Epoll, Timer};
use super::super::size_dist::SizeDist;
use super::super::stats::{Counters, Hists, Series, Shared, MERGE_EVERY_NS};
use super::proto::SendTemplate;
use super::ws::Url;
use boltq::client::TlsSession;
use device::{Device, Phase};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::SocketAddr;
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
    /// Where roaming devices reconnect, when not at [`GwRun::url`]: another node, whose
    /// fresh sessions are expected (each device subscribes from its committed cursor).
    pub resume_at: Option<Endpoint>,
    /// Where the writers connect, when not at [`GwRun::url`].
    pub writers_at: Option<Endpoint>,
    /// Run once every roaming device is away, before the writers write.
    pub while_away_cmd: Option<String>,
}

/// A plain `ws://` gateway address other than the run's own.
pub struct Endpoint {
    pub url: Url,
    pub addr: SocketAddr,
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
    /// `reconnect`: writer sends refused as retryable and sent again.
    pub send_retries: AtomicU64,
    /// `reconnect`: `--while-away-cmd` not run (0), running (1), done (2), failed (3).
    pub while_away: AtomicU64,
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
}
