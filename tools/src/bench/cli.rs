//! Command line of `boltq-bench` (clap derive). Every scenario takes the common options
//! ([`Common`]) flattened in, so they can be written after the scenario name.

use super::cpus::CpuList;
use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Transport: the v1 TCP protocol of the queue plane only. WebSocket scenarios (chat, channel,
reconnect) come with the messaging plane; TLS is not supported yet (plain TCP).

Loop modes: without --rate each connection keeps --depth requests in flight (closed loop).
With --rate the senders follow a fixed schedule (open loop) and latency is measured from the
intended send time, so a stalled server shows up as latency instead of as a lower rate.

Counts: for every request kind, sent = acknowledged (OK or EMPTY reply) + errors. Drained
runs also check consumed = published; pub/sub checks delivered = published x subscribers.
Exit status: 0 when errors <= --max-errors, 1 when more, 2 on a setup failure.";

/// Load generator for a BoltQ server.
#[derive(Parser, Debug)]
#[command(name = "boltq-bench", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Subcommand, Debug)]
pub enum Scenario {
    /// N producer connections publishing (PUBLISH 0x01) to Q queues.
    Publish(PublishArgs),
    /// Drain queues with CONSUME + ACK (optionally batch and long-poll CONSUME).
    Consume(ConsumeArgs),
    /// Producers and consumers together; end-to-end latency from a timestamp in the payload.
    Queue(QueueArgs),
    /// One publisher (PUBLISH_TOPIC) and K subscribers (CONSUME with `id`); delivery latency.
    Pubsub(PubsubArgs),
    /// PUBLISH_EXCHANGE through a topic exchange with B bindings (one queue per binding).
    Exchange(ExchangeArgs),
}

/// Options shared by every scenario.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Server TCP address (host:port).
    #[arg(long, default_value = "127.0.0.1:9091")]
    pub addr: String,
    /// API key, sent with AUTH on every connection before anything else.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Measured duration in seconds (after the warm-up). Default 10 when --messages is not
    /// given; with --messages it is a cap.
    #[arg(long)]
    pub duration_secs: Option<f64>,
    /// Total messages to send (publishes; for `consume`, messages to consume).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Load runs this long before measuring starts; its latencies and rates are not reported.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_secs: f64,
    /// Open loop: total sends per second over all sending connections.
    #[arg(long)]
    pub rate: Option<f64>,
    /// CPUs for the generator's threads, e.g. `1` or `1,3` or `2-3` (sched_setaffinity).
    #[arg(long)]
    pub cpus: Option<CpuList>,
    /// Event-loop threads (default: one per CPU of --cpus, else 1).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the final report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when more errors than this occurred.
    #[arg(long, default_value_t = 0)]
    pub max_errors: u64,
    /// Prefix of the queue, topic and exchange names this run uses.
    #[arg(long, default_value = "bench")]
    pub prefix: String,
    /// After the run, how long to wait for outstanding replies (and for consumers or
    /// subscribers to catch up) before counting what is missing as errors.
    #[arg(long, default_value_t = 10.0)]
    pub drain_timeout_secs: f64,
    /// A request without a reply for this long (plus --wait-ms) counts as a timeout and
    /// ends its connection.
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout_secs: f64,
    /// Skip the STATS cross-check of server-side counts (publish, exchange).
    #[arg(long)]
    pub no_verify: bool,
    /// No per-second progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Shape of the messages a sender publishes.
#[derive(Args, Debug, Clone)]
pub struct PayloadArgs {
    /// Payload size in bytes: the JSON string value of `payload` (quotes included), which
    /// carries a send timestamp and a sequence number. At least 34.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(34..=4_000_000))]
    pub size: u32,
    /// Priorities to publish with, as `priority:weight` pairs, e.g. `0:80,5:15,9:5`.
    #[arg(long)]
    pub priority_mix: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct PublishArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub payload: PayloadArgs,
    /// Producer connections.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Requests in flight per connection (pipelining depth).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Queues, published to round-robin.
    #[arg(long, default_value_t = 1)]
    pub queues: usize,
}

/// How consumers ask for messages.
#[derive(Args, Debug, Clone)]
pub struct ConsumerArgs {
    /// Batch CONSUME: ask for up to this many messages per request (BoltQ's `max`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub batch: Option<u32>,
    /// Long-poll CONSUME: the server waits up to this long for a message (BoltQ's `wait_ms`).
    #[arg(long)]
    pub wait_ms: Option<u64>,
}

#[derive(Args, Debug, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub consumer: ConsumerArgs,
    /// Consumer connections.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Requests (CONSUME and ACK) in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Queues, consumed round-robin.
    #[arg(long, default_value_t = 1)]
    pub queues: usize,
    /// Publish this many messages first (not measured), then drain exactly them.
    /// Without it (and without --messages) the run drains until the queues are empty.
    #[arg(long)]
    pub prefill: Option<u64>,
    /// Payload size of the prefilled messages.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(34..=4_000_000))]
    pub size: u32,
}

#[derive(Args, Debug, Clone)]
pub struct QueueArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub payload: PayloadArgs,
    #[command(flatten)]
    pub consumer: ConsumerArgs,
    /// Producer connections.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Consumer connections.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Requests in flight per producer connection.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Requests (CONSUME and ACK) in flight per consumer connection (default: --depth).
    #[arg(long)]
    pub consumer_depth: Option<usize>,
    /// Queues; producers and consumers go round-robin over them.
    #[arg(long, default_value_t = 1)]
    pub queues: usize,
}

#[derive(Args, Debug, Clone)]
pub struct PubsubArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub payload: PayloadArgs,
    /// Subscriber connections (one subscription each, same topic).
    #[arg(long, default_value_t = 10)]
    pub subscribers: usize,
    /// PUBLISH_TOPIC requests in flight on the publisher's connection.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
}

#[derive(Args, Debug, Clone)]
pub struct ExchangeArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub payload: PayloadArgs,
    /// Bindings on the topic exchange (`r.<i>.*` to queue `<prefix>.x.<i>`); each
    /// message's routing key `r.<n mod B>.k` matches exactly one of them.
    #[arg(long, default_value_t = 10)]
    pub bindings: usize,
    /// Producer connections.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
}
