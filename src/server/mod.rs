//! Process startup and shutdown: lock the data directory, bind the listeners, replay the
//! journals, start the shards, and on SIGINT/SIGTERM drain and sync before exiting 0.

pub mod cluster;
pub mod cluster_join;
pub mod exposure;
pub mod mesh;
pub mod ready;
pub mod shard_main;

use crate::admin::readiness::ServerState;
use crate::config::{Config, FsyncPolicy, StorageMode};
use boltq_io::listener::SharedListener;
use boltq_io::tls::TlsConfig;
use boltq_io::{Durability, LogConfig, StoreConfig};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// How long shutdown waits for in-flight work before syncing and exiting anyway.
pub const SHUTDOWN_DRAIN_MS: u64 = 10_000;

/// Why the server could not start or stopped abnormally. Printed as one line; exit code 1.
#[derive(Debug)]
pub struct ServerError(pub String);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Everything a shard needs to start, shared by all shards.
pub struct Plan {
    pub config: Config,
    pub store: Option<StoreConfig>,
    pub tcp: SharedListener,
    pub http: SharedListener,
    pub state: Arc<ServerState>,
    pub broker: crate::queue::broker::BrokerConfig,
    /// `server.tls.*` loaded, for both the TCP and HTTP listeners; `None` when TLS is off.
    pub tls: Option<TlsConfig>,
    /// `None` when `security.api_key` is empty (auth off).
    pub api_key: Option<String>,
    /// Per-process randomness for id and connection prefixes.
    pub random: u64,
    /// The high 32 bits of this process's connection ids (`plane::connection_boot_id`, or
    /// clustered `plane::clustered_boot_id`).
    pub boot_id: u64,
    /// Command-log bytes per queue slot that make a snapshot due (0 = never).
    pub slot_compaction_bytes: u64,
    /// When the process started serving (uptime in `/overview` and `/readyz`).
    pub started: std::time::Instant,
    /// The messaging plane, when `messaging.stream.enabled`.
    pub messaging: Option<crate::messaging::plane::MessagingPlan>,
    /// The dedicated gateway listener (`messaging.gateway.port` ≠ 0) and its TLS.
    pub gateway_listener: Option<(SharedListener, Option<TlsConfig>)>,
    /// `cluster.enabled`: the raft listeners and members.
    pub cluster: Option<cluster::ClusterPlan>,
    /// What startup warned about that an operator should also see on the dashboard
    /// (listeners open to other hosts without a key).
    pub warnings: Vec<String>,
    /// Set once a node that joined through seeds has left through them at shutdown
    /// (`shard_main::leave_before_closing`): the other shards close their storage then.
    pub members_left: std::sync::atomic::AtomicBool,
    /// Shards whose queue plane started; clustered, no shard starts its raft node (which
    /// writes the groups' logs) before every shard's plane did, so a start refused for
    /// single-node data leaves the data dir as it was (`shard_main::all_planes_started`).
    pub planes_started: std::sync::atomic::AtomicUsize,
    /// Clustered and founding alone: the exchanges shard 0 held as a single node, for the
    /// shard owning the exchange slot to found its group with (`shard_main::cluster_node`).
    pub single_node_exchanges: std::sync::Mutex<Option<crate::queue::broker::exchange::Exchanges>>,
}

/// Checks the settings a plane validates itself because config, the lowest layer, cannot
/// name the plane's bounds: today `[messaging.push]`. The binary runs it right after
/// [`Config::load`], so a failure reads and exits like any other config error.
pub fn check_plane_settings(config: &Config) -> Result<(), crate::config::ConfigError> {
    crate::messaging::push::settings::validate(&config.messaging)
}

/// Refuses settings that ask for a feature this build does not have yet, so that nobody
/// gets a lone node when they asked for a cluster, or a server without the messaging plane
/// they enabled.
/// Returns the one-line error to print (exit code 2, like any configuration error).
pub fn refuse_unbuilt_features(config: &Config) -> Result<(), String> {
    let cl = &config.cluster;
    let clustered = cl.enabled;
    let unbuilt = [
        (
            clustered && config.storage.mode == StorageMode::Memory,
            "cluster.enabled = true with storage.mode = \"memory\"",
            "clustering without disk storage (each slot's raft log is on disk)",
        ),
        (
            clustered && config.server.shards == 0,
            "cluster.enabled = true with server.shards = 0",
            "clustering nodes whose shard counts may differ (set server.shards to the same number on every node)",
        ),
        (
            config.messaging.replication.enabled,
            "messaging.replication.enabled = true",
            "messaging replication",
        ),
        (
            config.messaging.stream.enabled && config.storage.mode == StorageMode::Memory,
            "messaging.stream.enabled = true with storage.mode = \"memory\"",
            "the messaging plane without disk storage",
        ),
    ];
    let spill = config.queue.overflow != crate::config::OverflowPolicy::Reject;
    let unbuilt = unbuilt.into_iter().chain([(
        spill,
        "queue.overflow = \"spill\"",
        "spilling full queues to disk",
    )]);
    for (on, key, what) in unbuilt {
        if on {
            return Err(format!(
                "config error: {key}: {what} is not available in this build yet (see STATUS.md)"
            ));
        }
    }
    Ok(())
}

pub fn run(config: Config) -> Result<(), ServerError> {
    let cpus = boltq_shards::usable_cpus().map_err(|e| ServerError(e.to_string()))?;
    let shard_count = config.effective_shards(cpus.len());
    for w in config.warnings(cpus.len()) {
        log::warn!("{w}");
    }
    let store = match config.storage.mode {
        StorageMode::Disk => Some(store_config(&config)),
        StorageMode::Memory => None,
    };
    let _lock = match &store {
        Some(s) => Some(
            boltq_io::dirlock::DirLock::acquire_waiting(
                &s.data_dir,
                std::time::Duration::from_millis(config.storage.lock_wait_ms),
            )
            .map_err(|e| ServerError(format!("cannot use data directory: {e}")))?,
        ),
        None => None,
    };
    // Before binding: a bad certificate must stop the start, not surface per connection.
    let tls = load_tls(&config)?;
    let host = &config.server.host;
    let tcp = bind(host, config.server.tcp_port, "tcp", tls.as_ref())?;
    let http = bind(host, config.http_port(), "http", tls.as_ref())?;
    let random = process_random();
    let mut boot_id = crate::queue::server::plane::connection_boot_id(random);
    let cluster = match (&store, config.cluster.enabled) {
        (Some(store), true) => {
            if !config.cluster.peers.is_empty() {
                cluster::check_members(&store.data_dir, &config)?;
            }
            let node_id = crate::cluster::directory::raft_id(&cluster::node_name(&config));
            let (chosen, boots) = cluster::note_boot(&store.data_dir, node_id, random)?;
            boot_id = chosen;
            Some(cluster::ClusterPlan::build(
                &config,
                &store.data_dir,
                shard_count,
                boots,
            )?)
        }
        _ => None,
    };
    if let Some(s) = &store {
        recover(s)?;
        // After recovery: logs written only to the journal exist as directories now.
        if !config.cluster.enabled {
            cluster::refuse_cluster_data(&s.data_dir)?;
        }
    }
    let broker = broker_config(&config);
    broker
        .validate()
        .map_err(|e| ServerError(format!("queue configuration: {e}")))?;
    let api_key = Some(config.security.api_key.clone()).filter(|k| !k.is_empty());
    let messaging = match (&store, config.messaging.stream.enabled) {
        (Some(s), true) => Some(
            crate::messaging::plane::MessagingPlan::build(&config, &s.data_dir)
                .map_err(|e| ServerError(format!("messaging: {e}")))?,
        ),
        _ => None,
    };
    if let (Some(s), Some(m), true) = (&store, &messaging, config.cluster.enabled) {
        cluster::refuse_single_node_streams(&s.data_dir, m.topics.len())?;
    }
    let gateway_listener = bind_gateway(&config, messaging.is_some())?;
    let bound: Vec<(&str, SocketAddr)> = [("tcp", &tcp), ("http", &http)]
        .into_iter()
        .filter_map(|(name, l)| Some((name, l.local_addr().ok()?)))
        .collect();
    let warnings = exposure::open_listener_warnings(&config, &bound);
    for w in &warnings {
        log::warn!("{w}");
    }
    let plan = Arc::new(Plan {
        messaging,
        gateway_listener,
        cluster,
        tls,
        broker,
        api_key,
        random,
        boot_id,
        started: std::time::Instant::now(),
        slot_compaction_bytes: slot_compaction_bytes(config.storage.compaction_threshold),
        config,
        store,
        tcp,
        http,
        state: Arc::new(ServerState::new(shard_count)),
        warnings,
        members_left: std::sync::atomic::AtomicBool::new(false),
        planes_started: std::sync::atomic::AtomicUsize::new(0),
        single_node_exchanges: std::sync::Mutex::new(None),
    });
    let shutdown = boltq_shards::ShutdownHandle::new();
    let _signals = shutdown
        .listen_for_signals()
        .map_err(|e| ServerError(format!("cannot install signal handlers: {e}")))?;
    let mut rt = boltq_shards::RuntimeConfig::new(shard_count);
    rt.ring_depth = plan.config.server.ring_depth as usize;
    rt.spin_before_park_us = match plan.config.server.spin_before_park_us {
        0 => None,
        us => Some(us),
    };
    rt.io_memory_bytes = match plan.config.storage.io_memory_bytes {
        0 => None,
        b => Some(b as usize),
    };
    let results = boltq_shards::run_shards::<mesh::ShardMsg, _, _, _>(rt, shutdown, {
        let plan = Arc::clone(&plan);
        move |shard| shard_main::run(shard, Arc::clone(&plan))
    })
    .map_err(|e| ServerError(e.to_string()))?;
    for (shard, r) in results.into_iter().enumerate() {
        r.map_err(|e| ServerError(format!("shard {shard}: {e}")))?;
    }
    log::info!("stopped cleanly");
    Ok(())
}

/// `storage.compaction_threshold` is v1's size for its one WAL; here every queue slot has its
/// own command log, so each gets a share (never under 1 MiB, so small settings do not turn
/// into a snapshot per command). 0 keeps v1's meaning: never compact.
fn slot_compaction_bytes(threshold_bytes: u64) -> u64 {
    if threshold_bytes == 0 {
        return 0;
    }
    (threshold_bytes / 64).max(1024 * 1024)
}

fn broker_config(config: &Config) -> crate::queue::broker::BrokerConfig {
    let q = &config.queue;
    let capacity = q.capacity as usize;
    crate::queue::broker::BrokerConfig {
        max_retry: q.max_retry,
        ack_timeout_ns: q.ack_timeout.as_nanos().min(i64::MAX as u128) as i64,
        capacity_per_queue: capacity,
        retry_backoff_base_ns: q.retry_backoff_base_ms as i64 * 1_000_000,
        retry_backoff_max_ns: q.retry_backoff_max_ms as i64 * 1_000_000,
        dead_letter_capacity: capacity,
        durable_kept_bytes_max: q.durable_backlog_bytes_max,
        queues_max: q.queues_per_slot_max as usize,
        slot_bytes_max: q.slot_bytes_max,
        idle_queue_ttl_ns: q.idle_queue_ttl.as_nanos().min(i64::MAX as u128) as i64,
    }
}

/// 64 bits that differ between processes: time, pid and the address-space layout mixed.
/// Used only to keep message ids and connection ids of different runs apart, not for
/// anything secret.
fn process_random() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let stack_addr = &t as *const u64 as u64;
    let mut x = t ^ (u64::from(std::process::id()) << 32) ^ stack_addr.rotate_left(17);
    // splitmix64 finaliser: spreads the inputs over all bits.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn store_config(config: &Config) -> StoreConfig {
    let s = &config.storage;
    // Absolute: glommio opens some files relative to directory descriptors, and a relative
    // data dir (the default is ./data) failed there with "Bad file descriptor".
    let data_dir = std::env::current_dir()
        .map(|cwd| cwd.join(&s.data_dir))
        .unwrap_or_else(|_| s.data_dir.clone());
    let mut c = StoreConfig::new(&data_dir);
    c.durability = match config.fsync_policy() {
        FsyncPolicy::Always => Durability::Always,
        FsyncPolicy::Interval { interval_ms } => Durability::Interval { interval_ms },
        FsyncPolicy::Never => Durability::Never,
    };
    c.journal_file_bytes = s.journal_file_bytes;
    c.checkpoint_bytes = s.journal_file_bytes;
    c.journal_backlog_bytes_max = s.journal_backlog_bytes_max;
    c.open_segment_files_max = s.open_segment_files_max as usize;
    c.log = LogConfig {
        segment_bytes: s.segment_bytes,
        retention_bytes: s.retention_bytes,
        retention_ms: s.retention_ms,
        ..LogConfig::default()
    };
    c
}

/// Loads `server.tls.*` when enabled (config validation has made sure both files are named).
/// `ca_file`, when set, makes client certificates mandatory (mTLS).
fn load_tls(config: &Config) -> Result<Option<TlsConfig>, ServerError> {
    let t = &config.server.tls;
    if !t.enabled {
        return Ok(None);
    }
    let ca_file = Some(t.ca_file.as_path()).filter(|p| !p.as_os_str().is_empty());
    TlsConfig::load(&t.cert_file, &t.key_file, ca_file)
        .map(Some)
        .map_err(|e| ServerError(format!("server.tls: {e}")))
}

/// Binds the dedicated gateway listener when the gateway runs on its own port, with the
/// certificate of `messaging.gateway.tls` when enabled.
fn bind_gateway(
    config: &Config,
    messaging_on: bool,
) -> Result<Option<(SharedListener, Option<TlsConfig>)>, ServerError> {
    let g = &config.messaging.gateway;
    if !messaging_on || !g.enabled || g.port == 0 {
        return Ok(None);
    }
    let tls = match g.tls.enabled {
        true => Some(
            TlsConfig::load(&g.tls.cert_file, &g.tls.key_file, None)
                .map_err(|e| ServerError(format!("messaging.gateway.tls: {e}")))?,
        ),
        false => None,
    };
    let l = bind(&config.server.host, g.port, "gateway", tls.as_ref())?;
    Ok(Some((l, tls)))
}

/// How long startup keeps retrying a port that is still in use.
pub const BIND_RETRY_MS: u64 = 2_000;

/// Binds, retrying "address in use" for up to `BIND_RETRY_MS`: the sockets of a process
/// that was just killed stay bound for a few milliseconds after it is reaped (io_uring
/// releases them asynchronously), so an immediate restart would otherwise fail. A port held
/// by a live process still fails, after the retry period, with the same clear error.
fn bind_retrying(addr: SocketAddr) -> std::io::Result<SharedListener> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(BIND_RETRY_MS);
    loop {
        match SharedListener::bind(addr) {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

fn bind(
    host: &str,
    port: u16,
    what: &str,
    tls: Option<&TlsConfig>,
) -> Result<SharedListener, ServerError> {
    let addr: SocketAddr = (host, port)
        .to_socket_addrs()
        .map_err(|e| ServerError(format!("cannot resolve {what} address {host}:{port}: {e}")))?
        .next()
        .ok_or_else(|| ServerError(format!("no address for {host}:{port}")))?;
    let l = bind_retrying(addr).map_err(|e| ServerError(format!("{what} listener: {e}")))?;
    let local = l.local_addr().map_err(|e| ServerError(e.to_string()))?;
    let security = match tls {
        None => "",
        Some(t) if t.client_certificates_required() => " (tls, client certificates required)",
        Some(_) => " (tls)",
    };
    log::info!("listening {what} on {local}{security}");
    Ok(l)
}

/// Replays every journal into the logs' segments before any shard serves, on a temporary
/// executor (the shard count may differ from the one that wrote the journals).
fn recover(store: &StoreConfig) -> Result<(), ServerError> {
    let data_dir = store.data_dir.clone();
    let log_cfg = store.log.clone();
    let started = std::time::Instant::now();
    let report = boltq_shards::block_on("boltq-recovery", move || {
        Box::pin(async move {
            boltq_io::probe::warm_iopoll(&data_dir).await?;
            boltq_io::recovery::recover(&data_dir, &log_cfg).await
        })
    })
    .map_err(|e| ServerError(e.to_string()))?
    .map_err(|e| {
        ServerError(format!(
            "recovery of {} failed: {e}",
            store.data_dir.display()
        ))
    })?;
    log::info!(
        "recovered data dir {} in {} ms: {} journal files, {} records replayed, {} logs",
        store.data_dir.display(),
        started.elapsed().as_millis(),
        report.journal_files,
        report.records_replayed,
        report.logs_touched
    );
    for t in &report.torn_tails {
        log::warn!("journal tail cut at damage (unacknowledged data): {t}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clustered() -> Config {
        let mut c = Config::default();
        c.cluster.enabled = true;
        c.cluster.node_id = "a".into();
        c.server.shards = 2;
        c
    }

    #[test]
    fn a_cluster_this_build_can_run_is_accepted_and_every_missing_feature_is_named() {
        assert_eq!(refuse_unbuilt_features(&clustered()), Ok(()));
        let mut joining = clustered();
        joining.cluster.seeds = vec!["h:1".into()];
        joining.cluster.non_voter = true;
        joining.cluster.bootstrap = true;
        assert_eq!(refuse_unbuilt_features(&joining), Ok(()), "joins are built");
        let mut messaging = clustered();
        messaging.messaging.stream.enabled = true;
        assert_eq!(
            refuse_unbuilt_features(&messaging),
            Ok(()),
            "the messaging plane on the slot groups is built"
        );
        type Change = fn(&mut Config);
        let cases: [(&str, Change); 2] = [
            ("storage.mode", |c| c.storage.mode = StorageMode::Memory),
            ("server.shards", |c| c.server.shards = 0),
        ];
        for (key, change) in cases {
            let mut c = clustered();
            change(&mut c);
            let refused = refuse_unbuilt_features(&c).unwrap_err();
            assert!(refused.contains(key), "{key}: {refused}");
        }
    }
}
