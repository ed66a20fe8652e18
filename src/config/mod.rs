//! Server configuration: defaults → config file → `BOLTQ_*` environment →
//! command-line flags, validated as a whole before anything starts.
//!
//! # Sources, lowest priority first
//!
//! 1. **Defaults** — the `Default` impls below; every default is also listed in
//!    `config/boltq.example.toml`, and a test keeps the two identical.
//! 2. **Config file** (`--config FILE`, or v1's `-config FILE`):
//!    - `*.toml`: our format. Sections `[server]`, `[storage]`, `[queue]`,
//!      `[security]`, `[cache]`, `[cluster]`, `[messaging]` with the key paths
//!      of the v1 JSON config (spec/queue-plane.md §7, spec/messaging-edge.md
//!      §12) plus our own keys. **An unknown key is an error that names it**:
//!      a typo (`fsync_intervl_ms`) must not silently leave a default in
//!      place.
//!    - `*.json`: a v1 config file, read with v1's rules (see
//!      [`Config::from_v1_json_str`]).
//! 3. **Environment**: the `BOLTQ_*` variables of spec §7 and messaging §12.3,
//!    plus `BOLTQ_SHARDS`, `BOLTQ_FSYNC`, `BOLTQ_LOG_LEVEL` (see `env.rs`).
//! 4. **Flags** (see [`CliArgs`]); `--join` seeds come first in the seed list.
//!
//! # Deliberate differences from v1 (each fixes a v1 defect)
//!
//! - `storage.mode` defaults to `"disk"` (v1: `"memory"`): an acknowledged
//!   message is never lost by default. `"memory"` remains available.
//! - An unknown `storage.mode` is an error (v1 silently used memory).
//! - Unknown TOML keys are errors (v1 JSON ignored them; the v1 JSON loader
//!   still ignores them, for compatibility).
//! - Environment: a boolean must be `true`/`1` or `false`/`0`, a number must
//!   parse; anything else is an error naming the variable (v1 treated odd
//!   booleans as false and ignored unparsable integers, so a typo left the
//!   file value in force without a word).
//! - `server.http_port`, when not set anywhere, is `server.tcp_port − 1`
//!   (v1 kept 9090 whatever the TCP port). Both SDKs reach the HTTP API at
//!   TCP − 1 (spec §1, §13 item 10), so deriving it keeps them working on
//!   non-default ports.
//! - `security.allow_query_api_key` defaults to false: an `api_key` query
//!   parameter ends up in access logs and browser history.
//! - `queue.overflow` defaults to `"reject"` and `queue.retry_backoff_base_ms`
//!   to 1000 (see [`QueueConfig`]).
//! - `cluster.raft_dir` and `messaging.stream.dir` default to directories
//!   *under* `storage.data_dir`, so moving the data dir moves everything.
//!
//! Validation runs over the whole tree, including `[messaging]` when the
//! messaging plane is off (v1 skipped it, so `gateway.enabled` alone was inert).

pub(crate) mod check;
mod cli;
mod duration;
mod env;
mod error;
mod file;
mod messaging;
pub mod secret;
mod validate;

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use boltq_io::file_budget::OPEN_SEGMENT_FILES_MAX_DEFAULT;
use serde::{Deserialize, Serialize};

pub use cli::{normalize_v1_args, CliArgs};
pub use duration::{format_duration, parse_duration};
pub use error::ConfigError;
pub use messaging::{
    AclRuleConfig, ChatConfig, DedupConfig, GatewayConfig, GatewayTlsConfig, IdentityConfig,
    IdentityKeyConfig, MessagingConfig, PresenceConfig, PushConfig, ReplicationConfig,
    ReplicationRole, SignalsConfig, StreamConfig, FANOUT_ON_WRITE_LIMIT_MAX,
};

/// A way to read an environment variable. The binary passes
/// `&|name| std::env::var(name).ok()`; tests pass a map, so no test touches
/// the process environment (which is shared between test threads).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The whole configuration. Fields are public so each subsystem reads its
/// own section; values that need computing are methods on [`Config`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub queue: QueueConfig,
    pub security: SecurityConfig,
    pub admin: AdminConfig,
    pub cache: CacheConfig,
    pub cluster: ClusterConfig,
    pub messaging: MessagingConfig,
}

/// `[server]`: listeners, threads, logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Bind address of the TCP and HTTP listeners. Default `"0.0.0.0"`.
    pub host: String,
    /// HTTP admin port. Default: unset, meaning `tcp_port − 1` (9090 with the
    /// default TCP port); read it through [`Config::http_port`].
    pub http_port: Option<u16>,
    /// Binary protocol port. Default 9091.
    pub tcp_port: u16,
    /// Accepted for v1 config compatibility; no gRPC listener is ever opened.
    /// Default 9092.
    pub grpc_port: u16,
    pub tls: TlsConfig,
    /// Number of shards (one pinned executor thread each). 0 (default) = the
    /// number of online CPUs; at most 1024. More shards than CPUs is allowed
    /// (tests) but logged as a warning.
    pub shards: u32,
    /// How long an idle shard spins before parking its thread, in µs.
    /// 0 (default) = park at once: an idle server must stay under 1% CPU.
    /// Spinning trades a core per shard for lower wake-up latency; at most
    /// 10 000 (10 ms) because longer spins only burn CPU.
    pub spin_before_park_us: u64,
    /// Entries of each io_uring ring per shard, 16..=32768, default 4096. Deeper rings
    /// give the kernel more buckets to find a socket's armed poll in, which a busy shard
    /// with thousands of connections does on every park (see
    /// `boltq_shards::RING_DEPTH_DEFAULT`); about 400 KiB of ring memory each, three per
    /// shard.
    pub ring_depth: u64,
    /// `off`, `error`, `warn`, `info` (default), `debug` or `trace`.
    pub log_level: String,
    /// A TCP client must complete a frame within this once its first byte arrived, or the
    /// connection is closed: a half-sent frame pins up to 4 MiB of buffer. An idle
    /// connection (no partial frame) is never closed by it. Default `"30s"`, 1 ms..=1 h.
    #[serde(with = "duration::as_string")]
    pub read_timeout: Duration,
    /// With `security.api_key` set, a TCP client must authenticate within this after
    /// connecting, or the connection is closed. Default `"10s"`, 1 ms..=1 h.
    #[serde(with = "duration::as_string")]
    pub auth_timeout: Duration,
    /// Most open TCP (queue protocol) connections; each shard takes its share (this divided
    /// by the shard count, rounded up), and a connection past its shard's share is closed
    /// at once and counted (`boltq_connections_refused_total{listener="tcp"}`). An idle
    /// connection keeps ~20 KiB resident; its buffers may grow to ~200 KiB while large
    /// batches pass. Default 4096, 1..=1,000,000.
    pub tcp_connections_max: u64,
    /// Most open connections on the admin HTTP listener (SSE `/subscribe` streams
    /// included), shared out per shard as `tcp_connections_max`; one past it is closed at
    /// once and counted (`boltq_connections_refused_total{listener="http"}`). While the
    /// messaging gateway shares the listener, `messaging.gateway.connections_max` is added
    /// for its devices. Default 1024, 1..=1,000,000.
    pub http_connections_max: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "0.0.0.0".to_string(),
            http_port: None,
            tcp_port: 9091,
            grpc_port: 9092,
            tls: TlsConfig::default(),
            shards: 0,
            spin_before_park_us: 0,
            ring_depth: boltq_shards::RING_DEPTH_DEFAULT as u64,
            log_level: "info".to_string(),
            read_timeout: Duration::from_secs(30),
            auth_timeout: Duration::from_secs(10),
            tcp_connections_max: 4096,
            http_connections_max: 1024,
        }
    }
}

/// `[server.tls]`: one certificate for both the TCP and HTTP listeners.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Default false. When true, `cert_file` and `key_file` are required.
    pub enabled: bool,
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// PEM CA bundle. When set, clients of both listeners must present a
    /// certificate signed by it (mTLS); v1 read it nowhere.
    pub ca_file: PathBuf,
}

/// `storage.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StorageMode {
    /// Everything goes through the segment log under `storage.data_dir`.
    #[default]
    Disk,
    /// Nothing is written; everything is lost on restart.
    Memory,
}

impl StorageMode {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageMode::Disk => "disk",
            StorageMode::Memory => "memory",
        }
    }
}

/// `storage.fsync` / `messaging.fsync`: when an append counts as durable.
/// See [`FsyncPolicy`] for the resolved form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FsyncMode {
    /// Reply only after the commit round's fdatasync (default).
    #[default]
    Always,
    /// Reply after the write; fdatasync at most `fsync_interval_ms` later.
    Interval,
    /// Never fdatasync explicitly; the kernel writes back when it likes.
    Never,
}

impl FsyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FsyncMode::Always => "always",
            FsyncMode::Interval => "interval",
            FsyncMode::Never => "never",
        }
    }
}

/// The durability contract of one plane, resolved from the mode and the
/// interval key, for the storage layer to enforce. Promised loss on power
/// failure: `Always` none of what was acknowledged; `Interval` at most the
/// last `interval_ms` of acknowledged appends; `Never` whatever the kernel had
/// not yet written back. (STATUS.md states what the io layer actually does.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    Always,
    Interval { interval_ms: u64 },
    Never,
}

/// `[storage]`: where and how durably data is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `"disk"` (default) or `"memory"`. v1 defaulted to memory and silently
    /// treated unknown values as memory; both were ways to lose acknowledged
    /// messages, so we default to disk and reject unknown values.
    pub mode: StorageMode,
    /// Root of everything on disk (journals, segments, raft, streams, spill).
    /// Default `"./data"`.
    pub data_dir: PathBuf,
    /// v1 key: WAL size in bytes that triggers compaction; 0 disables
    /// (v1: ≤ 0 disables). Default 104857600 (100 MiB).
    pub compaction_threshold: u64,
    /// Bytes per second a shard writes of queue-slot snapshots (`queue::server::pacer`):
    /// unpaced, a large snapshot held client commits' fdatasyncs for hundreds of ms. 0 =
    /// not paced, else 1 MiB..=16 GiB; default 16 MiB.
    pub snapshot_write_bytes_per_sec: u64,
    /// `"always"` (default) | `"interval"` | `"never"`; see [`FsyncPolicy`].
    pub fsync: FsyncMode,
    /// Loss window for `fsync = "interval"`, in ms; 1..=10000, default 10.
    /// Validated even when another mode is chosen, so switching modes later
    /// cannot reveal a bad value.
    pub fsync_interval_ms: u64,
    /// Roll a segment file at this size; 1 MiB..=1 GiB, default 64 MiB.
    pub segment_bytes: u64,
    /// Size of each pre-zeroed per-shard journal file; 16 MiB + 4 KiB (twice the
    /// largest record, `JOURNAL_FILE_BYTES_FOR_ANY_RECORD`) ..=1 GiB and a multiple of
    /// 4096 (direct I/O alignment), default 64 MiB.
    pub journal_file_bytes: u64,
    /// Per-log size cap; whole sealed segments are removed. 0 (default) =
    /// unlimited.
    pub retention_bytes: u64,
    /// Per-log age cap in ms; whole sealed segments are removed. 0 (default)
    /// = unlimited.
    pub retention_ms: u64,
    /// io_uring DMA buffer memory per shard, in bytes. 0 (default) = let the
    /// runtime choose; otherwise at least 1 MiB.
    pub io_memory_bytes: u64,
    /// Segment-file descriptors each shard may hold open; past it, the
    /// least recently used idle logs close theirs and reopen on next use.
    /// Trades a reopen per cold log for staying under `ulimit -n` with many
    /// queues and partitions. 4..=1048576 (`OPEN_SEGMENT_FILES_MIN` ..=
    /// `OPEN_SEGMENT_FILES_MAX_CEILING`), default 4096 (the storage layer's
    /// `OPEN_SEGMENT_FILES_MAX_DEFAULT`).
    pub open_segment_files_max: u64,
    /// How long a start waits, in ms, for the data directory's lock while another process
    /// holds it (a process killed just now holds it until the kernel has released its
    /// files); then it exits 1. 0..=600000, default 30000; 0 = do not wait.
    pub lock_wait_ms: u64,
    /// Bytes a shard's journal may hold appended but not yet durable; past it, writes wait
    /// for the disk (the queue plane's commands in line, `queue::server::room`), so a
    /// stalled disk never turns into unbounded memory. 1 MiB..=64 GiB, default 256 MiB.
    pub journal_backlog_bytes_max: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            mode: StorageMode::Disk,
            data_dir: PathBuf::from("./data"),
            compaction_threshold: 100 * MIB,
            snapshot_write_bytes_per_sec: 16 * MIB,
            fsync: FsyncMode::Always,
            fsync_interval_ms: 10,
            segment_bytes: 64 * MIB,
            journal_file_bytes: 64 * MIB,
            retention_bytes: 0,
            retention_ms: 0,
            io_memory_bytes: 0,
            open_segment_files_max: OPEN_SEGMENT_FILES_MAX_DEFAULT as u64,
            lock_wait_ms: 30_000,
            journal_backlog_bytes_max: 256 * MIB,
        }
    }
}

/// `queue.overflow`: what a publish to a full priority level does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverflowPolicy {
    /// Refuse the publish with an error reply (default). Backpressure reaches
    /// the producer, and memory and disk stay bounded.
    #[default]
    Reject,
    /// v1 behaviour: accept and park the message in a spill file under
    /// `data_dir`; it is delivered after the in-memory backlog drains (order
    /// across the spill is not preserved).
    Spill,
}

/// `[queue]`: work-queue behaviour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Redeliveries before a message goes to `<queue>_dead_letter`; a message
    /// is delivered at most `max_retry + 1` times. Default 5; at least 1
    /// (v1 turned ≤ 0 into 5; in TOML we refuse 0 rather than reinterpret it).
    pub max_retry: u32,
    /// Time a consumer has to ACK before the message is redelivered, as a
    /// duration string. Default `"30s"`; must be > 0.
    #[serde(with = "duration::as_string")]
    pub ack_timeout: Duration,
    /// Most messages one queue holds (ready, delayed and waiting to retry),
    /// across all 10 priority levels; a publish beyond it is refused with
    /// `queue "<q>" is full (capacity N)`. Default 1048576; 1..=2^30.
    /// v1 applied this per priority level (10× in total) and spilled the
    /// excess to disk; one limit per queue is what users expect of it.
    pub capacity: u64,
    /// Delay before the first redelivery after a NACK or ack timeout, in ms;
    /// doubles each retry up to `retry_backoff_max_ms`. Default 1000.
    /// 0 = v1 behaviour (requeue at once).
    ///
    /// Why not v1's immediate retry: a message that fails deterministically
    /// then burns through all its retries in milliseconds and reaches the
    /// dead-letter queue before a transient cause (a restarting dependency)
    /// can clear, while hot-looping a consumer. With the defaults a message
    /// is retried after 1, 2, 4, 8, 16 s (31 s in total) before dead-lettering.
    /// v1 clients send nothing whose meaning depends on redelivery timing.
    pub retry_backoff_base_ms: u64,
    /// Upper bound of the backoff, in ms. Default 30000; must be ≥ the base
    /// when backoff is on, at most 3600000 (1 h).
    pub retry_backoff_max_ms: u64,
    /// Payload bytes one durable subscription keeps for its subscriber (its offline
    /// backlog and the pushes its connection has not confirmed, together), beside the
    /// `capacity` messages: a copy that would pass either is not kept for it (the publish
    /// still succeeds for everyone else). Default 268435456 (256 MiB); 1 MiB..=1 TiB.
    pub durable_backlog_bytes_max: u64,
    /// `"reject"` (default) or `"spill"` (v1 behaviour); see
    /// [`OverflowPolicy`].
    pub overflow: OverflowPolicy,
    /// Answer a PUBLISH_EXCHANGE (TCP 0x18, HTTP `/exchange/publish`) that matches no
    /// binding with an error instead of v1's silent OK. Default false (v1 clients expect
    /// the OK).
    pub report_unroutable: bool,
    /// Distinct (topic, subscriber id) pairs one TCP connection may subscribe; one more is
    /// refused with an error naming this key. Default 1024, 1..=65536.
    pub subscriptions_per_connection_max: u64,
    /// A TCP connection moves, once, to the shard that owns the queues its first requests
    /// name, before it uses any (the kernel hands connections to shards at random; served
    /// elsewhere, each request crosses cores twice). TLS connections stay where they were
    /// accepted. Default true; false keeps every connection where it was accepted.
    pub connection_affinity: bool,
    /// Work queues one slot holds (a node holds 256 slots; queue names spread over them by
    /// hash). A publish, bind or declare that would create one more is refused with an
    /// error naming this key; a CONSUME of an unknown name then answers EMPTY. Default
    /// 1024 (262,144 per node), 1..=65536.
    pub queues_per_slot_max: u64,
    /// Payload bytes of the work-queue messages one slot holds in any state (ready,
    /// delayed, retry-waiting, pending, dead-lettered); a publish that would pass it is
    /// refused with an error naming this key. It bounds one slot's memory and each of its
    /// snapshots (durable backlogs are bounded by `durable_backlog_bytes_max` each).
    /// Default 1073741824 (1 GiB), 1 MiB..=1 TiB.
    pub slot_bytes_max: u64,
    /// A work queue a publish or CONSUME created is forgotten once it has held nothing
    /// (no message in any state, no dead letter) and no publish or delivery used it for
    /// this long; the next publish or CONSUME of its name creates it again. Declared
    /// queues (BIND, `/queues` declare) are kept. `"0s"` keeps every queue (v1). Every
    /// node of a cluster must use the same value. Default 1h, 0s or 1s..=30 days.
    #[serde(with = "duration::as_string")]
    pub idle_queue_ttl: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_retry: 5,
            ack_timeout: Duration::from_secs(30),
            capacity: 1 << 20,
            retry_backoff_base_ms: 1000,
            retry_backoff_max_ms: 30_000,
            durable_backlog_bytes_max: 256 << 20,
            overflow: OverflowPolicy::Reject,
            report_unroutable: false,
            subscriptions_per_connection_max: 1024,
            connection_affinity: true,
            queues_per_slot_max: 1024,
            slot_bytes_max: 1 << 30,
            idle_queue_ttl: Duration::from_secs(3600),
        }
    }
}

/// `[security]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Shared key for TCP `AUTH` and HTTP `X-API-Key`. Empty (default) = auth
    /// off.
    pub api_key: String,
    /// Also accept the key as an `api_key` HTTP query parameter, as v1 always
    /// did. Default false: query strings end up in access logs and browser
    /// history (spec §8).
    pub allow_query_api_key: bool,
}

/// `[admin]`: what the admin HTTP listener shows to whom (issue 17, safe defaults).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Browser origins (`scheme://host[:port]`, exactly as browsers send `Origin`) that
    /// may call the admin API from a web page: a request whose `Origin` equals one of them
    /// gets the CORS headers, echoing that origin. `"*"` allows every origin (v1 sent
    /// `Access-Control-Allow-Origin: *` on every answer). Default empty: no CORS headers,
    /// so a web page an operator opens cannot read the admin API through their browser.
    pub cors_origins: Vec<String>,
    /// Serve `/metrics` without the API key when `security.api_key` is set. Default false:
    /// the metrics name queues and durable subscriber ids, and every scrape gathers
    /// statistics from every shard. Without an API key every route is open anyway.
    pub metrics_public: bool,
}

/// Default `cache.max_keys`: a KV store anyone who can reach the admin API fills is bounded
/// by default (v1: unlimited). With `memory_bytes_max` it keeps the store's share of a
/// 1 GiB host (~100 B of bookkeeping per key on top of its bytes).
pub const CACHE_MAX_KEYS_DEFAULT: u64 = 1_000_000;
/// Default `cache.memory_bytes_max`: 256 MiB of keys and values.
pub const CACHE_MEMORY_BYTES_MAX_DEFAULT: u64 = 256 << 20;
/// The largest KV entry (a 1 KiB key and a 1 MiB value): the least a nonzero
/// `cache.memory_bytes_max` must allow. The cache checks it matches its own limits.
pub const CACHE_ENTRY_BYTES_MAX: u64 = 1024 + (1 << 20);

/// `[cache]`: the KV store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Default true.
    pub enabled: bool,
    /// Most keys, split among the shards; 0 = unlimited (v1's only setting). Default
    /// [`CACHE_MAX_KEYS_DEFAULT`].
    pub max_keys: u64,
    /// Most key + value bytes held, split among the shards like `max_keys`; a new key
    /// past it evicts as one past `max_keys` does. 0 = unlimited. Default
    /// [`CACHE_MEMORY_BYTES_MAX_DEFAULT`].
    pub memory_bytes_max: u64,
    /// TTL applied to a `set` without one, in ms; 0 (default) = none.
    pub default_ttl_ms: u64,
    /// Expired-key sweep interval in seconds (v1 key name). Default 10; at
    /// least 1 (v1 turned ≤ 0 into 10).
    pub cleanup_sec: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_keys: CACHE_MAX_KEYS_DEFAULT,
            memory_bytes_max: CACHE_MEMORY_BYTES_MAX_DEFAULT,
            default_ttl_ms: 0,
            cleanup_sec: 10,
        }
    }
}

/// `[cluster]`: every key of spec §7. Clustering itself is a later issue;
/// the keys are accepted and validated now so configs keep working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Default false. Clusters the queue plane (`queue_plane` is implied).
    pub enabled: bool,
    /// Newest v1 required this *and* `enabled`; we accept it and treat it as
    /// implied by `enabled` (spec §6.1). Default false.
    pub queue_plane: bool,
    /// Node id; empty (default) = the hostname while clustering, see
    /// [`Config::node_id`].
    pub node_id: String,
    /// Raft bind and advertised address. Default `"0.0.0.0:9100"`, which a clustered
    /// node refuses at start: the other members dial this address, so it must be routable.
    pub raft_addr: String,
    /// Raft storage. Default unset = `<storage.data_dir>/raft` (v1:
    /// `./data/raft`, the same path with the default data dir).
    pub raft_dir: Option<PathBuf>,
    /// Form a new single-voter cluster when no Raft state exists. Default
    /// false.
    pub bootstrap: bool,
    /// When non-empty, `bootstrap` is decided by `node id == bootstrap_node_id`
    /// (newest v1's `BOLTQ_BOOTSTRAP_NODE_ID`, so one manifest serves every
    /// replica). Default "".
    pub bootstrap_node_id: String,
    /// The other members, `node_id@host:port` (their `cluster.raft_addr`); with
    /// `enabled`, this node and these are the voters of every slot's raft group (v1
    /// parsed this key and did not use it). Default [].
    pub peers: Vec<String>,
    /// HTTP `host:port` addresses for join/leave. Final order: `--join`, then
    /// `BOLTQ_JOIN_ADDR`, then these (or `BOLTQ_SEEDS`); trimmed,
    /// de-duplicated. Default [].
    pub seeds: Vec<String>,
    /// Join as a non-voting member. Default false.
    pub non_voter: bool,
    /// Raft entries per snapshot. Default 8192; at least 1.
    pub snapshot_threshold: u64,
    /// Control-group Raft address; empty (default) = raft port + 1, see
    /// [`Config::meta_raft_addr`].
    pub meta_raft_addr: String,
    /// Control-plane keys of newest v1 (accepted; used by later issues).
    /// Default 15.
    pub session_timeout_seconds: u64,
    /// Default false.
    pub rebalance: bool,
    /// Default 0.
    pub replication_factor: u32,
    /// Default 0.
    pub max_concurrent_moves: u32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            enabled: false,
            queue_plane: false,
            node_id: String::new(),
            raft_addr: "0.0.0.0:9100".to_string(),
            raft_dir: None,
            bootstrap: false,
            bootstrap_node_id: String::new(),
            peers: Vec::new(),
            seeds: Vec::new(),
            non_voter: false,
            snapshot_threshold: 8192,
            meta_raft_addr: String::new(),
            session_timeout_seconds: 15,
            rebalance: false,
            replication_factor: 0,
            max_concurrent_moves: 0,
        }
    }
}

const REDACTED: &str = "<redacted>";

impl Config {
    /// Loads and validates the configuration from the command line `args`
    /// (including the program name, as `std::env::args_os()` yields them) and
    /// the environment `env`.
    ///
    /// The binary does:
    /// ```ignore
    /// let config = Config::load(std::env::args_os().collect(), &|k| std::env::var(k).ok())
    ///     .unwrap_or_else(|e| { e.print(); std::process::exit(e.exit_code()) });
    /// ```
    pub fn load(args: Vec<OsString>, env: EnvLookup) -> Result<Config, ConfigError> {
        let cli = CliArgs::parse_args(args)?;
        Config::from_sources(&cli, env)
    }

    /// Layers file, environment and already-parsed flags over the defaults,
    /// then validates.
    pub fn from_sources(cli: &CliArgs, env: EnvLookup) -> Result<Config, ConfigError> {
        let mut config = match &cli.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        env::apply(&mut config, env)?;
        cli.apply(&mut config);
        config.normalize();
        validate::validate(&config, env)?;
        Ok(config)
    }

    /// Reads a config file: `.toml` as TOML, `.json` as a v1 JSON config.
    /// Not validated (validation needs the final, layered values).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        file::load(path)
    }

    /// Parses TOML text (unknown keys are errors). Not validated.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        file::parse_toml(text)
    }

    /// Parses a v1 JSON config with v1's rules, over our defaults:
    /// - unknown keys are ignored (`performance.worker_pool`, anything newer);
    /// - `queue.ack_timeout` must be a duration string (a number fails, as in
    ///   v1); a zero or negative one means the default 30 s;
    /// - a present `queue` object with `max_retry`/`capacity` absent or ≤ 0
    ///   gets 5 / 1048576 (v1 zeroed them, then its broker coerced them back);
    /// - other v1 "≤ 0 means default" keys (`cache.cleanup_sec`,
    ///   gateway sizes and timeouts) likewise; ≤ 0 `compaction_threshold`
    ///   means disabled (0);
    /// - `null` leaves the default in place (as Go's decoder does).
    ///
    /// Defaults are ours, not v1's: a file without `storage.mode` runs on
    /// disk. An unknown `storage.mode` is still an error. Not validated.
    pub fn from_v1_json_str(text: &str) -> Result<Config, ConfigError> {
        file::parse_v1_json(text)
    }

    /// Validates the whole tree; `env` resolves `secret_env` references.
    /// [`Config::load`] already calls this.
    pub fn validate(&self, env: EnvLookup) -> Result<(), ConfigError> {
        validate::validate(self, env)
    }

    /// Canonical form after layering: seed lists trimmed and de-duplicated
    /// keeping the first (highest-priority) occurrence, and this node's own entry taken
    /// out of `cluster.peers` when it names `cluster.raft_addr` (so one list of every
    /// member serves every node, as a Kubernetes StatefulSet's shared environment needs).
    fn normalize(&mut self) {
        fn dedup(list: &mut Vec<String>) {
            let mut seen = std::collections::HashSet::new();
            let items = std::mem::take(list);
            for item in items {
                let item = item.trim().to_string();
                if !item.is_empty() && seen.insert(item.clone()) {
                    list.push(item);
                }
            }
        }
        dedup(&mut self.cluster.seeds);
        dedup(&mut self.cluster.peers);
        let cl = &mut self.cluster;
        if !cl.node_id.is_empty() {
            let me = (cl.node_id.as_str(), cl.raft_addr.as_str());
            cl.peers.retain(|p| split_peer(p) != Some(me));
        }
    }

    /// The HTTP admin port: `server.http_port` if set anywhere, else
    /// `tcp_port − 1` (the SDKs' convention). Validation guarantees the result
    /// is a usable port.
    pub fn http_port(&self) -> u16 {
        self.server
            .http_port
            .unwrap_or_else(|| self.server.tcp_port.saturating_sub(1))
    }

    /// Shards to start: `server.shards`, or `online_cpus` (at least 1) when 0.
    pub fn effective_shards(&self, online_cpus: usize) -> usize {
        match self.server.shards {
            0 => online_cpus.max(1),
            n => n as usize,
        }
    }

    /// Durability policy of the queue plane (`storage.fsync`).
    pub fn fsync_policy(&self) -> FsyncPolicy {
        policy(self.storage.fsync, self.storage.fsync_interval_ms)
    }

    /// Durability policy of the messaging plane (`messaging.fsync`).
    pub fn messaging_fsync_policy(&self) -> FsyncPolicy {
        policy(self.messaging.fsync, self.messaging.fsync_interval_ms)
    }

    /// `server.log_level` as a filter. Validation guarantees it parses; an
    /// unparsable value (only possible without validation) means `Info`.
    pub fn log_level_filter(&self) -> log::LevelFilter {
        self.server
            .log_level
            .parse()
            .unwrap_or(log::LevelFilter::Info)
    }

    /// `cluster.raft_dir`, or `<storage.data_dir>/raft`.
    pub fn raft_dir(&self) -> PathBuf {
        self.cluster
            .raft_dir
            .clone()
            .unwrap_or_else(|| self.storage.data_dir.join("raft"))
    }

    /// `messaging.stream.dir`, or `<storage.data_dir>/streams`.
    pub fn stream_dir(&self) -> PathBuf {
        self.messaging
            .stream
            .dir
            .clone()
            .unwrap_or_else(|| self.storage.data_dir.join("streams"))
    }

    /// `cluster.meta_raft_addr`, or the raft address with its port + 1.
    /// `None` only if `raft_addr` has no numeric port (validation rejects
    /// that when clustering).
    pub fn meta_raft_addr(&self) -> Option<String> {
        if !self.cluster.meta_raft_addr.is_empty() {
            return Some(self.cluster.meta_raft_addr.clone());
        }
        let (host, port) = split_host_port(&self.cluster.raft_addr)?;
        Some(format!("{host}:{}", port.checked_add(1)?))
    }

    /// The node id v1 would use: `cluster.node_id`; else the hostname while
    /// clustering; else `node-<pid>`. Host name and pid are arguments so this
    /// stays a pure function.
    pub fn node_id(&self, hostname: &str, pid: u32) -> String {
        if !self.cluster.node_id.is_empty() {
            self.cluster.node_id.clone()
        } else if self.cluster.enabled && !hostname.is_empty() {
            hostname.to_string()
        } else {
            format!("node-{pid}")
        }
    }

    /// Whether this node bootstraps a new cluster: `node_id ==
    /// cluster.bootstrap_node_id` when that is set, else `cluster.bootstrap`.
    pub fn is_bootstrap_node(&self, node_id: &str) -> bool {
        if self.cluster.bootstrap_node_id.is_empty() {
            self.cluster.bootstrap
        } else {
            self.cluster.bootstrap_node_id == node_id
        }
    }

    /// Legal but questionable settings, one line each, for the binary to log
    /// at start (after the logger is set up from this very config).
    pub fn warnings(&self, online_cpus: usize) -> Vec<String> {
        let mut out = Vec::new();
        let shards = self.effective_shards(online_cpus);
        if shards > online_cpus.max(1) {
            out.push(format!(
                "server.shards = {shards} exceeds the {online_cpus} online CPUs; shards will share cores"
            ));
        }
        if self.server.spin_before_park_us > 0 {
            out.push(format!(
                "server.spin_before_park_us = {}: idle shards spin and use CPU",
                self.server.spin_before_park_us
            ));
        }
        if self.storage.mode == StorageMode::Memory {
            out.push("storage.mode = \"memory\": all messages are lost on restart".to_string());
        }
        for (key, mode) in [
            ("storage.fsync", self.storage.fsync),
            ("messaging.fsync", self.messaging.fsync),
        ] {
            match mode {
                FsyncMode::Never => out.push(format!(
                    "{key} = \"never\": acknowledged data can be lost on power failure"
                )),
                FsyncMode::Interval => out.push(format!(
                    "{key} = \"interval\": up to the interval of acknowledged data can be lost on power failure"
                )),
                FsyncMode::Always => {}
            }
        }
        if !self.security.api_key.is_empty() && self.security.allow_query_api_key {
            out.push(
                "security.allow_query_api_key = true: keys in URLs end up in logs".to_string(),
            );
        }
        out
    }

    /// A copy with every secret replaced by `<redacted>`, fit for logging or
    /// an admin "effective config" route.
    pub fn redacted(&self) -> Config {
        fn hide(s: &mut String) {
            if !s.is_empty() {
                *s = REDACTED.to_string();
            }
        }
        let mut c = self.clone();
        hide(&mut c.security.api_key);
        for key in &mut c.messaging.identity.keys {
            hide(&mut key.secret);
        }
        hide(&mut c.messaging.replication.secret);
        hide(&mut c.messaging.chat.membership_auth_header);
        hide(&mut c.messaging.push.auth_header);
        c
    }
}

fn policy(mode: FsyncMode, interval_ms: u64) -> FsyncPolicy {
    match mode {
        FsyncMode::Always => FsyncPolicy::Always,
        FsyncMode::Interval => FsyncPolicy::Interval { interval_ms },
        FsyncMode::Never => FsyncPolicy::Never,
    }
}

/// Splits `host:port` (host may be empty or a bracketed IPv6 literal).
/// `node_id@host:port` → (node id, address); None when either part is empty.
pub(crate) fn split_peer(peer: &str) -> Option<(&str, &str)> {
    let (id, addr) = peer.split_once('@')?;
    (!id.is_empty() && !addr.is_empty()).then_some((id, addr))
}

pub(crate) fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return None; // bare IPv6 literal without brackets is ambiguous
    }
    Some((host, port.parse().ok()?))
}
