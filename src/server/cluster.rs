//! `cluster.enabled = true`: the settings turned into what each shard's raft node needs.
//!
//! Every node lists the others in `cluster.peers` (`node_id@host:port`); this node and
//! those are the voters of every slot's group. Shard k of a node hosts the groups of the
//! slots it owns and listens on the raft port + k; it links to shard k of every peer, so
//! every node must run the same `server.shards` (checked at start; a mismatch shows as
//! misrouted-message warnings, since the peers cannot be asked).

use super::ServerError;
use crate::cluster::directory::{check_advertised, check_name, raft_id, Directory, Member, Role};
use crate::cluster::group::{ElectionTicks, ELECTION_TICKS};
use crate::cluster::node::{MembershipConfig, NodeConfig, StreamHooks};
use crate::cluster::shared_settings::SharedSettings;
use crate::config::{split_host_port, split_peer, Config};
use crate::messaging::slot::StreamSlotConfig;
use crate::queue::broker::BrokerConfig;
use crate::queue::server::plane::clustered_boot_id;
use crate::queue::server::replicated::ClusterView;
use boltq_io::listener::SharedListener;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// Milliseconds per raft tick: heartbeats every tick, elections after 10–20 ticks
/// (design §9: heartbeat ~100 ms, election timeout ~1 s).
pub const TICK_MS: u64 = 100;
/// Ticks between two rounds of leader balancing (5 s): long enough for the transfers of
/// one round to finish (each takes about a round trip, or an election timeout when the
/// target does not take it) before the next is planned.
pub const BALANCE_EVERY_TICKS: u64 = 50;

pub struct ClusterPlan {
    /// This node's raft id (`raft_id(name)`) and its name (`Config::node_id`).
    pub node_id: u64,
    pub name: String,
    /// Its advertised raft address (`cluster.raft_addr`, shard 0's).
    pub raft_addr: String,
    /// The member directory as this node starts with it: what its shards saved, or at the
    /// first start the founding members (this node and `cluster.peers`, or this node
    /// alone when it bootstraps), or nothing when it is to join through seeds.
    pub directory: Directory,
    /// Not a founding member: its groups start empty and learn their membership from the
    /// leaders once a seed accepted its join.
    pub joining: bool,
    /// It starts with no cluster state: no directory was saved and it founds nothing.
    pub fresh: bool,
    /// Set once a seed accepted this node's join; true from the start unless `fresh`
    /// (`MembershipConfig::admitted`).
    pub admitted: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Shard k's raft listener, on the raft port + k.
    pub listeners: Vec<SharedListener>,
    pub snapshot_every_entries: u64,
    pub election: ElectionTicks,
    /// Connection boot ids of this node's earlier processes (`note_boot`).
    pub earlier_boots: Vec<u64>,
    /// `<data_dir>/cluster`: where each shard keeps its copy of the directory.
    pub dir: PathBuf,
    /// The client side of TLS on the links (`server.tls.enabled`); the listeners then
    /// speak TLS with the server's certificate.
    pub link_tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// What every member must run alike (`shared_settings`).
    pub shared: SharedSettings,
}

/// Records the member set (this node's name and its peers') in
/// `<data_dir>/cluster/members` at the first start, and refuses a later start whose
/// configuration names other members. The groups are founded with the configured members
/// and nothing in this build changes them, so a reconfigured node would vote in groups
/// whose other members count different voters.
pub fn check_members(data_dir: &Path, config: &Config) -> Result<(), ServerError> {
    let mut names: Vec<String> = config
        .cluster
        .peers
        .iter()
        .map(|p| {
            split_peer(p)
                .expect("validated: node_id@host:port")
                .0
                .to_string()
        })
        .collect();
    names.push(config.cluster.node_id.clone());
    names.sort();
    let text: String = names.iter().map(|n| format!("{n}\n")).collect();
    let dir = data_dir.join("cluster");
    let path = dir.join("members");
    let fail =
        |what: &str, e: std::io::Error| ServerError(format!("{what} {}: {e}", path.display()));
    match std::fs::read_to_string(&path) {
        Ok(founded) if founded == text => Ok(()),
        Ok(founded) => Err(ServerError(format!(
            "cluster.peers: this node's groups were founded with the members {:?}, but its configuration names {:?}; changing the members of a cluster is not available in this build yet",
            founded.lines().collect::<Vec<_>>(),
            names
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir).map_err(|e| fail("create the directory of", e))?;
            write_durably(&dir, &path, &text).map_err(|e| fail("write", e))
        }
        Err(e) => Err(fail("read", e)),
    }
}

/// Writes `text` to `path` through a temporary file, synced, then renamed, the directory
/// synced: a crash leaves the old file or the new one.
fn write_durably(dir: &Path, path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Without `cluster.enabled` a node serves its single-node slot logs only, so the raft
/// groups' logs of a data dir that was a cluster member's (`logs/cluster/`) would be
/// hidden — and the member's place in its cluster left without notice. Refused instead.
pub fn refuse_cluster_data(data_dir: &Path) -> Result<(), ServerError> {
    let groups = boltq_io::store::logs_root(data_dir).join("cluster");
    let held = std::fs::read_dir(&groups).is_ok_and(|mut entries| entries.next().is_some());
    if held {
        return Err(ServerError(format!(
            "cluster.enabled is false, but this data dir holds a cluster member's replicated queues ({}), which a single node would not serve: start with cluster.enabled and this member's cluster settings, or, to run it alone, have it leave its cluster and start on another data dir",
            groups.display()
        )));
    }
    Ok(())
}

/// A first clustered start (no raft group has written a log here yet) on a data dir where
/// the messaging plane ran alone: a node's copy of a partition keeps the records it holds
/// at each sequence number, so the single node's records would be served as the
/// cluster's. Refused; `topics` is how many stream topics the data dir's catalog lists.
pub fn refuse_single_node_streams(data_dir: &Path, topics: usize) -> Result<(), ServerError> {
    let groups = boltq_io::store::logs_root(data_dir).join("cluster");
    let clustered_before = std::fs::read_dir(&groups).is_ok_and(|mut e| e.next().is_some());
    if topics > 0 && !clustered_before {
        return Err(ServerError(format!(
            "cluster.enabled: this data dir holds {topics} stream topic(s) of a messaging plane that ran as a single node, which a cluster member would serve as the cluster's records: start clustered on another data dir (carrying a single node's streams into a cluster is not built)"
        )));
    }
    Ok(())
}

/// Earlier processes' boot ids this node remembers: enough for every restart a sweep may
/// not have finished after (a sweep takes seconds once a leader is known).
pub const BOOTS_KEPT_MAX: usize = 64;

/// Picks this process's connection boot id (`plane::clustered_boot_id`: node `node_id`'s
/// tag, and 16 bits of `random` moved on until they differ from every earlier boot the node
/// remembers, whose connections its sweep ends), records it in `<data_dir>/cluster/boots`
/// (durably, before any connection is served), and returns it with the earlier ones, newest
/// last.
pub fn note_boot(
    data_dir: &Path,
    node_id: u64,
    random: u64,
) -> Result<(u64, Vec<u64>), ServerError> {
    let dir = data_dir.join("cluster");
    let path = dir.join("boots");
    let fail =
        |what: &str, e: std::io::Error| ServerError(format!("{what} {}: {e}", path.display()));
    std::fs::create_dir_all(&dir).map_err(|e| fail("create the directory of", e))?;
    let earlier = match std::fs::read_to_string(&path) {
        Ok(text) => {
            parse_boots(&text).map_err(|e| ServerError(format!("{}: {e}", path.display())))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(fail("read", e)),
    };
    // At most BOOTS_KEPT_MAX earlier boots, so one of the first BOOTS_KEPT_MAX + 1 steps
    // is free.
    let boot_id = (0..=BOOTS_KEPT_MAX as u64)
        .map(|step| clustered_boot_id(node_id, random.wrapping_add(step << 32)))
        .find(|id| !earlier.contains(id))
        .expect("more candidates than remembered boots");
    let mut kept: Vec<u64> = earlier.clone();
    kept.push(boot_id);
    let skip = kept.len().saturating_sub(BOOTS_KEPT_MAX);
    let text: String = kept[skip..].iter().map(|b| format!("{b:016x}\n")).collect();
    write_durably(&dir, &path, &text).map_err(|e| fail("write", e))?;
    Ok((boot_id, earlier))
}

fn parse_boots(text: &str) -> Result<Vec<u64>, String> {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            u64::from_str_radix(line.trim(), 16)
                .map_err(|e| format!("line {}: {line:?} is not a boot id: {e}", i + 1))
        })
        .collect()
}

impl ClusterPlan {
    /// Finds this node's members (`initial_directory`) and binds one raft listener per
    /// shard. Errors name the key.
    pub fn build(
        config: &Config,
        data_dir: &Path,
        shard_count: usize,
        earlier_boots: Vec<u64>,
    ) -> Result<ClusterPlan, ServerError> {
        let cl = &config.cluster;
        let name = node_name(config);
        check_name(&name).map_err(|e| ServerError(format!("cluster.node_id: {e}")))?;
        check_advertised(&cl.raft_addr)
            .map_err(|e| ServerError(format!("cluster.raft_addr: {e}")))?;
        let dir = data_dir.join("cluster");
        let directory = initial_directory(config, &name, &dir)?;
        let node_id = raft_id(&name);
        let joining = !directory.founders().contains(&node_id);
        let fresh = joining && directory.members().next().is_none();
        if joining && cl.seeds.is_empty() && directory.get(&name).is_none() {
            return Err(ServerError(
                "cluster.enabled: this node has no members to found a cluster with and none to join: list them in cluster.peers, set cluster.bootstrap on one node, or give the others cluster.seeds".into(),
            ));
        }
        let link_tls = match config.server.tls.enabled {
            false => None,
            true => Some(
                link_client_config(&config.server.tls)
                    .map_err(|e| ServerError(format!("server.tls (raft links): {e}")))?,
            ),
        };
        let base = resolve(&cl.raft_addr, "cluster.raft_addr")?;
        let mut listeners = Vec::with_capacity(shard_count);
        for shard in 0..shard_count {
            let addr = with_port_offset(base, shard)?;
            let l = super::bind_retrying(addr).map_err(|e| {
                ServerError(format!("cluster.raft_addr: shard {shard} on {addr}: {e}"))
            })?;
            log::info!("listening raft (shard {shard}) on {addr}");
            listeners.push(l);
        }
        Ok(ClusterPlan {
            node_id,
            name,
            raft_addr: cl.raft_addr.clone(),
            directory,
            joining,
            fresh,
            admitted: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!fresh)),
            listeners,
            snapshot_every_entries: cl.snapshot_threshold,
            election: ELECTION_TICKS,
            earlier_boots,
            dir,
            link_tls,
            shared: shared_settings(config, shard_count),
        })
    }

    /// Whether this node founds its cluster alone (it bootstrapped it): then what it held
    /// as a single node becomes its groups' founding state, which every member that joins
    /// later receives. With other founders there is no one founding state to agree on.
    pub fn founds_alone(&self) -> bool {
        !self.joining && self.directory.founders() == [self.node_id]
    }

    /// Who this node is (the members come from the directory as it changes).
    pub fn view(&self) -> ClusterView {
        ClusterView {
            node_id: self.node_id,
            name: self.name.clone(),
            raft_addr: self.raft_addr.clone(),
            members: vec![(self.node_id, self.name.clone(), self.raft_addr.clone())],
            clients: BTreeMap::new(),
        }
    }

    /// What shard `shard`'s raft node runs with: the groups of `slots`, linked to shard
    /// `shard` of every member.
    pub fn node_config(
        &self,
        shard: usize,
        slots: Vec<u16>,
        broker: BrokerConfig,
        streams: StreamSlotConfig,
        stream_hooks: Option<StreamHooks>,
        founding_states: BTreeMap<u16, Vec<u8>>,
    ) -> NodeConfig {
        NodeConfig {
            streams,
            stream_hooks,
            founding_states,
            node_id: self.node_id,
            peers: BTreeMap::new(),
            slots,
            tick_ms: TICK_MS,
            election: self.election,
            snapshot_every_entries: self.snapshot_every_entries,
            broker,
            joining: self.joining,
            balance_every_ticks: BALANCE_EVERY_TICKS,
            membership: Some(MembershipConfig {
                name: self.name.clone(),
                directory: self.directory.clone(),
                path: shard_directory_path(&self.dir, shard),
                port_offset: u16::try_from(shard).expect("validated: raft port + shard ≤ 65535"),
                admitted: std::sync::Arc::clone(&self.admitted),
            }),
            link_tls: self.link_tls.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// The settings whose values every member must share, as the links compare them: those
/// a replica's apply reads (the queue plane's limits and timeouts, the messaging state's
/// dedup and push settings) and those that decide where a command goes (shards,
/// partition counts). Named by their configuration keys, with the unit a value is in.
/// Not `messaging.stream.enabled`: a member may run with the plane off (its replicas keep
/// following the log; it fills its copy from a peer when the plane is back on).
pub fn shared_settings(config: &Config, shard_count: usize) -> SharedSettings {
    let b = super::broker_config(config);
    let s = stream_slot_config(&config.messaging);
    let m = &config.messaging;
    SharedSettings::new([
        ("server.shards", shard_count.to_string()),
        ("queue.ack_timeout_ns", b.ack_timeout_ns.to_string()),
        ("queue.capacity", b.capacity_per_queue.to_string()),
        (
            "queue.retry_backoff_base_ns",
            b.retry_backoff_base_ns.to_string(),
        ),
        (
            "queue.retry_backoff_max_ns",
            b.retry_backoff_max_ns.to_string(),
        ),
        (
            "queue.durable_backlog_bytes_max",
            b.durable_kept_bytes_max.to_string(),
        ),
        ("queue.queues_per_slot_max", b.queues_max.to_string()),
        ("queue.slot_bytes_max", b.slot_bytes_max.to_string()),
        ("queue.idle_queue_ttl_ns", b.idle_queue_ttl_ns.to_string()),
        (
            "messaging.stream.default_partitions",
            m.stream.default_partitions.to_string(),
        ),
        (
            "messaging.chat.conversation_partitions",
            m.chat.conversation_partitions.to_string(),
        ),
        (
            "messaging.chat.inbox_partitions",
            m.chat.inbox_partitions.to_string(),
        ),
        ("messaging.dedup.ttl_ns", s.dedup_ttl_ns.to_string()),
        (
            "messaging.dedup.entries_per_slot",
            s.dedup_entries_max.to_string(),
        ),
        ("messaging.push.enabled", s.anchor_push_cursors.to_string()),
    ])
}

/// Dedup entries each slot's messaging state keeps when `messaging.dedup.max_entries` is 0
/// (2,560,000 per node: every node holds every slot).
pub const DEDUP_ENTRIES_PER_SLOT_DEFAULT: usize = 10_000;

/// The messaging state's settings on every slot: the dedup window as configured, and
/// `messaging.dedup.max_entries` (a node-wide number) shared out over the slots.
pub fn stream_slot_config(m: &crate::config::MessagingConfig) -> StreamSlotConfig {
    let per_slot = match m.dedup.max_entries {
        0 => DEDUP_ENTRIES_PER_SLOT_DEFAULT,
        n => usize::try_from(n.div_ceil(u64::from(boltq_shards::SLOTS))).unwrap_or(usize::MAX),
    };
    StreamSlotConfig {
        dedup_ttl_ns: i64::try_from(m.dedup.ttl.as_nanos()).unwrap_or(i64::MAX),
        dedup_entries_max: per_slot,
        anchor_push_cursors: m.push.enabled,
    }
}

/// The client side of the raft links under `server.tls`: a peer's certificate must chain to
/// `server.tls.ca_file` (the system's CAs when it is unset) and name the IP address of the
/// peer's raft listener; this node presents its own certificate, which peers ask for when
/// they have a `ca_file` (mTLS), so it must then allow client authentication too.
fn link_client_config(
    tls: &crate::config::TlsConfig,
) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    if tls.ca_file.as_os_str().is_empty() {
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    } else {
        for cert in boltq_io::tls::read_certificates(&tls.ca_file, "CA")? {
            roots.add(cert).map_err(|e| {
                format!(
                    "CA file {}: unusable certificate: {e}",
                    tls.ca_file.display()
                )
            })?;
        }
    }
    if roots.is_empty() {
        return Err("no CA to check peers' certificates with: the system store is empty and server.tls.ca_file is unset".into());
    }
    let chain = boltq_io::tls::read_certificates(&tls.cert_file, "certificate")?;
    let key = boltq_io::tls::read_private_key(&tls.key_file)?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("certificate {}: {e}", tls.cert_file.display()))?;
    Ok(std::sync::Arc::new(config))
}

/// `cluster.node_id`, or the hostname (v1), or `node-<pid>`.
pub(crate) fn node_name(config: &Config) -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    config.node_id(hostname.trim(), std::process::id())
}

/// Where this node's clients connect, as the other members tell them in NOT_LEADER:
/// `server.host`, or the raft address's host when that is unspecified (0.0.0.0), with the
/// TCP and HTTP ports.
pub fn client_addrs(config: &Config) -> (String, String) {
    let bind = config
        .server
        .host
        .trim_start_matches('[')
        .trim_end_matches(']');
    let unspecified = bind.is_empty()
        || bind
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
    let host = if unspecified {
        split_host_port(&config.cluster.raft_addr)
            .map(|(h, _)| h.to_string())
            .unwrap_or_default()
    } else if bind.contains(':') {
        format!("[{bind}]")
    } else {
        bind.to_string()
    };
    (
        format!("{host}:{}", config.server.tcp_port),
        format!("{host}:{}", config.http_port()),
    )
}

fn shard_directory_path(dir: &Path, shard: usize) -> PathBuf {
    dir.join(format!("directory.{shard}"))
}

/// What the shards saved (merged: each shard keeps its own copy, and any may be the newest),
/// else the founding members: this node and `cluster.peers`, or this node alone when it
/// bootstraps. Empty for a node that is to join through seeds.
fn initial_directory(config: &Config, name: &str, dir: &Path) -> Result<Directory, ServerError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| ServerError(format!("create {}: {e}", dir.display())))?;
    // Every shard's copy, whatever shard count wrote them: any may be the newest.
    let mut saved = Directory::default();
    let mut any = false;
    let entries =
        std::fs::read_dir(dir).map_err(|e| ServerError(format!("read {}: {e}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(|e| ServerError(format!("read {}: {e}", dir.display())))?
            .path();
        let shard_copy = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("directory."))
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
        if !shard_copy {
            continue;
        }
        if let Some(d) = Directory::load(&path).map_err(ServerError)? {
            saved.merge(d.members().cloned());
            any = true;
        }
    }
    if any {
        return Ok(saved);
    }
    let cl = &config.cluster;
    let (tcp_addr, http_addr) = client_addrs(config);
    let me = Member {
        name: name.to_string(),
        addr: cl.raft_addr.clone(),
        role: Role::Voter,
        version: 0,
        tcp_addr,
        http_addr,
    };
    if !cl.peers.is_empty() {
        let peers = cl.peers.iter().map(|p| {
            let (peer, addr) = split_peer(p).expect("validated: node_id@host:port");
            Member {
                name: peer.to_string(),
                addr: addr.to_string(),
                role: Role::Voter,
                version: 0,
                tcp_addr: String::new(),
                http_addr: String::new(),
            }
        });
        let founders = Directory::new(peers.chain([me]));
        let ids: std::collections::BTreeSet<u64> = founders.members().map(Member::id).collect();
        if ids.len() != founders.members().count() {
            return Err(ServerError(
                "cluster.peers: two members' node ids hash to the same raft id; rename one".into(),
            ));
        }
        return Ok(founders);
    }
    if config.is_bootstrap_node(name) {
        log::info!("bootstrapping a new cluster with this node ({name}) as its only member");
        return Ok(Directory::new([me]));
    }
    Ok(Directory::default())
}

fn resolve(addr: &str, key: &str) -> Result<SocketAddr, ServerError> {
    let (host, port) = split_host_port(addr).expect("validated: host:port");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .map_err(|e| ServerError(format!("{key}: cannot resolve {addr}: {e}")))?
        .next()
        .ok_or_else(|| ServerError(format!("{key}: no address for {addr}")))
}

/// `addr` with its port + `shard` (shard k's raft listener).
fn with_port_offset(mut addr: SocketAddr, shard: usize) -> Result<SocketAddr, ServerError> {
    let port = u16::try_from(usize::from(addr.port()) + shard)
        .map_err(|_| ServerError(format!("raft port of {addr} + shard {shard} is past 65535")))?;
    addr.set_port(port);
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each setting a replica's apply or routing reads, changed alone in the
    /// configuration, makes the links name exactly that setting; one they do not read
    /// (here `queue.max_retry`, stamped into each publish by its leader) names none.
    #[test]
    fn each_shared_setting_follows_its_configuration_key() {
        let base = Config::default();
        let ours = shared_settings(&base, 2);
        type Change = fn(&mut Config);
        let cases: [(Change, Option<&str>); 16] = [
            (|c| c.queue.ack_timeout *= 2, Some("queue.ack_timeout_ns")),
            (|c| c.queue.capacity += 1, Some("queue.capacity")),
            (
                |c| c.queue.retry_backoff_base_ms += 1,
                Some("queue.retry_backoff_base_ns"),
            ),
            (
                |c| c.queue.retry_backoff_max_ms += 1,
                Some("queue.retry_backoff_max_ns"),
            ),
            (
                |c| c.queue.durable_backlog_bytes_max += 1,
                Some("queue.durable_backlog_bytes_max"),
            ),
            (
                |c| c.queue.queues_per_slot_max += 1,
                Some("queue.queues_per_slot_max"),
            ),
            (
                |c| c.queue.slot_bytes_max += 1,
                Some("queue.slot_bytes_max"),
            ),
            (
                |c| c.queue.idle_queue_ttl *= 2,
                Some("queue.idle_queue_ttl_ns"),
            ),
            (
                |c| c.messaging.stream.default_partitions += 1,
                Some("messaging.stream.default_partitions"),
            ),
            (
                |c| c.messaging.chat.conversation_partitions += 1,
                Some("messaging.chat.conversation_partitions"),
            ),
            (
                |c| c.messaging.chat.inbox_partitions += 1,
                Some("messaging.chat.inbox_partitions"),
            ),
            (
                |c| c.messaging.dedup.ttl *= 2,
                Some("messaging.dedup.ttl_ns"),
            ),
            (
                |c| c.messaging.dedup.max_entries = 1 << 30,
                Some("messaging.dedup.entries_per_slot"),
            ),
            (
                |c| c.messaging.push.enabled = !c.messaging.push.enabled,
                Some("messaging.push.enabled"),
            ),
            (
                |c| c.messaging.stream.enabled = !c.messaging.stream.enabled,
                None,
            ),
            (|c| c.queue.max_retry += 1, None),
        ];
        for (change, key) in cases {
            let mut config = base.clone();
            change(&mut config);
            let named: Vec<String> = ours
                .differences(&shared_settings(&config, 2))
                .into_iter()
                .map(|d| d.split(" = ").next().unwrap_or_default().to_string())
                .collect();
            assert_eq!(named, key.into_iter().collect::<Vec<_>>());
        }
        let shards = ours.differences(&shared_settings(&base, 4));
        assert_eq!(shards, ["server.shards = 2 here, 4 there"]);
    }

    #[test]
    fn single_node_streams_are_refused_on_a_first_clustered_start_only() {
        let dir = boltq_io::testutil::TempDir::new("streams-refused");
        let err = refuse_single_node_streams(dir.path(), 2).unwrap_err();
        assert!(err.0.contains("2 stream topic(s)"), "{}", err.0);
        refuse_single_node_streams(dir.path(), 0).expect("no streams: nothing to hide");
        // Once its raft groups wrote logs, its topics are the cluster's.
        let groups = boltq_io::store::logs_root(dir.path())
            .join("cluster")
            .join("000");
        std::fs::create_dir_all(&groups).unwrap();
        refuse_single_node_streams(dir.path(), 2).expect("a member's own topics");
    }

    #[test]
    fn boots_are_remembered_across_starts_up_to_the_limit() {
        let dir = boltq_io::testutil::TempDir::new("boots");
        let node = raft_id("n1");
        let (first, earlier) = note_boot(dir.path(), node, 7 << 32).unwrap();
        assert_eq!(earlier, Vec::<u64>::new());
        let (second, earlier) = note_boot(dir.path(), node, 9 << 32).unwrap();
        assert_eq!(earlier, vec![first]);
        assert_ne!(first, second);
        for i in 0..BOOTS_KEPT_MAX as u64 {
            note_boot(dir.path(), node, (100 + i) << 32).unwrap();
        }
        let (_, kept) = note_boot(dir.path(), node, 1).unwrap();
        assert_eq!(kept.len(), BOOTS_KEPT_MAX);
        assert_eq!(
            kept.last(),
            Some(&clustered_boot_id(
                node,
                (100 + BOOTS_KEPT_MAX as u64 - 1) << 32
            ))
        );
        std::fs::write(dir.path().join("cluster/boots"), "zz\n").unwrap();
        let refused = note_boot(dir.path(), node, 1).unwrap_err().0;
        assert!(refused.contains("line 1"), "{refused}");
    }

    /// A boot id carries its node's tag, and a new one never repeats a remembered boot of
    /// the node (the sweep of earlier boots would end the new process's connections), even
    /// when the process's randomness repeats.
    #[test]
    fn a_boot_id_carries_the_node_tag_and_never_repeats_an_earlier_boot() {
        use crate::queue::server::plane::{conn_node_tag, node_tag};
        let dir = boltq_io::testutil::TempDir::new("boots-tagged");
        let node = raft_id("boltq-2");
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..=BOOTS_KEPT_MAX {
            let (boot, earlier) = note_boot(dir.path(), node, 42 << 32).unwrap();
            assert!(
                !earlier.contains(&boot),
                "boot {boot:x} repeats an earlier one"
            );
            assert_eq!(conn_node_tag(boot | 17), node_tag(node));
            assert_eq!(
                boot & u64::from(u32::MAX),
                0,
                "the low half counts connections"
            );
            seen.insert(boot);
        }
        assert_eq!(seen.len(), BOOTS_KEPT_MAX + 1);
    }

    #[test]
    fn shard_k_uses_the_raft_port_plus_k() {
        let base: SocketAddr = "127.0.0.1:9100".parse().unwrap();
        assert_eq!(with_port_offset(base, 3).unwrap().port(), 9103);
        let top: SocketAddr = "127.0.0.1:65535".parse().unwrap();
        assert!(with_port_offset(top, 1).is_err());
    }
}
