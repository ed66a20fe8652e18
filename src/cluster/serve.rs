//! Serving the queue plane through the slot groups (`cluster.enabled`): the cluster side
//! of the seam `queue::server::replicated::Replicated`.
//!
//! The owner shard of a slot hosts the slot's replica; commands reach it as before (over
//! the mesh from other shards) and it hands them to its node, which proposes them when it
//! leads the slot and forwards them to the leader otherwise. Every replica applies every
//! committed command and so computes the same effects; each node carries out only those
//! for its own connections (pushes, prefetch releases), so nothing per-connection crosses
//! nodes. Long-polls retry their CONSUME each time the slot applied something. A closed
//! connection's disconnect is proposed to the slots where it consumed or subscribed, and
//! a restarted node ends the subscriptions its earlier processes left.

use super::directory::{Directory, Role};
use super::node::{Node, NodeConfig, ProposeError, Running};
use super::replica::NotApplied;
use crate::messaging::engine::mesh::StreamError;
use crate::messaging::engine::replicated::{StreamRead, StreamReplication};
use crate::messaging::slot::{StreamCommand, StreamOutcome, StreamSlot};
use crate::queue::broker::{Broker, Command, ConsumerRef, Outcome};
use crate::queue::server::plane::{conn_node_tag, node_tag, now_ns, Plane};
use crate::queue::server::replicated::{
    ClusterView, MembersChange, Replicated, SlotStatus, COMMIT_LATENCY_METRIC,
};
use crate::queue::server::waiters::Answer;
use boltq_io::event::Event;
use boltq_io::listener::Listener;
use boltq_io::record::Record;
use boltq_io::Store;
use boltq_shards::metrics::Histogram;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a command waits for its slot's group: through an election (about 1–2 s) and
/// the commit. Past it the client hears that no leader is known, or that the outcome is
/// unknown.
pub const CLUSTER_SUBMIT_TIMEOUT_MS: u64 = 5_000;

/// Most consumers with a long-poll running on one shard (as `waiters::WAITERS_MAX`): past
/// it a long-poll is answered with what its first CONSUME got.
pub const LONG_POLLS_MAX: usize = 65_536;

/// What a shard needs to start its part of the cluster.
pub struct ClusterStart {
    /// The slots and broker settings are filled in by the plane.
    pub node: NodeConfig,
    pub listener: Listener,
    pub view: ClusterView,
    /// Connection boot ids of this node's earlier processes (`server::cluster::boots`):
    /// their subscriptions are swept.
    pub earlier_boots: Vec<u64>,
    /// `server.shards`, which a joining node must share.
    pub shards: u64,
}

/// How often a node looks for subscriptions its earlier processes, or removed members, left
/// registered.
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
    /// Long-polls running in all (the sum over `long_polls`, kept rather than summed per
    /// CONSUME).
    long_polls_running: std::cell::Cell<usize>,
    earlier_boots: Vec<u64>,
    shards: u64,
    /// Stale connections whose disconnect is proposed and not yet answered.
    sweeping: Rc<RefCell<BTreeSet<(u16, ConsumerRef)>>>,
    /// Itself, for the tasks of long-polls.
    me: Weak<Replication>,
    commit_latency: Histogram,
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
        let registry = Rc::clone(
            plane
                .upgrade()
                .expect("the plane starts us")
                .shard
                .metrics(),
        );
        node.set_metrics(&registry);
        let replication = Rc::new_cyclic(|me| Replication {
            me: me.clone(),
            commit_latency: registry.histogram(COMMIT_LATENCY_METRIC, &[]),
            view: Rc::new(start.view),
            node: Rc::clone(&node),
            _running: running,
            touched: RefCell::new(HashMap::new()),
            applied: Event::default(),
            long_polls: RefCell::new(HashMap::new()),
            long_polls_running: std::cell::Cell::new(0),
            earlier_boots: start.earlier_boots,
            shards: start.shards,
            sweeping: Rc::default(),
        });
        let weak = Rc::downgrade(&replication);
        let plane_watched = plane.clone();
        node.set_observer(Box::new(move |effects, _slots| {
            let (Some(plane), Some(replication)) = (plane.upgrade(), weak.upgrade()) else {
                return;
            };
            for (_, effect) in effects {
                plane.route_own_effect(effect);
            }
            replication.refresh_exchanges(&plane);
            replication.applied.notify();
        }));
        if let Some(plane) = plane_watched.upgrade() {
            replication.refresh_exchanges(&plane);
        }
        boltq_shards::spawn(exchange_watch(Rc::downgrade(&replication), plane_watched)).detach();
        boltq_shards::spawn(sweep_loop(Rc::downgrade(&replication))).detach();
        Ok(replication)
    }

    /// Proposes the disconnect of every connection still registered live in one of this
    /// shard's slots that is known to be gone: those of an earlier process of this node (a
    /// restart left them; only this node knows its earlier processes), and, in the slots
    /// this node leads, those of a member that was removed (`/cluster/leave`), whose
    /// connection ids carry its node tag (`plane::clustered_boot_id`). While registered
    /// live, a durable registration would hold its copies as unconfirmed pushes (up to its
    /// cap) instead of a backlog, and a non-durable one would stay for good.
    ///
    /// A tag that a current member also has is never swept (two names can share a tag): a
    /// live member's connections are never ended by this, and a removed member sharing a
    /// current member's tag leaves its registrations behind (a collision costs a leak, not
    /// a wrong disconnect).
    fn sweep_stale(&self) {
        let removed = self.removed_member_tags();
        let mut stale = Vec::new();
        let mut of_removed = Vec::new();
        self.node.for_each_broker(|slot, broker| {
            for consumer in broker.live_subscribers() {
                let boot = consumer.conn & !u64::from(u32::MAX);
                if self.earlier_boots.contains(&boot) {
                    stale.push((slot, consumer));
                } else if removed.contains(&conn_node_tag(consumer.conn)) {
                    of_removed.push((slot, consumer));
                }
            }
        });
        let me = self.node.id();
        stale.extend(
            of_removed
                .into_iter()
                .filter(|(slot, _)| self.node.leader(*slot) == Some(me)),
        );
        for (slot, consumer) in stale {
            if !self.sweeping.borrow_mut().insert((slot, consumer)) {
                continue;
            }
            let sweeping = Rc::clone(&self.sweeping);
            let done = move |_, _| {
                sweeping.borrow_mut().remove(&(slot, consumer));
            };
            Replicated::submit(self, slot, Command::Disconnect { consumer }, Box::new(done));
        }
    }

    /// The node tags of members removed from the cluster that no current member has.
    fn removed_member_tags(&self) -> BTreeSet<u16> {
        let Some(directory) = self.node.directory() else {
            return BTreeSet::new();
        };
        let current: BTreeSet<u16> = directory
            .members()
            .filter(|m| m.role != Role::Gone)
            .map(|m| node_tag(m.id()))
            .collect();
        directory
            .members()
            .filter(|m| m.role == Role::Gone)
            .map(|m| node_tag(m.id()))
            .filter(|tag| !current.contains(tag))
            .collect()
    }
}

impl Replicated for Replication {
    /// Proposed in call order: the task's first step (propose here, or send to the leader)
    /// runs before any later call's, since tasks start in the order they were spawned.
    fn submit(&self, slot: u16, cmd: Command, answer: Answer) {
        self.note_touched(slot, &cmd);
        let (node, view) = (Rc::clone(&self.node), Rc::clone(&self.view));
        let latency = self.commit_latency.clone();
        boltq_shards::spawn(async move {
            let started = Instant::now();
            let outcome = run(&node, &view, slot, &cmd).await;
            latency.record(started.elapsed().as_micros() as u64);
            answer(outcome, None);
        })
        .detach();
    }

    /// Tried again each time this node applied something in this shard's slots, until it
    /// gets a message, the wait ends, or the connection closes.
    fn consume_waiting(&self, slot: u16, cmd: Command, wait_ms: u64, answer: Answer) {
        let Command::Consume { consumer, .. } = &cmd else {
            unreachable!("consume_waiting takes consumes")
        };
        let consumer = *consumer;
        self.note_touched(slot, &cmd);
        let running = self.long_polls_running.get();
        let wait_ms = if running >= LONG_POLLS_MAX {
            0
        } else {
            wait_ms
        };
        self.long_polls.borrow_mut().entry(consumer).or_default().0 += 1;
        self.long_polls_running.set(running + 1);
        let this = self.me.upgrade().expect("a replication in use is alive");
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
    fn disconnect(&self, consumer: ConsumerRef) {
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
            Replicated::submit(
                self,
                slot,
                Command::Disconnect { consumer },
                Box::new(|_, _| {}),
            );
        }
    }

    fn for_each_broker(&self, f: &mut dyn FnMut(u16, &Broker)) {
        self.node.for_each_broker(|slot, broker| f(slot, broker));
    }

    fn slot_status(&self) -> Vec<SlotStatus> {
        self.node.slot_status()
    }

    fn refused_links(&self) -> Vec<(u64, String)> {
        self.node.refused_links()
    }

    fn view(&self) -> ClusterView {
        let mut view = (*self.view).clone();
        if let Some(directory) = self.node.directory() {
            view.members = directory
                .members()
                .filter(|m| m.role != Role::Gone)
                .map(|m| (m.id(), m.name.clone(), m.addr.clone()))
                .collect();
            view.clients = directory
                .members()
                .map(|m| (m.id(), (m.tcp_addr.clone(), m.http_addr.clone())))
                .collect();
        }
        view
    }

    fn accept_members_change(&self, change: &MembersChange) -> Result<Vec<u8>, String> {
        let held = self.node.directory().unwrap_or_default();
        let now_ns = u64::try_from(now_ns()).unwrap_or(0);
        let mut directory = held.clone();
        if let Some(entry) = held.accept(change, now_ns, self.shards)? {
            log::info!("members change asked of this node: {change:?}");
            directory.merge([entry]);
        }
        Ok(directory.encode())
    }

    fn take_members(
        &self,
        directory: Vec<u8>,
        name: String,
        wait_ms: u64,
    ) -> Pin<Box<dyn Future<Output = usize>>> {
        let node = Rc::clone(&self.node);
        Box::pin(async move {
            match Directory::decode(bytes::Bytes::from(directory)) {
                Ok(directory) => node.learn(directory),
                Err(e) => {
                    log::error!("member directory from another shard refused: {e}");
                    return usize::MAX;
                }
            }
            node.settle(&name, Duration::from_millis(wait_ms)).await
        })
    }
}

/// The gateway's presence and typing travel on the same links (lossy, never through a
/// group).
impl crate::messaging::gateway::relay::PeerLinks for Replication {
    fn send(&self, to: Option<u64>, frame: Vec<u8>) {
        self.node.relay(to, &frame);
    }
}

impl Replication {
    /// Hands the peers' presence and typing frames to `sink` from now on.
    pub fn set_relay_sink(&self, sink: super::node::RelaySink) {
        self.node.set_relay_sink(sink);
    }
}

/// The messaging engine's side of the seam: its sends, cursor commits and dedup claims go
/// through the same slot groups as the queue plane's commands.
impl StreamReplication for Replication {
    fn submit(
        &self,
        slot: u16,
        cmd: StreamCommand,
    ) -> Pin<Box<dyn Future<Output = Result<StreamOutcome, StreamError>>>> {
        let node = Rc::clone(&self.node);
        let latency = self.commit_latency.clone();
        Box::pin(async move {
            let started = Instant::now();
            let timeout = Duration::from_millis(CLUSTER_SUBMIT_TIMEOUT_MS);
            let outcome = node.submit_stream(slot, &cmd, timeout).await;
            latency.record(started.elapsed().as_micros() as u64);
            outcome.map_err(|e| match e {
                ProposeError::Malformed => StreamError::Invalid(
                    "the record does not fit the replicated log's limits".into(),
                ),
                // Retryable: a device resends with the same client_msg_id, which the
                // group's dedup claims answer with the first copy if it was stored.
                e => StreamError::Limited(refusal_text(slot, &e)),
            })
        })
    }

    fn with_slot(&self, slot: u16, f: &mut dyn FnMut(&StreamSlot)) {
        self.node.with_streams(slot, |s| f(s));
    }

    fn leads(&self, slot: u16) -> bool {
        self.node.leader(slot) == Some(self.node.id())
    }

    fn read_from_peers(
        &self,
        slot: u16,
        read: StreamRead,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Record>, String>>>> {
        let node = Rc::clone(&self.node);
        Box::pin(async move {
            let timeout = Duration::from_millis(CLUSTER_SUBMIT_TIMEOUT_MS);
            node.read_stream(slot, &read, timeout).await
        })
    }
}

impl Replication {
    /// On the shard hosting the exchange slot: hands the plane the replica's exchange table
    /// when it is newer than the plane's (the plane passes it to its other shards).
    fn refresh_exchanges(&self, plane: &Plane) {
        let slot = crate::queue::server::exchanges::exchange_slot();
        let newer = self
            .node
            .with_broker(slot, |b| {
                let (version, table) = b.exchanges();
                (*version > plane.exchanges_version()).then(|| (*version, Arc::clone(table)))
            })
            .flatten();
        if let Some((version, table)) = newer {
            plane.install_replicated_exchanges(version, &table);
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
        let running = self.long_polls_running.get();
        assert!(running > 0, "a long-poll ended that never started");
        self.long_polls_running.set(running - 1);
        let mut polls = self.long_polls.borrow_mut();
        if let Some(entry) = polls.get_mut(&consumer) {
            entry.0 -= 1;
            if entry.0 == 0 {
                polls.remove(&consumer);
            }
        }
    }
}

/// How often the exchange slot's owner looks for a table its replica got other than by
/// applying entries (a snapshot from the leader).
pub const EXCHANGE_WATCH_MS: u64 = 1_000;

async fn exchange_watch(replication: Weak<Replication>, plane: Weak<Plane>) {
    loop {
        boltq_shards::sleep(Duration::from_millis(EXCHANGE_WATCH_MS)).await;
        match (replication.upgrade(), plane.upgrade()) {
            (Some(r), Some(p)) => r.refresh_exchanges(&p),
            _ => return,
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
            let known = leader.and_then(|id| match node.directory() {
                Some(d) => d.by_id(id).map(|m| {
                    let client = (m.tcp_addr.clone(), m.http_addr.clone());
                    (m.name.clone(), m.addr.clone(), client)
                }),
                None => view
                    .members
                    .iter()
                    .find(|m| m.0 == id)
                    .map(|m| (m.1.clone(), m.2.clone(), Default::default())),
            });
            let (leader_id, leader, (leader_tcp, leader_http)) = known.unwrap_or_default();
            Outcome::NotLeader {
                leader,
                leader_id,
                leader_tcp,
                leader_http,
            }
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
        ProposeError::MembershipPending
        | ProposeError::MembershipRefused(_)
        | ProposeError::Malformed => format!("internal error: {e:?}"),
    }
}
