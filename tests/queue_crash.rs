//! Crash test of the queue plane (issue 3): publishers and a consumer run against the real
//! binary under `storage.fsync = "always"` while the server is SIGKILLed at random moments
//! and restarted on the same data dir and ports.
//!
//! What a reply means under `always` (the server's promise): a PUBLISH reply means the
//! message is on disk; a CONSUME reply means the message's publish is on disk (its own
//! *pending* record is made durable by the next commit round, so a kill in between puts the
//! message back in line: delivered again, never lost); an ACK reply means the ack (and the
//! pending record before it) is on disk. Pending survives restarts and, with a 10-minute ack
//! timeout, never times out here. From that the test derives exact expectations:
//!
//! - A consumer whose ACK got no reply (the server died), or whose connection broke after
//!   the delivery and before the ACK was sent, sends the ACK after reconnecting until it
//!   gets a definite answer: OK (no earlier ACK was applied) or `not found in pending` (an
//!   earlier ACK was applied, or the kill undid the delivery). So every delivery the
//!   consumer saw ends acked, and a message is delivered twice only when its first delivery
//!   was followed by a kill before an ACK was answered — once at most; at-least-once would
//!   otherwise allow a redelivery only after an ack timeout or a NACK, and neither happens
//!   during the load.
//! - A CONSUME whose reply was lost may have made its message pending with an id the
//!   consumer never saw. At the end, every acknowledged publish that was neither acked nor
//!   drained is NACKed by the id its publish reply gave (`retry_backoff_base_ms = 0`, so it
//!   is ready again at once) and drained: a NACK that answers `not found in pending` means
//!   the message is gone, i.e. an acknowledged publish was lost.
//! - A publish whose reply was lost may or may not exist; it is delivered at most once. If
//!   it was also taken by a lost CONSUME it stays pending with an unknown id: at most one
//!   such message per lost CONSUME.
//! - After the drain the server is killed once more; then a NACK of every acked id must
//!   answer `not found in pending` (an ack that did not stick would make the message
//!   pending again, not ready), and nothing is ready, delayed or dead-lettered.
//! - Before the first kill a durable fanout and a durable topic exchange with bindings and
//!   a durable subscriber are set up; after every restart a publish through each exchange
//!   must reach exactly the bound queues, the previous round's acked copies must stay
//!   acked, and a PUBLISH_TOPIC made while the subscriber is offline must come back as the
//!   last push of its catch-up when it subscribes again (earlier rounds' messages may come
//!   again before it: delivery is at-least-once across kills).
//!
//! - Durable pub/sub runs beside it (issue 13): a topic publisher and a durable subscriber
//!   that reconnects and re-subscribes after every kill. Every acknowledged topic publish
//!   must reach the subscriber at least once — live, or in a catch-up after a restart, or
//!   in the final catch-up (duplicates are allowed: a push whose TCP acknowledgement had
//!   not been confirmed when the server died is handed out again).
//! - A second durable subscriber of the same topic acknowledges its pushes (`"ack": true`)
//!   and now and then "crashes" itself: it drops its connection with pushes its kernel and
//!   its client had taken but it had not handled. Every acknowledged topic publish must be
//!   handled by it at least once all the same (TCP confirmation alone would lose those).
//!
//! Set `BOLTQ_CRASH_SEED` to replay a run's random choices (kill moments, batch sizes,
//! queues); the seed is printed.

mod support;

use boltq::client::{Client, ClientError, ClientOptions, ConsumedMessage, PublishReply};
use boltq::queue::protocol::frame::{op, status};
use boltq_io::testutil::{Rng, TempDir};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::Server;

const PUBLISHERS: usize = 3;
/// Work queues the load runs on (spread over the two shards' slots).
const QUEUES: [&str; 4] = ["crash-q0", "crash-q1", "crash-q2", "crash-q3"];
/// SIGKILLs while publishers and the consumer run; two more follow once they stopped.
const KILLS_UNDER_LOAD: usize = 30;
/// Load between two kills, chosen at random in this range (ms).
const LOAD_MS: (u64, u64) = (50, 400);
/// Largest pipelined publish batch.
const PUBLISH_BATCH_MAX: u64 = 4;
/// Largest pipelined consume batch (its ACKs follow as one pipelined batch too).
const CONSUME_BATCH_MAX: u64 = 16;
/// How long a worker keeps trying to reach a server that is being restarted.
const RECONNECT_DEADLINE: Duration = Duration::from_secs(60);
/// Bound on every wait for the workers or the server to make progress.
const PROGRESS_DEADLINE: Duration = Duration::from_secs(30);

/// Payload padding, in 16-hex-digit words: about 1 KiB per message, so the queues' command
/// logs pass the 1 MiB per-slot compaction threshold and snapshots happen under the kills.
const PAD_WORDS: usize = 64;

/// Exchanges, bindings and the durable subscription that must survive every kill.
const FANOUT: &str = "crash-fanout";
const FANOUT_QUEUES: [&str; 2] = ["crash-fan-a", "crash-fan-b"];
const TOPIC_EXCHANGE: &str = "crash-topic";
const TOPIC_QUEUE: &str = "crash-orders";
const NEWS: &str = "crash-news";
const NEWS_SUBSCRIBER: &str = "crash-sub";
/// The durable pub/sub load: a topic, its durable subscriber, and their worker indices.
const STREAM: &str = "crash-stream";
const STREAM_READER: &str = "crash-reader";
/// The subscriber of `STREAM` that acknowledges its pushes.
const STREAM_ACKER: &str = "crash-acker";
const TOPIC_PUBLISHER_WORKER: usize = PUBLISHERS + 1;
const READER_WORKER: usize = PUBLISHERS + 2;
const ACKER_WORKER: usize = PUBLISHERS + 3;
/// The acking subscriber drops its connection unread after about one push in this many.
const ACKER_CRASH_ONE_IN: u64 = 300;

/// A message of the load: (publisher, sequence number).
type Key = (u32, u64);

/// 10-minute ack timeout: nothing is redelivered by timeout during the test. No retry
/// backoff, so a NACKed message is ready again at once. Many retries, so nothing is
/// dead-lettered. A small compaction threshold (the server gives each slot at least 1 MiB),
/// so slots snapshot and compact while being killed.
const CONFIG: &str = r#"
[storage]
fsync = "always"
compaction_threshold = 1

[queue]
ack_timeout = "10m"
max_retry = 100
retry_backoff_base_ms = 0
"#;

#[test]
fn sigkill_under_load_loses_no_acknowledged_message_and_keeps_metadata() {
    let started = Instant::now();
    let seed = std::env::var("BOLTQ_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(time_seed);
    println!("queue crash test: seed {seed} (BOLTQ_CRASH_SEED={seed} replays the choices)");
    let mut rng = Rng::new(seed);

    let cfg_dir = TempDir::new("crash-cfg");
    let cfg = cfg_dir.path().join("boltq.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let mut server = Server::start_restartable(&["--config", cfg.to_str().unwrap()]);
    let port = server.tcp_port;

    declare_durable_metadata(port);
    // The durable registration exists before the first topic publish (one made before any
    // subscribe goes nowhere, by design).
    Client::connect(&addr(port), ClientOptions::default())
        .and_then(|mut c| {
            c.subscribe(STREAM, STREAM_READER, true)?;
            c.subscribe_acked(STREAM, STREAM_ACKER)
        })
        .expect("register the durable subscribers");

    let stop = Arc::new(AtomicBool::new(false));
    let reader_stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::new(PUBLISHERS + 4));
    let publishers: Vec<JoinHandle<PublisherLog>> = (0..PUBLISHERS)
        .map(|p| {
            let (stop, progress) = (Arc::clone(&stop), Arc::clone(&progress));
            let seed = seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(p as u64 + 1));
            std::thread::spawn(move || run_publisher(p as u32, port, seed, &stop, &progress))
        })
        .collect();
    let consumer = {
        let (stop, progress) = (Arc::clone(&stop), Arc::clone(&progress));
        std::thread::spawn(move || run_consumer(port, !seed, &stop, &progress, PUBLISHERS))
    };
    let topic_publisher = {
        let (stop, progress) = (Arc::clone(&stop), Arc::clone(&progress));
        std::thread::spawn(move || {
            run_topic_publisher(port, seed.rotate_left(17), &stop, &progress)
        })
    };
    let reader = {
        let (stop, progress) = (Arc::clone(&reader_stop), Arc::clone(&progress));
        std::thread::spawn(move || run_durable_reader(port, Reader::TcpConfirmed, &stop, &progress))
    };
    let acker = {
        let (stop, progress) = (Arc::clone(&reader_stop), Arc::clone(&progress));
        let reader = Reader::Acking {
            seed: seed.rotate_left(29),
        };
        std::thread::spawn(move || run_durable_reader(port, reader, &stop, &progress))
    };

    let mut kills = 0;
    let mut metadata_acked = Vec::new();
    let mut since = progress.now_us();
    for _ in 0..KILLS_UNDER_LOAD {
        // Every worker has had a reply to a request sent after the last restart: the load
        // is running against this server generation.
        progress.wait_all_since(since, &server);
        let load_ms = LOAD_MS.0 + rng.below(LOAD_MS.1 - LOAD_MS.0 + 1);
        std::thread::sleep(Duration::from_millis(load_ms));
        server = server.restart_when_ports_free(libc::SIGKILL).0;
        // Taken before the workers are told: a request sent after this moment went to the
        // new server (the old one is dead). Taken after telling them, a worker that
        // reconnected in between would have its only progress mark counted as too early
        // (the durable reader marks once per subscribe), and the wait below would stall.
        since = progress.now_us();
        progress.server_restarted();
        kills += 1;
        check_durable_metadata(port, kills, &mut metadata_acked);
    }
    progress.wait_all_since(since, &server);
    stop.store(true, Ordering::SeqCst);
    let publisher_logs: Vec<PublisherLog> = publishers
        .into_iter()
        .map(|h| h.join().expect("publisher thread"))
        .collect();
    let consumer_log = consumer.join().expect("consumer thread");
    let topic_log = topic_publisher.join().expect("topic publisher thread");
    // The reader reads on until the pushes stop, so what it was sent it has read.
    reader_stop.store(true, Ordering::SeqCst);
    let mut reader_log = reader.join().expect("durable reader thread");
    let mut acker_log = acker.join().expect("acking reader thread");

    // One more kill with everything quiet: the drain reads what recovery rebuilt.
    server = server.restart_when_ports_free(libc::SIGKILL).0;
    progress.server_restarted();
    kills += 1;
    check_durable_metadata(port, kills, &mut metadata_acked);
    let (mut ledger, mut report) = final_drain(port, &publisher_logs, &consumer_log);

    // And one more after the drain: its acks (and every earlier one) must have stuck.
    server = server.restart_when_ports_free(libc::SIGKILL).0;
    progress.server_restarted();
    kills += 1;
    check_durable_metadata(port, kills, &mut metadata_acked);
    verify_final_state(port, &mut ledger, &mut report, &consumer_log);
    verify_topic_deliveries(
        port,
        Reader::TcpConfirmed,
        &topic_log,
        &mut reader_log,
        &mut ledger.violations,
    );
    verify_topic_deliveries(
        port,
        Reader::Acking { seed: 0 },
        &topic_log,
        &mut acker_log,
        &mut ledger.violations,
    );
    println!(
        "queue crash test: acking subscriber: {} handled ({} more than once), {} subscribes, \
         {} connections dropped with pushes unhandled, {} pushes its client dropped unread, \
         {} in the final catch-up",
        acker_log.seen.len(),
        acker_log.seen.values().filter(|n| **n > 1).count(),
        acker_log.subscribes,
        acker_log.crashes,
        acker_log.client_drops,
        acker_log.final_catch_up,
    );
    println!(
        "queue crash test: durable pub/sub: {} topic publishes acknowledged ({} unanswered), \
         {} delivered ({} more than once), {} subscribes (one per server generation and \
         more; {} kept across an announced restart), {} in the final catch-up",
        topic_log.acked.iter().filter(|a| **a).count(),
        topic_log.acked.iter().filter(|a| !**a).count(),
        reader_log.seen.len(),
        reader_log.seen.values().filter(|n| **n > 1).count(),
        reader_log.subscribes,
        reader_log.kept_across_restart,
        reader_log.final_catch_up,
    );
    let violations = &ledger.violations;
    print_traces(violations, &consumer_log);
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations (first 50):\n{}\n{report:?}\nserver log tail:\n{}",
        violations.len(),
        violations
            .iter()
            .take(50)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        tail(&server.log(), 40)
    );
    println!(
        "queue crash test: command-log snapshots present in {} queue slots",
        slots_with_snapshots(server.data_dir())
    );
    println!(
        "queue crash test: {kills} SIGKILLs in {:.1} s; publishes: {} acknowledged, {} \
         unanswered (of which {} delivered); deliveries: {} during load, {} in the final \
         drain, {} recovered from pending by NACK; acks: {} answered, {} lost and re-sent \
         ({} found nothing pending: applied, or the delivery undone by the kill; {} of those \
         delivered again); lost consume replies: {}; stuck pending (unknown id): {}",
        started.elapsed().as_secs_f64(),
        report.confirmed,
        report.unanswered,
        report.unanswered_delivered,
        report.load_deliveries,
        report.final_deliveries,
        report.recovered_by_nack,
        report.acks_answered,
        consumer_log.lost_acks,
        report.acks_gone_after_kill,
        ledger.redelivered_after_kill,
        consumer_log.lost_consumes,
        report.stuck_pending,
    );
    assert!(kills >= 30, "issue 13 asks for at least 30 kills");
    assert!(
        topic_log.acked.iter().any(|a| *a),
        "the durable pub/sub load made no progress"
    );
    assert!(
        report.confirmed > 0 && report.load_deliveries > 0,
        "the load made no progress: {report:?}"
    );
}

// ---- workers ---------------------------------------------------------------------------

/// Per worker: when (µs since `base`) the request behind its latest reply was sent; and
/// which server generation is up (bumped by the main thread after every restart).
struct Progress {
    base: Instant,
    last_ok_sent_us: Vec<AtomicU64>,
    server_generation: AtomicU64,
}

impl Progress {
    fn new(workers: usize) -> Progress {
        Progress {
            base: Instant::now(),
            last_ok_sent_us: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            server_generation: AtomicU64::new(1),
        }
    }

    /// The main thread's restart returned: the new server listens.
    fn server_restarted(&self) {
        self.server_generation.fetch_add(1, Ordering::SeqCst);
    }

    fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64 + 1
    }

    fn mark(&self, worker: usize, sent_us: u64) {
        self.last_ok_sent_us[worker].fetch_max(sent_us, Ordering::SeqCst);
    }

    /// Waits until every worker got a reply to a request sent at or after `since_us`, which
    /// (when `since_us` was taken once the old server was dead) can only have come from the
    /// new server.
    /// On a stall it panics with the server's log tail, which says what the server was
    /// doing meanwhile.
    fn wait_all_since(&self, since_us: u64, server: &Server) {
        let deadline = Instant::now() + PROGRESS_DEADLINE;
        loop {
            let behind: Vec<usize> = (0..self.last_ok_sent_us.len())
                .filter(|&w| self.last_ok_sent_us[w].load(Ordering::SeqCst) < since_us)
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "workers {behind:?} made no progress within {PROGRESS_DEADLINE:?}; server log \
                 tail:\n{}",
                tail(&server.log(), 40)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// A worker's connection and the server generation it was made to.
struct Conn {
    client: Option<Client>,
    generation: u64,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            client: None,
            generation: 0,
        }
    }

    /// The connection, (re)connecting first if needed; `None` once `stop` is set.
    ///
    /// After a failure it waits for the next server generation instead of dialling in a
    /// loop: while nothing listens on the port, a connect to a loopback port in the
    /// ephemeral range can pick that very port as its source and connect to itself, and
    /// the restarted server then cannot bind it.
    fn get(&mut self, port: u16, stop: &AtomicBool, progress: &Progress) -> Option<&mut Client> {
        let deadline = Instant::now() + RECONNECT_DEADLINE;
        while self.client.is_none() {
            if stop.load(Ordering::SeqCst) {
                return None;
            }
            let generation = progress.server_generation.load(Ordering::SeqCst);
            if generation > self.generation {
                self.generation = generation;
                self.client = Client::connect(&addr(port), ClientOptions::default()).ok();
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "no server to reconnect to for {RECONNECT_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        self.client.as_mut()
    }

    /// The connection broke (the server died): reconnect only to a newer generation.
    fn broken(&mut self) {
        self.client = None;
    }

    /// The server closed the connection while no kill had happened (it may close a durable
    /// subscriber, e.g. one that fell 16 MiB behind): connect again to the same server now.
    /// If a kill raced with it, that connect fails and the wait is for the next generation.
    fn closed_by_server(&mut self, progress: &Progress) {
        self.client = None;
        if progress.server_generation.load(Ordering::SeqCst) == self.generation {
            self.generation -= 1;
        }
    }
}

/// The payload of message `(p, s)`: the key plus padding derived from it, so a corrupted
/// or mixed-up payload is noticed.
fn payload_json(p: u32, s: u64) -> String {
    format!(r#"{{"p":{p},"s":{s},"pad":"{}"}}"#, padding(p, s))
}

fn padding(p: u32, s: u64) -> String {
    let mut x = (u64::from(p) << 48) ^ s ^ 0x5851_f42d_4c95_7f2d;
    let mut pad = String::with_capacity(16 * PAD_WORDS);
    for _ in 0..PAD_WORDS {
        x = x.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29) ^ 0x1405_7b7e_f767_814f;
        pad.push_str(&format!("{x:016x}"));
    }
    pad
}

/// The key of a load payload, or `None` when it is not one this test published.
fn decode_key(payload: &str) -> Option<Key> {
    let v: Value = serde_json::from_str(payload).ok()?;
    let obj = v.as_object()?;
    if obj.len() != 3 {
        return None;
    }
    let p = u32::try_from(obj.get("p")?.as_u64()?).ok()?;
    let s = obj.get("s")?.as_u64()?;
    (obj.get("pad")?.as_str()? == padding(p, s)).then_some((p, s))
}

/// What one publisher sent, indexed by sequence number.
#[derive(Debug, Default)]
struct PublisherLog {
    /// Queue index of every publish that was (perhaps partly) sent.
    queue: Vec<usize>,
    /// The id from the OK reply; `None` while no reply arrived.
    id: Vec<Option<String>>,
    /// Anything but a well-formed OK reply.
    errors: Vec<String>,
}

fn run_publisher(
    p: u32,
    port: u16,
    seed: u64,
    stop: &AtomicBool,
    progress: &Progress,
) -> PublisherLog {
    let mut rng = Rng::new(seed);
    let mut log = PublisherLog::default();
    let mut conn = Conn::new();
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.get(port, stop, progress) else {
            break;
        };
        let batch = 1 + rng.below(PUBLISH_BATCH_MAX) as usize;
        let sent_us = progress.now_us();
        let first = log.queue.len();
        // Recorded before the write: a partly written frame may still be applied.
        let frames: Vec<(u8, String)> = (0..batch)
            .map(|_| {
                let seq = log.queue.len() as u64;
                let q = rng.below(QUEUES.len() as u64) as usize;
                log.queue.push(q);
                log.id.push(None);
                let body = format!(
                    r#"{{"topic":"{}","payload":{}}}"#,
                    QUEUES[q],
                    payload_json(p, seq)
                );
                (op::PUBLISH, body)
            })
            .collect();
        let whole = pipelined(c, &frames, |i, code, payload| {
            // Any reply counts as progress; wrong ones are reported at the end.
            progress.mark(p as usize, sent_us);
            let seq = first + i;
            let reply = serde_json::from_slice::<PublishReply>(payload);
            let wanted_topic = QUEUES[log.queue[seq]];
            if let Some(r) = reply
                .ok()
                .filter(|r| code == status::OK && r.topic == wanted_topic && is_message_id(&r.id))
            {
                log.id[seq] = Some(r.id);
                return;
            }
            log.errors.push(format!(
                "publish ({p},{seq}): status {code:#04x} {}",
                String::from_utf8_lossy(payload)
            ));
        });
        if !whole {
            conn.broken();
        }
    }
    log
}

/// Sends `frames` on `c` in one pipelined batch, then hands each reply, in order, to
/// `on_reply(index, status, payload)`. False when the connection broke on the way (the
/// frames after the break were not sent, or their replies not read).
fn pipelined(
    c: &mut Client,
    frames: &[(u8, String)],
    mut on_reply: impl FnMut(usize, u8, &[u8]),
) -> bool {
    for (code, body) in frames {
        if c.send_frame(*code, body.as_bytes()).is_err() {
            return false;
        }
    }
    for i in 0..frames.len() {
        let Ok((code, payload)) = c.read_frame() else {
            return false;
        };
        on_reply(i, code, &payload);
    }
    true
}

/// What the topic publisher sent: whether each publish (by sequence number) was answered OK.
#[derive(Debug, Default)]
struct TopicLog {
    acked: Vec<bool>,
    errors: Vec<String>,
}

/// Publishes `{"t":<seq>}` to `STREAM` in small pipelined batches until `stop`.
fn run_topic_publisher(port: u16, seed: u64, stop: &AtomicBool, progress: &Progress) -> TopicLog {
    let mut rng = Rng::new(seed);
    let mut log = TopicLog::default();
    let mut conn = Conn::new();
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = conn.get(port, stop, progress) else {
            break;
        };
        let batch = 1 + rng.below(PUBLISH_BATCH_MAX) as usize;
        let sent_us = progress.now_us();
        let first = log.acked.len();
        let frames: Vec<(u8, String)> = (first..first + batch)
            .map(|seq| {
                log.acked.push(false);
                let body = format!(r#"{{"topic":"{STREAM}","payload":{{"t":{seq}}}}}"#);
                (op::PUBLISH_TOPIC, body)
            })
            .collect();
        let whole = pipelined(c, &frames, |i, code, payload| {
            progress.mark(TOPIC_PUBLISHER_WORKER, sent_us);
            if code == status::OK {
                log.acked[first + i] = true;
            } else {
                log.errors.push(format!(
                    "topic publish {}: status {code:#04x} {}",
                    first + i,
                    String::from_utf8_lossy(payload)
                ));
            }
        });
        if !whole {
            conn.broken();
        }
    }
    log
}

/// How a durable subscriber of the pub/sub load confirms what it got.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// A v1 subscriber: its TCP's acknowledgement confirms a push.
    TcpConfirmed,
    /// Subscribed with `"ack": true`: it handles a push (notes it), then ACKs its id, and
    /// now and then drops its connection without handling what its client and kernel hold.
    Acking { seed: u64 },
}

impl Reader {
    fn id(self) -> &'static str {
        match self {
            Reader::TcpConfirmed => STREAM_READER,
            Reader::Acking { .. } => STREAM_ACKER,
        }
    }

    fn worker(self) -> usize {
        match self {
            Reader::TcpConfirmed => READER_WORKER,
            Reader::Acking { .. } => ACKER_WORKER,
        }
    }

    fn subscribe(self, c: &mut Client) -> Result<(), ClientError> {
        match self {
            Reader::TcpConfirmed => c.subscribe(STREAM, STREAM_READER, true),
            Reader::Acking { .. } => c.subscribe_acked(STREAM, STREAM_ACKER),
        }
    }
}

/// What the durable subscriber received: how often each topic publish arrived.
#[derive(Debug, Default)]
struct ReaderLog {
    seen: HashMap<u64, u32>,
    subscribes: u64,
    final_catch_up: u64,
    /// Connections that turned out to go to the new server when a restart was announced.
    kept_across_restart: u64,
    /// Connections the acking reader dropped with pushes unhandled.
    crashes: u64,
    /// Pushes the acking reader's client dropped unread (it handles and ACKs each one, so
    /// it can fall behind its pushes): never acknowledged, so handed out again.
    client_drops: u64,
    errors: Vec<String>,
}

impl ReaderLog {
    /// Reads the pushes that already arrived (and any that follow within 20 ms of each
    /// other, for at most a second); a failed connection just ends it.
    fn drain_until_quiet(&mut self, c: &mut Client, reader: Reader) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) {
            match c.next_push(20) {
                Ok(Some(push)) => {
                    if self.handle(c, reader, &push).is_err() {
                        break;
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Notes `push` and, for an acking reader, acknowledges it.
    fn handle(
        &mut self,
        c: &mut Client,
        reader: Reader,
        push: &boltq::client::Push,
    ) -> Result<(), ClientError> {
        self.note(push);
        match reader {
            Reader::TcpConfirmed => Ok(()),
            Reader::Acking { .. } => c.ack(&push.id),
        }
    }

    /// Records pushes `c` had to drop (its push queue was full, the reader being slower
    /// than the pushes). For the TCP-confirmed reader they never reached it, so a "lost"
    /// publish among them would be the test's doing: an error. The acking reader never
    /// acknowledged them, so the server hands them out again: only counted.
    fn note_dropped(&mut self, c: &Client, reader: Reader) {
        let dropped = c.dropped_pushes();
        match reader {
            _ if dropped == 0 => {}
            Reader::TcpConfirmed => self
                .errors
                .push(format!("the client dropped {dropped} pushes")),
            Reader::Acking { .. } => self.client_drops += dropped,
        }
    }

    fn note(&mut self, push: &boltq::client::Push) {
        let t = serde_json::from_str::<Value>(&push.payload_json)
            .ok()
            .and_then(|v| v["t"].as_u64());
        match t {
            Some(t) => *self.seen.entry(t).or_insert(0) += 1,
            None => self.errors.push(format!(
                "a push that is no topic publish of this test: {push:?}"
            )),
        }
    }
}

/// Subscribes durable to `STREAM` and reads its pushes; after every kill it reconnects and
/// subscribes again (getting the catch-up). Once `stop` is set it reads on until no push
/// came for a second, so everything the server handed it has been read.
fn run_durable_reader(
    port: u16,
    reader: Reader,
    stop: &AtomicBool,
    progress: &Progress,
) -> ReaderLog {
    let mut rng = match reader {
        Reader::Acking { seed } => Some(Rng::new(seed)),
        Reader::TcpConfirmed => None,
    };
    let mut log = ReaderLog::default();
    let mut conn = Conn::new();
    let never = AtomicBool::new(false);
    let mut subscribed = false;
    let mut quiet_since = Instant::now();
    loop {
        let generation = progress.server_generation.load(Ordering::SeqCst);
        if let Some(c) = conn
            .client
            .as_mut()
            .filter(|_| generation > conn.generation)
        {
            // A restart was announced. Either this connection went to the killed server,
            // whose socket may stay open for a while without a FIN (the dying process's
            // io_uring still holds it) so a reader that only reads would wait on it; or it
            // already goes to the new server (made after an EOF, before the restart was
            // announced). Dropping a live connection would throw away pushes its kernel
            // has acknowledged, which the server rightly counts as delivered: read what
            // arrived, then keep the connection if the server still answers.
            log.drain_until_quiet(c, reader);
            let sent_us = progress.now_us();
            if c.ping().is_ok() {
                conn.generation = generation;
                log.kept_across_restart += 1;
                // This connection subscribed on the new server before the restart was
                // announced (after an EOF from the dying one, once the new one listened):
                // its only subscribe's mark came too early for the wait on progress, so
                // the answered ping marks that it is served by the new server.
                if subscribed {
                    progress.mark(reader.worker(), sent_us);
                }
            } else {
                log.drain_until_quiet(c, reader);
                log.note_dropped(c, reader);
                conn.broken();
                subscribed = false;
            }
        }
        let Some(c) = conn.get(port, &never, progress) else {
            unreachable!("never stops reconnecting")
        };
        if !subscribed {
            let sent_us = progress.now_us();
            if let Err(e) = reader.subscribe(c) {
                // Printed now: a refused re-subscribe stalls the whole test, and this
                // line is what explains the stall.
                eprintln!("durable reader {}: subscribe failed: {e}", reader.id());
                conn.closed_by_server(progress);
                continue;
            }
            progress.mark(reader.worker(), sent_us);
            log.subscribes += 1;
            subscribed = true;
        }
        match c.next_push(100) {
            Ok(Some(push)) => {
                quiet_since = Instant::now();
                if rng
                    .as_mut()
                    .is_some_and(|r| r.below(ACKER_CRASH_ONE_IN) == 0)
                {
                    // Gone before handling this push and whatever else its client and
                    // kernel took: all of it must come again.
                    log.crashes += 1;
                    conn.closed_by_server(progress);
                    subscribed = false;
                    continue;
                }
                if let Err(e) = log.handle(c, reader, &push) {
                    eprintln!("durable reader {}: ack failed: {e}", reader.id());
                    conn.closed_by_server(progress);
                    subscribed = false;
                }
            }
            Ok(None) => {
                if stop.load(Ordering::SeqCst) && quiet_since.elapsed() > Duration::from_secs(1) {
                    log.note_dropped(c, reader);
                    return log;
                }
            }
            Err(e) => {
                eprintln!("durable reader {}: connection ended: {e}", reader.id());
                conn.closed_by_server(progress);
                subscribed = false;
            }
        }
    }
}

/// Subscribes once more (the reader is gone), takes the catch-up, and checks that every
/// acknowledged topic publish reached the subscriber at least once.
fn verify_topic_deliveries(
    port: u16,
    reader: Reader,
    topic_log: &TopicLog,
    reader_log: &mut ReaderLog,
    violations: &mut Vec<String>,
) {
    // The acking reader's client may drop pushes of a large catch-up while it ACKs one by
    // one; those were not acknowledged, so a subscribe again gets them: until a round
    // whose client dropped nothing.
    for round in 1.. {
        let mut c = Client::connect(&addr(port), ClientOptions::default()).expect("connect");
        reader.subscribe(&mut c).expect("subscribe");
        while let Some(push) = c.next_push(1_000).expect("catch-up") {
            reader_log.handle(&mut c, reader, &push).expect("ack");
            reader_log.final_catch_up += 1;
        }
        let dropped = c.dropped_pushes();
        reader_log.note_dropped(&c, reader);
        if dropped == 0 || matches!(reader, Reader::TcpConfirmed) {
            break;
        }
        if round == 50 {
            violations.push(format!(
                "the {} reader's final catch-up still dropped pushes after {round} rounds",
                reader.id()
            ));
            break;
        }
    }
    violations.extend(topic_log.errors.iter().cloned());
    violations.extend(reader_log.errors.iter().cloned());
    for (t, acked) in topic_log.acked.iter().enumerate() {
        if *acked && !reader_log.seen.contains_key(&(t as u64)) {
            violations.push(format!(
                "topic publish {t} was acknowledged and never reached its durable subscriber {}",
                reader.id()
            ));
        }
    }
    let unknown = reader_log
        .seen
        .keys()
        .filter(|t| **t as usize >= topic_log.acked.len())
        .count();
    if unknown > 0 {
        violations.push(format!("{unknown} pushes of topic publishes never sent"));
    }
}

/// The consumer's trace of every message id a violation names, by id or by key.
fn print_traces(violations: &[String], consumer: &ConsumerLog) {
    if violations.is_empty() {
        return;
    }
    let keys: HashMap<&str, String> = consumer
        .trace
        .iter()
        .filter_map(|(id, line)| {
            let key = line.split(" delivered ").nth(1)?.split(" retry").next()?;
            let key = key.strip_prefix("Some(")?.strip_suffix(')')?;
            Some((id.as_str(), key.to_string()))
        })
        .collect();
    let named = |id: &str| {
        violations
            .iter()
            .any(|v| v.contains(id) || keys.get(id).is_some_and(|key| v.contains(key.as_str())))
    };
    for (id, line) in &consumer.trace {
        if named(id) {
            println!("trace {id}: {line}");
        }
    }
}

fn is_message_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckHow {
    /// OK to the first ACK.
    Answered,
    /// A kill came between the delivery and the ACK's answer (the ACK went unanswered, or
    /// the connection broke before it was sent); the ACK on a new connection got OK.
    AnsweredAfterKill,
    /// A kill came between the delivery and the ACK's answer; the ACK on a new connection
    /// got `not found in pending`: either an earlier ACK was applied (and, since it was
    /// recovered, durable), or the kill came before the delivery's pending record was
    /// durable and the message is ready again (it may then be delivered once more).
    GoneAfterKill,
}

#[derive(Debug)]
enum Event {
    Delivered(ConsumedMessage),
    Acked { id: String, how: AckHow },
}

#[derive(Debug, Default)]
struct ConsumerLog {
    /// In the order they happened.
    events: Vec<Event>,
    /// CONSUMEs sent whose reply never came (each may have left one message pending).
    lost_consumes: u64,
    /// ACKs sent whose reply never came (each was re-sent until answered).
    lost_acks: u64,
    errors: Vec<String>,
    /// (message id, what happened to it), printed for the ids and keys a violation names:
    /// which server generation and which batch delivered or answered it.
    trace: Vec<(String, String)>,
}

/// Consumes in pipelined batches (one CONSUME per queue, round robin, up to
/// `CONSUME_BATCH_MAX`), then ACKs the batch's deliveries pipelined. ACKs whose reply did not
/// come are re-sent on the next connection until answered, before anything else; so are the
/// ACKs of a batch whose connection broke before every CONSUME was answered.
fn run_consumer(
    port: u16,
    seed: u64,
    stop: &AtomicBool,
    progress: &Progress,
    me: usize,
) -> ConsumerLog {
    let mut rng = Rng::new(seed);
    let mut log = ConsumerLog::default();
    let mut conn = Conn::new();
    // Delivered messages still to ack, and whether a kill came since the delivery (its ACK
    // went unanswered, or the connection broke before the ACK was sent).
    let mut to_ack: Vec<(String, bool)> = Vec::new();
    let never_stop = AtomicBool::new(false);
    let mut next_queue = 0;
    loop {
        if to_ack.is_empty() && stop.load(Ordering::SeqCst) {
            break;
        }
        // Unresolved acks keep the consumer going even after `stop`.
        let gate = if to_ack.is_empty() { stop } else { &never_stop };
        if conn.get(port, gate, progress).is_none() {
            break;
        }
        let generation = conn.generation;
        let c = conn.client.as_mut().expect("connected just now");
        let sent_us = progress.now_us();
        if !to_ack.is_empty() {
            let bodies: Vec<String> = to_ack
                .iter()
                .map(|(id, _)| format!(r#"{{"id":"{id}"}}"#))
                .collect();
            let mut sent = 0;
            for body in &bodies {
                if c.send_frame(op::ACK, body.as_bytes()).is_err() {
                    break;
                }
                sent += 1;
            }
            let mut answered = 0;
            if sent == bodies.len() {
                while answered < sent {
                    let Ok((code, payload)) = c.read_frame() else {
                        break;
                    };
                    let (id, after_kill) = &to_ack[answered];
                    let text = String::from_utf8_lossy(&payload);
                    log.trace.push((
                        id.clone(),
                        format!(
                            "generation {generation}: ack {} of {sent} (after kill: {after_kill}) \
                             answered {code:#04x} {text}",
                            answered + 1
                        ),
                    ));
                    let how = match (code, text.as_ref()) {
                        (status::OK, r#"{"status":"acked"}"#) if *after_kill => {
                            Some(AckHow::AnsweredAfterKill)
                        }
                        (status::OK, r#"{"status":"acked"}"#) => Some(AckHow::Answered),
                        (status::ERROR, t)
                            if *after_kill
                                && t == format!(
                                    r#"{{"error":"message {id} not found in pending"}}"#
                                ) =>
                        {
                            Some(AckHow::GoneAfterKill)
                        }
                        _ => None,
                    };
                    match how {
                        Some(how) => log.events.push(Event::Acked {
                            id: id.clone(),
                            how,
                        }),
                        None => log.errors.push(format!(
                            "ack {id} (after kill: {after_kill}): status {code:#04x} {text}"
                        )),
                    }
                    answered += 1;
                    progress.mark(me, sent_us);
                }
            }
            to_ack.drain(..answered);
            if !to_ack.is_empty() {
                log.lost_acks += to_ack.len() as u64;
                for (_, after_kill) in &mut to_ack {
                    *after_kill = true;
                }
                conn.broken();
            }
            continue;
        }
        let batch = 1 + rng.below(CONSUME_BATCH_MAX) as usize;
        let queues: Vec<&str> = (0..batch)
            .map(|i| QUEUES[(next_queue + i) % QUEUES.len()])
            .collect();
        next_queue += batch;
        let mut sent = 0;
        for queue in &queues {
            let body = format!(r#"{{"topic":"{queue}"}}"#);
            if c.send_frame(op::CONSUME, body.as_bytes()).is_err() {
                break;
            }
            sent += 1;
        }
        let mut answered = 0;
        if sent == queues.len() {
            while answered < sent {
                let Ok((code, payload)) = c.read_frame() else {
                    break;
                };
                let text = String::from_utf8_lossy(&payload);
                match code {
                    status::OK => match ConsumedMessage::parse(&text) {
                        Ok(m) => {
                            log.trace.push((
                                m.id.clone(),
                                format!(
                                    "generation {generation}: consume {} of {sent} ({}) \
                                     delivered {:?} retry {}",
                                    answered + 1,
                                    queues[answered],
                                    decode_key(&m.payload_json),
                                    m.retry
                                ),
                            ));
                            to_ack.push((m.id.clone(), false));
                            log.events.push(Event::Delivered(m));
                        }
                        Err(e) => log.errors.push(format!("consume reply {text}: {e}")),
                    },
                    status::EMPTY if payload.is_empty() => {}
                    _ => log.errors.push(format!(
                        "consume {}: status {code:#04x} {text}",
                        queues[answered]
                    )),
                }
                answered += 1;
                progress.mark(me, sent_us);
            }
        }
        if answered < queues.len() {
            // Sent (perhaps partly) and unanswered: each may have made a message pending.
            log.lost_consumes += (queues.len() - answered) as u64;
            // The kill may undo the answered ones too: their pending records are made
            // durable by a commit round that may not have happened.
            for (_, after_kill) in &mut to_ack {
                *after_kill = true;
            }
            conn.broken();
        }
    }
    log
}

// ---- exchanges, bindings, durable subscription -------------------------------------------

fn client(port: u16) -> Client {
    Client::connect(&addr(port), ClientOptions::default()).expect("connect")
}

/// Before the first kill: a durable fanout exchange bound to two queues, a durable topic
/// exchange with a wildcard binding, and a durable subscriber that then goes offline.
fn declare_durable_metadata(port: u16) {
    let mut c = client(port);
    c.exchange_declare(FANOUT, "fanout", true).unwrap();
    for q in FANOUT_QUEUES {
        c.bind_queue(FANOUT, q, "", None, false).unwrap();
    }
    c.exchange_declare(TOPIC_EXCHANGE, "topic", true).unwrap();
    c.bind_queue(TOPIC_EXCHANGE, TOPIC_QUEUE, "orders.*.created", None, false)
        .unwrap();
    let mut sub = client(port);
    sub.subscribe(NEWS, NEWS_SUBSCRIBER, true).unwrap();
    drop(sub);
}

/// After restart number `round`: the messages this check acked in earlier rounds stay acked
/// (not pending again); publishes through both exchanges land in exactly the bound queues;
/// and a PUBLISH_TOPIC made while the durable subscriber is offline reaches it as catch-up
/// when it subscribes again (after any earlier round's message the kill handed out again).
fn check_durable_metadata(port: u16, round: usize, acked_before: &mut Vec<String>) {
    let mut c = client(port);
    for id in acked_before.drain(..) {
        match c.nack(&id) {
            Err(ClientError::Server(e)) if e == format!("message {id} not found in pending") => {}
            other => panic!("round {round}: acked exchange copy {id} is pending again: {other:?}"),
        }
    }
    let body = format!(r#"{{"round":{round}}}"#);
    c.publish_exchange(FANOUT, "ignored", &body, None, 0)
        .unwrap_or_else(|e| panic!("round {round}: fanout exchange lost: {e}"));
    let routed = format!(r#"{{"round":{round},"key":"orders.eu.created"}}"#);
    c.publish_exchange(TOPIC_EXCHANGE, "orders.eu.created", &routed, None, 0)
        .unwrap_or_else(|e| panic!("round {round}: topic exchange lost: {e}"));
    c.publish_exchange(
        TOPIC_EXCHANGE,
        "orders.eu.deleted",
        r#""unrouted""#,
        None,
        0,
    )
    .unwrap();
    for (queue, want) in [
        (FANOUT_QUEUES[0], &body),
        (FANOUT_QUEUES[1], &body),
        (TOPIC_QUEUE, &routed),
    ] {
        let m = c
            .consume(queue)
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: binding to {queue} lost"));
        assert_eq!(
            (m.topic.as_str(), m.payload_json.as_str()),
            (queue, want.as_str()),
            "round {round}: queue {queue} holds a stale or foreign message"
        );
        c.ack(&m.id).unwrap();
        acked_before.push(m.id);
        assert_eq!(
            c.consume(queue).unwrap(),
            None,
            "round {round}: {queue} got a second copy"
        );
    }

    let news = format!(r#"{{"news":{round}}}"#);
    c.publish_topic(NEWS, &news, None, 0).unwrap();
    let mut sub = client(port);
    sub.subscribe(NEWS, NEWS_SUBSCRIBER, true).unwrap();
    // The catch-up ends with this round's message. Before it may come earlier rounds'
    // messages again: a push is confirmed (and leaves the registration) once the
    // subscriber's TCP acknowledged it, by a record nobody waits for, so a kill soon after
    // can hand it out once more — at-least-once allows that, never a missing message.
    loop {
        let push = sub
            .next_push(10_000)
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: durable subscription lost (no catch-up)"));
        assert_eq!(
            (push.topic.as_str(), push.subscriber_id.as_str()),
            (NEWS, NEWS_SUBSCRIBER),
            "round {round}: {push:?}"
        );
        if push.payload_json == news {
            break;
        }
        let earlier = serde_json::from_str::<Value>(&push.payload_json)
            .ok()
            .and_then(|v| v["news"].as_u64())
            .is_some_and(|n| n < round as u64);
        assert!(
            earlier,
            "round {round}: catch-up holds {} before this round's message",
            push.payload_json
        );
    }
}

// ---- final drain and verification --------------------------------------------------------

#[derive(Debug, Default)]
struct Report {
    confirmed: usize,
    unanswered: usize,
    unanswered_delivered: usize,
    load_deliveries: usize,
    final_deliveries: usize,
    recovered_by_nack: usize,
    acks_answered: usize,
    acks_gone_after_kill: usize,
    stuck_pending: u64,
}

/// Consumes `queue` until EMPTY, pipelining CONSUMEs and then their ACKs.
fn drain(c: &mut Client, queue: &str) -> Vec<ConsumedMessage> {
    const BATCH: usize = 64;
    let consume = format!(r#"{{"topic":"{queue}"}}"#);
    let mut out = Vec::new();
    loop {
        let frames: Vec<(u8, &[u8])> = (0..BATCH)
            .map(|_| (op::CONSUME, consume.as_bytes()))
            .collect();
        let mut batch = Vec::new();
        for (code, payload) in c.pipeline(&frames).unwrap() {
            match code {
                status::OK => batch
                    .push(ConsumedMessage::parse(std::str::from_utf8(&payload).unwrap()).unwrap()),
                status::EMPTY => {}
                other => panic!(
                    "drain {queue}: status {other:#04x} {}",
                    String::from_utf8_lossy(&payload)
                ),
            }
        }
        let acks: Vec<String> = batch
            .iter()
            .map(|m| format!(r#"{{"id":"{}"}}"#, m.id))
            .collect();
        let frames: Vec<(u8, &[u8])> = acks.iter().map(|a| (op::ACK, a.as_bytes())).collect();
        for (i, reply) in c.pipeline(&frames).unwrap().into_iter().enumerate() {
            assert_eq!(
                reply,
                (status::OK, br#"{"status":"acked"}"#.to_vec()),
                "drain {queue}: ack of {}",
                batch[i].id
            );
        }
        let done = batch.len() < BATCH;
        out.extend(batch);
        if done {
            return out;
        }
    }
}

/// What the test knows about every message, and what it found wrong.
struct Ledger<'a> {
    /// key → (queue, id from the publish reply when there was one).
    published: HashMap<Key, (usize, Option<&'a str>)>,
    /// Keys delivered so far (each must be delivered at most once).
    delivered: HashSet<Key>,
    /// Keys whose ACK was answered, with the acked id: they must never come back.
    acked: HashMap<Key, String>,
    /// Keys whose re-sent ACK found nothing pending: acked, or put back in line by the
    /// kill. Each may be delivered once more (then it leaves this set); what is left after
    /// the final drain was acked.
    gone_after_kill: HashMap<Key, String>,
    /// Deliveries allowed by `gone_after_kill`.
    redelivered_after_kill: usize,
    violations: Vec<String>,
}

impl Ledger<'_> {
    /// Checks one delivery: a payload this test published, from the queue it went to, with
    /// the id its publish reply gave, `retry` as expected, never after its ack, never twice.
    fn delivery(&mut self, m: &ConsumedMessage, phase: &str, retry: u32) -> Option<Key> {
        let Some(key) = decode_key(&m.payload_json) else {
            self.violations.push(format!(
                "{phase}: delivery {} carries a payload nobody published: {}",
                m.id, m.payload_json
            ));
            return None;
        };
        let Some(&(queue, id)) = self.published.get(&key) else {
            self.violations
                .push(format!("{phase}: {key:?} was never published"));
            return None;
        };
        if m.topic != QUEUES[queue] {
            self.violations.push(format!(
                "{phase}: {key:?} published to {} came from {}",
                QUEUES[queue], m.topic
            ));
        }
        if let Some(id) = id.filter(|id| *id != m.id) {
            self.violations.push(format!(
                "{phase}: {key:?} published as {id} delivered as {}",
                m.id
            ));
        }
        if m.retry != retry {
            self.violations.push(format!(
                "{phase}: {key:?} delivered with retry {} (expected {retry}: no timeout or \
                 nack happened to it)",
                m.retry
            ));
        }
        if self.acked.contains_key(&key) {
            self.violations.push(format!(
                "{phase}: {key:?} reappeared after its ACK was answered"
            ));
        } else if self.delivered.insert(key) {
            // The first delivery.
        } else if self.gone_after_kill.remove(&key).is_some() {
            self.redelivered_after_kill += 1;
        } else {
            self.violations.push(format!(
                "{phase}: {key:?} delivered again although no kill interrupted the ACK of its \
                 first delivery, and it was never nacked and never timed out"
            ));
        }
        Some(key)
    }
}

/// Replays the workers' logs into a ledger, drains every queue, and recovers (by NACK with
/// the publish id) acknowledged publishes that are neither acked nor ready.
fn final_drain<'a>(
    port: u16,
    publishers: &'a [PublisherLog],
    consumer: &ConsumerLog,
) -> (Ledger<'a>, Report) {
    let mut report = Report::default();
    let mut ledger = Ledger {
        published: HashMap::new(),
        delivered: HashSet::new(),
        acked: HashMap::new(),
        gone_after_kill: HashMap::new(),
        redelivered_after_kill: 0,
        violations: Vec::new(),
    };
    for log in publishers {
        ledger.violations.extend(log.errors.iter().cloned());
    }
    ledger
        .violations
        .extend(consumer.errors.iter().map(|e| format!("consumer: {e}")));
    for (p, log) in publishers.iter().enumerate() {
        for (s, (&q, id)) in log.queue.iter().zip(&log.id).enumerate() {
            ledger
                .published
                .insert((p as u32, s as u64), (q, id.as_deref()));
            match id {
                Some(_) => report.confirmed += 1,
                None => report.unanswered += 1,
            }
        }
    }

    // Replay what the consumer saw, in order.
    let mut key_of_id: HashMap<&str, Key> = HashMap::new();
    for event in &consumer.events {
        match event {
            Event::Delivered(m) => {
                report.load_deliveries += 1;
                if let Some(key) = ledger.delivery(m, "load", 0) {
                    key_of_id.insert(&m.id, key);
                }
            }
            Event::Acked { id, how } => {
                match how {
                    AckHow::GoneAfterKill => report.acks_gone_after_kill += 1,
                    AckHow::Answered | AckHow::AnsweredAfterKill => report.acks_answered += 1,
                }
                if let Some(&key) = key_of_id.get(id.as_str()) {
                    if *how == AckHow::GoneAfterKill {
                        ledger.gone_after_kill.insert(key, id.clone());
                    } else {
                        ledger.acked.insert(key, id.clone());
                    }
                }
            }
        }
    }
    let mut unacked: Vec<Key> = ledger
        .delivered
        .iter()
        .filter(|k| !ledger.acked.contains_key(k) && !ledger.gone_after_kill.contains_key(k))
        .copied()
        .collect();
    if !unacked.is_empty() {
        unacked.sort();
        ledger.violations.push(format!(
            "the consumer left deliveries unacked (it resolves every ack): {unacked:?}"
        ));
    }

    // Everything still ready.
    let mut c = client(port);
    for queue in QUEUES {
        for m in drain(&mut c, queue) {
            report.final_deliveries += 1;
            if let Some(key) = ledger.delivery(&m, "final drain", 0) {
                ledger.acked.insert(key, m.id.clone());
            }
        }
    }
    // Not ready again, so the ACK the kill interrupted had been applied.
    let gone: Vec<(Key, String)> = ledger.gone_after_kill.drain().collect();
    ledger.acked.extend(gone);

    // Acknowledged publishes neither delivered nor ready must be pending (taken by a CONSUME
    // whose reply was lost): NACK them by their publish id and drain them.
    let mut missing: Vec<(Key, &str)> = ledger
        .published
        .iter()
        .filter_map(|(key, (_, id))| Some((*key, (*id)?)))
        .filter(|(key, _)| !ledger.delivered.contains(key))
        .collect();
    missing.sort();
    let mut nacked = 0;
    for (key, id) in &missing {
        match c.nack(id) {
            Ok(()) => nacked += 1,
            Err(e) => ledger.violations.push(format!(
                "LOST: acknowledged publish {key:?} (id {id}) is neither ready nor pending: {e}"
            )),
        }
    }
    let deadline = Instant::now() + PROGRESS_DEADLINE;
    while report.recovered_by_nack < nacked {
        assert!(
            Instant::now() < deadline,
            "{} nacked messages did not become ready again",
            nacked - report.recovered_by_nack
        );
        for queue in QUEUES {
            for m in drain(&mut c, queue) {
                report.recovered_by_nack += 1;
                if let Some(key) = ledger.delivery(&m, "after nack", 1) {
                    ledger.acked.insert(key, m.id.clone());
                }
            }
        }
    }
    report.unanswered_delivered = ledger
        .delivered
        .iter()
        .filter(|k| ledger.published.get(k).is_some_and(|(_, id)| id.is_none()))
        .count();
    (ledger, report)
}

/// After a restart following the drain: no acked message is ready or pending again (a NACK
/// of each acked id must answer `not found in pending`), nothing is ready, dead-lettered or
/// delayed, and what is pending is explained by lost CONSUME replies that took unanswered
/// publishes (whose ids nobody knows).
fn verify_final_state(
    port: u16,
    ledger: &mut Ledger<'_>,
    report: &mut Report,
    consumer: &ConsumerLog,
) {
    let mut c = client(port);
    let mut acked: Vec<(&Key, &String)> = ledger.acked.iter().collect();
    acked.sort();
    for chunk in acked.chunks(256) {
        let bodies: Vec<String> = chunk
            .iter()
            .map(|(_, id)| format!(r#"{{"id":"{id}"}}"#))
            .collect();
        let frames: Vec<(u8, &[u8])> = bodies.iter().map(|b| (op::NACK, b.as_bytes())).collect();
        for ((key, id), reply) in chunk.iter().zip(c.pipeline(&frames).unwrap()) {
            let want = format!(r#"{{"error":"message {id} not found in pending"}}"#);
            if reply != (status::ERROR, want.into_bytes()) {
                ledger.violations.push(format!(
                    "ACK LOST: {key:?} (id {id}) was acked (reply received) but is pending \
                     again after a restart: NACK answered {:#04x} {}",
                    reply.0,
                    String::from_utf8_lossy(&reply.1)
                ));
            }
        }
    }
    let stats = c.stats().unwrap();
    for queue in QUEUES {
        let ready = stats["Queues"][queue].as_u64().unwrap_or(0);
        if ready != 0 {
            ledger.violations.push(format!(
                "{queue} has {ready} ready after the drain and a restart: {stats}"
            ));
        }
    }
    if stats["DeadLetters"] != serde_json::json!({}) || stats["DelayedCount"] != 0 {
        ledger.violations.push(format!(
            "unexpected dead letters or delayed messages: {stats}"
        ));
    }
    report.stuck_pending = stats["PendingCount"].as_u64().unwrap_or(u64::MAX);
    let unanswered_undelivered = (report.unanswered - report.unanswered_delivered) as u64;
    let explainable = consumer.lost_consumes.min(unanswered_undelivered);
    if report.stuck_pending > explainable {
        ledger.violations.push(format!(
            "{} messages pending at the end, but at most {explainable} can be (lost consume \
             replies: {}, unanswered publishes never delivered: {unanswered_undelivered}): {stats}",
            report.stuck_pending, consumer.lost_consumes
        ));
    }
}

/// For the report only (the layout is the server's business): queue slots whose snapshot
/// log holds data, i.e. that compacted at least once.
fn slots_with_snapshots(data_dir: &std::path::Path) -> usize {
    let Ok(slots) = std::fs::read_dir(data_dir.join("logs").join("queue")) else {
        return 0;
    };
    slots
        .flatten()
        .filter(|slot| {
            std::fs::read_dir(slot.path().join("snap")).is_ok_and(|files| {
                files
                    .flatten()
                    .any(|f| f.metadata().is_ok_and(|m| m.len() > 0))
            })
        })
        .count()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}
