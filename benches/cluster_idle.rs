//! What replication costs while nothing happens: three nodes on loopback in one process
//! (one executor, each node with its own store and links), every node hosting `SLOTS`
//! groups with the server's 100 ms tick, measured for `WINDOW_S` seconds once every group
//! has a leader. Reports the CPU the process used (user + system, % of one core, for all
//! three nodes together) and the batches the links carried per second.
//!
//! `cargo bench --bench cluster_idle [slots]` (default 256, the server's slot count)
//!
//! Not a timing harness case: one run, one line. Idle cost is what decides whether
//! heartbeats must be coalesced per node pair (design §9).

use boltq::cluster::group::ELECTION_TICKS;
use boltq::cluster::node::{Node, NodeConfig, Running};
use boltq::queue::broker::BrokerConfig;
use boltq_io::listener::{Listener, SharedListener};
use boltq_io::testutil::TempDir;
use boltq_io::{Store, StoreConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

const TICK_MS: u64 = 100;
const WINDOW_S: u64 = 10;

/// CPU seconds (user + system) this process has used, from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

async fn start(
    id: u64,
    addrs: &BTreeMap<u64, SocketAddr>,
    slots: &[u16],
    dir: &TempDir,
) -> (Running, Rc<Store>, SharedListener) {
    let c = StoreConfig::new(dir.path());
    boltq_io::probe::warm_iopoll(&c.data_dir).await.unwrap();
    boltq_io::recovery::recover(&c.data_dir, &c.log)
        .await
        .unwrap();
    let store = Store::open(c, 0).await.unwrap();
    let shared = SharedListener::bind(addrs[&id]).unwrap();
    let listener = Listener::for_shard(&shared, None).unwrap();
    let cfg = NodeConfig {
        node_id: id,
        peers: addrs
            .iter()
            .filter(|(p, _)| **p != id)
            .map(|(p, a)| (*p, *a))
            .collect(),
        slots: slots.to_vec(),
        tick_ms: TICK_MS,
        election: ELECTION_TICKS,
        snapshot_every_entries: 8192,
        broker: BrokerConfig::default(),
        joining: false,
        balance_every_ticks: 0,
        membership: None,
        link_tls: None,
        streams: Default::default(),
        shared: Default::default(),
        stream_hooks: None,
        founding_states: Default::default(),
    };
    let running = Node::start(cfg, Rc::clone(&store), listener).await.unwrap();
    (running, store, shared)
}

fn main() {
    let slots: u16 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|a| a.parse().expect("slots: a number"))
        .unwrap_or(256);
    let slots: Vec<u16> = (0..slots).collect();
    boltq_shards::block_on("cluster-idle", move || {
        Box::pin(async move {
            let dirs: Vec<TempDir> = (1..=3).map(|i| TempDir::new(&format!("idle-{i}"))).collect();
            let addrs: BTreeMap<u64, SocketAddr> = (1..=3)
                .map(|id| {
                    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                    (id, probe.local_addr().unwrap())
                })
                .collect();
            let mut nodes = Vec::new();
            for id in 1..=3u64 {
                nodes.push(start(id, &addrs, &slots, &dirs[(id - 1) as usize]).await);
            }
            let started = Instant::now();
            loop {
                let led = slots
                    .iter()
                    .all(|s| nodes.iter().any(|(r, _, _)| r.node.leader(*s) == Some(r.node.id())));
                if led {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(60), "no leaders in 60 s");
                boltq_shards::sleep(Duration::from_millis(50)).await;
            }
            let elected = started.elapsed();
            let sent = || -> u64 {
                nodes
                    .iter()
                    .flat_map(|(r, _, _)| (1..=3).filter_map(|to| r.node.link_stats(to)))
                    .map(|s| s.batches_sent)
                    .sum()
            };
            let sent_before = sent();
            let cpu_before = cpu_seconds();
            let window = Instant::now();
            boltq_shards::sleep(Duration::from_secs(WINDOW_S)).await;
            let cpu = cpu_seconds() - cpu_before;
            let wall = window.elapsed().as_secs_f64();
            let batches_per_s = (sent() - sent_before) as f64 / wall;
            let leaders: Vec<usize> = nodes
                .iter()
                .map(|(r, _, _)| slots.iter().filter(|s| r.node.leader(**s) == Some(r.node.id())).count())
                .collect();
            println!(
                "cluster idle: 3 nodes x {} slots, tick {TICK_MS} ms: every slot led after {:.2} s \
                 (leaders per node {leaders:?}); CPU {:.1} % of one core for all three over {:.1} s; \
                 {batches_per_s:.0} batches/s on all links",
                slots.len(),
                elected.as_secs_f64(),
                100.0 * cpu / wall,
                wall
            );
            drop(nodes);
            drop(dirs);
        })
    })
    .unwrap();
}
