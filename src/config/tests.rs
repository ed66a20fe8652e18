//! Tests of the whole loading pipeline. Environment is always injected through
//! a map, never the process environment (tests run in parallel threads).

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

const EXAMPLE: &str = include_str!("../../config/boltq.example.toml");

/// The `configs/default.json` shipped with v1 (spec queue-plane §7).
const V1_DEFAULT_JSON: &str = r#"{
  "server": { "http_port": 9090, "tcp_port": 9091, "grpc_port": 9092, "host": "0.0.0.0" },
  "storage": { "mode": "memory", "data_dir": "./data" },
  "queue": { "max_retry": 5, "ack_timeout": "30s", "capacity": 1048576 },
  "performance": { "worker_pool": 16 },
  "security": { "api_key": "" },
  "cluster": {
    "enabled": false, "node_id": "node1", "raft_addr": "0.0.0.0:9100",
    "raft_dir": "./data/raft", "bootstrap": false, "peers": [], "snapshot_threshold": 8192
  }
}"#;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn args(list: &[&str]) -> Vec<OsString> {
    std::iter::once("boltq")
        .chain(list.iter().copied())
        .map(OsString::from)
        .collect()
}

/// A file in the temp dir, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(ext: &str, text: &str) -> TempFile {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "boltq-config-test-{}-{}.{ext}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Parses `toml` and validates it, returning the error.
fn toml_error(toml: &str) -> ConfigError {
    match Config::from_toml_str(toml) {
        Err(e) => e,
        Ok(c) => c
            .validate(&no_env)
            .expect_err(&format!("expected an error for:\n{toml}")),
    }
}

#[test]
fn defaults() {
    let c = Config::default();
    c.validate(&no_env).unwrap();
    assert_eq!(c.server.host, "0.0.0.0");
    assert_eq!(c.server.tcp_port, 9091);
    assert_eq!(c.http_port(), 9090);
    assert_eq!(c.server.grpc_port, 9092);
    assert_eq!(c.server.ring_depth, 4096);
    assert_eq!(c.effective_shards(8), 8);
    assert_eq!(c.effective_shards(0), 1);
    assert_eq!(c.log_level_filter(), log::LevelFilter::Info);
    assert_eq!(c.storage.mode, StorageMode::Disk);
    assert_eq!(c.storage.data_dir, PathBuf::from("./data"));
    assert_eq!(c.fsync_policy(), FsyncPolicy::Always);
    assert_eq!(c.messaging_fsync_policy(), FsyncPolicy::Always);
    assert_eq!(c.storage.segment_bytes, 64 << 20);
    assert_eq!(
        c.storage.open_segment_files_max,
        boltq_io::file_budget::OPEN_SEGMENT_FILES_MAX_DEFAULT as u64
    );
    assert_eq!(c.storage.lock_wait_ms, 30_000);
    assert_eq!(c.storage.journal_backlog_bytes_max, 256 << 20);
    assert_eq!(c.queue.max_retry, 5);
    assert_eq!(c.queue.ack_timeout, Duration::from_secs(30));
    assert_eq!(c.queue.capacity, 1_048_576);
    assert_eq!(c.queue.overflow, OverflowPolicy::Reject);
    assert!(!c.security.allow_query_api_key);
    assert!(c.admin.cors_origins.is_empty(), "no CORS by default");
    assert!(
        !c.admin.metrics_public,
        "/metrics behind the key by default"
    );
    assert!(c.cache.enabled);
    assert!(!c.cluster.enabled);
    assert_eq!(c.raft_dir(), Path::new("./data/raft"));
    assert_eq!(c.stream_dir(), Path::new("./data/streams"));
    assert_eq!(c.meta_raft_addr().as_deref(), Some("0.0.0.0:9101"));
    assert!(!c.messaging.stream.enabled);
    // Loading with nothing at all gives the defaults.
    assert_eq!(Config::load(args(&[]), &no_env).unwrap(), c);
}

#[test]
fn example_file_equals_defaults() {
    let parsed = Config::from_toml_str(EXAMPLE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed, Config::default());
}

/// Every key of the schema appears in the example (set, or commented out when
/// its default is "unset"), so the example documents every key.
#[test]
fn example_file_lists_every_key() {
    let mut listed = BTreeSet::new();
    let mut section = String::new();
    for line in EXAMPLE.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let body = line.trim_start_matches('#').trim();
        if let Some((key, _)) = body.split_once(" = ") {
            if !key.contains(' ') {
                listed.insert(format!("{section}.{key}"));
            }
        }
    }
    fn leaves(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    leaves(child, &p, out);
                }
            }
            _ => out.push(path.to_string()),
        }
    }
    let mut keys = Vec::new();
    leaves(
        &serde_json::to_value(Config::default()).unwrap(),
        "",
        &mut keys,
    );
    assert!(
        keys.len() > 100,
        "schema walk found only {} keys",
        keys.len()
    );
    let missing: Vec<_> = keys.iter().filter(|k| !listed.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "keys missing from boltq.example.toml: {missing:?}"
    );
}

#[test]
fn full_toml() {
    let c = Config::from_toml_str(
        r#"
        [server]
        host = "127.0.0.1"
        tcp_port = 7001
        shards = 4
        spin_before_park_us = 50
        ring_depth = 256
        log_level = "debug"
        [server.tls]
        enabled = true
        cert_file = "/etc/boltq/cert.pem"
        key_file = "/etc/boltq/key.pem"
        [storage]
        mode = "memory"
        data_dir = "/var/lib/boltq"
        fsync = "interval"
        fsync_interval_ms = 5
        segment_bytes = 1048576
        journal_file_bytes = 16781312
        retention_bytes = 1000000000
        retention_ms = 86400000
        io_memory_bytes = 33554432
        open_segment_files_max = 64
        lock_wait_ms = 500
        journal_backlog_bytes_max = 1048576
        [queue]
        max_retry = 3
        ack_timeout = "1m30s"
        capacity = 1024
        retry_backoff_base_ms = 0
        overflow = "spill"
        [security]
        api_key = "s3cret"
        allow_query_api_key = true
        [cache]
        enabled = false
        max_keys = 10
        [cluster]
        enabled = true
        node_id = "n1"
        raft_addr = "10.0.0.1:9100"
        seeds = ["10.0.0.2:7000", " 10.0.0.3:7000 ", "10.0.0.2:7000"]
        [messaging]
        fsync = "never"
        [messaging.stream]
        enabled = true
        retention_age = "8760h"
        [[messaging.identity.keys]]
        id = "k1"
        secret = "0123456789abcdef0123456789abcdef"
        [[messaging.identity.policy]]
        pattern = "chat.group.{group}"
        actions = ["read", "write"]
        effect = "allow"
        require_membership = true
        membership_segment = 2
        [messaging.identity]
        enabled = true
        membership_cache_ttl = "-1s"
        [messaging.gateway]
        enabled = true
        port = 7100
        allowed_origins = ["https://app.example"]
        "#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let c = {
        // Seeds are normalised by the loader; go through it.
        let f = TempFile::new("toml", &toml::to_string(&c).unwrap());
        Config::load(args(&["--config", f.arg()]), &no_env).unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(c.server.host, "127.0.0.1");
    assert_eq!(c.server.tcp_port, 7001);
    assert_eq!(c.server.ring_depth, 256);
    assert_eq!(c.http_port(), 7000, "derived from tcp_port");
    assert_eq!(c.effective_shards(64), 4);
    assert_eq!(c.log_level_filter(), log::LevelFilter::Debug);
    assert!(c.server.tls.enabled);
    assert_eq!(c.storage.mode, StorageMode::Memory);
    assert_eq!(c.fsync_policy(), FsyncPolicy::Interval { interval_ms: 5 });
    assert_eq!(c.messaging_fsync_policy(), FsyncPolicy::Never);
    assert_eq!(c.storage.io_memory_bytes, 32 << 20);
    assert_eq!(c.storage.open_segment_files_max, 64);
    assert_eq!(c.storage.lock_wait_ms, 500);
    assert_eq!(c.storage.journal_backlog_bytes_max, 1 << 20);
    assert_eq!(c.queue.ack_timeout, Duration::from_secs(90));
    assert_eq!(c.queue.overflow, OverflowPolicy::Spill);
    assert_eq!(c.queue.retry_backoff_base_ms, 0);
    assert_eq!(c.security.api_key, "s3cret");
    assert!(!c.cache.enabled);
    assert_eq!(c.cluster.seeds, vec!["10.0.0.2:7000", "10.0.0.3:7000"]);
    assert_eq!(c.raft_dir(), Path::new("/var/lib/boltq/raft"));
    assert_eq!(c.stream_dir(), Path::new("/var/lib/boltq/streams"));
    assert_eq!(
        c.messaging.stream.retention_age,
        Duration::from_secs(8760 * 3600)
    );
    assert_eq!(c.messaging.identity.membership_cache_ttl, None);
    assert_eq!(c.messaging.identity.policy[0].membership_segment, 2);
    assert_eq!(c.messaging.gateway.port, 7100);
    assert_eq!(c.node_id("host-a", 42), "n1");
}

#[test]
fn unknown_toml_keys_are_errors_naming_the_key() {
    for (toml, key, line) in [
        (
            "[storage]\nfsync_intervl_ms = 5\n",
            "storage.fsync_intervl_ms",
            2,
        ),
        (
            "[server]\nhost = \"x\"\n\n[server.tls]\nenabld = true\n",
            "server.tls.enabld",
            5,
        ),
        ("[performance]\nworker_pool = 16\n", "performance", 1),
        (
            "[messaging.stream]\nenabeld = true\n",
            "messaging.stream.enabeld",
            2,
        ),
        (
            "[[messaging.identity.keys]]\nid = \"a\"\nsecrt = \"b\"\n",
            "messaging.identity.keys.secrt",
            3,
        ),
    ] {
        let err = Config::from_toml_str(toml).unwrap_err();
        assert_eq!(err.key(), Some(key), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("config error: line {line}: {key}: unknown key")),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }
}

#[test]
fn toml_type_and_value_errors_name_the_key() {
    for (toml, key, needle) in [
        ("[server]\ntcp_port = 70000\n", "server.tcp_port", "70000"),
        ("[server]\nhost = 3\n", "server.host", "string"),
        (
            "[storage]\nmode = \"dsk\"\n",
            "storage.mode",
            "unknown value \"dsk\"",
        ),
        (
            "[storage]\nfsync = \"sometimes\"\n",
            "storage.fsync",
            "sometimes",
        ),
        (
            "[queue]\nack_timeout = 30\n",
            "queue.ack_timeout",
            "duration string",
        ),
        (
            "[queue]\nack_timeout = \"30\"\n",
            "queue.ack_timeout",
            "not a duration",
        ),
        (
            "[queue]\nack_timeout = \"-5s\"\n",
            "queue.ack_timeout",
            "negative",
        ),
        ("[queue]\ncapacity = -1\n", "queue.capacity", "-1"),
    ] {
        let err = Config::from_toml_str(toml).unwrap_err();
        assert_eq!(err.key(), Some(key), "{err}");
        let text = err.to_string();
        assert!(text.contains(needle), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
    let err = Config::from_toml_str("[server\n").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("config error: line 1: invalid TOML"),
        "{err}"
    );
}

#[test]
fn v1_default_json_loads() {
    let c = Config::from_v1_json_str(V1_DEFAULT_JSON).unwrap_or_else(|e| panic!("{e}"));
    c.validate(&no_env).unwrap();
    assert_eq!(c.server.http_port, Some(9090));
    assert_eq!(c.http_port(), 9090);
    assert_eq!(c.server.tcp_port, 9091);
    assert_eq!(c.server.grpc_port, 9092);
    assert_eq!(c.server.host, "0.0.0.0");
    assert_eq!(c.storage.mode, StorageMode::Memory);
    assert_eq!(c.storage.data_dir, PathBuf::from("./data"));
    assert_eq!(c.queue.max_retry, 5);
    assert_eq!(c.queue.ack_timeout, Duration::from_secs(30));
    assert_eq!(c.queue.capacity, 1_048_576);
    assert_eq!(c.security.api_key, "");
    assert!(!c.cluster.enabled);
    assert_eq!(c.cluster.node_id, "node1");
    assert_eq!(c.cluster.raft_addr, "0.0.0.0:9100");
    assert_eq!(c.raft_dir(), Path::new("./data/raft"));
    assert!(!c.cluster.bootstrap);
    assert!(c.cluster.peers.is_empty());
    assert_eq!(c.cluster.snapshot_threshold, 8192);
    // Everything v1 did not set keeps our defaults.
    assert_eq!(c.storage.fsync, FsyncMode::Always);
    assert_eq!(c.messaging, MessagingConfig::default());
}

#[test]
fn v1_json_rules() {
    // A present queue object with absent or zero fields: v1 coerces to 5 / 2^20.
    for queue in [
        r#"{}"#,
        r#"{"max_retry": 0, "capacity": 0}"#,
        r#"{"max_retry": -3, "capacity": -1}"#,
    ] {
        let c = Config::from_v1_json_str(&format!(r#"{{"queue": {queue}}}"#)).unwrap();
        assert_eq!(
            (c.queue.max_retry, c.queue.capacity),
            (5, 1_048_576),
            "{queue}"
        );
        assert_eq!(c.queue.ack_timeout, Duration::from_secs(30));
    }
    // Zero or negative ack_timeout → 30 s; a number fails, naming the key.
    for t in ["\"0s\"", "\"-5s\"", "\"0\""] {
        let c =
            Config::from_v1_json_str(&format!(r#"{{"queue": {{"ack_timeout": {t}}}}}"#)).unwrap();
        assert_eq!(c.queue.ack_timeout, Duration::from_secs(30), "{t}");
    }
    let c = Config::from_v1_json_str(r#"{"queue": {"ack_timeout": "1m30s"}}"#).unwrap();
    assert_eq!(c.queue.ack_timeout, Duration::from_secs(90));
    let err = Config::from_v1_json_str(r#"{"queue": {"ack_timeout": 30}}"#).unwrap_err();
    assert_eq!(err.key(), Some("queue.ack_timeout"), "{err}");
    assert!(err.to_string().contains("duration string"), "{err}");
    // Unknown keys at any depth are ignored, null keeps the default.
    let c = Config::from_v1_json_str(
        r#"{"server": {"tcp_port": 7001, "future": 1, "http_port": null},
            "brand_new": {"x": 1},
            "messaging": {"stream": {"enabled": true, "whatever": 2},
                          "identity": {"keys": [{"id": "a", "secret": "s", "extra": 1}]}},
            "storage": {"compaction_threshold": -1},
            "cache": {"cleanup_sec": 0, "max_keys": -5}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.server.tcp_port, 7001);
    assert_eq!(c.http_port(), 7000);
    assert!(c.messaging.stream.enabled);
    assert_eq!(c.messaging.identity.keys[0].id, "a");
    assert_eq!(c.storage.compaction_threshold, 0);
    assert_eq!(c.cache.cleanup_sec, 10);
    assert_eq!(c.cache.max_keys, 0);
    // Gateway sizes ≤ 0 fall back to defaults (v1).
    let c = Config::from_v1_json_str(
        r#"{"messaging": {"gateway": {"send_buffer": 0, "max_subscriptions": -1, "pong_timeout": "0s"}}}"#,
    )
    .unwrap();
    assert_eq!(c.messaging.gateway, GatewayConfig::default());
    // An unknown storage mode is an error (v1 silently used memory).
    let err = Config::from_v1_json_str(r#"{"storage": {"mode": "dsk"}}"#).unwrap_err();
    assert_eq!(err.key(), Some("storage.mode"), "{err}");
    // Syntax errors give the line.
    let err = Config::from_v1_json_str("{\n\"server\": }").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("config error: line 2: invalid JSON"),
        "{err}"
    );
    assert!(Config::from_v1_json_str("[1]").is_err());
}

#[test]
fn v1_json_file_with_single_dash_args() {
    let f = TempFile::new("json", V1_DEFAULT_JSON);
    for argv in [
        args(&["-config", f.arg(), "-join", "10.0.0.9:9090"]),
        args(&[&format!("-config={}", f.arg()), "-join=10.0.0.9:9090"]),
    ] {
        let c = Config::load(argv, &no_env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.storage.mode, StorageMode::Memory);
        assert_eq!(c.cluster.node_id, "node1");
        assert_eq!(c.cluster.seeds, vec!["10.0.0.9:9090"]);
    }
}

#[test]
fn env_overrides() {
    let env = env_of(&[
        ("BOLTQ_HTTP_PORT", "8000"),
        ("BOLTQ_TCP_PORT", " 8001 "),
        ("BOLTQ_SHARDS", "3"),
        ("BOLTQ_LOG_LEVEL", "WARN"),
        ("BOLTQ_STORAGE_MODE", "memory"),
        ("BOLTQ_DATA_DIR", "/srv/boltq"),
        ("BOLTQ_STORAGE_COMPACTION_THRESHOLD", "-1"),
        ("BOLTQ_FSYNC", "never"),
        ("BOLTQ_API_KEY", "k"),
        ("BOLTQ_CACHE_ENABLED", "0"),
        ("BOLTQ_CACHE_MAX_KEYS", "99"),
        ("BOLTQ_CACHE_MEMORY_BYTES_MAX", "2000000"),
        (
            "BOLTQ_ADMIN_CORS_ORIGINS",
            "https://ops.example, https://b.example",
        ),
        ("BOLTQ_ADMIN_METRICS_PUBLIC", "true"),
        ("BOLTQ_CLUSTER_ENABLED", "TRUE"),
        ("BOLTQ_QUEUE_PLANE", "1"),
        ("BOLTQ_NODE_ID", ""), // empty = unset
        ("BOLTQ_RAFT_ADDR", "10.1.1.1:9100"),
        ("BOLTQ_RAFT_DIR", "/raft"),
        ("BOLTQ_BOOTSTRAP_NODE_ID", "host-a"),
        ("BOLTQ_CLUSTER_PEERS", "p1@h:1"),
        ("BOLTQ_SEEDS", "s1:1, s2:2,,"),
        ("BOLTQ_JOIN_ADDR", "j1:1,s2:2"),
        ("BOLTQ_NON_VOTER", "true"),
        ("BOLTQ_SESSION_TIMEOUT_SECONDS", "20"),
        ("BOLTQ_STREAM_ENABLED", "yes"),
        ("BOLTQ_STREAM_RETENTION_AGE", "48h"),
        ("BOLTQ_IDENTITY_KEY", "0123456789abcdef0123456789abcdef"),
        ("BOLTQ_GATEWAY_ENABLED", "true"),
        ("BOLTQ_GATEWAY_PORT", "9300"),
        ("BOLTQ_GATEWAY_ALLOWED_ORIGINS", "https://a, https://b"),
        ("BOLTQ_PUSH_GRACE_DELAY", "0s"),
        ("BOLTQ_REPLICATION_TOPICS", "t:4"),
    ]);
    let c = Config::load(args(&[]), &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((c.http_port(), c.server.tcp_port), (8000, 8001));
    assert_eq!(c.server.shards, 3);
    assert_eq!(c.server.log_level, "warn");
    assert_eq!(c.storage.mode, StorageMode::Memory);
    assert_eq!(c.storage.data_dir, PathBuf::from("/srv/boltq"));
    assert_eq!(c.storage.compaction_threshold, 0);
    assert_eq!(c.fsync_policy(), FsyncPolicy::Never);
    assert_eq!(c.security.api_key, "k");
    assert!(!c.cache.enabled);
    assert_eq!(c.cache.max_keys, 99);
    assert_eq!(c.cache.memory_bytes_max, 2_000_000);
    assert_eq!(
        c.admin.cors_origins,
        ["https://ops.example", "https://b.example"]
    );
    assert!(c.admin.metrics_public);
    assert!(c.cluster.enabled && c.cluster.queue_plane && c.cluster.non_voter);
    assert_eq!(c.node_id("host-a", 1), "host-a");
    assert!(c.is_bootstrap_node("host-a"));
    assert!(!c.is_bootstrap_node("host-b"));
    assert_eq!(c.raft_dir(), Path::new("/raft"));
    assert_eq!(c.cluster.peers, vec!["p1@h:1"]);
    assert_eq!(c.cluster.seeds, vec!["j1:1", "s2:2", "s1:1"]);
    assert_eq!(c.cluster.session_timeout_seconds, 20);
    assert!(c.messaging.stream.enabled);
    assert_eq!(
        c.messaging.stream.retention_age,
        Duration::from_secs(48 * 3600)
    );
    assert!(c.messaging.identity.enabled);
    assert_eq!(c.messaging.identity.keys[0].id, "default");
    assert_eq!(
        c.messaging.gateway.allowed_origins,
        vec!["https://a", "https://b"]
    );
    assert_eq!(c.messaging.push.grace_delay, Duration::ZERO);
    assert_eq!(c.messaging.replication.topics, vec!["t:4"]);
}

#[test]
fn env_parse_errors_name_the_variable() {
    for (var, value) in [
        ("BOLTQ_CLUSTER_ENABLED", "yes"),
        ("BOLTQ_CACHE_ENABLED", "off"),
        ("BOLTQ_TCP_PORT", "abc"),
        ("BOLTQ_TCP_PORT", "-1"),
        ("BOLTQ_HTTP_PORT", "65536"),
        ("BOLTQ_SHARDS", "-1"),
        ("BOLTQ_CACHE_MAX_KEYS", "1e6"),
        ("BOLTQ_STORAGE_MODE", "dsk"),
        ("BOLTQ_FSYNC", "sometimes"),
        ("BOLTQ_LOG_LEVEL", "loud"),
        ("BOLTQ_STORAGE_COMPACTION_THRESHOLD", "100MB"),
        ("BOLTQ_STREAM_ENABLED", "maybe"),
        ("BOLTQ_PRESENCE_TTL", "90"),
        ("BOLTQ_GATEWAY_PORT", "-1"),
        ("BOLTQ_REPLICATION_MIN_IN_SYNC", "two"),
    ] {
        let err = Config::load(args(&[]), &env_of(&[(var, value)])).unwrap_err();
        assert_eq!(err.key(), Some(var), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "config error: environment variable {var} = {value:?}: "
            )),
            "{text}"
        );
        assert_eq!(err.exit_code(), 2);
    }
}

#[test]
fn server_does_not_read_client_only_variables() {
    let c = Config::load(args(&[]), &env_of(&[("BOLTQ_TLS_ENABLED", "true")])).unwrap();
    assert!(!c.server.tls.enabled);
}

#[test]
fn precedence_file_env_cli() {
    let f = TempFile::new(
        "toml",
        "[server]\ntcp_port = 6001\nshards = 2\n[storage]\ndata_dir = \"/file\"\nfsync = \"never\"\n[cluster]\nseeds = [\"f:1\"]\n",
    );
    let env = env_of(&[
        ("BOLTQ_TCP_PORT", "6101"),
        ("BOLTQ_SHARDS", "3"),
        ("BOLTQ_DATA_DIR", "/env"),
        ("BOLTQ_JOIN_ADDR", "e:1"),
    ]);
    // File < env.
    let c = Config::load(args(&["--config", f.arg()]), &env).unwrap();
    assert_eq!((c.server.tcp_port, c.server.shards), (6101, 3));
    assert_eq!(c.storage.data_dir, PathBuf::from("/env"));
    assert_eq!(c.storage.fsync, FsyncMode::Never);
    assert_eq!(c.cluster.seeds, vec!["e:1", "f:1"]);
    // Env < CLI; --join goes first.
    let c = Config::load(
        args(&[
            "--config",
            f.arg(),
            "--tcp-port",
            "6201",
            "--http-port",
            "6300",
            "--shards",
            "5",
            "--data-dir",
            "/cli",
            "--log-level",
            "trace",
            "--join",
            "c:1",
            "--join",
            "e:1",
            "--storage-mode",
            "memory",
            "--fsync",
            "interval",
        ]),
        &env,
    )
    .unwrap();
    assert_eq!(
        (c.server.tcp_port, c.http_port(), c.server.shards),
        (6201, 6300, 5)
    );
    assert_eq!(c.storage.data_dir, PathBuf::from("/cli"));
    assert_eq!(c.log_level_filter(), log::LevelFilter::Trace);
    assert_eq!(c.cluster.seeds, vec!["c:1", "e:1", "f:1"]);
    assert_eq!(c.storage.mode, StorageMode::Memory);
    assert_eq!(c.fsync_policy(), FsyncPolicy::Interval { interval_ms: 10 });
}

#[test]
fn file_errors_name_the_file() {
    let f = TempFile::new("yaml", "a: 1");
    let err = Config::load(args(&["--config", f.arg()]), &no_env).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("config error: {}: unsupported", f.arg())),
        "{err}"
    );

    let err = Config::load(args(&["--config", "/nonexistent/boltq.toml"]), &no_env).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("config error: /nonexistent/boltq.toml: cannot read:"),
        "{err}"
    );

    let f = TempFile::new("toml", "[queue]\n\nmax_retyr = 1\n");
    let err = Config::load(args(&["--config", f.arg()]), &no_env).unwrap_err();
    assert_eq!(
        err.to_string().split(" (").next().unwrap(),
        format!("config error: {}:3: queue.max_retyr: unknown key", f.arg())
    );
}

#[test]
fn validation_message_format() {
    let err = toml_error("[storage]\nfsync_interval_ms = 0\n");
    assert_eq!(
        err.to_string(),
        "config error: storage.fsync_interval_ms = 0: must be between 1 and 10000"
    );
    let err = toml_error("[server]\ntcp_port = 9090\n[server.tls]\nenabled = true\n");
    assert_eq!(
        err.to_string(),
        "config error: server.tls.cert_file: required when server.tls.enabled = true"
    );
}

#[test]
fn port_zero_means_any_free_port_from_file_env_and_flags() {
    // Two listeners on port 0 do not collide: each gets its own port from the kernel.
    let f = TempFile::new("toml", "[server]\ntcp_port = 0\nhttp_port = 0\n");
    let c = Config::load(args(&["--config", f.arg()]), &no_env).unwrap();
    assert_eq!((c.server.tcp_port, c.http_port()), (0, 0));
    let env = env_of(&[("BOLTQ_TCP_PORT", "0"), ("BOLTQ_HTTP_PORT", "0")]);
    let c = Config::load(args(&[]), &env).unwrap();
    assert_eq!((c.server.tcp_port, c.http_port()), (0, 0));
    let c = Config::load(args(&["--tcp-port", "0", "--http-port", "0"]), &no_env).unwrap();
    assert_eq!((c.server.tcp_port, c.http_port()), (0, 0));
    // An ephemeral TCP port leaves no `tcp_port - 1` default for HTTP.
    let err = Config::load(args(&["--tcp-port", "0"]), &no_env).unwrap_err();
    assert_eq!(err.key(), Some("server.http_port"), "{err}");
}

#[test]
fn each_validation_error_names_its_key() {
    const KEY: &str = "0123456789abcdef0123456789abcdef";
    let cases: &[(&str, &str)] = &[
        ("[server]\nhost = \"\"", "server.host"),
        ("[server]\ntcp_port = 0", "server.http_port"),
        ("[server]\ntcp_port = 1", "server.http_port"),
        ("[server]\ntcp_port = 9000\nhttp_port = 9000", "server.http_port"),
        ("[server.tls]\nenabled = true", "server.tls.cert_file"),
        ("[server.tls]\nenabled = true\ncert_file = \"c\"", "server.tls.key_file"),
        ("[server]\nshards = 1025", "server.shards"),
        ("[server]\nspin_before_park_us = 10001", "server.spin_before_park_us"),
        ("[server]\nring_depth = 15", "server.ring_depth"),
        ("[server]\nring_depth = 32769", "server.ring_depth"),
        ("[server]\nlog_level = \"verbose\"", "server.log_level"),
        ("[storage]\ndata_dir = \"\"", "storage.data_dir"),
        ("[storage]\nfsync_interval_ms = 10001", "storage.fsync_interval_ms"),
        ("[storage]\nsegment_bytes = 1048575", "storage.segment_bytes"),
        ("[storage]\nsegment_bytes = 1073741825", "storage.segment_bytes"),
        ("[storage]\njournal_file_bytes = 1048576", "storage.journal_file_bytes"),
        ("[storage]\njournal_file_bytes = 4194305", "storage.journal_file_bytes"),
        // A 4 MiB journal refused a 3 MiB publish after the broker had applied it.
        ("[storage]\njournal_file_bytes = 4194304", "storage.journal_file_bytes"),
        ("[storage]\njournal_file_bytes = 16777216", "storage.journal_file_bytes"),
        ("[storage]\nio_memory_bytes = 4096", "storage.io_memory_bytes"),
        ("[storage]\nopen_segment_files_max = 3", "storage.open_segment_files_max"),
        ("[storage]\nopen_segment_files_max = 1048577", "storage.open_segment_files_max"),
        ("[storage]\nlock_wait_ms = 600001", "storage.lock_wait_ms"),
        ("[storage]\njournal_backlog_bytes_max = 1048575", "storage.journal_backlog_bytes_max"),
        (
            "[storage]\njournal_backlog_bytes_max = 68719476737",
            "storage.journal_backlog_bytes_max",
        ),
        ("[server]\nread_timeout = \"0s\"", "server.read_timeout"),
        ("[server]\nread_timeout = \"2h\"", "server.read_timeout"),
        ("[server]\nauth_timeout = \"0s\"", "server.auth_timeout"),
        ("[server]\ntcp_connections_max = 0", "server.tcp_connections_max"),
        ("[server]\nhttp_connections_max = 0", "server.http_connections_max"),
        ("[messaging.gateway]\nconnections_max = 0", "messaging.gateway.connections_max"),
        ("[queue]\nmax_retry = 0", "queue.max_retry"),
        ("[queue]\nack_timeout = \"0s\"", "queue.ack_timeout"),
        ("[queue]\ncapacity = 0", "queue.capacity"),
        ("[queue]\nsubscriptions_per_connection_max = 0", "queue.subscriptions_per_connection_max"),
        ("[queue]\ndurable_backlog_bytes_max = 1048575", "queue.durable_backlog_bytes_max"),
        ("[queue]\ndurable_backlog_bytes_max = 1099511627777", "queue.durable_backlog_bytes_max"),
        ("[queue]\nslot_bytes_max = 1048575", "queue.slot_bytes_max"),
        ("[queue]\nslot_bytes_max = 1099511627777", "queue.slot_bytes_max"),
        ("[queue]\nidle_queue_ttl = \"500ms\"", "queue.idle_queue_ttl"),
        ("[queue]\nidle_queue_ttl = \"31days\"", "queue.idle_queue_ttl"),
        ("[queue]\nretry_backoff_base_ms = 5000\nretry_backoff_max_ms = 100", "queue.retry_backoff_max_ms"),
        ("[queue]\nretry_backoff_max_ms = 3600001", "queue.retry_backoff_max_ms"),
        ("[admin]\ncors_origins = [\"\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"*\", \"app.example\"]", "admin.cors_origins[1]"),
        ("[admin]\ncors_origins = [\"https://app.example/\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"https://app.example/admin\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"https://\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"https://App.example\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"https://a b\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"https://a\\r\\nX-Evil: 1\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"null\"]", "admin.cors_origins[0]"),
        ("[admin]\ncors_origins = [\"ftp://app.example\"]", "admin.cors_origins[0]"),
        ("[cache]\ncleanup_sec = 0", "cache.cleanup_sec"),
        ("[storage]\nsnapshot_write_bytes_per_sec = 1048575", "storage.snapshot_write_bytes_per_sec"),
        ("[storage]\nsnapshot_write_bytes_per_sec = 17179869185", "storage.snapshot_write_bytes_per_sec"),
        ("[cluster]\nsnapshot_threshold = 0", "cluster.snapshot_threshold"),
        ("[cluster]\nseeds = [\"nohost\"]", "cluster.seeds[0]"),
        ("[cluster]\nenabled = true\nraft_addr = \"10.0.0.1\"", "cluster.raft_addr"),
        ("[cluster]\nenabled = true\nraft_addr = \"10.0.0.1:9091\"", "cluster.raft_addr"),
        ("[cluster]\nenabled = true\nraft_addr = \"10.0.0.1:65535\"", "cluster.raft_addr"),
        ("[cluster]\nenabled = true\nraft_addr = \"h:1\"\nmeta_raft_addr = \"x\"", "cluster.meta_raft_addr"),
        ("[cluster]\nenabled = true\nraft_addr = \"h:1\"\npeers = [\"h:2\"]", "cluster.peers[0]"),
        ("[cluster]\nenabled = true\nraft_addr = \"h:1\"\npeers = [\"@h:2\"]", "cluster.peers[0]"),
        ("[cluster]\nenabled = true\nraft_addr = \"h:1\"\npeers = [\"b@h\"]", "cluster.peers[0]"),
        ("[cluster]\nenabled = true\nraft_addr = \"h:1\"\nnode_id = \"a\"\npeers = [\"a@h:2\"]", "cluster.peers[0]"),
        ("[cluster]\nenabled = true\nraft_addr = \"h:1\"\npeers = [\"b@h:2\", \"b@h:3\"]", "cluster.peers[1]"),
        ("[server]\nshards = 4\n[cluster]\nenabled = true\nraft_addr = \"h:65533\"\nmeta_raft_addr = \"h:9\"", "cluster.raft_addr"),
        ("[messaging]\nfsync_interval_ms = 0", "messaging.fsync_interval_ms"),
        ("[messaging]\nfsync = \"never\"\n[messaging.stream]\nsync_on_append = true", "messaging.stream.sync_on_append"),
        ("[messaging.stream]\ndefault_partitions = 0", "messaging.stream.default_partitions"),
        ("[messaging.stream]\nsegment_bytes = 10", "messaging.stream.segment_bytes"),
        ("[messaging.stream]\nindex_interval = 1", "messaging.stream.index_interval"),
        ("[messaging.stream]\nmaintenance_interval = \"0s\"", "messaging.stream.maintenance_interval"),
        ("[messaging.identity]\nenabled = true", "messaging.identity.keys"),
        ("[[messaging.identity.keys]]\nid = \"a\"\nsecret = \"short\"", "messaging.identity.keys[0].secret"),
        ("[[messaging.identity.keys]]\nsecret = \"0123456789abcdef0123456789abcdef\"", "messaging.identity.keys[0].id"),
        ("[messaging.identity]\nmembership_cache_ttl = \"0s\"", "messaging.identity.membership_cache_ttl"),
        ("[[messaging.identity.policy]]\npattern = \"a\"\neffect = \"permit\"", "messaging.identity.policy[0].effect"),
        ("[[messaging.identity.policy]]\npattern = \"a\"\neffect = \"allow\"\nactions = [\"delete\"]", "messaging.identity.policy[0].actions"),
        ("[[messaging.identity.policy]]\neffect = \"allow\"", "messaging.identity.policy[0].pattern"),
        ("[messaging.gateway]\nenabled = true", "messaging.gateway.enabled"),
        ("[messaging.gateway]\npath = \"ws\"", "messaging.gateway.path"),
        ("[messaging.gateway]\nport = 9091", "messaging.gateway.port"),
        ("[messaging.gateway]\nresume_window = \"0s\"", "messaging.gateway.resume_window"),
        ("[messaging.gateway]\npong_timeout = \"500ms\"", "messaging.gateway.pong_timeout"),
        ("[messaging.gateway]\nmax_subscriptions = 0", "messaging.gateway.max_subscriptions"),
        ("[messaging.gateway]\nsend_buffer = 0", "messaging.gateway.send_buffer"),
        ("[messaging.gateway]\nslow_consumer_timeout = \"500ms\"", "messaging.gateway.slow_consumer_timeout"),
        ("[messaging.gateway]\nslow_consumer_timeout = \"11m\"", "messaging.gateway.slow_consumer_timeout"),
        ("[messaging.gateway]\nread_limit = 100", "messaging.gateway.read_limit"),
        ("[messaging.gateway]\nhistory_limit = 0", "messaging.gateway.history_limit"),
        ("[messaging.gateway.tls]\nenabled = true", "messaging.gateway.tls.cert_file"),
        ("[messaging.presence]\nttl = \"0s\"", "messaging.presence.ttl"),
        ("[messaging.presence]\nsweep_interval = \"0s\"", "messaging.presence.sweep_interval"),
        ("[messaging.chat]\nconversation_partitions = 0", "messaging.chat.conversation_partitions"),
        ("[messaging.chat]\ninbox_partitions = 0", "messaging.chat.inbox_partitions"),
        ("[messaging.chat]\nmembership_timeout = \"0s\"", "messaging.chat.membership_timeout"),
        ("[messaging.chat]\nfanout_on_write_limit = -1", "messaging.chat.fanout_on_write_limit"),
        ("[messaging.chat]\nfanout_on_write_limit = 4097", "messaging.chat.fanout_on_write_limit"),
        ("[messaging.dedup]\nttl = \"0s\"", "messaging.dedup.ttl"),
        ("[messaging.signals]\nrate_per_second = 0", "messaging.signals.rate_per_second"),
        ("[messaging.signals]\nburst = 0", "messaging.signals.burst"),
        ("[messaging.signals]\nmax_payload = 0", "messaging.signals.max_payload"),
        ("[messaging.signals]\nsubscriber_buffer = 0", "messaging.signals.subscriber_buffer"),
        ("[messaging.replication]\nrole = \"LEADER\"", "messaging.replication.role"),
        ("[messaging.replication]\nmin_in_sync = 0", "messaging.replication.min_in_sync"),
        ("[messaging.replication]\nack_timeout = \"0s\"", "messaging.replication.ack_timeout"),
        ("[messaging.replication]\nsecret_env = \"NOT_SET_ANYWHERE\"", "messaging.replication.secret_env"),
        ("[messaging.replication]\nenabled = true", "messaging.replication.enabled"),
        ("[messaging.stream]\nenabled = true\n[messaging.replication]\nenabled = true\nrole = \"leader\"", "messaging.replication.listen"),
        ("[messaging.stream]\nenabled = true\n[messaging.replication]\nenabled = true\nlisten = \"h:9200\"", "messaging.replication.role"),
        ("[messaging.stream]\nenabled = true\n[messaging.replication]\nenabled = true\nrole = \"follower\"", "messaging.replication.leader_addr"),
        ("[messaging.stream]\nenabled = true\n[messaging.replication]\nenabled = true\nrole = \"follower\"\nleader_addr = \"h:1\"\ntopics = [\"t\"]", "messaging.replication.topics"),
        ("[messaging.stream]\nenabled = true\n[messaging.replication]\nenabled = true\nrole = \"follower\"\nleader_addr = \"h:1\"\nmin_in_sync = 2", "messaging.replication.min_in_sync"),
    ];
    for (toml, key) in cases {
        toml_error(toml).assert_one_line_naming(key, toml);
    }
    // A follower may not run the gateway (identity and stream are on, so only
    // the follower rule can fire).
    let follower_gateway = format!(
        "[messaging.stream]\nenabled = true\n[messaging.identity]\nenabled = true\n[[messaging.identity.keys]]\nid = \"k\"\nsecret = \"{KEY}\"\n[messaging.gateway]\nenabled = true\n[messaging.replication]\nenabled = true\nrole = \"follower\"\nleader_addr = \"h:1\""
    );
    assert_eq!(
        toml_error(&follower_gateway).key(),
        Some("messaging.gateway.enabled")
    );
}

/// The `[admin]` keys load from a file and accept every origin form a browser sends.
#[test]
fn admin_keys_load_and_accept_browser_origins() {
    let f = TempFile::new(
        "toml",
        "[admin]\ncors_origins = [\"*\", \"https://app.example\", \"http://localhost:3000\", \
         \"http://[::1]:8080\", \"https://xn--bcher-kva.example\"]\nmetrics_public = true\n",
    );
    let c = Config::load(args(&["--config", f.arg()]), &no_env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.admin.cors_origins,
        vec![
            "*",
            "https://app.example",
            "http://localhost:3000",
            "http://[::1]:8080",
            "https://xn--bcher-kva.example"
        ]
    );
    assert!(c.admin.metrics_public);
    let err = toml_error("[admin]\ncors_origins = [\"https://app.example/\"]");
    assert_eq!(
        err.to_string(),
        "config error: admin.cors_origins[0] = \"https://app.example/\": \
         must be scheme://host[:port] with no path or trailing slash"
    );
    assert_eq!(
        toml_error("[admin]\nmetrics_publik = true").key(),
        Some("admin.metrics_publik"),
        "a typo is an error naming the key"
    );
}

/// Both ends of `storage.open_segment_files_max` are accepted (the refusals
/// one past each end are in `each_validation_error_names_its_key`), and the
/// floor is the storage layer's own, so the server never hands it a limit
/// it would refuse at startup.
#[test]
fn open_segment_files_max_accepts_its_bounds() {
    for n in [
        boltq_io::file_budget::OPEN_SEGMENT_FILES_MIN as u64,
        1 << 20,
    ] {
        let c = Config::from_toml_str(&format!("[storage]\nopen_segment_files_max = {n}")).unwrap();
        c.validate(&no_env).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(c.storage.open_segment_files_max, n);
    }
}

#[test]
fn secrets_resolve_from_env() {
    const KEY: &str = "0123456789abcdef0123456789abcdef";
    let c = Config::from_toml_str(
        "[messaging.identity]\nenabled = true\n[[messaging.identity.keys]]\nid = \"k\"\nsecret_env = \"MY_SECRET\"\n[messaging.replication]\nsecret_env = \"REPL\"\n",
    )
    .unwrap();
    let err = c.validate(&env_of(&[("REPL", "x")])).unwrap_err();
    assert_eq!(
        err.key(),
        Some("messaging.identity.keys[0].secret_env (MY_SECRET)"),
        "{err}"
    );
    let env = env_of(&[("MY_SECRET", KEY), ("REPL", "x")]);
    c.validate(&env).unwrap();
    assert_eq!(c.messaging.identity.keys[0].resolve_secret(&env), KEY);
    assert_eq!(c.messaging.replication.resolve_secret(&env), "x");
}

#[test]
fn derived_values() {
    let mut c = Config::default();
    c.server.tcp_port = 7001;
    assert_eq!(c.http_port(), 7000);
    c.server.http_port = Some(8080);
    assert_eq!(c.http_port(), 8080);

    c.server.shards = 6;
    assert_eq!(c.effective_shards(2), 6);
    assert!(c.warnings(2).iter().any(|w| w.starts_with("server.shards")));

    c.storage.fsync = FsyncMode::Interval;
    c.storage.fsync_interval_ms = 25;
    assert_eq!(c.fsync_policy(), FsyncPolicy::Interval { interval_ms: 25 });
    c.storage.fsync = FsyncMode::Never;
    assert_eq!(c.fsync_policy(), FsyncPolicy::Never);

    assert_eq!(c.node_id("h", 7), "node-7");
    c.cluster.enabled = true;
    assert_eq!(c.node_id("h", 7), "h");
    c.cluster.raft_addr = "10.0.0.5:9200".into();
    assert_eq!(c.meta_raft_addr().as_deref(), Some("10.0.0.5:9201"));
    c.cluster.meta_raft_addr = "10.0.0.5:9300".into();
    assert_eq!(c.meta_raft_addr().as_deref(), Some("10.0.0.5:9300"));
    c.cluster.raft_addr = "[::1]:9100".into();
    c.cluster.meta_raft_addr.clear();
    assert_eq!(c.meta_raft_addr().as_deref(), Some("[::1]:9101"));

    c.cluster.bootstrap = true;
    assert!(c.is_bootstrap_node("anyone"));
    c.cluster.bootstrap_node_id = "n2".into();
    assert!(!c.is_bootstrap_node("n1"));
    assert!(c.is_bootstrap_node("n2"));

    assert_eq!(c.messaging.chat.effective_fanout_on_write_limit(), 256);
    c.messaging.chat.fanout_on_write_limit = 0;
    assert_eq!(c.messaging.chat.effective_fanout_on_write_limit(), 256);

    c.messaging.replication.topics = vec!["a:b:4".into(), "c:1".into()];
    assert_eq!(
        c.messaging.replication.parsed_topics(),
        Some(vec![("a:b".to_string(), 4), ("c".to_string(), 1)])
    );
}

#[test]
fn redacted_hides_secrets() {
    let mut c = Config::default();
    c.security.api_key = "topsecret".into();
    c.messaging.push.auth_header = "Bearer x".into();
    c.messaging.identity.keys.push(IdentityKeyConfig {
        id: "k".into(),
        secret: "s".repeat(40),
        secret_env: String::new(),
    });
    let shown = format!("{:?}", c.redacted());
    assert!(!shown.contains("topsecret") && !shown.contains("Bearer x") && !shown.contains("ssss"));
    assert_eq!(
        c.redacted().security.allow_query_api_key,
        c.security.allow_query_api_key
    );
    assert_eq!(
        Config::default().redacted(),
        Config::default(),
        "empty secrets stay empty"
    );
}

#[test]
fn help_and_version_exit_zero() {
    for flag in ["--help", "--version"] {
        let err = Config::load(args(&[flag]), &no_env).unwrap_err();
        assert_eq!(err.exit_code(), 0, "{flag}");
    }
    let err = Config::load(args(&["--tcp-port", "x"]), &no_env).unwrap_err();
    assert_eq!(err.exit_code(), 2);
}

/// One list of every member serves every node (a StatefulSet's shared environment): a
/// node's own entry, with its own raft address, is taken out of its peers; with another
/// address it is refused.
#[test]
fn peers_may_name_this_node_with_its_own_raft_address() {
    let all = "boltq-0@boltq-0.boltq-peers:9100,boltq-1@boltq-1.boltq-peers:9100,boltq-2@boltq-2.boltq-peers:9100";
    for (i, me) in ["boltq-0", "boltq-1", "boltq-2"].iter().enumerate() {
        let raft = format!("{me}.boltq-peers:9100");
        let env = env_of(&[
            ("BOLTQ_CLUSTER_ENABLED", "true"),
            ("BOLTQ_NODE_ID", me),
            ("BOLTQ_RAFT_ADDR", &raft),
            ("BOLTQ_CLUSTER_PEERS", all),
        ]);
        let c = Config::load(args(&[]), &env).unwrap_or_else(|e| panic!("{e}"));
        let others: Vec<String> = all
            .split(',')
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, p)| p.to_string())
            .collect();
        assert_eq!(c.cluster.peers, others, "node {me}");
    }
    let env = env_of(&[
        ("BOLTQ_CLUSTER_ENABLED", "true"),
        ("BOLTQ_NODE_ID", "boltq-0"),
        ("BOLTQ_RAFT_ADDR", "boltq-0.elsewhere:9100"),
        ("BOLTQ_CLUSTER_PEERS", all),
    ]);
    let err = Config::load(args(&[]), &env).unwrap_err().to_string();
    assert!(err.contains("cluster.peers[0]"), "{err}");
}
