//! `BOLTQ_*` environment overrides (spec queue-plane §7, messaging-edge §12.3,
//! plus ours: `BOLTQ_HOST`, `BOLTQ_SHARDS`, `BOLTQ_FSYNC`, `BOLTQ_LOG_LEVEL`).
//!
//! Rules, and how they differ from v1:
//! - An unset or empty variable leaves the value unchanged (as in v1).
//! - Booleans: `true`/`1` and `false`/`0` (case-insensitive). Anything else is
//!   an error naming the variable. v1 read any other value as false, so
//!   `BOLTQ_CLUSTER_ENABLED=yes` silently meant *off*. Messaging variables also
//!   take `yes`/`no`, because v1's messaging parser accepted `yes`.
//! - Numbers, ports and durations must parse (surrounding spaces allowed);
//!   v1 ignored unparsable integers and kept the file value without a word.
//!   Ports must be 0..=65535; 0 asks the kernel for any free port, except for
//!   `BOLTQ_GATEWAY_PORT`, where 0 means "on the admin listener".
//! - Comma lists are split, trimmed, and empty items dropped (v1 did not trim
//!   messaging lists, so `"a, b"` gave an origin `" b"` that never matched).
//! - `BOLTQ_SEEDS` replaces `cluster.seeds`; `BOLTQ_JOIN_ADDR` is put in
//!   front of them (v1's seed order).
//! - `BOLTQ_TLS_ENABLED`, `BOLTQ_ADDR`, `BOLTQ_CA_FILE`, `BOLTQ_TLS_INSECURE`
//!   belong to the v1 CLI client and are deliberately NOT read by the server:
//!   a shell set up for the CLI must not change how the server listens.

use std::path::PathBuf;
use std::str::FromStr;

use super::duration::parse_duration;
use super::{Config, ConfigError, EnvLookup, FsyncMode, IdentityKeyConfig, StorageMode};

struct Env<'a> {
    lookup: EnvLookup<'a>,
}

impl Env<'_> {
    fn raw(&self, var: &str) -> Option<String> {
        (self.lookup)(var).filter(|v| !v.is_empty())
    }

    fn string(&self, var: &str, target: &mut String) {
        if let Some(v) = self.raw(var) {
            *target = v;
        }
    }

    fn path(&self, var: &str, target: &mut PathBuf) {
        if let Some(v) = self.raw(var) {
            *target = PathBuf::from(v);
        }
    }

    fn parse_with<T>(
        &self,
        var: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        match self.raw(var) {
            None => Ok(None),
            Some(v) => parse(v.trim())
                .map(Some)
                .map_err(|why| ConfigError::env(var, &v, why)),
        }
    }

    fn bool(&self, var: &str, target: &mut bool) -> Result<(), ConfigError> {
        if let Some(b) = self.parse_with(var, |s| match s.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err("must be true, 1, false or 0".to_string()),
        })? {
            *target = b;
        }
        Ok(())
    }

    /// Messaging booleans: v1 also took `yes`.
    fn bool_yes(&self, var: &str, target: &mut bool) -> Result<(), ConfigError> {
        if let Some(b) = self.parse_with(var, |s| match s.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err("must be true, 1, yes, false, 0 or no".to_string()),
        })? {
            *target = b;
        }
        Ok(())
    }

    fn int<T: FromStr>(&self, var: &str, target: &mut T) -> Result<(), ConfigError> {
        if let Some(n) = self.parse_with(var, |s| {
            s.parse::<T>()
                .map_err(|_| "must be a non-negative whole number in range".to_string())
        })? {
            *target = n;
        }
        Ok(())
    }

    fn port(&self, var: &str) -> Result<Option<u16>, ConfigError> {
        self.parse_with(var, |s| {
            s.parse::<u16>()
                .map_err(|_| "must be a port number between 0 and 65535".to_string())
        })
    }

    fn duration(&self, var: &str, target: &mut std::time::Duration) -> Result<(), ConfigError> {
        if let Some(d) = self.parse_with(var, parse_duration)? {
            *target = d;
        }
        Ok(())
    }

    fn list(&self, var: &str) -> Option<Vec<String>> {
        self.raw(var).map(|v| split_list(&v))
    }
}

pub(super) fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn apply(c: &mut Config, lookup: EnvLookup) -> Result<(), ConfigError> {
    let env = Env { lookup };

    // [server]
    env.string("BOLTQ_HOST", &mut c.server.host);
    if let Some(p) = env.port("BOLTQ_HTTP_PORT")? {
        c.server.http_port = Some(p);
    }
    if let Some(p) = env.port("BOLTQ_TCP_PORT")? {
        c.server.tcp_port = p;
    }
    env.int("BOLTQ_SHARDS", &mut c.server.shards)?;
    if let Some(level) = env.parse_with("BOLTQ_LOG_LEVEL", |s| {
        s.parse::<log::LevelFilter>()
            .map(|_| s.to_ascii_lowercase())
            .map_err(|_| "must be off, error, warn, info, debug or trace".to_string())
    })? {
        c.server.log_level = level;
    }

    // [storage]
    if let Some(mode) = env.parse_with("BOLTQ_STORAGE_MODE", |s| match s {
        "disk" => Ok(StorageMode::Disk),
        "memory" => Ok(StorageMode::Memory),
        _ => Err("must be \"disk\" or \"memory\"".to_string()),
    })? {
        c.storage.mode = mode;
    }
    env.path("BOLTQ_DATA_DIR", &mut c.storage.data_dir);
    // v1: ≤ 0 disables compaction; negative numbers keep that meaning.
    if let Some(t) = env.parse_with("BOLTQ_STORAGE_COMPACTION_THRESHOLD", |s| {
        s.parse::<i64>()
            .map(|n| n.max(0) as u64)
            .map_err(|_| "must be a whole number of bytes (≤ 0 disables)".to_string())
    })? {
        c.storage.compaction_threshold = t;
    }
    if let Some(mode) = env.parse_with("BOLTQ_FSYNC", parse_fsync)? {
        c.storage.fsync = mode;
    }

    // [security], [admin], [cache]
    env.string("BOLTQ_API_KEY", &mut c.security.api_key);
    if let Some(origins) = env.list("BOLTQ_ADMIN_CORS_ORIGINS") {
        c.admin.cors_origins = origins;
    }
    env.bool("BOLTQ_ADMIN_METRICS_PUBLIC", &mut c.admin.metrics_public)?;
    env.bool("BOLTQ_CACHE_ENABLED", &mut c.cache.enabled)?;
    env.int("BOLTQ_CACHE_MAX_KEYS", &mut c.cache.max_keys)?;
    env.int(
        "BOLTQ_CACHE_MEMORY_BYTES_MAX",
        &mut c.cache.memory_bytes_max,
    )?;

    // [cluster]
    let cl = &mut c.cluster;
    env.bool("BOLTQ_CLUSTER_ENABLED", &mut cl.enabled)?;
    env.bool("BOLTQ_QUEUE_PLANE", &mut cl.queue_plane)?;
    env.string("BOLTQ_NODE_ID", &mut cl.node_id);
    env.string("BOLTQ_RAFT_ADDR", &mut cl.raft_addr);
    if let Some(dir) = env.raw("BOLTQ_RAFT_DIR") {
        cl.raft_dir = Some(PathBuf::from(dir));
    }
    env.bool("BOLTQ_BOOTSTRAP", &mut cl.bootstrap)?;
    env.string("BOLTQ_BOOTSTRAP_NODE_ID", &mut cl.bootstrap_node_id);
    if let Some(peers) = env.list("BOLTQ_CLUSTER_PEERS") {
        cl.peers = peers;
    }
    if let Some(seeds) = env.list("BOLTQ_SEEDS") {
        cl.seeds = seeds;
    }
    if let Some(mut join) = env.list("BOLTQ_JOIN_ADDR") {
        join.append(&mut cl.seeds);
        cl.seeds = join;
    }
    env.bool("BOLTQ_NON_VOTER", &mut cl.non_voter)?;
    env.string("BOLTQ_META_RAFT_ADDR", &mut cl.meta_raft_addr);
    env.int(
        "BOLTQ_SESSION_TIMEOUT_SECONDS",
        &mut cl.session_timeout_seconds,
    )?;
    env.bool("BOLTQ_REBALANCE", &mut cl.rebalance)?;
    env.int("BOLTQ_REPLICATION_FACTOR", &mut cl.replication_factor)?;

    apply_messaging(c, &env)
}

fn parse_fsync(s: &str) -> Result<FsyncMode, String> {
    match s {
        "always" => Ok(FsyncMode::Always),
        "interval" => Ok(FsyncMode::Interval),
        "never" => Ok(FsyncMode::Never),
        _ => Err("must be \"always\", \"interval\" or \"never\"".to_string()),
    }
}

/// messaging-edge §12.3.
fn apply_messaging(c: &mut Config, env: &Env) -> Result<(), ConfigError> {
    let m = &mut c.messaging;

    env.bool_yes("BOLTQ_STREAM_ENABLED", &mut m.stream.enabled)?;
    if let Some(dir) = env.raw("BOLTQ_STREAM_DIR") {
        m.stream.dir = Some(PathBuf::from(dir));
    }
    env.bool_yes("BOLTQ_STREAM_SYNC_ON_APPEND", &mut m.stream.sync_on_append)?;
    env.duration("BOLTQ_STREAM_RETENTION_AGE", &mut m.stream.retention_age)?;

    env.bool_yes("BOLTQ_IDENTITY_ENABLED", &mut m.identity.enabled)?;
    env.string("BOLTQ_IDENTITY_ISSUER", &mut m.identity.issuer);
    env.bool_yes(
        "BOLTQ_IDENTITY_ALLOW_ANONYMOUS",
        &mut m.identity.allow_anonymous,
    )?;
    // A key given by environment appends a key and turns identity on (v1).
    if let Some(secret) = env.raw("BOLTQ_IDENTITY_KEY") {
        let id = env
            .raw("BOLTQ_IDENTITY_KEY_ID")
            .unwrap_or_else(|| "default".to_string());
        m.identity.keys.push(IdentityKeyConfig {
            id,
            secret,
            secret_env: String::new(),
        });
        m.identity.enabled = true;
    }

    env.bool_yes("BOLTQ_GATEWAY_ENABLED", &mut m.gateway.enabled)?;
    env.string("BOLTQ_GATEWAY_PATH", &mut m.gateway.path);
    if let Some(p) = env.parse_with("BOLTQ_GATEWAY_PORT", |s| {
        s.parse::<u16>()
            .map_err(|_| "must be a port number between 0 and 65535".to_string())
    })? {
        m.gateway.port = p;
    }
    env.duration("BOLTQ_GATEWAY_RESUME_WINDOW", &mut m.gateway.resume_window)?;
    if let Some(origins) = env.list("BOLTQ_GATEWAY_ALLOWED_ORIGINS") {
        m.gateway.allowed_origins = origins;
    }

    env.string("BOLTQ_PRESENCE_REGION", &mut m.presence.region);
    env.duration("BOLTQ_PRESENCE_TTL", &mut m.presence.ttl)?;

    env.string("BOLTQ_MEMBERSHIP_URL", &mut m.chat.membership_url);
    env.string(
        "BOLTQ_MEMBERSHIP_AUTH_HEADER",
        &mut m.chat.membership_auth_header,
    );
    env.int(
        "BOLTQ_FANOUT_ON_WRITE_LIMIT",
        &mut m.chat.fanout_on_write_limit,
    )?;

    env.bool_yes("BOLTQ_PUSH_ENABLED", &mut m.push.enabled)?;
    env.string("BOLTQ_PUSH_WEBHOOK_URL", &mut m.push.webhook_url);
    env.string("BOLTQ_PUSH_AUTH_HEADER", &mut m.push.auth_header);
    // "0s" is meaningful here: it disables the grace delay.
    env.duration("BOLTQ_PUSH_GRACE_DELAY", &mut m.push.grace_delay)?;

    let r = &mut m.replication;
    env.bool_yes("BOLTQ_REPLICATION_ENABLED", &mut r.enabled)?;
    env.string("BOLTQ_REPLICATION_ROLE", &mut r.role);
    env.string("BOLTQ_REPLICATION_LISTEN", &mut r.listen);
    env.string("BOLTQ_REPLICATION_LEADER_ADDR", &mut r.leader_addr);
    env.string("BOLTQ_REPLICATION_SECRET", &mut r.secret);
    env.int("BOLTQ_REPLICATION_MIN_IN_SYNC", &mut r.min_in_sync)?;
    env.bool_yes("BOLTQ_REPLICATION_SYNC_ON_APPLY", &mut r.sync_on_apply)?;
    if let Some(topics) = env.list("BOLTQ_REPLICATION_TOPICS") {
        r.topics = topics;
    }
    Ok(())
}
