//! The plane with `cluster.enabled`: a slot's commands go through the slot's raft group
//! (`cluster::node`) instead of the slot's command log, so a reply means a quorum of nodes
//! has the command on disk and this node's leader applied it.
//!
//! The owner shard of a slot hosts the slot's replica; commands reach it as before (over
//! the mesh from other shards) and it hands them to its node, which proposes them when it
//! leads the slot and forwards them to the leader otherwise. Every replica applies every
//! committed command and so computes the same effects; each node carries out only those
//! for its own connections (pushes, prefetch releases), so nothing per-connection crosses
//! nodes. Long-polls retry their CONSUME each time the slot applied something. A closed
//! connection's disconnect is proposed to the slots where it consumed or subscribed.
//!
//! Not replicated yet: the exchange table (declare, delete, bind and unbind are refused;
//! the default exchange works) and the KV cache (each node has its own).

use super::plane::{now_ns, Plane};
use super::waiters::Answer;
use crate::cluster::node::{Node, NodeConfig, ProposeError, Running, SlotStatus};
use crate::cluster::replica::NotApplied;
use crate::queue::broker::{Command, ConsumerRef, Effect, Outcome};
use crate::queue::protocol::reply::ClusterInfo;
use boltq_io::event::Event;
use boltq_io::listener::Listener;
use boltq_io::Store;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// How long a command waits for its slot's group: through an election (about 1–2 s) and
/// the commit. Past it the client hears that no leader is known, or that the outcome is
/// unknown.
pub const CLUSTER_SUBMIT_TIMEOUT_MS: u64 = 5_000;

/// Most consumers with a long-poll running on one shard (as `waiters::WAITERS_MAX`): past
/// it a long-poll is answered with what its first CONSUME got.
pub const LONG_POLLS_MAX: usize = 65_536;

/// Who this node and its peers are, for `/cluster/status`, CLUSTER_STATUS and `/readyz`.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// This node's raft id and configured name and raft address.
    pub node_id: u64,
    pub name: String,
    pub raft_addr: String,
    /// Every member (this node too): raft id, name, raft address.
    pub members: Vec<(u64, String, String)>,
}

/// What the slots' groups look like from this node (every shard's part merged).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSummary {
    pub info: ClusterInfo,
    /// Slots each member leads, by name (members leading none are listed with 0).
    pub slots_led: BTreeMap<String, u64>,
    pub slots_without_leader: u64,
}

impl ClusterView {
    /// v1's single-group fields mapped onto a group per slot: `state` is `Leader` while
    /// this node leads some slot; `leader`/`leader_id` name the member leading the most
    /// slots; `term` and `last_index` are the highest of any slot.
    pub fn summary(&self, raft: &[SlotStatus]) -> ClusterSummary {
        let name_of = |id: u64| {
            self.members
                .iter()
                .find(|m| m.0 == id)
                .map(|m| (m.1.clone(), m.2.clone()))
                .unwrap_or_else(|| (format!("raft-{id}"), String::new()))
        };
        let mut slots_led: BTreeMap<String, u64> =
            self.members.iter().map(|m| (m.1.clone(), 0)).collect();
        let mut slots_without_leader = 0;
        for status in raft {
            match status.leader {
                Some(id) => *slots_led.entry(name_of(id).0).or_default() += 1,
                None => slots_without_leader += 1,
            }
        }
        let top = slots_led
            .iter()
            .filter(|(_, &n)| n > 0)
            .max_by_key(|(name, &n)| (n, std::cmp::Reverse((*name).clone())))
            .map(|(name, _)| name.clone());
        let (leader_id, leader) = match top {
            Some(name) => {
                let addr = self
                    .members
                    .iter()
                    .find(|m| m.1 == name)
                    .map(|m| m.2.clone());
                (name, addr.unwrap_or_default())
            }
            None => (String::new(), String::new()),
        };
        let leads_some = slots_led.get(&self.name).is_some_and(|&n| n > 0);
        let info = ClusterInfo {
            node_id: self.name.clone(),
            raft_addr: self.raft_addr.clone(),
            state: if leads_some { "Leader" } else { "Follower" }.to_string(),
            leader,
            leader_id,
            term: raft.iter().map(|s| s.term).max().unwrap_or(0),
            last_index: raft.iter().map(|s| s.commit).max().unwrap_or(0),
            peers: self
                .members
                .iter()
                .map(|m| format!("{}@{}", m.1, m.2))
                .collect(),
        };
        ClusterSummary {
            info,
            slots_led,
            slots_without_leader,
        }
    }
}

/// What a shard needs to start its part of the cluster.
pub struct ClusterStart {
    /// The slots and broker settings are filled in by the plane.
    pub node: NodeConfig,
    pub listener: Listener,
    pub view: ClusterView,
    /// Connection boot ids of this node's earlier processes (`server::cluster::boots`):
    /// their subscriptions are swept.
    pub earlier_boots: Vec<u64>,
}

/// How often a node looks for subscriptions its earlier processes left registered.
pub const STALE_SWEEP_MS: u64 = 2_000;

pub struct Replication {
    view: Rc<ClusterView>,
    node: Rc<Node>,
    _running: Running,
    /// Slots where each connection consumed or subscribed, through this shard: where its
    /// disconnect is proposed. An entry lives until the connection closes.
    touched: RefCell<HashMap<ConsumerRef, BTreeSet<u16>>>,
    /// Notified whenever this node applied entries of one of this shard's slots.
    applied: Event,
    /// Long-polls running per consumer, and whether the consumer closed meanwhile.
    long_polls: RefCell<HashMap<ConsumerRef, (usize, bool)>>,
    earlier_boots: Vec<u64>,
    /// Stale connections whose disconnect is proposed and not yet answered.
    sweeping: Rc<RefCell<BTreeSet<(u16, ConsumerRef)>>>,
}

impl Replication {
    /// Starts this shard's raft node for the slots it owns; its effects go to `plane`.
    pub async fn start(
        start: ClusterStart,
        store: Rc<Store>,
        plane: Weak<Plane>,
    ) -> Result<Rc<Replication>, String> {
        let running = Node::start(start.node, store, start.listener).await?;
        let node = Rc::clone(&running.node);
        let replication = Rc::new(Replication {
            view: Rc::new(start.view),
            node: Rc::clone(&node),
            _running: running,
            touched: RefCell::new(HashMap::new()),
            applied: Event::default(),
            long_polls: RefCell::new(HashMap::new()),
            earlier_boots: start.earlier_boots,
            sweeping: Rc::default(),
        });
        let weak = Rc::downgrade(&replication);
        node.set_observer(Box::new(move |effects, _slots| {
            let (Some(plane), Some(replication)) = (plane.upgrade(), weak.upgrade()) else {
                return;
            };
            for (_, effect) in effects {
                plane.route_own_effect(effect);
            }
            replication.applied.notify();
        }));
        if !replication.earlier_boots.is_empty() {
            boltq_shards::spawn(sweep_loop(Rc::downgrade(&replication))).detach();
        }
        Ok(replication)
    }

    /// Proposes the disconnect of every connection of an earlier process of this node that
    /// still has live subscriptions in one of this shard's slots. A restart left them:
    /// those connections are gone, and while registered live a durable registration would
    /// hold its copies as unconfirmed pushes (up to its cap) instead of a backlog, and a
    /// non-durable one would stay for good. Each node sweeps only its own: only it knows
    /// that its earlier processes are gone.
    fn sweep_stale(&self) {
        let mut stale = Vec::new();
        self.node.for_each_broker(|slot, broker| {
            for consumer in broker.live_subscribers() {
                let boot = consumer.conn & !u64::from(u32::MAX);
                if self.earlier_boots.contains(&boot) {
                    stale.push((slot, consumer));
                }
            }
        });
        for (slot, consumer) in stale {
            if !self.sweeping.borrow_mut().insert((slot, consumer)) {
                continue;
            }
            let sweeping = Rc::clone(&self.sweeping);
            let done = move |_, _| {
                sweeping.borrow_mut().remove(&(slot, consumer));
            };
            self.submit(slot, Command::Disconnect { consumer }, Box::new(done));
        }
    }

    pub fn node(&self) -> &Rc<Node> {
        &self.node
    }

    pub fn view(&self) -> &ClusterView {
        &self.view
    }

    /// Runs `cmd` through slot `slot`'s group; `answer` gets the outcome. Proposed in call
    /// order: the task's first step (propose here, or send to the leader) runs before any
    /// later call's, since tasks start in the order they were spawned.
    pub fn submit(&self, slot: u16, cmd: Command, answer: Answer) {
        self.note_touched(slot, &cmd);
        let (node, view) = (Rc::clone(&self.node), Rc::clone(&self.view));
        boltq_shards::spawn(async move {
            let outcome = run(&node, &view, slot, &cmd).await;
            answer(outcome, None);
        })
        .detach();
    }

    /// A CONSUME that waits up to `wait_ms` for a message: tried again each time this
    /// node applied something in this shard's slots, until it gets one, the wait ends, or
    /// the connection closes.
    pub fn consume_waiting(self: &Rc<Self>, slot: u16, cmd: Command, wait_ms: u64, answer: Answer) {
        let Command::Consume { consumer, .. } = &cmd else {
            unreachable!("consume_waiting takes consumes")
        };
        let consumer = *consumer;
        self.note_touched(slot, &cmd);
        let running = self
            .long_polls
            .borrow()
            .values()
            .map(|&(n, _)| n)
            .sum::<usize>();
        let wait_ms = if running >= LONG_POLLS_MAX {
            0
        } else {
            wait_ms
        };
        self.long_polls.borrow_mut().entry(consumer).or_default().0 += 1;
        let this = Rc::clone(self);
        boltq_shards::spawn(async move {
            let deadline = Instant::now() + Duration::from_millis(wait_ms);
            let mut cmd = cmd;
            let outcome = loop {
                let ticket = this.applied.ticket();
                let outcome = run(&this.node, &this.view, slot, &cmd).await;
                let left = deadline.saturating_duration_since(Instant::now());
                if outcome != Outcome::Empty || left.is_zero() || this.closed(consumer) {
                    break outcome;
                }
                boltq_shards::timeout(left, this.applied.wait(ticket)).await;
                if let Command::Consume { now_ns: at, .. } = &mut cmd {
                    *at = now_ns();
                }
            };
            this.long_poll_ended(consumer);
            answer(outcome, None);
        })
        .detach();
    }

    /// The connection closed: its long-polls stop, and its disconnect is proposed to every
    /// slot where it consumed or subscribed (ending its live subscriptions there).
    pub fn disconnect(&self, consumer: ConsumerRef) {
        if let Some(polls) = self.long_polls.borrow_mut().get_mut(&consumer) {
            polls.1 = true;
        }
        self.applied.notify();
        let slots = self
            .touched
            .borrow_mut()
            .remove(&consumer)
            .unwrap_or_default();
        for slot in slots {
            self.submit(slot, Command::Disconnect { consumer }, Box::new(|_, _| {}));
        }
    }

    fn note_touched(&self, slot: u16, cmd: &Command) {
        let consumer = match cmd {
            Command::Consume { consumer, .. } | Command::Subscribe { consumer, .. } => *consumer,
            _ => return,
        };
        self.touched
            .borrow_mut()
            .entry(consumer)
            .or_default()
            .insert(slot);
    }

    fn closed(&self, consumer: ConsumerRef) -> bool {
        self.long_polls
            .borrow()
            .get(&consumer)
            .is_some_and(|&(_, closed)| closed)
    }

    fn long_poll_ended(&self, consumer: ConsumerRef) {
        let mut polls = self.long_polls.borrow_mut();
        if let Some(entry) = polls.get_mut(&consumer) {
            entry.0 -= 1;
            if entry.0 == 0 {
                polls.remove(&consumer);
            }
        }
    }
}

async fn sweep_loop(replication: Weak<Replication>) {
    loop {
        match replication.upgrade() {
            Some(r) => r.sweep_stale(),
            None => return,
        }
        boltq_shards::sleep(Duration::from_millis(STALE_SWEEP_MS)).await;
    }
}

async fn run(node: &Node, view: &ClusterView, slot: u16, cmd: &Command) -> Outcome {
    let timeout = Duration::from_millis(CLUSTER_SUBMIT_TIMEOUT_MS);
    match node.submit(slot, cmd, timeout).await {
        Ok(outcome) => outcome,
        Err(ProposeError::NotLeader { leader }) => {
            let known = leader.and_then(|id| view.members.iter().find(|m| m.0 == id));
            let (leader_id, leader) =
                known.map_or_else(Default::default, |m| (m.1.clone(), m.2.clone()));
            Outcome::NotLeader { leader, leader_id }
        }
        Err(e) => Outcome::Error(refusal_text(slot, &e)),
    }
}

/// What a client reads when the cluster gave no outcome.
pub fn refusal_text(slot: u16, e: &ProposeError) -> String {
    match e {
        ProposeError::NotLeader { .. } => {
            format!("not leader: no leader of slot {slot} is known (an election is under way); retry")
        }
        ProposeError::NotApplied(NotApplied::Superseded) => {
            "not applied: the leader changed before the command was committed; retry".into()
        }
        ProposeError::NotApplied(NotApplied::Unknown) => {
            "outcome unknown: the leader changed while the command was in flight; it may have been applied".into()
        }
        ProposeError::TimedOut => {
            "timed out waiting for the cluster: the command may still be applied".into()
        }
        ProposeError::TooMany => format!("too many commands in flight for slot {slot}; retry"),
        ProposeError::Stopped(why) => format!("replication stopped on this node: {why}"),
        ProposeError::UnknownSlot(slot) => format!("internal error: slot {slot} is not hosted here"),
        ProposeError::MembershipPending | ProposeError::MembershipRefused(_) => {
            format!("internal error: {e:?}")
        }
    }
}

impl Plane {
    /// Carries out an effect of an applied command if it is for a connection of this
    /// process (every node applies every command; the others' connections are theirs).
    pub(super) fn route_own_effect(&self, effect: Effect) {
        let to = match &effect {
            Effect::Push { to, .. } => *to,
            Effect::Released { consumer, .. } => *consumer,
        };
        let ours = to.conn & !u64::from(u32::MAX) == self.boot_id;
        if ours && usize::from(to.shard) < self.shard.count() {
            self.route_effect(effect);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ClusterView {
        let members = [(1, "a"), (2, "b"), (3, "c")]
            .map(|(id, name)| (id, name.to_string(), format!("h{id}:9100")))
            .to_vec();
        ClusterView {
            node_id: 2,
            name: "b".into(),
            raft_addr: "h2:9100".into(),
            members,
        }
    }

    fn slot(slot: u16, leader: Option<u64>, term: u64, commit: u64) -> SlotStatus {
        SlotStatus {
            slot,
            leader,
            term,
            commit,
            applied: commit,
        }
    }

    #[test]
    fn the_summary_counts_slots_per_leader_and_names_the_busiest_leader() {
        let raft = [
            slot(0, Some(3), 2, 10),
            slot(1, Some(3), 4, 7),
            slot(2, Some(2), 1, 3),
            slot(3, None, 5, 1),
        ];
        let s = view().summary(&raft);
        assert_eq!(
            s.slots_led,
            BTreeMap::from([("a".into(), 0), ("b".into(), 1), ("c".into(), 2)])
        );
        assert_eq!(s.slots_without_leader, 1);
        assert_eq!(s.info.state, "Leader", "b leads slot 2");
        assert_eq!(
            (s.info.leader_id.as_str(), s.info.leader.as_str()),
            ("c", "h3:9100")
        );
        assert_eq!((s.info.term, s.info.last_index), (5, 10));
        assert_eq!(s.info.peers, ["a@h1:9100", "b@h2:9100", "c@h3:9100"]);
    }

    #[test]
    fn a_node_leading_nothing_is_a_follower_and_no_leader_is_named_before_an_election() {
        let s = view().summary(&[slot(0, None, 1, 0)]);
        assert_eq!(s.info.state, "Follower");
        assert_eq!(s.info.leader_id, "");
        assert_eq!(s.slots_without_leader, 1);
    }
}
