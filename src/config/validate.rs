//! Whole-tree validation, run once at start after all sources are layered.
//!
//! Checks stop at the first failure and report it as one line naming the key.
//! Values are reported under their config key even when they came from an
//! environment variable or flag (those had their syntax checked where they
//! were read, under their own names). Validation is pure: it reads no files
//! (TLS files are opened, and their errors reported, by the listeners) and
//! only consults the environment to resolve `secret_env` references.
//!
//! `[messaging.push]` is not checked here: its bounds are the push dispatcher's, and
//! config sits below the planes, so push validates its own settings
//! (`messaging::push::settings`, called by the binary after loading).

use std::time::Duration;

use super::duration::format_duration;
use boltq_io::file_budget::OPEN_SEGMENT_FILES_MIN;

use super::check::{
    at_least, duration_range, host_port, non_empty, positive_duration, range, range_bytes, require,
    Check, GIB,
};
use super::{split_host_port, Config, ConfigError, EnvLookup, FsyncMode, ReplicationRole, MIB};

/// Highest `storage.open_segment_files_max` accepted. A million descriptors
/// per shard is already past common `ulimit -n` hard limits; a larger value
/// is more likely a typo than a plan, and would only hide the budget.
pub const OPEN_SEGMENT_FILES_MAX_CEILING: u64 = 1 << 20;

pub(super) fn validate(c: &Config, env: EnvLookup) -> Check {
    server(c)?;
    storage(c)?;
    queue(c)?;
    admin(c)?;
    cache(c)?;
    cluster(c)?;
    messaging(c, env)
}

fn server(c: &Config) -> Check {
    let s = &c.server;
    non_empty(
        "server.host",
        &s.host,
        "must not be empty (use 0.0.0.0 for all interfaces)",
    )?;
    // Every u16 is a usable port: 0 binds any free port (the `ready:` log line names the
    // ports bound), which is how tests start servers without guessing free ports. The
    // `tcp_port - 1` default for HTTP stops where it would be 0 (or below).
    if s.http_port.is_none() && s.tcp_port <= 1 {
        return Err(ConfigError::conflict(
            "server.http_port",
            format!(
                "not set, and tcp_port = {} gives no default (tcp_port - 1); set it explicitly",
                s.tcp_port
            ),
        ));
    }
    if s.tcp_port != 0 && c.http_port() == s.tcp_port {
        return Err(ConfigError::invalid(
            "server.http_port",
            c.http_port(),
            "must differ from server.tcp_port",
        ));
    }
    if s.tls.enabled {
        require(
            !s.tls.cert_file.as_os_str().is_empty(),
            "server.tls.cert_file",
            "required when server.tls.enabled = true",
        )?;
        require(
            !s.tls.key_file.as_os_str().is_empty(),
            "server.tls.key_file",
            "required when server.tls.enabled = true",
        )?;
    }
    range("server.shards", u64::from(s.shards), 0, 1024)?;
    range(
        "server.spin_before_park_us",
        s.spin_before_park_us,
        0,
        10_000,
    )?;
    range(
        "server.ring_depth",
        s.ring_depth,
        boltq_shards::RING_DEPTH_MIN as u64,
        boltq_shards::RING_DEPTH_MAX as u64,
    )?;
    for (key, value) in [
        ("server.tcp_connections_max", s.tcp_connections_max),
        ("server.http_connections_max", s.http_connections_max),
    ] {
        range(key, value, 1, 1_000_000)?;
    }
    for (key, value) in [
        ("server.read_timeout", s.read_timeout),
        ("server.auth_timeout", s.auth_timeout),
    ] {
        duration_range(
            key,
            value,
            Duration::from_millis(1),
            Duration::from_secs(3600),
        )?;
    }
    if s.log_level.parse::<log::LevelFilter>().is_err() {
        return Err(ConfigError::invalid(
            "server.log_level",
            format!("{:?}", s.log_level),
            "must be off, error, warn, info, debug or trace",
        ));
    }
    Ok(())
}

fn storage(c: &Config) -> Check {
    let s = &c.storage;
    require(
        !s.data_dir.as_os_str().is_empty(),
        "storage.data_dir",
        "must not be empty",
    )?;
    range("storage.fsync_interval_ms", s.fsync_interval_ms, 1, 10_000)?;
    if s.snapshot_write_bytes_per_sec != 0 {
        range_bytes(
            "storage.snapshot_write_bytes_per_sec",
            s.snapshot_write_bytes_per_sec,
            MIB,
            16 * GIB,
        )?;
    }
    range_bytes("storage.segment_bytes", s.segment_bytes, MIB, GIB)?;
    // Twice the largest record and more: a command applied in memory must never find its
    // append refused for its size (issue 13 item 5).
    range_bytes(
        "storage.journal_file_bytes",
        s.journal_file_bytes,
        boltq_io::store::JOURNAL_FILE_BYTES_FOR_ANY_RECORD,
        GIB,
    )?;
    // 4096 is a power of two, so the low 12 bits must be clear.
    if s.journal_file_bytes & 4095 != 0 {
        return Err(ConfigError::invalid(
            "storage.journal_file_bytes",
            s.journal_file_bytes,
            "must be a multiple of 4096 (direct I/O alignment)",
        ));
    }
    if s.io_memory_bytes != 0 {
        at_least("storage.io_memory_bytes", s.io_memory_bytes, MIB)?;
    }
    range(
        "storage.open_segment_files_max",
        s.open_segment_files_max,
        OPEN_SEGMENT_FILES_MIN as u64,
        OPEN_SEGMENT_FILES_MAX_CEILING,
    )?;
    range("storage.lock_wait_ms", s.lock_wait_ms, 0, 600_000)?;
    range_bytes(
        "storage.journal_backlog_bytes_max",
        s.journal_backlog_bytes_max,
        MIB,
        64 * GIB,
    )?;
    Ok(())
}

fn queue(c: &Config) -> Check {
    let q = &c.queue;
    range("queue.max_retry", u64::from(q.max_retry), 1, 1_000_000)?;
    positive_duration("queue.ack_timeout", q.ack_timeout)?;
    range("queue.capacity", q.capacity, 1, 1 << 30)?;
    range(
        "queue.subscriptions_per_connection_max",
        q.subscriptions_per_connection_max,
        1,
        65_536,
    )?;
    range(
        "queue.queues_per_slot_max",
        q.queues_per_slot_max,
        1,
        65_536,
    )?;
    range(
        "queue.durable_backlog_bytes_max",
        q.durable_backlog_bytes_max,
        1 << 20,
        1 << 40,
    )?;
    range("queue.slot_bytes_max", q.slot_bytes_max, 1 << 20, 1 << 40)?;
    if !q.idle_queue_ttl.is_zero() {
        duration_range(
            "queue.idle_queue_ttl",
            q.idle_queue_ttl,
            Duration::from_secs(1),
            Duration::from_secs(30 * 24 * 3600),
        )?;
    }
    range(
        "queue.retry_backoff_max_ms",
        q.retry_backoff_max_ms,
        0,
        3_600_000,
    )?;
    if q.retry_backoff_base_ms > 0 && q.retry_backoff_max_ms < q.retry_backoff_base_ms {
        return Err(ConfigError::invalid(
            "queue.retry_backoff_max_ms",
            q.retry_backoff_max_ms,
            format!(
                "must be at least queue.retry_backoff_base_ms ({})",
                q.retry_backoff_base_ms
            ),
        ));
    }
    Ok(())
}

fn admin(c: &Config) -> Check {
    for (i, origin) in c.admin.cors_origins.iter().enumerate() {
        if let Err(reason) = cors_origin(origin) {
            return Err(ConfigError::invalid(
                &format!("admin.cors_origins[{i}]"),
                format!("{origin:?}"),
                reason,
            ));
        }
    }
    Ok(())
}

/// `"*"`, or an origin as a browser sends it in `Origin`: `http://` or `https://`, a host
/// and an optional port, lowercase, no path. Anything else could never equal a request's
/// `Origin`, so it is a mistake to report, not a value to keep. (`"null"`, the origin of
/// sandboxed pages and local files, is refused: any page can make itself sandboxed.)
fn cors_origin(origin: &str) -> Result<(), &'static str> {
    if origin == "*" {
        return Ok(());
    }
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or("must be \"*\" or start with http:// or https://")?;
    if rest.is_empty() {
        return Err("names no host");
    }
    if rest.contains('/') {
        return Err("must be scheme://host[:port] with no path or trailing slash");
    }
    if !rest.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces (browsers send hosts punycoded)");
    }
    if rest.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("must be lowercase, as browsers send it");
    }
    Ok(())
}

fn cache(c: &Config) -> Check {
    at_least("cache.cleanup_sec", c.cache.cleanup_sec, 1)?;
    let entry_bytes_max = super::CACHE_ENTRY_BYTES_MAX;
    if c.cache.memory_bytes_max != 0 && c.cache.memory_bytes_max < entry_bytes_max {
        return Err(ConfigError::invalid(
            "cache.memory_bytes_max",
            c.cache.memory_bytes_max.to_string(),
            format!(
                "must be 0 (unlimited) or at least {entry_bytes_max} (one key and value of the largest size)"
            ),
        ));
    }
    Ok(())
}

fn cluster(c: &Config) -> Check {
    let cl = &c.cluster;
    at_least("cluster.snapshot_threshold", cl.snapshot_threshold, 1)?;
    for (i, seed) in cl.seeds.iter().enumerate() {
        host_port(&format!("cluster.seeds[{i}]"), seed)?;
    }
    if !cl.enabled {
        return Ok(());
    }
    host_port("cluster.raft_addr", &cl.raft_addr)?;
    if !cl.meta_raft_addr.is_empty() {
        host_port("cluster.meta_raft_addr", &cl.meta_raft_addr)?;
    }
    if c.meta_raft_addr().is_none() {
        return Err(ConfigError::invalid(
            "cluster.raft_addr",
            format!("{:?}", cl.raft_addr),
            "port 65535 leaves no room for the default meta_raft_addr (port + 1); set cluster.meta_raft_addr",
        ));
    }
    if let Some((_, raft_port)) = split_host_port(&cl.raft_addr) {
        if raft_port != 0 && (raft_port == c.server.tcp_port || raft_port == c.http_port()) {
            return Err(ConfigError::invalid(
                "cluster.raft_addr",
                format!("{:?}", cl.raft_addr),
                "port must differ from server.tcp_port and the HTTP port",
            ));
        }
        // Shard k listens on the raft port + k (`Config::cluster_members`).
        let last = u32::from(raft_port) + c.server.shards.saturating_sub(1);
        if last > u32::from(u16::MAX) {
            return Err(ConfigError::invalid(
                "cluster.raft_addr",
                format!("{:?}", cl.raft_addr),
                format!(
                    "shard k listens on this port + k: {} shards need ports up to {last}",
                    c.server.shards
                ),
            ));
        }
    }
    cluster_membership(c)
}

/// `cluster.peers`: `node_id@host:port` each, no node id twice. What else this build's
/// clustering needs is checked at start (`server::refuse_unbuilt_features`).
fn cluster_membership(c: &Config) -> Check {
    let cl = &c.cluster;
    let mut seen = std::collections::BTreeSet::from([cl.node_id.as_str()]);
    for (i, peer) in cl.peers.iter().enumerate() {
        let key = format!("cluster.peers[{i}]");
        let Some((id, addr)) = super::split_peer(peer) else {
            return Err(ConfigError::invalid(
                &key,
                format!("{peer:?}"),
                "must be node_id@host:port (the member's node id and its cluster.raft_addr)",
            ));
        };
        host_port(&key, addr)?;
        if !seen.insert(id) {
            return Err(ConfigError::invalid(
                &key,
                format!("{peer:?}"),
                "names a node id twice (or this node's own cluster.node_id with another address than cluster.raft_addr)",
            ));
        }
    }
    Ok(())
}

fn messaging(c: &Config, env: EnvLookup) -> Check {
    let m = &c.messaging;
    range(
        "messaging.fsync_interval_ms",
        m.fsync_interval_ms,
        1,
        10_000,
    )?;

    let st = &m.stream;
    if st.sync_on_append && m.fsync != FsyncMode::Always {
        return Err(ConfigError::conflict(
            "messaging.stream.sync_on_append",
            format!(
                "true contradicts messaging.fsync = \"{}\"; drop sync_on_append (messaging.fsync = \"always\" is the same thing)",
                m.fsync.as_str()
            ),
        ));
    }
    if let Some(dir) = &st.dir {
        require(
            !dir.as_os_str().is_empty(),
            "messaging.stream.dir",
            "must not be empty (leave it out for <data_dir>/streams)",
        )?;
    }
    range(
        "messaging.stream.default_partitions",
        u64::from(st.default_partitions),
        1,
        4096,
    )?;
    range_bytes("messaging.stream.segment_bytes", st.segment_bytes, MIB, GIB)?;
    range(
        "messaging.stream.index_interval",
        st.index_interval,
        64,
        st.segment_bytes,
    )?;
    positive_duration(
        "messaging.stream.maintenance_interval",
        st.maintenance_interval,
    )?;

    identity(c, env)?;

    let g = &m.gateway;
    if g.enabled {
        require(
            st.enabled,
            "messaging.gateway.enabled",
            "requires messaging.stream.enabled = true",
        )?;
        require(
            m.identity.enabled,
            "messaging.gateway.enabled",
            "requires messaging.identity.enabled = true (a public socket cannot be authorised by the shared API key alone)",
        )?;
    }
    require(
        g.enabled || !g.demo,
        "messaging.gateway.demo",
        "requires messaging.gateway.enabled = true (the demo page talks to the gateway)",
    )?;
    if !g.path.starts_with('/') {
        return Err(ConfigError::invalid(
            "messaging.gateway.path",
            format!("{:?}", g.path),
            "must start with /",
        ));
    }
    if g.port != 0 && (g.port == c.server.tcp_port || g.port == c.http_port()) {
        return Err(ConfigError::invalid(
            "messaging.gateway.port",
            g.port,
            "must differ from server.tcp_port and the HTTP port (0 mounts the gateway on the HTTP listener)",
        ));
    }
    positive_duration("messaging.gateway.resume_window", g.resume_window)?;
    if g.pong_timeout < Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            "messaging.gateway.pong_timeout",
            format!("\"{}\"", format_duration(g.pong_timeout)),
            "must be at least 1s",
        ));
    }
    range(
        "messaging.gateway.max_subscriptions",
        u64::from(g.max_subscriptions),
        1,
        100_000,
    )?;
    range(
        "messaging.gateway.send_buffer",
        u64::from(g.send_buffer),
        1,
        65_536,
    )?;
    range(
        "messaging.gateway.connections_max",
        g.connections_max,
        1,
        10_000_000,
    )?;
    range(
        "messaging.gateway.connections_per_ip_max",
        g.connections_per_ip_max,
        1,
        10_000_000,
    )?;
    range_bytes("messaging.gateway.read_limit", g.read_limit, 1024, 64 * MIB)?;
    range_bytes(
        "messaging.gateway.send_buffer_bytes",
        g.send_buffer_bytes,
        64 * 1024,
        256 * MIB,
    )?;
    // Under a second, a routine network hiccup on a healthy mobile link closes it; past
    // ten minutes a stuck device pins its queue and socket buffers for nothing.
    if g.slow_consumer_timeout < Duration::from_secs(1)
        || g.slow_consumer_timeout > Duration::from_secs(600)
    {
        return Err(ConfigError::invalid(
            "messaging.gateway.slow_consumer_timeout",
            format!("\"{}\"", format_duration(g.slow_consumer_timeout)),
            "must be between 1s and 10m",
        ));
    }
    range(
        "messaging.gateway.history_limit",
        u64::from(g.history_limit),
        1,
        10_000,
    )?;
    if g.tls.enabled {
        require(
            !g.tls.cert_file.as_os_str().is_empty(),
            "messaging.gateway.tls.cert_file",
            "required when messaging.gateway.tls.enabled = true",
        )?;
        require(
            !g.tls.key_file.as_os_str().is_empty(),
            "messaging.gateway.tls.key_file",
            "required when messaging.gateway.tls.enabled = true",
        )?;
    }

    positive_duration("messaging.presence.ttl", m.presence.ttl)?;
    positive_duration(
        "messaging.presence.sweep_interval",
        m.presence.sweep_interval,
    )?;

    let ch = &m.chat;
    range(
        "messaging.chat.fanout_on_write_limit",
        u64::from(ch.fanout_on_write_limit),
        0,
        u64::from(super::messaging::FANOUT_ON_WRITE_LIMIT_MAX),
    )?;
    range(
        "messaging.chat.conversation_partitions",
        u64::from(ch.conversation_partitions),
        1,
        4096,
    )?;
    range(
        "messaging.chat.inbox_partitions",
        u64::from(ch.inbox_partitions),
        1,
        4096,
    )?;
    positive_duration("messaging.chat.membership_timeout", ch.membership_timeout)?;

    if let Some(path) = &m.http_client.ca_file {
        // Read now so a bad file stops the start, not the first https call hours later.
        boltq_io::tls::root_store(path).map_err(|e| {
            ConfigError::invalid("messaging.http_client.ca_file", path.display(), e)
        })?;
    }

    positive_duration("messaging.dedup.ttl", m.dedup.ttl)?;

    let sg = &m.signals;
    at_least(
        "messaging.signals.rate_per_second",
        u64::from(sg.rate_per_second),
        1,
    )?;
    at_least("messaging.signals.burst", u64::from(sg.burst), 1)?;
    range_bytes(
        "messaging.signals.max_payload",
        u64::from(sg.max_payload),
        1,
        MIB,
    )?;
    at_least(
        "messaging.signals.subscriber_buffer",
        u64::from(sg.subscriber_buffer),
        1,
    )?;

    replication(c, env)
}

fn identity(c: &Config, env: EnvLookup) -> Check {
    let id = &c.messaging.identity;
    if id.enabled && id.keys.is_empty() {
        return Err(ConfigError::conflict(
            "messaging.identity.keys",
            "at least one key is required when messaging.identity.enabled = true",
        ));
    }
    // Checked even with identity off (v1 did too): a broken key should fail
    // the day it is written, not the day identity is switched on.
    for (i, key) in id.keys.iter().enumerate() {
        let at = format!("messaging.identity.keys[{i}]");
        non_empty(&format!("{at}.id"), &key.id, "every key needs an id")?;
        let secret = key.resolve_secret(env);
        if secret.len() < 32 {
            let source = if key.secret_env.is_empty() {
                format!("{at}.secret")
            } else {
                format!("{at}.secret_env ({})", key.secret_env)
            };
            return Err(ConfigError::conflict(
                &source,
                format!(
                    "secret is {} bytes; at least 32 random bytes are required",
                    secret.len()
                ),
            ));
        }
    }
    if id.membership_cache_ttl == Some(Duration::ZERO) {
        return Err(ConfigError::invalid(
            "messaging.identity.membership_cache_ttl",
            "\"0s\"",
            "must be positive, or negative (e.g. \"-1s\") to disable the cache",
        ));
    }
    for (i, rule) in id.policy.iter().enumerate() {
        let at = format!("messaging.identity.policy[{i}]");
        non_empty(
            &format!("{at}.pattern"),
            &rule.pattern,
            "every rule needs a pattern",
        )?;
        if rule.effect != "allow" && rule.effect != "deny" {
            return Err(ConfigError::invalid(
                &format!("{at}.effect"),
                format!("{:?}", rule.effect),
                "must be \"allow\" or \"deny\"",
            ));
        }
        for action in &rule.actions {
            if !matches!(action.as_str(), "read" | "write" | "manage") {
                return Err(ConfigError::invalid(
                    &format!("{at}.actions"),
                    format!("{action:?}"),
                    "each action must be \"read\", \"write\" or \"manage\"",
                ));
            }
        }
    }
    Ok(())
}

fn replication(c: &Config, env: EnvLookup) -> Check {
    let r = &c.messaging.replication;
    let Some(role) = r.role() else {
        return Err(ConfigError::invalid(
            "messaging.replication.role",
            format!("{:?}", r.role),
            "must be \"\" (controller-driven), \"leader\" or \"follower\" (lowercase)",
        ));
    };
    at_least(
        "messaging.replication.min_in_sync",
        u64::from(r.min_in_sync),
        1,
    )?;
    positive_duration("messaging.replication.ack_timeout", r.ack_timeout)?;
    if !r.secret_env.is_empty() && env(&r.secret_env).is_none_or(|v| v.is_empty()) {
        return Err(ConfigError::conflict(
            "messaging.replication.secret_env",
            format!("names {} but that variable is not set", r.secret_env),
        ));
    }
    if !r.enabled {
        return Ok(());
    }
    require(
        c.messaging.stream.enabled,
        "messaging.replication.enabled",
        "requires messaging.stream.enabled = true",
    )?;
    match role {
        ReplicationRole::Controller | ReplicationRole::Leader => {
            host_port("messaging.replication.listen", &r.listen)?;
            if role == ReplicationRole::Controller && !c.cluster.enabled {
                return Err(ConfigError::conflict(
                    "messaging.replication.role",
                    "\"\" (controller-driven) requires cluster.enabled = true; use \"leader\" or \"follower\" without clustering",
                ));
            }
        }
        ReplicationRole::Follower => {
            host_port("messaging.replication.leader_addr", &r.leader_addr)?;
            if r.parsed_topics().is_none() {
                return Err(ConfigError::conflict(
                    "messaging.replication.topics",
                    "every entry must be \"topic:partitionCount\" with a count of at least 1",
                ));
            }
            if r.min_in_sync > 1 {
                return Err(ConfigError::invalid(
                    "messaging.replication.min_in_sync",
                    r.min_in_sync,
                    "a follower may not require more than 1",
                ));
            }
            require(
                !c.messaging.gateway.enabled,
                "messaging.gateway.enabled",
                "a replication follower cannot run the gateway (its writes would diverge from the leader's log)",
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod http_client_tests {
    use crate::config::Config;

    fn check(toml: &str) -> Result<(), String> {
        let c = Config::from_toml_str(toml).map_err(|e| e.to_string())?;
        c.validate(&|_: &str| None).map_err(|e| e.to_string())
    }

    #[test]
    fn an_unreadable_or_empty_ca_file_stops_the_start_naming_the_key() {
        let dir = boltq_io::testutil::TempDir::new("http-client-ca");
        let missing = dir.path().join("missing.pem");
        let err = check(&format!(
            "[messaging.http_client]\nca_file = {:?}",
            missing.to_str().unwrap()
        ))
        .unwrap_err();
        assert!(err.contains("messaging.http_client.ca_file"), "{err}");
        assert!(err.contains("cannot read"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no PEM here\n").unwrap();
        let err = check(&format!(
            "[messaging.http_client]\nca_file = {:?}",
            empty.to_str().unwrap()
        ))
        .unwrap_err();
        assert!(err.contains("messaging.http_client.ca_file"), "{err}");
        assert!(err.contains("no certificate"), "{err}");
        check("[messaging.http_client]").unwrap();
    }
}
