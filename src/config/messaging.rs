//! `[messaging]`: the messaging plane (spec/messaging-edge.md §12), modelled
//! key by key.
//!
//! The whole v1 table is modelled with typed structs and `deny_unknown_fields`
//! at every level, so a typo inside `[messaging]` is an error like anywhere
//! else. (Keeping unknown keys as a raw `toml::Value` was the fallback; it is
//! not needed.) The one free-form part is inside `identity.policy` rules,
//! which are typed too but whose *patterns* are checked by the ACL module.
//!
//! Defaults are v1's except `fsync` (ours): the plane is off by default, and
//! turning it on must not change the queue plane's behaviour.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration;
use super::FsyncMode;

/// `[messaging]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MessagingConfig {
    /// Durability of stream appends: `"always"` (default) | `"interval"` |
    /// `"never"`; see [`super::FsyncPolicy`]. v1 had only
    /// `stream.sync_on_append` (default false, i.e. not durable on ack).
    pub fsync: FsyncMode,
    /// Loss window for `fsync = "interval"`, in ms; 1..=10000, default 10.
    pub fsync_interval_ms: u64,
    pub stream: StreamConfig,
    pub identity: IdentityConfig,
    pub gateway: GatewayConfig,
    pub presence: PresenceConfig,
    pub chat: ChatConfig,
    pub push: PushConfig,
    pub http_client: HttpClientConfig,
    pub dedup: DedupConfig,
    pub signals: SignalsConfig,
    pub replication: ReplicationConfig,
}

impl Default for MessagingConfig {
    fn default() -> Self {
        MessagingConfig {
            fsync: FsyncMode::Always,
            fsync_interval_ms: 10,
            stream: StreamConfig::default(),
            identity: IdentityConfig::default(),
            gateway: GatewayConfig::default(),
            presence: PresenceConfig::default(),
            chat: ChatConfig::default(),
            push: PushConfig::default(),
            http_client: HttpClientConfig::default(),
            dedup: DedupConfig::default(),
            signals: SignalsConfig::default(),
            replication: ReplicationConfig::default(),
        }
    }
}

/// `[messaging.stream]`: the partitioned log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Master switch of the messaging plane. Default false.
    pub enabled: bool,
    /// Log root; default unset = `<storage.data_dir>/streams`
    /// (see [`super::Config::stream_dir`]).
    pub dir: Option<PathBuf>,
    /// Partitions of implicitly created topics (immutable per topic).
    /// Default 16; 1..=4096.
    pub default_partitions: u32,
    /// Segment roll size in bytes. Default 268435456 (256 MiB); 1 MiB..=1 GiB.
    pub segment_bytes: u64,
    /// Bytes between sparse index entries (v1 key name). Default 4096;
    /// 64..=segment_bytes.
    pub index_interval: u64,
    /// Per-partition size cap; 0 (default) = unlimited.
    pub retention_bytes: u64,
    /// Per-partition age cap, e.g. `"8760h"`; `"0s"` (default) = unlimited.
    #[serde(with = "duration::as_string")]
    pub retention_age: Duration,
    /// v1 key. `true` demands fsync per append, which `messaging.fsync =
    /// "always"` (our default) already gives; `true` together with another
    /// `messaging.fsync` is a contradiction and rejected. `false` (default)
    /// does not weaken `messaging.fsync`.
    pub sync_on_append: bool,
    /// Cadence of retention and (v1) periodic fsync. Default `"30s"`; > 0.
    #[serde(with = "duration::as_string")]
    pub maintenance_interval: Duration,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            enabled: false,
            dir: None,
            default_partitions: 16,
            segment_bytes: 256 * 1024 * 1024,
            index_interval: 4096,
            retention_bytes: 0,
            retention_age: Duration::ZERO,
            sync_on_append: false,
            maintenance_interval: Duration::from_secs(30),
        }
    }
}

/// `[messaging.identity]`: token verification for gateway clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// Default false. Requires at least one key.
    pub enabled: bool,
    /// HMAC keys, `[[messaging.identity.keys]]` with `id`, `secret`,
    /// `secret_env`. Every listed key must resolve to ≥ 32 bytes even when
    /// identity is off. Default [].
    pub keys: Vec<IdentityKeyConfig>,
    /// Required `iss` claim when non-empty. Default "".
    pub issuer: String,
    /// Clock-skew tolerance for `exp`/`nbf`. Default `"60s"`.
    #[serde(with = "duration::as_string")]
    pub leeway: Duration,
    /// The shared API key acts as an anonymous principal that bypasses the
    /// ACL. Default true (v1).
    pub allow_anonymous: bool,
    /// ACL rules replacing the built-in defaults (spec §4.7; v1 declared but
    /// ignored them). Default [] = built-in rules.
    pub policy: Vec<AclRuleConfig>,
    /// Membership cache TTL; a negative duration (e.g. `"-1s"`) disables the
    /// cache, represented as `None`. Default `"30s"`.
    #[serde(with = "duration::as_string_negative_disables")]
    pub membership_cache_ttl: Option<Duration>,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            enabled: false,
            keys: Vec::new(),
            issuer: String::new(),
            leeway: Duration::from_secs(60),
            allow_anonymous: true,
            policy: Vec::new(),
            membership_cache_ttl: Some(Duration::from_secs(30)),
        }
    }
}

/// One token-signing key.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityKeyConfig {
    /// `kid` of tokens signed with this key.
    pub id: String,
    /// The secret itself (prefer `secret_env`).
    pub secret: String,
    /// Name of an environment variable holding the secret; it wins over
    /// `secret` when set and non-empty.
    pub secret_env: String,
}

impl IdentityKeyConfig {
    /// The effective secret: `$secret_env` if set and non-empty, else `secret`.
    pub fn resolve_secret(&self, env: super::EnvLookup) -> String {
        if !self.secret_env.is_empty() {
            if let Some(v) = env(&self.secret_env).filter(|v| !v.is_empty()) {
                return v;
            }
        }
        self.secret.clone()
    }
}

/// One ACL rule (spec messaging-edge §4.1). Field names as in v1's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AclRuleConfig {
    pub pattern: String,
    pub except_pattern: String,
    /// `read` / `write` / `manage`; empty = all.
    pub actions: Vec<String>,
    /// `allow` or `deny`.
    pub effect: String,
    pub require_scope: Vec<String>,
    pub require_membership: bool,
    /// Zero-based topic segment holding the group id.
    pub membership_segment: u32,
}

/// `[messaging.gateway]`: the WebSocket endpoint for devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Default false. Requires `stream.enabled` and `identity.enabled`.
    pub enabled: bool,
    /// Default `"/ws"`; must start with `/`.
    pub path: String,
    /// Dedicated listener port; 0 (default) = mount on the admin listener
    /// (not for production).
    pub port: u16,
    /// How long a detached session can be resumed. Default `"5m"`; > 0.
    #[serde(with = "duration::as_string")]
    pub resume_window: Duration,
    /// Drop a client silent this long; pings go every third of it. Default
    /// `"90s"`; at least 1 s.
    #[serde(with = "duration::as_string")]
    pub pong_timeout: Duration,
    /// Per connection. Default 200; 1..=100000.
    pub max_subscriptions: u32,
    /// Most open device connections, each shard an equal share (rounded up); one past it is
    /// closed at once and counted (`boltq_connections_refused_total{listener="gateway"}`,
    /// or `"http"` when the gateway shares the admin listener, whose cap then grows by this
    /// much). An idle device costs ~9 KB. Default 200000; 1..=10000000.
    pub connections_max: u64,
    /// Most open device connections from one IP address, each shard an equal share
    /// (rounded up), so one host cannot take every place of `connections_max`; one past it
    /// is closed at once and counted (`boltq_connections_refused_per_ip_total`). Devices
    /// behind one carrier-grade NAT share an address: size it for that. Applies to the
    /// listener serving the gateway (the admin listener when they share it). Default 5000;
    /// 1..=10000000.
    pub connections_per_ip_max: u64,
    /// Outbound frames queued per connection before its producers wait. Default 256;
    /// 1..=65536.
    pub send_buffer: u32,
    /// Bytes of outbound frames queued per connection before its producers wait.
    /// Default 4194304; 64 KiB..=256 MiB.
    pub send_buffer_bytes: u64,
    /// A connection whose socket accepts no bytes this long while outbound frames wait
    /// is closed as a slow consumer (1008). A client reading slowly but steadily is
    /// never closed by it. Default `"10s"`; 1s..=10m.
    #[serde(with = "duration::as_string")]
    pub slow_consumer_timeout: Duration,
    /// Accept `security.api_key` as the anonymous principal on the gateway. Default false:
    /// the backend key must never reach a device on a public listener.
    pub allow_shared_key: bool,
    /// Largest inbound message, in bytes (v1 key name). Default 1048576;
    /// 1 KiB..=64 MiB.
    pub read_limit: u64,
    /// Max records per `history` request. Default 200; 1..=10000.
    pub history_limit: u32,
    /// Allowed `Origin` values; empty (default) = any.
    pub allowed_origins: Vec<String>,
    /// Serve the browser chat demo at `/demo/chat` and its dev-only token route
    /// `/demo/token` on the HTTP admin listener. Default false; requires `enabled`.
    /// Anyone who reaches the listener can then mint a token for any user: for a
    /// developer's machine, never for production.
    pub demo: bool,
    pub tls: GatewayTlsConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            enabled: false,
            path: "/ws".to_string(),
            port: 0,
            resume_window: Duration::from_secs(300),
            pong_timeout: Duration::from_secs(90),
            max_subscriptions: 200,
            connections_max: 200_000,
            connections_per_ip_max: 5_000,
            send_buffer: 256,
            send_buffer_bytes: 4 * 1024 * 1024,
            slow_consumer_timeout: Duration::from_secs(10),
            allow_shared_key: false,
            read_limit: 1024 * 1024,
            history_limit: 200,
            allowed_origins: Vec::new(),
            demo: false,
            tls: GatewayTlsConfig::default(),
        }
    }
}

/// `[messaging.gateway.tls]`: TLS of the dedicated gateway listener.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayTlsConfig {
    pub enabled: bool,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// `[messaging.presence]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PresenceConfig {
    /// Session lifetime without heartbeat. Default `"90s"`; > 0.
    #[serde(with = "duration::as_string")]
    pub ttl: Duration,
    /// Default `"15s"`; > 0.
    #[serde(with = "duration::as_string")]
    pub sweep_interval: Duration,
    /// Stamped on sessions. Default "".
    pub region: String,
}

impl Default for PresenceConfig {
    fn default() -> Self {
        PresenceConfig {
            ttl: Duration::from_secs(90),
            sweep_interval: Duration::from_secs(15),
            region: String::new(),
        }
    }
}

/// Largest `messaging.chat.fanout_on_write_limit`: a send names the members it fans out to
/// in its replicated command (`messaging::slot::FANOUT_MEMBERS_MAX`), and writes one pointer
/// per member; a group larger than this is read at its own partition.
pub const FANOUT_ON_WRITE_LIMIT_MAX: u32 = 4096;

/// `[messaging.chat]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChatConfig {
    /// Groups up to this size (inclusive) fan out on write. Default 256;
    /// 0 behaves as 256 (v1); at most [`FANOUT_ON_WRITE_LIMIT_MAX`].
    pub fanout_on_write_limit: u32,
    /// Default 16; 1..=4096.
    pub conversation_partitions: u32,
    /// Default 1; 1..=4096.
    pub inbox_partitions: u32,
    /// Membership service; without it group conversations are unavailable.
    /// Default "".
    pub membership_url: String,
    /// Default `"3s"`; > 0.
    #[serde(with = "duration::as_string")]
    pub membership_timeout: Duration,
    /// Sent verbatim as `Authorization`. Default "".
    pub membership_auth_header: String,
}

impl Default for ChatConfig {
    fn default() -> Self {
        ChatConfig {
            fanout_on_write_limit: 256,
            conversation_partitions: 16,
            inbox_partitions: 1,
            membership_url: String::new(),
            membership_timeout: Duration::from_secs(3),
            membership_auth_header: String::new(),
        }
    }
}

impl ChatConfig {
    /// The limit in force (v1 treats 0 as the default 256).
    pub fn effective_fanout_on_write_limit(&self) -> u32 {
        match self.fanout_on_write_limit {
            0 => 256,
            n => n,
        }
    }
}

/// `[messaging.push]`: offline push via the operator's webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConfig {
    /// Default false. Requires `stream.enabled` and `webhook_url`.
    pub enabled: bool,
    pub webhook_url: String,
    /// Sent verbatim as `Authorization`. Default "".
    pub auth_header: String,
    /// Per call. Default `"10s"`; > 0.
    #[serde(with = "duration::as_string")]
    pub timeout: Duration,
    /// Then drop and advance. Default 5; at least 1.
    pub max_attempts: u32,
    /// Wait before pushing (a device may still read it); `"0s"` disables.
    /// Default `"3s"`.
    #[serde(with = "duration::as_string")]
    pub grace_delay: Duration,
    /// Inbox discovery cadence. Default `"30s"`; > 0. This build is told of every new
    /// inbox by the engine at once; the interval paces its re-scan of inboxes it could not
    /// track (memory full) and is otherwise unused.
    #[serde(with = "duration::as_string")]
    pub scan_interval: Duration,
    /// HMAC-SHA256 key of the `X-BoltQ-Signature` header of every webhook call (spec §19
    /// decision 13). Required when `enabled`; at least 32 bytes. Default "".
    pub signing_secret: String,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            enabled: false,
            webhook_url: String::new(),
            auth_header: String::new(),
            timeout: Duration::from_secs(10),
            max_attempts: 5,
            grace_delay: Duration::from_secs(3),
            scan_interval: Duration::from_secs(30),
            signing_secret: String::new(),
        }
    }
}

/// `[messaging.http_client]`: the outbound calls (push webhook, membership service).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpClientConfig {
    /// PEM file of CAs trusted for `https://` webhook and membership URLs, in addition to
    /// the system's store (a private CA). Default unset: the system's store only.
    pub ca_file: Option<PathBuf>,
}

/// `[messaging.dedup]`: idempotent sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DedupConfig {
    /// Must exceed the longest client retry window. Default `"10m"`; > 0.
    #[serde(with = "duration::as_string")]
    pub ttl: Duration,
    /// Memory cap in entries; 0 (default): 100,000 per shard, or with `cluster.enabled`
    /// 10,000 per slot (the number is node-wide there, shared over the slots). v1 did not
    /// enforce it.
    pub max_entries: u64,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            ttl: Duration::from_secs(600),
            max_entries: 0,
        }
    }
}

/// `[messaging.signals]`: typing indicators and other ephemeral signals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalsConfig {
    /// Per user. Default 5; at least 1.
    pub rate_per_second: u32,
    /// Default 20; at least 1.
    pub burst: u32,
    /// Bytes (v1 key name). Default 4096; 1..=1048576.
    pub max_payload: u32,
    /// Default 64; at least 1.
    pub subscriber_buffer: u32,
}

impl Default for SignalsConfig {
    fn default() -> Self {
        SignalsConfig {
            rate_per_second: 5,
            burst: 20,
            max_payload: 4096,
            subscriber_buffer: 64,
        }
    }
}

/// `messaging.replication.role`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationRole {
    /// `""`: assignments come from the cluster controller (needs
    /// `cluster.enabled`).
    Controller,
    Leader,
    Follower,
}

/// `[messaging.replication]`: leader/follower log replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicationConfig {
    /// Default false. Requires `stream.enabled`.
    pub enabled: bool,
    /// `""` (default, controller-driven), `"leader"` or `"follower"`; exact
    /// lowercase (v1 rejected `"LEADER"` too). Read via [`Self::role`].
    pub role: String,
    /// Replication listener (leader / controller mode). Default "".
    pub listen: String,
    /// Upstream of a follower. Default "".
    pub leader_addr: String,
    /// Link authentication; empty = none (private networks only).
    pub secret: String,
    /// Environment variable holding the secret; must be set if named.
    pub secret_env: String,
    /// Replicas (including the leader) before an append is acknowledged.
    /// Default 1; at least 1; a follower may not set more than 1.
    pub min_in_sync: u32,
    /// Default `"5s"`; > 0.
    #[serde(with = "duration::as_string")]
    pub ack_timeout: Duration,
    /// Records behind and still in sync. Default 10000.
    pub max_lag_in_sync: u64,
    /// Follower assignments `"topic:partitionCount"` (split at the last `:`).
    /// Default [].
    pub topics: Vec<String>,
    /// Follower fsyncs before acking. Default false (v1).
    pub sync_on_apply: bool,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            enabled: false,
            role: String::new(),
            listen: String::new(),
            leader_addr: String::new(),
            secret: String::new(),
            secret_env: String::new(),
            min_in_sync: 1,
            ack_timeout: Duration::from_secs(5),
            max_lag_in_sync: 10_000,
            topics: Vec::new(),
            sync_on_apply: false,
        }
    }
}

impl ReplicationConfig {
    /// The role, or `None` for a string validation rejects.
    pub fn role(&self) -> Option<ReplicationRole> {
        match self.role.as_str() {
            "" => Some(ReplicationRole::Controller),
            "leader" => Some(ReplicationRole::Leader),
            "follower" => Some(ReplicationRole::Follower),
            _ => None,
        }
    }

    /// The effective link secret: `$secret_env` if named, else `secret`.
    pub fn resolve_secret(&self, env: super::EnvLookup) -> String {
        if !self.secret_env.is_empty() {
            if let Some(v) = env(&self.secret_env).filter(|v| !v.is_empty()) {
                return v;
            }
        }
        self.secret.clone()
    }

    /// Follower topic assignments as `(topic, partitions)`, split at the last
    /// `:`; `None` if any entry is malformed.
    pub fn parsed_topics(&self) -> Option<Vec<(String, u32)>> {
        self.topics
            .iter()
            .map(|t| {
                let (name, count) = t.rsplit_once(':')?;
                let count: u32 = count.parse().ok()?;
                (!name.is_empty() && count >= 1).then(|| (name.to_string(), count))
            })
            .collect()
    }
}
