//! Three nodes on loopback, each with its own store, links and listener, on one executor:
//! they elect leaders, commit publishes, lose the leader to a crash (its tasks stop and its
//! store halts, as kill -9 leaves them), elect another, and take the crashed node back,
//! which catches up from its raft log and the leader.

use super::*;
use crate::cluster::membership::MemberChange;
use crate::cluster::tests::support::{open_store, run, store_config};
use crate::messaging::cursor::{Commit, CursorKey};
use crate::queue::broker::ConsumerRef;
use crate::queue::message::{IdGenerator, Message, MessageId};
use crate::queue::server::replicated::{
    COMMANDS_REFUSED_METRIC, FOLLOWER_LAG_METRIC, SNAPSHOTS_SENT_METRIC,
};
use boltq_io::listener::SharedListener;
use boltq_io::testutil::TempDir;
use boltq_io::StoreConfig;
use bytes::Bytes;

const SLOTS: [u16; 2] = [0, 1];
const TICK_MS: u64 = 50;
const QUEUE: &str = "jobs";

fn message(id: MessageId) -> Message {
    let mut msg = crate::queue::server::wal::tests::message(QUEUE);
    msg.id = id;
    msg.payload = Bytes::from(format!("\"{id}\""));
    msg
}

struct Member {
    id: u64,
    joining: bool,
    addr: SocketAddr,
    store_config: StoreConfig,
    _dir: TempDir,
    running: Option<(Running, Rc<Store>, SharedListener)>,
}

impl Member {
    async fn start(&mut self, addrs: &BTreeMap<u64, SocketAddr>) {
        let store = open_store(&self.store_config).await;
        let shared = SharedListener::bind(self.addr).unwrap();
        let listener = Listener::for_shard(&shared, None).unwrap();
        let cfg = NodeConfig {
            node_id: self.id,
            peers: addrs
                .iter()
                .filter(|(id, _)| **id != self.id)
                .map(|(id, a)| (*id, *a))
                .collect(),
            slots: SLOTS.to_vec(),
            tick_ms: TICK_MS,
            election: ElectionTicks { min: 10, max: 20 },
            snapshot_every_entries: 25,
            broker: BrokerConfig::default(),
            joining: self.joining,
            balance_every_ticks: 0,
            membership: None,
            link_tls: None,
            streams: Default::default(),
            shared: Default::default(),
            stream_hooks: None,
            founding_states: BTreeMap::new(),
        };
        let running = Node::start(cfg, Rc::clone(&store), listener).await.unwrap();
        self.running = Some((running, store, shared));
    }

    /// As kill -9: the loop, links and listener stop at once; the store writes nothing more.
    async fn crash(&mut self) {
        let (running, store, shared) = self.running.take().expect("running");
        drop(running);
        drop(shared);
        store.halt().await;
    }

    fn node(&self) -> Option<&Rc<Node>> {
        self.running.as_ref().map(|(r, _, _)| &r.node)
    }
}

/// The node every running member agrees leads `slot`, once they do.
async fn agreed_leader(members: &[Member], slot: u16, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        // Only members of the group have a view (a joiner not yet added has none).
        let views: Vec<Option<u64>> = members
            .iter()
            .filter_map(|m| m.node())
            .filter(|n| {
                let conf = n.membership(slot).unwrap();
                conf.voters.contains(&n.id()) || conf.learners.contains(&n.id())
            })
            .map(|n| n.leader(slot))
            .collect();
        if let Some(Some(leader)) = views.first() {
            let leads = members
                .iter()
                .any(|m| m.id == *leader && m.node().is_some());
            if leads && views.iter().all(|v| v == &Some(*leader)) {
                return *leader;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader of slot {slot}: {views:?}"
        );
        boltq_shards::sleep(Duration::from_millis(10)).await;
    }
}

/// Publishes a new message through `node` as a v1 client would: whichever node leads,
/// and once more (same id) when the answer is "maybe applied" — a leader change on a
/// loaded machine must not fail the test, only a lost or refused publish may.
async fn publish(node: &Node, slot: u16, ids: &mut IdGenerator) -> MessageId {
    let id = ids.next(0);
    publish_as_a_client(node, slot, id).await;
    id
}

async fn publish_as_a_client(node: &Node, slot: u16, id: MessageId) {
    let cmd = Command::Publish { msg: message(id) };
    for attempt in 1..=5 {
        let asked = Instant::now();
        match node.submit(slot, &cmd, Duration::from_secs(10)).await {
            Ok(Outcome::Published) => return,
            // An earlier attempt had been applied after all.
            Ok(Outcome::Error(e)) if attempt > 1 && e.contains("already exists") => return,
            Err(ProposeError::NotApplied(NotApplied::Unknown)) => {
                // Known within about an election, not at the timeout.
                assert!(
                    asked.elapsed() < Duration::from_secs(5),
                    "{:?}",
                    asked.elapsed()
                );
            }
            other => panic!("publish {id} through node {}: {other:?}", node.id()),
        }
    }
    panic!("publish {id}: the outcome stayed unknown after 5 attempts");
}

fn member(id: u64, joining: bool) -> Member {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    let dir = TempDir::new(&format!("cluster-node-{id}"));
    Member {
        id,
        joining,
        addr,
        store_config: store_config(dir.path(), 64 * 1024),
        _dir: dir,
        running: None,
    }
}

/// Proposes a membership change on whichever member leads `slot`, again while the
/// leadership moves (a loaded machine may hold an election at any time).
async fn change_membership(members: &[Member], slot: u16, changes: &[MemberChange]) {
    for _ in 0..20 {
        let leader = agreed_leader(members, slot, Duration::from_secs(10)).await;
        let node = members[(leader - 1) as usize].node().unwrap();
        match node
            .change_membership(slot, changes, Duration::from_secs(10))
            .await
        {
            Ok(_) => return,
            Err(ProposeError::NotLeader { .. } | ProposeError::MembershipPending) => {
                boltq_shards::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("membership change {changes:?}: {e:?}"),
        }
    }
    panic!("membership change {changes:?}: no leader took it");
}

/// Until `f` holds, for at most `within`.
async fn until(what: &str, within: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        boltq_shards::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_joining_node_becomes_a_learner_then_replaces_a_voter_and_holds_everything() {
    run("cluster-node-test", || async {
        let mut members: Vec<Member> = (1..=3).map(|id| member(id, false)).collect();
        let mut addrs: BTreeMap<u64, SocketAddr> = members.iter().map(|m| (m.id, m.addr)).collect();
        for m in members.iter_mut() {
            m.start(&addrs).await;
        }
        let mut ids = IdGenerator::new([7; 7]);
        let mut published = Vec::new();
        let leader_id = agreed_leader(&members, 0, Duration::from_secs(10)).await;
        let leader = members[(leader_id - 1) as usize].node().unwrap().clone();
        let registry = boltq_shards::metrics::Registry::new(64);
        leader.set_metrics(&registry);
        for _ in 0..40 {
            published.push(publish(&leader, 0, &mut ids).await);
        }
        // Node 4 boots empty and links up; the founders learn its address.
        let mut joiner = member(4, true);
        addrs.insert(4, joiner.addr);
        joiner.start(&addrs).await;
        for m in &members {
            m.node().unwrap().add_peer(4, joiner.addr);
        }
        members.push(joiner);
        let timeout = Duration::from_secs(10);
        change_membership(&members, 0, &[MemberChange::AddLearner(4)]).await;
        let learner = leader.membership(0).unwrap();
        assert_eq!(
            (learner.voters.len(), learner.learners.clone()),
            (3, vec![4])
        );
        let node4 = members[3].node().unwrap().clone();
        let held = |node: &Node, ids: &[MessageId]| {
            node.with_broker(0, |b| ids.iter().filter(|id| b.holds(id)).count())
                .unwrap()
        };
        until("the learner to catch up", timeout, || {
            held(&node4, &published) == published.len()
        })
        .await;
        // It started from the leader's snapshot (the founders' logs begin at one).
        let sent = registry.snapshot().counter(SNAPSHOTS_SENT_METRIC, &[]);
        assert!(sent >= Some(1), "snapshots sent by the leader: {sent:?}");
        // Swap a follower founder out for node 4 (joint consensus, left on a tick).
        let replaced = (1..=3).find(|id| *id != leader_id).unwrap();
        change_membership(
            &members,
            0,
            &[MemberChange::AddVoter(4), MemberChange::Remove(replaced)],
        )
        .await;
        let mut want: Vec<u64> = (1..=4).filter(|id| *id != replaced).collect();
        want.sort_unstable();
        until(
            "every member to apply the final membership",
            timeout,
            || {
                members.iter().filter(|m| m.id != replaced).all(|m| {
                    let conf = m.node().unwrap().membership(0).unwrap();
                    let mut voters = conf.voters.clone();
                    voters.sort_unstable();
                    voters == want && conf.voters_outgoing.is_empty() && conf.learners.is_empty()
                })
            },
        )
        .await;
        // The replaced node can go: the group commits with 4 in its place.
        members[(replaced - 1) as usize].crash().await;
        for _ in 0..20 {
            published.push(publish(&leader, 0, &mut ids).await);
        }
        until("node 4 to hold every publish", timeout, || {
            held(&node4, &published) == published.len()
        })
        .await;
    });
}

#[test]
fn three_nodes_elect_commit_fail_over_and_take_a_crashed_node_back() {
    run("cluster-node-test", || async {
        // Ports first, so every node knows every address.
        let mut members: Vec<Member> = (1..=3).map(|id| member(id, false)).collect();
        let addrs: BTreeMap<u64, SocketAddr> = members.iter().map(|m| (m.id, m.addr)).collect();
        for m in members.iter_mut() {
            m.start(&addrs).await;
        }
        let mut ids = IdGenerator::new([9; 7]);
        let mut published = Vec::new();
        let first = agreed_leader(&members, 0, Duration::from_secs(10)).await;
        let leader = members[(first - 1) as usize].node().unwrap().clone();
        for _ in 0..60 {
            published.push(publish(&leader, 0, &mut ids).await);
        }
        // A follower refuses and names the leader.
        let follower = members
            .iter()
            .find(|m| m.id != first)
            .unwrap()
            .node()
            .unwrap();
        assert_eq!(
            follower
                .propose(
                    0,
                    &Command::Publish {
                        msg: message(ids.next(0))
                    },
                    Duration::from_secs(1)
                )
                .await,
            Err(ProposeError::NotLeader {
                leader: Some(first)
            })
        );
        // A follower forwards to the leader and relays the outcome: publish, then consume.
        let forwarded = ids.next(0);
        let outcome = follower
            .submit(
                0,
                &Command::Publish {
                    msg: message(forwarded),
                },
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(outcome, Ok(Outcome::Published));
        published.push(forwarded);
        assert!(leader.with_broker(0, |b| b.holds(&forwarded)).unwrap());
        let consume = Command::Consume {
            queue: QUEUE.to_string(),
            consumer: ConsumerRef {
                shard: 0,
                conn: 1 << 40,
            },
            max: 2,
            now_ns: 2,
        };
        match follower.submit(0, &consume, Duration::from_secs(5)).await {
            Ok(Outcome::Delivered(messages)) => assert_eq!(messages.len(), 2),
            other => panic!("a forwarded consume gave {other:?}"),
        }
        drop(leader);

        members[(first - 1) as usize].crash().await;
        let crashed_at = Instant::now();
        // Submitted to a survivor during the election, as a client would: an answer comes
        // within about an election, not at the timeout; a command forwarded to the dead
        // leader is "maybe applied", and the client sends it again (same id: a duplicate
        // publish is not applied twice).
        let survivor = members
            .iter()
            .find(|m| m.node().is_some())
            .unwrap()
            .node()
            .unwrap();
        let during = ids.next(0);
        publish_as_a_client(survivor, 0, during).await;
        published.push(during);
        let second = agreed_leader(&members, 0, Duration::from_secs(10)).await;
        let failover = crashed_at.elapsed();
        assert_ne!(second, first);
        let leader = members[(second - 1) as usize].node().unwrap().clone();
        let registry = boltq_shards::metrics::Registry::new(64);
        leader.set_metrics(&registry);
        for _ in 0..60 {
            published.push(publish(&leader, 0, &mut ids).await);
        }
        let lag = || {
            registry
                .snapshot()
                .gauge(FOLLOWER_LAG_METRIC, &[])
                .unwrap_or(0)
        };
        assert!(
            lag() >= 60,
            "the crashed follower lacks the 60 publishes since: lag {}",
            lag()
        );
        let held = |node: &Node| {
            node.with_broker(0, |b| published.iter().filter(|id| b.holds(id)).count())
                .unwrap()
        };
        assert_eq!(
            held(&leader),
            published.len(),
            "the new leader holds every publish"
        );

        // The crashed node comes back on its store and port and catches up.
        members[(first - 1) as usize].start(&addrs).await;
        let back = members[(first - 1) as usize].node().unwrap().clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        while held(&back) < published.len() {
            assert!(
                Instant::now() < deadline,
                "node {first} back holds {} of {}",
                held(&back),
                published.len()
            );
            boltq_shards::sleep(Duration::from_millis(20)).await;
        }
        // Caught up: no follower of the leader's groups lacks anything.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lag() > 0 {
            assert!(Instant::now() < deadline, "lag stays at {}", lag());
            boltq_shards::sleep(Duration::from_millis(20)).await;
        }
        // Slot 1 elected a leader too, independently of slot 0.
        agreed_leader(&members, 1, Duration::from_secs(10)).await;
        println!("failover of slot 0 took {failover:?} (tick {TICK_MS} ms)");
    });
}

/// What one node's stream sink received, in order, across its restarts.
type Sunk = Rc<RefCell<Vec<(u16, crate::messaging::slot::Appended)>>>;

fn sink_into(node: &Node, sunk: &Sunk) {
    let sunk = Rc::clone(sunk);
    node.set_stream_sink(Box::new(move |records| {
        sunk.borrow_mut().extend(records);
        Box::pin(async { Ok(()) })
    }));
}

fn send(n: u64) -> StreamCommand {
    let topic = "chat.dm.alice:bob".to_string();
    StreamCommand::Append(crate::messaging::slot::Append {
        dedup: Some(crate::messaging::slot::DedupClaim::Send(
            crate::messaging::dedup::DedupKey::new("alice", &topic, &format!("c{n}")).unwrap(),
        )),
        topic,
        partition: 0,
        now_ns: 1_000 + n as i64,
        key: Bytes::new(),
        headers: vec![],
        payload: Bytes::from(format!("send {n}")),
        fanout: Vec::new(),
    })
}

/// Sends as a device would: again with the same dedup id while the outcome is unknown.
async fn send_as_a_device(node: &Node, n: u64) -> (crate::messaging::dedup::Coordinates, bool) {
    for _ in 0..5 {
        match node
            .submit_stream(0, &send(n), Duration::from_secs(10))
            .await
        {
            Ok(StreamOutcome::Appended { coords, duplicate }) => return (coords, duplicate),
            Err(ProposeError::NotApplied(_) | ProposeError::TimedOut) => {}
            other => panic!("send {n} through node {}: {other:?}", node.id()),
        }
    }
    panic!("send {n}: the outcome stayed unknown after 5 attempts");
}

#[test]
fn stream_sends_through_any_node_are_numbered_once_by_the_leader_and_reach_every_node() {
    run("cluster-node-test", || async {
        let mut members: Vec<Member> = (1..=3).map(|id| member(id, false)).collect();
        let addrs: BTreeMap<u64, SocketAddr> = members.iter().map(|m| (m.id, m.addr)).collect();
        let sunk: Vec<Sunk> = (0..3).map(|_| Sunk::default()).collect();
        for (m, s) in members.iter_mut().zip(&sunk) {
            m.start(&addrs).await;
            sink_into(m.node().unwrap(), s);
        }
        let first = agreed_leader(&members, 0, Duration::from_secs(10)).await;
        let follower = members
            .iter()
            .find(|m| m.id != first)
            .unwrap()
            .node()
            .unwrap()
            .clone();
        // Through a follower: forwarded, numbered by the leader in log order.
        let mut coords = Vec::new();
        for n in 1..=20 {
            let (c, duplicate) = send_as_a_device(&follower, n).await;
            assert!(!duplicate, "send {n}");
            coords.push(c);
        }
        let seqs: Vec<u64> = coords.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
        // A cursor commit through the follower, read back from every replica.
        let key = CursorKey::for_device("chat.dm.alice:bob", 0, "bob", "phone").unwrap();
        let commit = StreamCommand::Commit {
            key: key.clone(),
            seq: 11,
        };
        let committed = follower
            .submit_stream(0, &commit, Duration::from_secs(10))
            .await;
        assert_eq!(
            committed,
            Ok(StreamOutcome::Committed(Commit::Stored {
                seq: 11,
                clamped: false
            }))
        );
        let timeout = Duration::from_secs(10);
        until("every replica to hold the cursor", timeout, || {
            members.iter().all(|m| {
                m.node().unwrap().with_streams(0, |s| s.cursors().get(&key)) == Some(Some(11))
            })
        })
        .await;

        // The leader dies; a device retries send 5 (its reply was lost) and goes on.
        members[(first - 1) as usize].crash().await;
        let survivor = members
            .iter()
            .find(|m| m.node().is_some())
            .unwrap()
            .node()
            .unwrap()
            .clone();
        let (again, duplicate) = send_as_a_device(&survivor, 5).await;
        assert!(duplicate, "a retried send is answered from the dedup claim");
        assert_eq!(again, coords[4], "with the first copy's coordinates");
        let (next, duplicate) = send_as_a_device(&survivor, 21).await;
        assert!(!duplicate);
        assert_eq!(next.seq, 21);

        // Every survivor's sink got records 1..=21 in order, each with its send's payload.
        for m in members.iter().filter(|m| m.node().is_some()) {
            let got = &sunk[(m.id - 1) as usize];
            until("the survivor's sink to take record 21", timeout, || {
                got.borrow().len() >= 21
            })
            .await;
            let got = got.borrow();
            let records: Vec<(u64, Bytes)> = got
                .iter()
                .map(|(slot, a)| {
                    assert_eq!(
                        (*slot, a.topic.as_str(), a.partition),
                        (0, "chat.dm.alice:bob", 0)
                    );
                    (a.record.seq, a.record.payload.clone())
                })
                .collect();
            let want: Vec<(u64, Bytes)> = (1..=21)
                .map(|n| (n, Bytes::from(format!("send {n}"))))
                .collect();
            assert_eq!(records, want, "node {}", m.id);
        }
    });
}

/// Issue 15: a command of either plane that gets no outcome is counted by why
/// (`COMMANDS_REFUSED_METRIC`), so the refusals clients saw during a failover show. A node
/// whose two peers never started has no leader: its publish and its send are refused as
/// `not_leader`, after waiting out their timeout for one.
#[test]
fn commands_refused_for_want_of_a_leader_are_counted_by_reason() {
    run("cluster-node-refused", || async {
        let mut members: Vec<Member> = (1..=3).map(|id| member(id, false)).collect();
        let addrs: BTreeMap<u64, SocketAddr> = members.iter().map(|m| (m.id, m.addr)).collect();
        members[0].start(&addrs).await;
        let alone = members[0].node().unwrap().clone();
        let registry = boltq_shards::metrics::Registry::new(64);
        alone.set_metrics(&registry);
        let refused = |reason: &str| {
            registry
                .snapshot()
                .counter(COMMANDS_REFUSED_METRIC, &[("reason", reason)])
        };
        assert_eq!(refused("not_leader"), Some(0));
        let publish = Command::Publish {
            msg: message(IdGenerator::new([3; 7]).next(0)),
        };
        let wait = Duration::from_millis(300);
        let outcome = alone.submit(0, &publish, wait).await;
        assert!(
            matches!(outcome, Err(ProposeError::NotLeader { leader: None })),
            "{outcome:?}"
        );
        let sent = alone.submit_stream(1, &send(1), wait).await;
        assert!(
            matches!(sent, Err(ProposeError::NotLeader { leader: None })),
            "{sent:?}"
        );
        assert_eq!(refused("not_leader"), Some(2));
        assert_eq!(refused("timed_out"), Some(0));
    });
}
