//! Command line of `boltq-bench` (clap derive). Every scenario takes the common options
//! ([`Common`]) flattened in, so they can be written after the scenario name.

use super::cpus::CpuList;
use super::size_dist::SizeDist;
use super::wire::{PAYLOAD_BYTES_MAX, PAYLOAD_BYTES_MIN};
use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Transport: publish, consume, queue, pubsub and exchange speak the v1 TCP protocol to --addr.
chat, channel and reconnect are WebSocket scenarios: devices connect to the messaging
gateway at --url with HS256 tokens minted from --secret (the server's
messaging.identity.keys); --addr and --api-key do not apply to them. TLS: --tls for the TCP
scenarios, a wss:// --url for the gateway, https:// for --http; --tls-ca, --tls-insecure and
--tls-server-name apply to all three.

Loop modes: without --rate each connection keeps --depth requests in flight (closed loop).
With --rate the senders follow a fixed schedule (open loop) and latency is measured from the
intended send time, so a stalled server shows up as latency instead of as a lower rate.

Counts: for every request kind, sent = acknowledged (OK or EMPTY reply) + errors. Drained
runs also check consumed = published; pub/sub checks delivered = published x subscribers;
chat and channel check delivered = acknowledged sends x recipients (every record in order,
none repeated or skipped); reconnect checks that every device resumed and received exactly
what was written while it was away.
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
    /// Gateway: N devices in M direct or group conversations; send→sent and send→delivered
    /// latency.
    Chat(ChatArgs),
    /// Gateway: one large group, K listeners, P senders; fan-out latency.
    Channel(ChannelArgs),
    /// Gateway: N devices drop their connections at once, miss messages, and resume; time
    /// until all are caught up, nothing lost or repeated.
    Reconnect(ReconnectArgs),
}

/// `--size` of the TCP scenarios: bounded by the stamp and by the protocol's frame limit.
fn tcp_size(spec: &str) -> Result<SizeDist, String> {
    SizeDist::parse(spec, PAYLOAD_BYTES_MIN as u32, PAYLOAD_BYTES_MAX as u32)
}

/// `--size` of the gateway scenarios: bounded by the stamp and by what fits the gateway's
/// frame limit once base64-encoded.
fn ws_size(spec: &str) -> Result<SizeDist, String> {
    use super::gateway::proto::{PAYLOAD_BYTES_MAX, STAMP_BYTES};
    SizeDist::parse(spec, STAMP_BYTES as u32, PAYLOAD_BYTES_MAX as u32)
}

/// Options shared by every scenario.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Server TCP address (host:port).
    #[arg(long, default_value = "127.0.0.1:9091")]
    pub addr: String,
    /// API key, sent with AUTH on every connection before anything else (and as X-API-Key
    /// to --http).
    #[arg(long)]
    pub api_key: Option<String>,
    /// The server's admin HTTP address (host:port, or https://host:port when its listeners
    /// speak TLS): `/metrics` is scraped before and after the measured phase and the report
    /// gets the server's own counts (section `server`).
    #[arg(long)]
    pub http: Option<String>,
    /// TCP scenarios: speak TLS to --addr (a server with `server.tls` enabled). The server's
    /// certificate must chain to the system's CAs unless --tls-ca or --tls-insecure. (The
    /// gateway scenarios take TLS from a wss:// --url, --http from https://.)
    #[arg(long)]
    pub tls: bool,
    /// PEM file of the CAs that may sign the server's certificate (TLS of any kind).
    #[arg(long)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Accept any server certificate (self-signed test certificates; no protection).
    #[arg(long)]
    pub tls_insecure: bool,
    /// Name the server's certificate must carry (default: the host of --addr or --url).
    #[arg(long)]
    pub tls_server_name: Option<String>,
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
    /// carries a send timestamp and a sequence number; 34..=4000000. One size (`100`), a
    /// uniform range (`64-4096`) or weighted choices (`100:90,4096:10`), drawn per message
    /// from each connection's seeded PRNG.
    #[arg(long, default_value = "100", value_parser = tcp_size)]
    pub size: SizeDist,
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
    /// ACK each CONSUME reply's messages with one ACK carrying `ids` (a BoltQ addition, not
    /// in v1) instead of one ACK per message. Pair it with `--batch`.
    #[arg(long)]
    pub ack_many: bool,
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
    /// Payload size of the prefilled messages (a distribution, as for `publish`).
    #[arg(long, default_value = "100", value_parser = tcp_size)]
    pub size: SizeDist,
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
    /// Each connection uses one queue (producer i and consumer i: queue i mod --queues), as
    /// a service holding a connection per queue does, instead of going round-robin.
    #[arg(long)]
    pub queue_per_connection: bool,
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

/// Where and how gateway devices connect.
#[derive(Args, Debug, Clone)]
pub struct GatewayArgs {
    /// Gateway URL (ws:// or wss://).
    #[arg(long, default_value = "ws://127.0.0.1:9090/ws")]
    pub url: String,
    /// HS256 secret the server verifies tokens with (a `messaging.identity.keys` secret,
    /// at least 32 bytes). The generator mints one token per device from it.
    #[arg(long)]
    pub secret: String,
    /// `kid` of the minted tokens (the `id` of that key in the server's configuration).
    #[arg(long, default_value = "k1")]
    pub key_id: String,
    /// Token lifetime. A run must end before its tokens expire (the server closes
    /// connections at expiry).
    #[arg(long, default_value_t = 3600)]
    pub token_ttl_secs: u64,
    /// Tenant claim (`tid`) of the tokens, passed to the membership service.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Run a membership service for the run's own groups on this address (host:port), for
    /// a server whose `[messaging.chat] membership_url` points at it.
    #[arg(long)]
    pub membership_listen: Option<String>,
    /// Devices connecting or setting up at once (all threads together); the rest wait
    /// their turn. Keep it under the server's accept backlog (4,096): connects beyond it
    /// are dropped by the kernel and retried a second later, which then dominates a mass
    /// reconnect's time.
    #[arg(long, default_value_t = 64)]
    pub connect_concurrency: usize,
    /// Suffix of every id this run uses (after --prefix); default: derived from the clock,
    /// so runs against one server never share users, topics or cursors.
    #[arg(long)]
    pub run_id: Option<String>,
}

/// Payload of gateway sends.
#[derive(Args, Debug, Clone)]
pub struct WsPayloadArgs {
    /// Payload bytes of each send (before base64): a 24-byte stamp (sender, sequence, send
    /// time) and filler; 24..=524288. One size, a range (`64-4096`) or weighted choices
    /// (`100:90,4096:10`), drawn per send from each device's seeded PRNG.
    #[arg(long, default_value = "100", value_parser = ws_size)]
    pub size: SizeDist,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversationKind {
    Direct,
    Group,
}

#[derive(Args, Debug, Clone)]
pub struct ChatArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub payload: WsPayloadArgs,
    /// Devices (one user each), all connected for the whole run.
    #[arg(long, default_value_t = 100)]
    pub devices: usize,
    /// Conversations (default: devices/2 direct ones, or devices/group-size groups, so each
    /// device is in exactly one).
    #[arg(long)]
    pub conversations: Option<usize>,
    /// Direct conversations need nothing else; groups need a membership service (see
    /// --membership-listen).
    #[arg(long, value_enum, default_value_t = ConversationKind::Direct)]
    pub kind: ConversationKind,
    /// Members per group.
    #[arg(long, default_value_t = 8)]
    pub group_size: usize,
    /// Sends in flight per device. Closed loop: exactly this many (default 1). Open loop
    /// (--rate): at most this many (default 16).
    #[arg(long)]
    pub depth: Option<usize>,
    /// Also subscribe every device to its inbox and count the pointer records.
    #[arg(long)]
    pub inbox: bool,
    /// Skip the setup step in which one member of each conversation sends an unmeasured
    /// message first (which creates the topics before measuring starts).
    #[arg(long)]
    pub no_prime: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ChannelArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub payload: WsPayloadArgs,
    /// Members subscribed to the channel.
    #[arg(long, default_value_t = 100)]
    pub listeners: usize,
    /// Members sending to it (not subscribed).
    #[arg(long, default_value_t = 1)]
    pub senders: usize,
    /// Sends in flight per sender (closed loop default 1; open loop default 16).
    #[arg(long)]
    pub depth: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct ReconnectArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub payload: WsPayloadArgs,
    /// Devices that go away and resume.
    #[arg(long, default_value_t = 100)]
    pub devices: usize,
    /// 1: each device shares a direct conversation with the writer user. More: devices are
    /// in groups of this size with the writer (fewer partitions on the server; needs a
    /// membership service, see --membership-listen).
    #[arg(long, default_value_t = 1)]
    pub group_size: usize,
    /// Messages written to each device's conversation while it is away.
    #[arg(long, default_value_t = 2)]
    pub away_messages: u64,
    /// Connections of the writer user that write while the devices are away.
    #[arg(long, default_value_t = 1)]
    pub writers: usize,
    /// Sends in flight per writer connection.
    #[arg(long, default_value_t = 64)]
    pub depth: usize,
    /// Where the roaming devices reconnect (default: --url), for example the gateway of
    /// another node of a cluster. Sessions live on the node that made them, so on another
    /// node a device starts a fresh session and subscribes from its committed cursor:
    /// counted as not resumed, not as an error. ws:// only.
    #[arg(long)]
    pub resume_url: Option<String>,
    /// Where the writers connect (default: --url): keep them off a node that
    /// --while-away-cmd stops. ws:// only.
    #[arg(long)]
    pub writer_url: Option<String>,
    /// Shell command (`sh -c`) run once every roaming device is away and before the
    /// writers write, for example `kill -9 <pid>` of the node the devices were on. It must
    /// exit 0.
    #[arg(long)]
    pub while_away_cmd: Option<String>,
}
