//! Quiescent groups (`quiesce.rs`) on three real hosts wired in memory, without faults
//! except the one each test names: idle groups stop exchanging raft messages, and a
//! proposal, a dead leader or a cut-off leader wakes them as Raft needs; a round's
//! proposals travel as one append per follower (`coalesce.rs`).

use crate::cluster::group::ElectionTicks;
use crate::cluster::host::Host;
use crate::cluster::image_log::Recovered;
use crate::cluster::quiesce::{LEADER_PATIENCE_TICKS_MAX, LIVENESS_TICKS_MAX};
use crate::cluster::replica::{ProposalId, RestoreJob};
use crate::messaging::slot::StreamSlotConfig;
use crate::queue::broker::{BrokerConfig, Command};
use crate::queue::message::{IdGenerator, Message};
use std::collections::{BTreeMap, BTreeSet};

const SLOTS: [u16; 4] = [0, 1, 2, 3];
const NODES: [u64; 3] = [1, 2, 3];
/// Message exchanges within one tick before the test calls the cluster stuck.
const EXCHANGES_PER_TICK_MAX: usize = 64;

/// One batch that crossed: who sent it to whom, and how many raft messages it held (0: a
/// keepalive).
#[derive(Debug)]
struct Sent {
    from: u64,
    to: u64,
    messages: usize,
}

struct Net {
    hosts: BTreeMap<u64, Host>,
    /// Stopped: neither ticks nor sends nor receives.
    down: BTreeSet<u64>,
    /// Cut off: runs, but nothing crosses between it and the others.
    isolated: BTreeSet<u64>,
    /// (from, to): nothing crosses from one to the other (the other way still does).
    cut: BTreeSet<(u64, u64)>,
    /// (node, slot, proposal) of every proposal applied, as its proposer was told.
    applied: Vec<(u64, u16, ProposalId)>,
    /// When set, snapshots from a leader stay undecoded here (as behind a slow blocking
    /// pool) until `hand_back_restores`; else each is decoded at once.
    held_restores: Option<Vec<(u64, u16, RestoreJob)>>,
}

impl Net {
    /// Node n's election timeout is 6 + 4n ticks, so node 1 wins the first elections.
    fn new() -> Net {
        let hosts = NODES
            .iter()
            .map(|&id| {
                let ticks = 6 + 4 * id as usize;
                let host = Host::new(
                    id,
                    &SLOTS,
                    |_| Recovered::new_group(&NODES, 1),
                    &BrokerConfig::default(),
                    &StreamSlotConfig::default(),
                    1_000,
                    || ElectionTicks {
                        min: ticks,
                        max: ticks + 1,
                    },
                )
                .unwrap();
                (id, host)
            })
            .collect();
        Net {
            hosts,
            down: BTreeSet::new(),
            isolated: BTreeSet::new(),
            cut: BTreeSet::new(),
            applied: Vec::new(),
            held_restores: None,
        }
    }

    fn up(&self, id: u64) -> bool {
        !self.down.contains(&id)
    }

    /// One tick of every running host, then messages flow until none is left.
    fn tick(&mut self) -> Vec<Sent> {
        for (id, host) in self.hosts.iter_mut() {
            if !self.down.contains(id) {
                host.tick(0);
            }
        }
        self.exchange()
    }

    fn exchange(&mut self) -> Vec<Sent> {
        let mut sent = Vec::new();
        for _ in 0..EXCHANGES_PER_TICK_MAX {
            let mut flights = Vec::new();
            for (&id, host) in self.hosts.iter_mut() {
                if self.down.contains(&id) {
                    continue;
                }
                let out = host.collect();
                for (slot, job) in out.snapshot_jobs {
                    host.snapshot_encoded(slot, job.encode());
                }
                for (slot, job) in out.restore_jobs {
                    match self.held_restores.as_mut() {
                        Some(held) => held.push((id, slot, job)),
                        None => host.restored(slot, job.decode()),
                    }
                }
                self.applied.extend(
                    out.answers
                        .into_iter()
                        .filter(|(_, a)| a.outcome.is_ok())
                        .map(|(slot, a)| (id, slot, a.id)),
                );
                let mut batches = out.batches;
                for (to, list) in host.synced() {
                    batches.entry(to).or_default().extend(list);
                }
                if !batches.is_empty() {
                    flights.push((id, batches));
                }
            }
            if flights.is_empty() {
                return sent;
            }
            for (from, batches) in flights {
                for (to, list) in batches {
                    for batch in list {
                        sent.push(Sent {
                            from,
                            to,
                            messages: batch.len(),
                        });
                        let crosses = !self.isolated.contains(&from)
                            && !self.isolated.contains(&to)
                            && !self.cut.contains(&(from, to));
                        if crosses && self.up(to) {
                            self.hosts.get_mut(&to).unwrap().receive(from, batch);
                        }
                    }
                }
            }
        }
        panic!("messages still flowing after {EXCHANGES_PER_TICK_MAX} exchanges");
    }

    /// A command proposed to node `node`'s replica of `slot` (which must lead it).
    fn propose(&mut self, node: u64, slot: u16) -> ProposalId {
        let host = self.hosts.get_mut(&node).unwrap();
        host.propose(slot, &Command::Tick { now_ns: 1 }).unwrap()
    }

    /// Decodes the snapshots held back and hands them to their hosts; from now on each is
    /// decoded at once.
    fn hand_back_restores(&mut self) {
        for (node, slot, job) in self.held_restores.take().unwrap_or_default() {
            self.hosts
                .get_mut(&node)
                .unwrap()
                .restored(slot, job.decode());
        }
        self.exchange();
    }

    fn ticks(&mut self, n: usize) -> Vec<Sent> {
        (0..n).flat_map(|_| self.tick()).collect()
    }

    fn leader(&self, node: u64, slot: u16) -> bool {
        self.hosts[&node].replica(slot).unwrap().group().is_leader()
    }

    /// Each slot's leaders among the running hosts that are not cut off.
    fn leaders(&self) -> Vec<Vec<u64>> {
        SLOTS
            .iter()
            .map(|&slot| {
                NODES
                    .iter()
                    .copied()
                    .filter(|&n| self.up(n) && !self.isolated.contains(&n))
                    .filter(|&n| self.leader(n, slot))
                    .collect()
            })
            .collect()
    }

    fn quiesced(&self) -> usize {
        self.hosts
            .iter()
            .filter(|(id, _)| self.up(**id))
            .map(|(_, h)| h.quiesced())
            .sum()
    }

    /// Ticks until `done`, at most `ticks_max`; how many it took.
    fn tick_until(&mut self, ticks_max: usize, mut done: impl FnMut(&Net) -> bool) -> usize {
        for t in 1..=ticks_max {
            self.tick();
            if done(self) {
                return t;
            }
        }
        panic!(
            "not done after {ticks_max} ticks: leaders {:?}",
            self.leaders()
        );
    }

    /// Started, node 1 elected everywhere, and every group quiescent.
    fn at_rest() -> Net {
        let mut net = Net::new();
        net.tick_until(60, |n| n.quiesced() == SLOTS.len() * NODES.len());
        assert!(
            SLOTS.iter().all(|&s| net.leader(1, s)),
            "{:?}",
            net.leaders()
        );
        net
    }
}

fn raft_messages(sent: &[Sent]) -> usize {
    sent.iter().map(|s| s.messages).sum()
}

#[test]
fn idle_groups_quiesce_and_only_keepalives_cross() {
    let mut net = Net::at_rest();
    let sent = net.ticks(30);
    assert_eq!(raft_messages(&sent), 0, "{sent:?}");
    // Each node still hears from each other node at every tick: one keepalive per pair.
    assert_eq!(sent.len(), 30 * NODES.len() * (NODES.len() - 1), "{sent:?}");
    assert!(sent.iter().all(|s| s.from != s.to));
    assert_eq!(net.quiesced(), SLOTS.len() * NODES.len());
}

/// Ten proposals of one round reach each follower as one append (`coalesce.rs`), which it
/// answers once; all ten commit and apply everywhere.
#[test]
fn a_rounds_proposals_reach_each_follower_as_one_append() {
    let mut net = Net::at_rest();
    let ids: Vec<ProposalId> = (0..10).map(|_| net.propose(1, 2)).collect();
    let sent = net.exchange();
    for id in &ids {
        assert!(net.applied.contains(&(1, 2, *id)), "{:?}", net.applied);
    }
    for n in [2, 3] {
        assert_eq!(net.hosts[&n].replica(2).unwrap().applied(), ids[9].index);
        let to_follower: Vec<usize> = sent
            .iter()
            .filter(|s| s.from == 1 && s.to == n)
            .map(|s| s.messages)
            .collect();
        let answers: usize = sent
            .iter()
            .filter(|s| s.from == n && s.to == 1)
            .map(|s| s.messages)
            .sum();
        // The append with the ten entries, then the one that carries their commit.
        assert_eq!(to_follower, [1, 1], "leader to node {n}");
        assert_eq!(answers, 2, "node {n} to the leader");
    }
}

#[test]
fn a_proposal_to_a_quiescent_leader_commits_without_a_tick() {
    let mut net = Net::at_rest();
    let id = net.propose(1, 2);
    net.exchange();
    assert!(net.applied.contains(&(1, 2, id)), "{:?}", net.applied);
    for n in NODES {
        let applied = net.hosts[&n].replica(2).unwrap().applied();
        assert!(
            applied >= id.index,
            "node {n} applied {applied} < {}",
            id.index
        );
    }
    // The group had to wake for it, and rests again after a tick.
    assert!(net.quiesced() < SLOTS.len() * NODES.len());
    net.ticks(2);
    assert_eq!(net.quiesced(), SLOTS.len() * NODES.len());
}

#[test]
fn followers_of_a_quiescent_leader_that_stops_elect_another() {
    let mut net = Net::at_rest();
    net.down.insert(1);
    let took = net.tick_until(60, |n| n.leaders().iter().all(|l| l.len() == 1));
    // Nodes 2 and 3 wake once node 1 was silent for the liveness limit, counting the ticks
    // they missed: node 3's election timeout (18 ticks) after node 1 was last heard at the
    // latest, as without quiescence, not that much after the wake.
    assert!(
        took as u64 >= LIVENESS_TICKS_MAX,
        "elected after {took} ticks"
    );
    assert!(took <= 6 + 4 * 3 + 1, "elected after {took} ticks");
    // The node comes back as a follower, and the groups come to rest again.
    net.down.remove(&1);
    net.tick_until(60, |n| n.quiesced() == SLOTS.len() * NODES.len());
    for leaders in net.leaders() {
        assert_eq!(leaders.len(), 1);
        assert_ne!(leaders, vec![1]);
    }
}

#[test]
fn a_quiescent_leader_cut_off_from_its_followers_steps_down_and_commits_nothing() {
    let mut net = Net::at_rest();
    net.isolated.insert(1);
    let id = net.propose(1, 0);
    net.tick_until(60, |n| {
        n.leaders().iter().all(|l| l.len() == 1) && SLOTS.iter().all(|&s| !n.leader(1, s))
    });
    net.isolated.clear();
    net.tick_until(60, |n| n.quiesced() == SLOTS.len() * NODES.len());
    assert!(!net.applied.contains(&(1, 0, id)), "{:?}", net.applied);
    for &slot in &SLOTS {
        let applied: BTreeSet<u64> = NODES
            .iter()
            .map(|n| net.hosts[n].replica(slot).unwrap().applied())
            .collect();
        assert_eq!(
            applied.len(),
            1,
            "slot {slot}: replicas apply alike: {applied:?}"
        );
    }
}

#[test]
fn a_follower_that_misses_its_leaders_keepalives_for_a_while_rests_again_without_a_word() {
    let mut net = Net::at_rest();
    let all = SLOTS.len() * NODES.len();
    // Node 2 hears nothing from node 1 for longer than the liveness limit but less than an
    // election timeout: its followers wake, then rest again once node 1 is heard.
    net.cut.insert((1, 2));
    let mut sent = net.ticks(LIVENESS_TICKS_MAX as usize + 1);
    assert_eq!(net.quiesced(), all - SLOTS.len(), "node 2's followers woke");
    net.cut.clear();
    sent.extend(net.ticks(2));
    assert_eq!(net.quiesced(), all);
    assert_eq!(raft_messages(&sent), 0, "{sent:?}");
}

#[test]
fn a_quiescent_leader_waits_out_a_members_short_silence() {
    let mut net = Net::at_rest();
    // Longer than the liveness limit, shorter than the leader's patience.
    net.cut.insert((2, 1));
    let sent = net.ticks(LEADER_PATIENCE_TICKS_MAX as usize - 1);
    assert_eq!(net.quiesced(), SLOTS.len() * NODES.len());
    assert_eq!(raft_messages(&sent), 0, "{sent:?}");
    // Past its patience the leader wakes (and heartbeats, so check-quorum can act).
    let sent = net.ticks(2);
    assert!(SLOTS.iter().all(|&s| net.leader(1, s)));
    assert!(raft_messages(&sent) > 0);
}

#[test]
fn a_leader_whose_timer_falls_due_within_the_rest_keeps_its_shard_on_the_short_tick() {
    let mut net = Net::at_rest();
    let (now_ns, rest_ns, delay_ns) = (1_000_000_000, 300_000_000, 200_000_000);
    assert!(net.hosts[&1].at_rest_until(now_ns + rest_ns));
    let msg = Message {
        id: IdGenerator::new(*b"quiesce").next(0),
        topic: "delayed".into(),
        payload: bytes::Bytes::from_static(b"1"),
        timestamp_ns: now_ns,
        retry: 0,
        max_retry: 3,
        priority: 0,
        delay_ns,
        ttl_ns: 0,
        deliver_at_ns: now_ns + delay_ns,
        expires_at_ns: 0,
        extras: None,
    };
    let host = net.hosts.get_mut(&1).unwrap();
    host.propose(0, &Command::Publish { msg }).unwrap();
    net.ticks(2);
    assert_eq!(
        net.quiesced(),
        SLOTS.len() * NODES.len(),
        "the group rests again"
    );
    assert!(!net.hosts[&1].at_rest_until(now_ns + rest_ns));
    assert!(net.hosts[&1].at_rest_until(now_ns + delay_ns - 1));
    // Only leaders propose the timers' ticks: a follower's shard may sleep on.
    assert!(net.hosts[&2].at_rest_until(now_ns + rest_ns));
}

/// Issue 13's read-only precheck in a cluster: a leader answers a poll of an existing,
/// empty queue from its applied state, with no entry; a poll that creates the queue or
/// finds a message goes through the log, and a follower never answers one itself.
#[test]
fn an_empty_poll_of_an_existing_queue_is_answered_by_its_leader_without_an_entry() {
    use crate::queue::broker::{ConsumerRef, Outcome};
    let mut net = Net::at_rest();
    let slot = 2;
    let poll = Command::Consume {
        queue: "q".into(),
        consumer: ConsumerRef { shard: 0, conn: 1 },
        max: 1,
        now_ns: 1,
    };
    let answered = |net: &Net, node: u64| net.hosts[&node].answered_without_entry(slot, &poll);
    assert_eq!(answered(&net, 1), None, "the poll creates the queue");
    let created = net.hosts.get_mut(&1).unwrap().propose(slot, &poll).unwrap();
    net.exchange();
    assert!(net.applied.contains(&(1, slot, created)));
    assert_eq!(answered(&net, 1), Some(Outcome::Empty));
    assert_eq!(answered(&net, 2), None, "a follower asks its leader");
    let applied = net.hosts[&1].replica(slot).unwrap().applied();
    // A message arrives: the poll must take it, through the log.
    let msg = super::sim::message(IdGenerator::new(*b"prechek").next(slot), "q", 1);
    let published = net
        .hosts
        .get_mut(&1)
        .unwrap()
        .propose(slot, &Command::Publish { msg })
        .unwrap();
    net.exchange();
    assert!(net.applied.contains(&(1, slot, published)));
    assert_eq!(
        answered(&net, 1),
        None,
        "a ready message is delivered through the log"
    );
    assert!(net.hosts[&1].replica(slot).unwrap().applied() > applied);
}

/// Issue 14's snapshots decoded off the raft loop: a node that became a slot's leader while
/// the snapshot it was sent is still decoding answers no poll from its state, which is
/// older than the group's. Node 3 saw queue `q` created, missed a message published to it
/// and a snapshot's worth of entries after, and takes the lead of a slot before its
/// snapshot is back: its own copy shows `q` empty, the group's holds the message.
#[test]
fn a_leader_whose_snapshot_is_still_decoding_answers_no_poll_from_its_old_state() {
    use crate::queue::broker::ConsumerRef;
    let mut net = Net::at_rest();
    let poll = Command::Consume {
        queue: "q".into(),
        consumer: ConsumerRef { shard: 0, conn: 1 },
        max: 1,
        now_ns: 1,
    };
    let mut ids = IdGenerator::new(*b"restore");
    for &slot in &SLOTS {
        net.hosts.get_mut(&1).unwrap().propose(slot, &poll).unwrap();
    }
    net.exchange();
    net.down.insert(3);
    for &slot in &SLOTS {
        let msg = super::sim::message(ids.next(slot), "q", 1);
        let host = net.hosts.get_mut(&1).unwrap();
        host.propose(slot, &Command::Publish { msg }).unwrap();
        // A snapshot's worth of entries, so node 3 can only catch up from one.
        for _ in 0..1_100 {
            host.propose(slot, &Command::Tick { now_ns: 1 }).unwrap();
        }
        net.exchange();
    }
    net.held_restores = Some(Vec::new());
    net.down.remove(&3);
    net.tick_until(100, |n| {
        SLOTS
            .iter()
            .all(|&s| n.hosts[&3].replica(s).unwrap().is_restoring())
    });
    // Node 1 leads every slot: balancing hands some to node 3, which takes them with its
    // snapshots still decoding.
    let mut slot = None;
    for _ in 0..200 {
        net.hosts.get_mut(&1).unwrap().balance_leaders();
        net.tick();
        slot = SLOTS.iter().copied().find(|&s| {
            net.leader(3, s) && net.hosts[&3].replica(s).unwrap().group().reads_locally()
        });
        if slot.is_some() {
            break;
        }
    }
    let slot = slot.expect("node 3 leads a slot and has committed an entry of its term");
    let replica = net.hosts[&3].replica(slot).unwrap();
    assert!(replica.is_restoring(), "its snapshot is still out");
    assert!(
        replica.broker().finds_nothing(&poll),
        "its own copy shows q empty: the poll would be answered from it"
    );
    assert_eq!(net.hosts[&3].answered_without_entry(slot, &poll), None);
    net.hand_back_restores();
    let replica = net.hosts[&3].replica(slot).unwrap();
    assert!(!replica.is_restoring());
    assert!(
        !replica.broker().finds_nothing(&poll),
        "the group's state holds the message"
    );
    assert_eq!(net.hosts[&3].answered_without_entry(slot, &poll), None);
}
