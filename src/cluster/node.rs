//! One node's replication on one shard: the host (its slot replicas), their raft logs in
//! the shard's store, and the links to the peers, driven by one loop. Each round of the
//! loop is a commit round:
//!
//! 1. take what arrived (peers' batches, snapshot reports) and, when due, tick;
//! 2. `collect` every group: append their records to the store, send what may go before
//!    persistence (a leader's appends), answer the proposals that were applied;
//! 3. wait for the journal to make the records durable (one fdatasync for all groups),
//!    then send what had to wait (votes, append responses) and drop log fronts that
//!    snapshots made redundant.
//!
//! A store failure stops the node: its unsynced messages are never sent, every waiting
//! proposal is told, and later proposals are refused. The queue plane calls `submit`
//! (`queue/server/replicated.rs`) and carries out the applied commands' effects for its
//! own connections (`set_observer`).

use super::admission::Admission;
use super::directory::{Directory, Member, Role};
use super::forward::{self, Answer, SlotCommand};
use super::group::ElectionTicks;
use super::group_log::GroupLog;
use super::host::{Batches, Host, HostRefused};
use super::image_log::Recovered;
use super::membership::MemberChange;
use super::metrics::NodeMetrics;
use super::replica::{
    Applied, NotApplied, ProposalId, ProposalRefused, RestoreJob, Restored, SnapshotJob,
};
use super::shared_settings::SharedSettings;
use super::transport::{self, Incoming, Outbound};
use super::wire::SlotMessage;
use crate::messaging::engine::replicated::StreamRead;
use crate::messaging::slot::{
    Appended, StreamCommand, StreamOutcome, StreamSlot, StreamSlotConfig,
};
use crate::queue::broker::{Broker, BrokerConfig, Command, Effect, Outcome};
use crate::queue::server::replicated::SlotStatus;
use boltq_io::event::Event;
use boltq_io::listener::Listener;
use boltq_io::record::Record;
use boltq_io::Store;
use raft::prelude::ConfState;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a node waits before asking again when it knows no leader for a slot, or the
/// one it asked no longer leads (an election is under way).
pub const LEADER_RETRY_MS: u64 = 50;
/// Least time between two warnings about misrouted raft messages.
pub const MISROUTED_LOG_MS: u64 = 10_000;
/// How long a leader works on a forwarded command before it answers "timed out".
pub const FORWARDED_TIMEOUT_MS: u64 = 10_000;

pub struct NodeConfig {
    pub node_id: u64,
    /// The other voters and their raft addresses.
    pub peers: BTreeMap<u64, SocketAddr>,
    pub slots: Vec<u16>,
    pub tick_ms: u64,
    pub election: ElectionTicks,
    pub snapshot_every_entries: u64,
    pub broker: BrokerConfig,
    /// A node joining groups that exist: its replicas start empty and learn the
    /// membership from the leaders' snapshots (false: a founder, whose groups' voters are
    /// it and `peers`).
    pub joining: bool,
    /// Ticks between two rounds of leader balancing (`balance.rs`); 0 = never.
    pub balance_every_ticks: u64,
    /// With a member directory (`directory.rs`), the groups' memberships follow it and it
    /// is kept and gossiped; without, the members are `peers` and this node for good.
    pub membership: Option<MembershipConfig>,
    /// TLS on the links this node dials (`server.tls`); `None`: plain TCP. Its listener
    /// speaks TLS when it is built with the server's certificate.
    pub link_tls: Option<Arc<rustls::ClientConfig>>,
    /// The messaging state's settings, the same on every member.
    pub streams: StreamSlotConfig,
    /// What every member must share (`shared_settings.rs`): the links say it in their
    /// hello and refuse a peer that differs.
    pub shared: SharedSettings,
    /// The messaging plane's logs on this node, from the first round on (a restart applies
    /// its log again before anyone could set them later); `None`: the plane is off here
    /// (records are dropped, peers' reads refused).
    pub stream_hooks: Option<StreamHooks>,
    /// Slot states this node held as a single node, for a node that founds its cluster
    /// alone: each becomes its slot group's founding state (`GroupStorage::found_with`),
    /// unless the group is already past its founding — then an earlier start carried it.
    /// Once `start` returns, every slot named here holds its state in its group.
    pub founding_states: BTreeMap<u16, Vec<u8>>,
}

pub struct StreamHooks {
    pub sink: StreamSink,
    pub reader: StreamReader,
    pub installed: SnapshotsInstalled,
}

/// What a node needs to follow the member directory.
pub struct MembershipConfig {
    /// This node's name (its raft id is the name hashed).
    pub name: String,
    /// What this shard knew of the members at start.
    pub directory: Directory,
    /// Where this shard keeps its copy of the directory.
    pub path: PathBuf,
    /// Shard k links to shard k of every member, on the member's raft port + k.
    pub port_offset: u16,
    /// False while this node, started without cluster state, waits for a seed to accept
    /// its join (`server::cluster_join`): until then it takes no part in any group. If
    /// it was a member whose data was lost, its groups would otherwise vote again in
    /// terms they voted in (two leaders of a term) — its seeds refuse its join instead.
    pub admitted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Ticks between two sends of the directory to every peer: how soon a node that missed a
/// change (it was down, or its link was not up yet) learns it.
pub const GOSSIP_EVERY_TICKS: u64 = 10;
/// Ticks a shard whose groups are all quiescent lets pass between wake-ups (300 ms at the
/// server's 100 ms tick): its keepalives go out as often, twice within a peer's liveness
/// limit, and a silent leader is noticed up to that much later, still before the shortest
/// election timeout (`quiesce::LIVENESS_TICKS_MAX`).
pub const RESTING_TICKS_PER_WAKE: u32 = 3;
const _: () = assert!(
    super::quiesce::LIVENESS_TICKS_MAX + (RESTING_TICKS_PER_WAKE as u64)
        < super::group::ELECTION_TICKS.min as u64
);

/// Why a proposal has no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// This node does not lead the slot; `leader` is the one it knows of.
    NotLeader { leader: Option<u64> },
    /// The node hosts no replica of the slot.
    UnknownSlot(u16),
    /// `replica::PROPOSALS_MAX` proposals wait already.
    TooMany,
    /// A membership change is proposed and not yet applied: one at a time.
    MembershipPending,
    /// The command does not encode within its limits.
    Malformed,
    /// The group refused the membership change (e.g. it would leave no voter).
    MembershipRefused(String),
    /// The entry was not applied, or may not have been (`NotApplied`).
    NotApplied(NotApplied),
    /// No outcome in time: it may still be applied.
    TimedOut,
    /// The node stopped (its store failed).
    Stopped(String),
}

/// Told after every round that applied entries: the effects of every command applied (on
/// every replica, not only leaders: each node carries out those for its own connections)
/// and the slots that applied anything.
pub type Observer = Box<dyn Fn(Vec<(u16, Effect)>, &[u16])>;

/// Takes the stream records this node's replicas appended (`messaging::slot`), by slot, in
/// apply order, and writes them into the node's own logs of the partitions. Called in each
/// round before the raft logs' records of that round are appended to the store, so a raft
/// snapshot (which holds the partitions' positions, not their records) is never in the
/// journal ahead of the records it counts: once it is durable, so are they.
pub type StreamSink =
    Box<dyn Fn(Vec<(u16, Appended)>) -> Pin<Box<dyn Future<Output = Result<(), String>>>>>;

/// Told the slots whose state a snapshot from the leader replaced, once the round's stream
/// records are written (`StreamSink`): the partitions' copies may now end before the
/// positions the snapshot holds.
pub type SnapshotsInstalled = Box<dyn Fn(&[u16])>;

/// Reads records of this node's copy of a partition for a peer filling a hole in its own
/// (at most `forward::READ_BYTES_MAX` bytes and `READ_RECORDS_MAX` records, from the
/// first asked for, in order).
pub type StreamReader =
    Box<dyn Fn(StreamRead) -> Pin<Box<dyn Future<Output = Result<Vec<Record>, String>>>>>;

/// Takes the presence and typing frames peers relay (`messaging::gateway::relay`), as
/// they came, with the sending node's id.
pub type RelaySink = Rc<dyn Fn(u64, bytes::Bytes)>;

#[derive(Default)]
struct Waiter {
    answer: RefCell<Option<Result<Applied, NotApplied>>>,
    ready: Event,
}

/// Results of work done off the raft loop, by slot, for the next round.
type Finished<R> = RefCell<Vec<(u16, R)>>;

pub struct Node {
    cfg: NodeConfig,
    host: RefCell<Host>,
    store: Rc<Store>,
    outbound: RefCell<Outbound>,
    inbox: RefCell<Vec<(u64, Vec<SlotMessage>)>>,
    /// Snapshots encoded off the loop, for the next round to hand back.
    encoded: RefCell<Vec<(u16, Result<raft::prelude::Snapshot, String>)>>,
    /// Snapshots from leaders decoded off the loop, likewise.
    restored: RefCell<Vec<(u16, Restored)>>,
    wake: Event,
    waiting: RefCell<HashMap<(u16, ProposalId), Rc<Waiter>>>,
    /// Commands this node forwarded, by request id, until their reply.
    forwarded: RefCell<HashMap<u64, Rc<ReplyWaiter>>>,
    next_request_id: std::cell::Cell<u64>,
    failed: RefCell<Option<String>>,
    observer: RefCell<Option<Observer>>,
    stream_sink: RefCell<Option<Rc<StreamSink>>>,
    snapshots_installed: Option<SnapshotsInstalled>,
    stream_reader: RefCell<Option<Rc<StreamReader>>>,
    relay_sink: RefCell<Option<RelaySink>>,
    metrics: RefCell<NodeMetrics>,
    /// The leader each hosted group had at the end of the last round.
    leaders: RefCell<BTreeMap<u16, Option<u64>>>,
    /// Raft messages received for slots this node does not host, and when that was last
    /// logged (a sign that the nodes' `server.shards` differ).
    misrouted: std::cell::Cell<(u64, Option<Instant>)>,
    /// The member directory, when the node follows one (`NodeConfig::membership`).
    directory: RefCell<Option<Directory>>,
    /// Notified whenever the directory changed or entries were applied: what waits for a
    /// membership change to settle watches it.
    members_moved: Event,
    /// What the listener checks peers against, and whom it refused lately.
    admission: Rc<Admission>,
    /// Notified when the directory changed: the task that keeps it saved watches it.
    directory_changed: Event,
}

#[derive(Default)]
struct ReplyWaiter {
    answer: RefCell<Option<Answer>>,
    ready: Event,
}

/// A started node; dropping it stops its loop, its links and its listener (what a crash
/// does to them; the store is the caller's).
pub struct Running {
    pub node: Rc<Node>,
    _tasks: Vec<boltq_shards::Task<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // Forwarded commands still being served hold the node: they must find it stopped
        // and its links gone, as after a crash.
        self.node.outbound.borrow_mut().close();
        self.node.stop("the node was stopped".into());
    }
}

/// Writes each state of `states` as the founding snapshot of its slot's group, where that
/// group is still unfounded, and waits until all of them are fdatasync'ed: the caller
/// then forgets the single-node copies.
async fn found_with_states(
    store: &Rc<Store>,
    states: BTreeMap<u16, Vec<u8>>,
    voters: &[u64],
    cfg: &NodeConfig,
    logs: &mut BTreeMap<u16, GroupLog>,
    recovered: &mut BTreeMap<u16, Recovered>,
) -> Result<(), String> {
    if states.is_empty() {
        return Ok(());
    }
    if cfg.joining || voters != [cfg.node_id] {
        return Err(format!(
            "slots {:?} hold a single node's data, which only a node founding its cluster alone carries in",
            states.keys().collect::<Vec<_>>()
        ));
    }
    let mut last_lsn = None;
    for (slot, state) in states {
        let (Some(image), Some(log)) = (recovered.get_mut(&slot), logs.get_mut(&slot)) else {
            return Err(format!("slot {slot} is not hosted here"));
        };
        if !image.storage.is_unfounded() {
            continue;
        }
        log::info!("slot {slot}: founding its group with the state held as a single node");
        image.storage.found_with(state);
        let written = image.log.write(image.storage.take_writes());
        last_lsn = log.append_paced(written).await?.or(last_lsn);
    }
    if let Some(lsn) = last_lsn {
        store
            .wait_synced(lsn)
            .await
            .map_err(|e| format!("sync the founding states: {e}"))?;
    }
    Ok(())
}

impl Node {
    /// Replays every slot's raft log from `store`, starts the links to the peers, accepts
    /// theirs on `listener`, and starts the loop.
    pub async fn start(
        mut cfg: NodeConfig,
        store: Rc<Store>,
        listener: Listener,
    ) -> Result<Running, String> {
        let mut voters: Vec<u64> = Vec::new();
        if !cfg.joining {
            match &cfg.membership {
                Some(m) => voters = m.directory.founders(),
                None => voters.extend(cfg.peers.keys().copied().chain([cfg.node_id])),
            }
            voters.sort_unstable();
        }
        let mut logs = BTreeMap::new();
        let mut recovered = BTreeMap::new();
        for &slot in &cfg.slots {
            let (log, image) = GroupLog::open(&store, slot, &voters).await?;
            logs.insert(slot, log);
            recovered.insert(slot, image);
        }
        let founding_states = std::mem::take(&mut cfg.founding_states);
        found_with_states(
            &store,
            founding_states,
            &voters,
            &cfg,
            &mut logs,
            &mut recovered,
        )
        .await?;
        let election = cfg.election;
        let host = Host::new(
            cfg.node_id,
            &cfg.slots,
            |slot| recovered.remove(&slot).expect("opened above"),
            &cfg.broker,
            &cfg.streams,
            cfg.snapshot_every_entries,
            || election,
        )?;
        let (stream_sink, stream_reader, snapshots_installed) = match cfg.stream_hooks.take() {
            Some(h) => (
                Some(Rc::new(h.sink)),
                Some(Rc::new(h.reader)),
                Some(h.installed),
            ),
            None => (None, None, None),
        };
        let outbound = Outbound::start(cfg.node_id, &cfg.peers, cfg.link_tls.clone(), &cfg.shared);
        let admission = Rc::new(Admission::new(cfg.node_id, cfg.shared.clone()));
        let directory = cfg.membership.as_ref().map(|m| m.directory.clone());
        let admitted = cfg
            .membership
            .as_ref()
            .map(|m| std::sync::Arc::clone(&m.admitted));
        let node = Rc::new(Node {
            cfg,
            host: RefCell::new(host),
            store,
            outbound: RefCell::new(outbound),
            inbox: RefCell::new(Vec::new()),
            encoded: RefCell::new(Vec::new()),
            restored: RefCell::new(Vec::new()),
            wake: Event::default(),
            waiting: RefCell::new(HashMap::new()),
            forwarded: RefCell::new(HashMap::new()),
            next_request_id: std::cell::Cell::new(1),
            failed: RefCell::new(None),
            observer: RefCell::new(None),
            stream_sink: RefCell::new(stream_sink),
            snapshots_installed,
            stream_reader: RefCell::new(stream_reader),
            relay_sink: RefCell::new(None),
            metrics: RefCell::new(NodeMetrics::default()),
            leaders: RefCell::new(BTreeMap::new()),
            misrouted: std::cell::Cell::new((0, None)),
            directory: RefCell::new(None),
            members_moved: Event::default(),
            directory_changed: Event::default(),
            admission,
        });
        if let Some(directory) = directory {
            node.learn(directory);
        }
        let inbound = Rc::clone(&node);
        let deliver: transport::Deliver = Rc::new(move |from, incoming| match incoming {
            Incoming::Raft(_)
                if admitted
                    .as_ref()
                    .is_some_and(|a| !a.load(std::sync::atomic::Ordering::Acquire)) => {}
            Incoming::Raft(batch) => {
                inbound.inbox.borrow_mut().push((from, batch));
                inbound.wake.notify();
            }
            Incoming::Forward(request) => {
                boltq_shards::spawn(Rc::clone(&inbound).serve_forwarded(from, request)).detach();
            }
            Incoming::Reply(reply) => inbound.take_reply(reply),
            Incoming::Directory(directory) => inbound.learn(directory),
            Incoming::Relay(frame) => {
                let sink = inbound.relay_sink.borrow().clone();
                if let Some(sink) = sink {
                    sink(from, frame);
                }
            }
        });
        let mut tasks = vec![
            transport::serve(listener, Rc::clone(&node.admission), deliver),
            boltq_shards::spawn(Rc::clone(&node).run(logs)),
        ];
        if let Some(m) = &node.cfg.membership {
            let path = m.path.clone();
            tasks.push(boltq_shards::spawn(
                Rc::clone(&node).keep_directory_saved(path),
            ));
        }
        Ok(Running {
            node,
            _tasks: tasks,
        })
    }

    pub fn id(&self) -> u64 {
        self.cfg.node_id
    }

    /// The peers whose links this node refused lately, by raft id, with why (their shared
    /// settings differ).
    pub fn refused_links(&self) -> Vec<(u64, String)> {
        self.admission.refused_peers()
    }

    /// Links this node to one that joined (before the membership change that adds it).
    pub fn add_peer(&self, id: u64, addr: SocketAddr) {
        self.outbound.borrow_mut().add_peer(id, addr);
    }

    /// Counters of the link to node `to`.
    pub fn link_stats(&self, to: u64) -> Option<transport::LinkStats> {
        self.outbound.borrow().stats(to)
    }

    /// The leader of `slot` this node knows of.
    pub fn leader(&self, slot: u16) -> Option<u64> {
        self.host.borrow().replica(slot)?.group().leader()
    }

    /// Counts into `registry` from now on (`metrics.rs`).
    pub fn set_metrics(&self, registry: &boltq_shards::metrics::Registry) {
        let metrics = NodeMetrics::register(registry);
        self.outbound.borrow().count_into(metrics.links.clone());
        *self.metrics.borrow_mut() = metrics;
    }

    /// Sets what is told of the effects of applied commands (replacing any earlier one).
    pub fn set_observer(&self, observer: Observer) {
        *self.observer.borrow_mut() = Some(observer);
    }

    /// Where the stream records applied from now on go. Without one they are dropped (a
    /// node with the messaging plane off keeps the partitions' positions only).
    pub fn set_stream_sink(&self, sink: StreamSink) {
        *self.stream_sink.borrow_mut() = Some(Rc::new(sink));
    }

    /// From now on peers' presence and typing frames go to `sink` (before, they are
    /// dropped: the gateway is not up).
    pub fn set_relay_sink(&self, sink: RelaySink) {
        *self.relay_sink.borrow_mut() = Some(sink);
    }

    /// Sends a presence or typing frame to node `to`, or to every peer; lossy (a frame a
    /// link cannot take is dropped, and the relay repairs what it must).
    pub fn relay(&self, to: Option<u64>, frame: &[u8]) {
        let outbound = self.outbound.borrow();
        match to {
            Some(to) => {
                outbound.send_relay(to, frame);
            }
            None => {
                for to in outbound.peers() {
                    outbound.send_relay(to, frame);
                }
            }
        }
    }

    /// Reads slot `slot`'s messaging state as this node applied it (committed state).
    pub fn with_streams<R>(&self, slot: u16, f: impl FnOnce(&StreamSlot) -> R) -> Option<R> {
        Some(f(self.host.borrow().replica(slot)?.streams()))
    }

    /// Every hosted group's leader, term, commit and applied index, by slot.
    pub fn slot_status(&self) -> Vec<SlotStatus> {
        self.host
            .borrow()
            .replicas()
            .map(|(slot, replica)| SlotStatus {
                slot,
                voters: replica.group().conf_state().voters,
                learners: replica.group().conf_state().learners,
                leader: replica.group().leader(),
                term: replica.group().term(),
                commit: replica.group().commit_index(),
                applied: replica.applied(),
                lag: replica.group().follower_lag_max(),
                quiescent: replica.group().is_quiesced(),
            })
            .collect()
    }

    /// Calls `f` with every hosted slot's broker as this replica has applied it.
    pub fn for_each_broker(&self, mut f: impl FnMut(u16, &Broker)) {
        for (slot, replica) in self.host.borrow().replicas() {
            f(slot, replica.broker());
        }
    }

    /// Reads slot `slot`'s broker as this replica has applied it.
    pub fn with_broker<R>(&self, slot: u16, f: impl FnOnce(&Broker) -> R) -> Option<R> {
        Some(f(self.host.borrow().replica(slot)?.broker()))
    }

    /// Proposes `cmd` to slot `slot`'s group (this node must lead it) and waits up to
    /// `timeout` for the outcome of its entry: a quorum has it on disk and this replica
    /// applied it.
    pub async fn propose(
        &self,
        slot: u16,
        cmd: &Command,
        timeout: Duration,
    ) -> Result<Outcome, ProposeError> {
        let cmd = SlotCommand::Queue(cmd.clone());
        match self.propose_any(slot, &cmd, timeout).await? {
            Applied::Command(outcome) => Ok(outcome),
            Applied::Membership(_) | Applied::Stream(_) => {
                unreachable!("a command's entry applies as a command")
            }
        }
    }

    /// Either plane's command, as `propose` (the outcome is `Applied::Command` or
    /// `Applied::Stream` accordingly).
    async fn propose_any(
        &self,
        slot: u16,
        cmd: &SlotCommand,
        timeout: Duration,
    ) -> Result<Applied, ProposeError> {
        self.check_running()?;
        if let SlotCommand::Queue(cmd) = cmd {
            let answered = self.host.borrow().answered_without_entry(slot, cmd);
            if let Some(outcome) = answered {
                self.metrics.borrow().answered_without_entry.inc();
                return Ok(Applied::Command(outcome));
            }
        }
        let placed = match cmd {
            SlotCommand::Queue(cmd) => self.host.borrow_mut().propose(slot, cmd),
            SlotCommand::Stream(cmd) => self.host.borrow_mut().propose_stream(slot, cmd),
        };
        self.wait_for(slot, placed, timeout).await
    }

    /// Proposes a membership change of slot `slot`'s group (this node must lead it) and
    /// waits up to `timeout` for it to be applied here.
    pub async fn change_membership(
        &self,
        slot: u16,
        changes: &[MemberChange],
        timeout: Duration,
    ) -> Result<ConfState, ProposeError> {
        self.check_running()?;
        let placed = self.host.borrow_mut().propose_membership(slot, changes);
        match self.wait_for(slot, placed, timeout).await? {
            Applied::Membership(result) => result.map_err(ProposeError::MembershipRefused),
            Applied::Command(_) | Applied::Stream(_) => {
                unreachable!("a membership entry applies as one")
            }
        }
    }

    /// Slot `slot`'s membership as this replica applied it.
    pub fn membership(&self, slot: u16) -> Option<ConfState> {
        Some(self.host.borrow().replica(slot)?.group().conf_state())
    }

    /// Runs `cmd` on slot `slot`'s leader, wherever it is, and waits up to `timeout` for
    /// its outcome: proposed here when this node leads, else forwarded to the leader it
    /// knows and the reply relayed. While no leader is known (an election), it asks again
    /// every `LEADER_RETRY_MS`; only when `timeout` passes without one is the answer
    /// `NotLeader` (what a v1 client gets as NOT_LEADER). A forwarded command whose leader
    /// is lost before it answers gets `NotApplied(Unknown)` (it may have been applied; the
    /// client decides whether to retry), as soon as this node sees the leader change.
    pub async fn submit(
        &self,
        slot: u16,
        cmd: &Command,
        timeout: Duration,
    ) -> Result<Outcome, ProposeError> {
        let cmd = SlotCommand::Queue(cmd.clone());
        match self.submit_any(slot, &cmd, timeout).await? {
            Applied::Command(outcome) => Ok(outcome),
            Applied::Membership(_) | Applied::Stream(_) => {
                unreachable!("a command's entry applies as a command")
            }
        }
    }

    /// A messaging command (`messaging::slot`), run on the slot's leader as `submit` runs
    /// a queue command: forwarded when another node leads, the outcome relayed.
    pub async fn submit_stream(
        &self,
        slot: u16,
        cmd: &StreamCommand,
        timeout: Duration,
    ) -> Result<StreamOutcome, ProposeError> {
        // Checked here once, so that a forwarded one is never refused by the encoder.
        crate::messaging::slot::command::encode(cmd, &mut Vec::new())
            .map_err(|_| ProposeError::Malformed)?;
        let cmd = SlotCommand::Stream(cmd.clone());
        match self.submit_any(slot, &cmd, timeout).await? {
            Applied::Stream(outcome) => Ok(outcome),
            Applied::Membership(_) | Applied::Command(_) => {
                unreachable!("a messaging command's entry applies as one")
            }
        }
    }

    /// Runs `cmd` on the slot's leader, wherever it is; a refusal is counted by why.
    async fn submit_any(
        &self,
        slot: u16,
        cmd: &SlotCommand,
        timeout: Duration,
    ) -> Result<Applied, ProposeError> {
        let result = self.submit_until_leader_answers(slot, cmd, timeout).await;
        if let Err(e) = &result {
            self.metrics.borrow().count_refusal(e);
        }
        result
    }

    async fn submit_until_leader_answers(
        &self,
        slot: u16,
        cmd: &SlotCommand,
        timeout: Duration,
    ) -> Result<Applied, ProposeError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let leader = match self.propose_any(slot, cmd, left).await {
                Err(ProposeError::NotLeader { leader }) => leader,
                done => return done,
            };
            let answer = match leader {
                Some(leader) if leader != self.id() => self.forward(leader, slot, cmd, left).await,
                _ => None,
            };
            match answer {
                Some(Answer::Applied(outcome)) => return Ok(Applied::Command(outcome)),
                Some(Answer::Records(_)) => {
                    return Err(ProposeError::Stopped(
                        "a command answered with records".into(),
                    ))
                }
                Some(Answer::StreamApplied(outcome)) => return Ok(Applied::Stream(outcome)),
                Some(Answer::NotApplied(why)) => return Err(ProposeError::NotApplied(why)),
                Some(Answer::TimedOut) => return Err(ProposeError::TimedOut),
                Some(Answer::TooMany) => return Err(ProposeError::TooMany),
                Some(Answer::Stopped(why)) => return Err(ProposeError::Stopped(why)),
                Some(Answer::UnknownSlot) => return Err(ProposeError::UnknownSlot(slot)),
                // No leader known, the one asked no longer leads, or the request could
                // not be sent (it never left: asking again cannot apply it twice).
                Some(Answer::NotLeader(_)) | None => {}
            }
            let retry = Duration::from_millis(LEADER_RETRY_MS);
            if Instant::now() + retry >= deadline {
                return Err(ProposeError::NotLeader { leader });
            }
            boltq_shards::sleep(retry).await;
        }
    }

    /// Sends `cmd` to node `leader` and waits for its answer. None: it could not be sent.
    async fn forward(
        &self,
        leader: u64,
        slot: u16,
        cmd: &SlotCommand,
        timeout: Duration,
    ) -> Option<Answer> {
        let asked = forward::Asked::Command(cmd.clone());
        self.ask(leader, slot, asked, timeout, true).await
    }

    /// Reads records of a partition from another node's copy (`StreamRead`): the slot's
    /// leader first, then each other member, until one sends them from `read.from_seq`. A
    /// copy whose retention removed that record sends its records from its first one; the
    /// earliest of those is the answer only when no member had `read.from_seq`. Err: none
    /// sent any within `timeout` (each says why).
    pub async fn read_stream(
        &self,
        slot: u16,
        read: &StreamRead,
        timeout: Duration,
    ) -> Result<Vec<Record>, String> {
        let mut peers: Vec<u64> = self.leader(slot).into_iter().collect();
        if let Some(conf) = self.membership(slot) {
            peers.extend(conf.voters.iter().chain(&conf.learners).copied());
        }
        peers.retain(|&p| p != self.id());
        peers.dedup();
        let mut why = Vec::new();
        let mut later: Option<Vec<Record>> = None;
        for peer in peers {
            let asked = forward::Asked::Read(read.clone());
            match self.ask(peer, slot, asked, timeout, false).await {
                Some(Answer::Records(records)) if records.is_empty() => {
                    why.push(format!("node {peer}: no records"))
                }
                Some(Answer::Records(records)) if records[0].seq == read.from_seq => {
                    return Ok(records)
                }
                Some(Answer::Records(records)) => {
                    let first = records[0].seq;
                    why.push(format!("node {peer}: its records start at {first}"));
                    if later.as_ref().is_none_or(|l| first < l[0].seq) {
                        later = Some(records);
                    }
                }
                Some(Answer::Stopped(e)) => why.push(format!("node {peer}: {e}")),
                Some(other) => why.push(format!("node {peer}: {other:?}")),
                None => why.push(format!("node {peer}: not reachable")),
            }
        }
        later.ok_or_else(|| format!("no member sent the records: {}", why.join("; ")))
    }

    /// Sends `asked` to node `peer` and waits for its answer. None: it could not be sent.
    /// With `until_leader_changes`, the wait also ends once `peer` no longer leads `slot`.
    async fn ask(
        &self,
        peer: u64,
        slot: u16,
        asked: forward::Asked,
        timeout: Duration,
        until_leader_changes: bool,
    ) -> Option<Answer> {
        let leader = peer;
        let id = self.next_request_id.get();
        self.next_request_id.set(id + 1);
        let request = forward::Request { id, slot, asked };
        if !self.outbound.borrow().send_forward(peer, &request) {
            return None;
        }
        let waiter = Rc::new(ReplyWaiter::default());
        self.forwarded.borrow_mut().insert(id, Rc::clone(&waiter));
        let deadline = Instant::now() + timeout;
        let answer = loop {
            let ticket = waiter.ready.ticket();
            if let Some(answer) = waiter.answer.borrow_mut().take() {
                break answer;
            }
            // Sent and unanswered: it may have been applied, so it is not sent again. The
            // wait ends once this node sees another leader (or none): a leader that died
            // or was deposed never answers.
            if until_leader_changes && self.leader(slot) != Some(leader) {
                break Answer::NotApplied(NotApplied::Unknown);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Answer::TimedOut;
            }
            let step = left.min(Duration::from_millis(LEADER_RETRY_MS));
            boltq_shards::timeout(step, waiter.ready.wait(ticket)).await;
        };
        self.forwarded.borrow_mut().remove(&id);
        Some(answer)
    }

    fn take_reply(&self, reply: forward::Reply) {
        if let Some(waiter) = self.forwarded.borrow().get(&reply.id) {
            *waiter.answer.borrow_mut() = Some(reply.answer);
            waiter.ready.notify();
        }
    }

    /// Runs a command another node forwarded and answers it. It is not forwarded again:
    /// a node that no longer leads says so, and the sender asks whoever leads now.
    async fn serve_forwarded(self: Rc<Self>, from: u64, request: forward::Request) {
        let timeout = Duration::from_millis(FORWARDED_TIMEOUT_MS);
        let cmd = match request.asked {
            forward::Asked::Command(cmd) => cmd,
            forward::Asked::Read(read) => {
                let reader = self.stream_reader.borrow().clone();
                let answer = match reader {
                    Some(reader) => match reader(read).await {
                        Ok(records) => Answer::Records(records),
                        Err(e) => Answer::Stopped(e),
                    },
                    None => Answer::Stopped("the messaging plane is off on this node".into()),
                };
                let reply = forward::Reply {
                    id: request.id,
                    answer,
                };
                self.outbound.borrow().send_reply(from, &reply);
                return;
            }
        };
        let answer = match self.propose_any(request.slot, &cmd, timeout).await {
            Ok(Applied::Command(outcome)) => Answer::Applied(outcome),
            Ok(Applied::Stream(outcome)) => Answer::StreamApplied(outcome),
            Ok(Applied::Membership(_)) => unreachable!("commands apply as commands"),
            Err(ProposeError::NotLeader { leader }) => Answer::NotLeader(leader),
            Err(ProposeError::NotApplied(why)) => Answer::NotApplied(why),
            Err(ProposeError::TimedOut) => Answer::TimedOut,
            Err(ProposeError::TooMany) => Answer::TooMany,
            Err(ProposeError::Stopped(why)) => Answer::Stopped(why),
            Err(ProposeError::UnknownSlot(_)) => Answer::UnknownSlot,
            Err(
                e @ (ProposeError::MembershipPending
                | ProposeError::MembershipRefused(_)
                | ProposeError::Malformed),
            ) => Answer::Stopped(format!("{e:?}")),
        };
        let reply = forward::Reply {
            id: request.id,
            answer,
        };
        self.outbound.borrow().send_reply(from, &reply);
    }

    fn check_running(&self) -> Result<(), ProposeError> {
        match self.failed.borrow().clone() {
            Some(e) => Err(ProposeError::Stopped(e)),
            None => Ok(()),
        }
    }

    async fn wait_for(
        &self,
        slot: u16,
        placed: Result<ProposalId, HostRefused>,
        timeout: Duration,
    ) -> Result<Applied, ProposeError> {
        let id = placed.map_err(|e| match e {
            HostRefused::UnknownSlot(slot) => ProposeError::UnknownSlot(slot),
            HostRefused::Proposal(ProposalRefused::NotLeader { leader }) => {
                ProposeError::NotLeader { leader }
            }
            HostRefused::Proposal(ProposalRefused::TooMany) => ProposeError::TooMany,
            HostRefused::Proposal(ProposalRefused::MembershipPending) => {
                ProposeError::MembershipPending
            }
            HostRefused::Proposal(ProposalRefused::Malformed) => ProposeError::Malformed,
        })?;
        let waiter = Rc::new(Waiter::default());
        self.waiting
            .borrow_mut()
            .insert((slot, id), Rc::clone(&waiter));
        self.wake.notify();
        let answer = boltq_shards::timeout(timeout, async {
            loop {
                let ticket = waiter.ready.ticket();
                if let Some(answer) = waiter.answer.borrow_mut().take() {
                    return answer;
                }
                waiter.ready.wait(ticket).await;
            }
        })
        .await;
        self.waiting.borrow_mut().remove(&(slot, id));
        match answer {
            None => Err(ProposeError::TimedOut),
            Some(Ok(applied)) => Ok(applied),
            Some(Err(NotApplied::Unknown)) if self.failed.borrow().is_some() => Err(
                ProposeError::Stopped(self.failed.borrow().clone().unwrap_or_default()),
            ),
            Some(Err(why)) => Err(ProposeError::NotApplied(why)),
        }
    }

    async fn run(self: Rc<Self>, mut logs: BTreeMap<u16, GroupLog>) {
        let tick = Duration::from_millis(self.cfg.tick_ms);
        let mut next_tick = Instant::now() + tick;
        let mut ticks: u64 = 0;
        loop {
            let ticket = self.wake.ticket();
            // A shard whose groups all rest (`quiesce.rs`) wakes for every few ticks only,
            // unless news comes or a broker timer falls due: a wake-up costs more than the
            // ticks it carries.
            let rest = tick * RESTING_TICKS_PER_WAKE;
            let until_ns = boltq_io::store::now_ns() + rest.as_nanos() as i64;
            let stride = if self.host.borrow().at_rest_until(until_ns) {
                RESTING_TICKS_PER_WAKE
            } else {
                1
            };
            let wake_at = next_tick + tick * (stride - 1);
            let now = Instant::now();
            let idle = self.inbox.borrow().is_empty() && !self.host.borrow().has_dirty();
            if idle && now < wake_at {
                boltq_shards::timeout(wake_at - now, self.wake.wait(ticket)).await;
            }
            let now = Instant::now();
            let due = if now < next_tick {
                0
            } else {
                let late = (now - next_tick).as_millis() / tick.as_millis().max(1);
                (1 + late as u32).min(stride)
            };
            if due > 0 {
                // Ticks stay on this node's own grid, whatever wakes the loop: were news to
                // move it, nodes that hear the same keepalives would tick in step, and the
                // followers of a silent leader would time out in step too and split votes.
                next_tick += tick * due;
                if next_tick <= now {
                    next_tick = now + tick;
                }
            }
            if let Err(e) = self.round(&mut logs, due).await {
                log::error!("raft node {} stopped: {e}", self.cfg.node_id);
                self.stop(e);
                return;
            }
            for _ in 0..due {
                ticks += 1;
                let every = self.cfg.balance_every_ticks;
                if every > 0 && ticks.is_multiple_of(every) {
                    let started = self.host.borrow_mut().balance_leaders();
                    self.metrics.borrow().transfers.add(started as u64);
                }
                if ticks.is_multiple_of(GOSSIP_EVERY_TICKS) {
                    self.gossip();
                }
            }
        }
    }

    /// Ticks `ticks` times, takes in what peers sent, and carries out what the groups
    /// decided.
    async fn round(
        self: &Rc<Self>,
        logs: &mut BTreeMap<u16, GroupLog>,
        ticks: u32,
    ) -> Result<(), String> {
        let inbox = std::mem::take(&mut *self.inbox.borrow_mut());
        let encoded = std::mem::take(&mut *self.encoded.borrow_mut());
        let restored = std::mem::take(&mut *self.restored.borrow_mut());
        let reports = self.outbound.borrow().take_snapshot_reports();
        let (out, busy) = {
            let mut host = self.host.borrow_mut();
            // The ticks passed before the news now in the inbox arrived (which would have
            // woken the loop at once): they come first, the news is judged on a fresh clock.
            for _ in 0..ticks {
                host.tick(boltq_io::store::now_ns());
            }
            let mut misrouted = 0;
            for (from, batch) in inbox {
                misrouted += host.receive(from, batch) as u64;
            }
            self.note_misrouted(misrouted);
            for (slot, to, delivered) in reports {
                host.report_snapshot(slot, to, delivered);
            }
            for (slot, snapshot) in encoded {
                host.snapshot_encoded(slot, snapshot);
            }
            for (slot, state) in restored {
                host.restored(slot, state);
            }
            // A round for peers' keepalives alone (quiescent groups) changes nothing to count.
            let busy = host.has_dirty();
            (host.collect(), busy)
        };
        self.encode_snapshots(out.snapshot_jobs);
        self.decode_snapshots(out.restore_jobs);
        if !out.appended.is_empty() {
            let sink = self.stream_sink.borrow().clone();
            if let Some(sink) = sink {
                sink(out.appended).await?;
            }
        }
        if let (Some(told), false) = (&self.snapshots_installed, out.installed.is_empty()) {
            told(&out.installed);
        }
        let mut lsn = None;
        for (slot, written) in out.written {
            let log = logs.get_mut(&slot).expect("a log per slot");
            lsn = lsn.max(log.append_round(written).await?);
        }
        self.send(out.batches);
        for (slot, answer) in out.answers {
            if let Some(waiter) = self.waiting.borrow().get(&(slot, answer.id)) {
                *waiter.answer.borrow_mut() = Some(answer.outcome);
                waiter.ready.notify();
            }
        }
        if busy {
            self.count(&out.applied, out.installed.len() as u64, &out.collected);
        }
        if ticks > 0 {
            self.refresh_gauges();
        }
        self.tell_observer(out.effects, &out.applied);
        if !self.host.borrow().needs_sync() {
            return Ok(());
        }
        if let Some(lsn) = lsn {
            self.store
                .wait_durable(lsn)
                .await
                .map_err(|e| format!("sync the raft logs: {e}"))?;
        }
        let batches = self.host.borrow_mut().synced();
        self.send(batches);
        for log in logs.values_mut().filter(|log| log.has_front_to_drop()) {
            log.drop_covered_front().await?;
        }
        Ok(())
    }

    /// Encodes each snapshot taken on the blocking pool and hands it to the next round:
    /// the loop goes on meanwhile (`replica.rs` says why).
    fn encode_snapshots(self: &Rc<Self>, jobs: Vec<(u16, SnapshotJob)>) {
        self.off_the_loop(jobs, SnapshotJob::encode, |node| &node.encoded);
    }

    /// Decodes each snapshot installed from a leader likewise.
    fn decode_snapshots(self: &Rc<Self>, jobs: Vec<(u16, RestoreJob)>) {
        self.off_the_loop(jobs, RestoreJob::decode, |node| &node.restored);
    }

    /// Runs `work` on each slot's job on the blocking pool; its result goes into the list
    /// `done` names, for the next round, and wakes the loop.
    fn off_the_loop<J: Send + 'static, R: Send + 'static>(
        self: &Rc<Self>,
        jobs: Vec<(u16, J)>,
        work: fn(J) -> R,
        done: fn(&Node) -> &Finished<R>,
    ) {
        for (slot, job) in jobs {
            let node = Rc::downgrade(self);
            boltq_shards::spawn(async move {
                let result = boltq_shards::spawn_blocking(move || work(job)).await;
                if let Some(node) = node.upgrade() {
                    done(&node).borrow_mut().push((slot, result));
                    node.wake.notify();
                }
            })
            .detach();
        }
    }

    /// Counts a round: entries applied, snapshots installed, and leader changes of the
    /// groups it collected (no other group's leader can have changed).
    fn count(&self, applied: &[(u16, u64, u64)], snapshots_installed: u64, collected: &[u16]) {
        let metrics = self.metrics.borrow();
        metrics.applied.add(applied.len() as u64);
        metrics.snapshots_installed.add(snapshots_installed);
        let host = self.host.borrow();
        let mut leaders = self.leaders.borrow_mut();
        for &slot in collected {
            let Some(replica) = host.replica(slot) else {
                continue;
            };
            let leader = replica.group().leader();
            match leaders.get_mut(&slot) {
                Some(before) if *before != leader => {
                    *before = leader;
                    metrics.leader_changes.inc();
                }
                Some(_) => {}
                None => {
                    leaders.insert(slot, leader);
                }
            }
        }
    }

    /// Sets the gauges that look at every group: how many this node leads, knows no leader
    /// of, or rests, and the largest follower lag. Once per tick, not per round: a walk of
    /// all 256 groups for every message was an eighth of a busy node's CPU.
    fn refresh_gauges(&self) {
        let metrics = self.metrics.borrow();
        let host = self.host.borrow();
        let (mut led, mut without, mut lag) = (0, 0, 0);
        for (_, replica) in host.replicas() {
            lag = lag.max(replica.group().follower_lag_max());
            let leader = replica.group().leader();
            led += i64::from(leader == Some(self.cfg.node_id));
            without += i64::from(leader.is_none());
        }
        metrics.slots_led.set(led);
        metrics.groups_quiescent.set(host.quiesced() as i64);
        metrics.slots_without_leader.set(without);
        metrics
            .follower_lag
            .set(i64::try_from(lag).unwrap_or(i64::MAX));
    }

    fn count_snapshots_sent(&self, batches: &Batches) {
        let sent = batches
            .values()
            .flatten()
            .flatten()
            .filter(|m| m.msg.get_msg_type() == raft::prelude::MessageType::MsgSnapshot)
            .count();
        self.metrics.borrow().snapshots_sent.add(sent as u64);
    }

    fn tell_observer(&self, effects: Vec<(u16, Effect)>, applied: &[(u16, u64, u64)]) {
        if applied.is_empty() {
            return;
        }
        self.members_moved.notify();
        let mut slots: Vec<u16> = applied.iter().map(|&(slot, _, _)| slot).collect();
        slots.dedup();
        if let Some(observer) = self.observer.borrow().as_ref() {
            observer(effects, &slots);
        }
    }

    /// Counts raft messages for slots this node does not host and says so at most every
    /// `MISROUTED_LOG_MS`: peers that place slots on shards differently never converge.
    fn note_misrouted(&self, count: u64) {
        if count == 0 {
            return;
        }
        let (total, logged) = self.misrouted.get();
        let total = total + count;
        let now = Instant::now();
        let due =
            logged.is_none_or(|at| now.duration_since(at).as_millis() as u64 >= MISROUTED_LOG_MS);
        if due {
            log::warn!(
                "raft node {}: {total} messages for slots this shard does not host (does every node run the same server.shards?)",
                self.cfg.node_id
            );
        }
        self.misrouted
            .set((total, if due { Some(now) } else { logged }));
    }

    fn send(&self, batches: Batches) {
        self.count_snapshots_sent(&batches);
        let messages = batches.values().flatten().map(Vec::len).sum::<usize>();
        self.metrics.borrow().messages_sent.add(messages as u64);
        for (to, batches) in batches {
            for batch in batches {
                self.outbound.borrow().send(to, &batch);
            }
        }
    }

    /// Takes what `incoming` knows that this node did not (`Directory::merge`): links to
    /// the members it names, their wants for the groups, and its own copy saved (by
    /// `keep_directory_saved`) and sent to every peer when anything changed. Without
    /// `NodeConfig::membership`, ignored.
    pub fn learn(self: &Rc<Self>, incoming: Directory) {
        let Some(cfg) = &self.cfg.membership else {
            return;
        };
        let changed = self
            .directory
            .borrow_mut()
            .get_or_insert_with(Directory::default)
            .merge(incoming.members().cloned());
        if changed.is_empty() {
            return;
        }
        let merged = self.directory().expect("set above");
        for member in changed.iter().filter(|m| m.id() != self.cfg.node_id) {
            self.link_to(member, cfg.port_offset);
        }
        self.host.borrow_mut().set_wants(merged.wants());
        self.outbound.borrow().set_greeting(&merged);
        for m in &changed {
            log::info!("member {} ({}) at {}: {:?}", m.name, m.id(), m.addr, m.role);
        }
        self.gossip();
        self.directory_changed.notify();
        self.members_moved.notify();
    }

    /// Saves the directory at `path` whenever it changed, one save at a time on the
    /// blocking pool (the file is synced: never on the shard), the newest state each time.
    /// A change not yet saved when the process stops is gossiped back by the peers.
    async fn keep_directory_saved(self: Rc<Self>, path: PathBuf) {
        let mut saved: Option<Directory> = None;
        loop {
            let ticket = self.directory_changed.ticket();
            let now = self.directory();
            if now.is_none() || now == saved {
                self.directory_changed.wait(ticket).await;
                continue;
            }
            let (directory, at) = (now.clone().expect("checked"), path.clone());
            if let Err(e) = boltq_shards::spawn_blocking(move || directory.save(&at)).await {
                log::error!("save the member directory {}: {e}", path.display());
            }
            saved = now;
        }
    }

    /// Starts (or moves) the link to `member`'s shard of this one, once its address is
    /// resolved (names on the blocking pool). An address that does not resolve is logged
    /// and left: the next change of the entry tries again.
    fn link_to(self: &Rc<Self>, member: &Member, port_offset: u16) {
        if member.role == Role::Gone {
            return;
        }
        let Some((host, port)) = crate::config::split_host_port(&member.addr) else {
            log::warn!(
                "member {}: raft address {:?} is not host:port",
                member.name,
                member.addr
            );
            return;
        };
        let Some(port) = port.checked_add(port_offset) else {
            log::warn!(
                "member {}: raft port {port} + shard {port_offset} is past 65535",
                member.name
            );
            return;
        };
        let (node, id, name, host) = (
            Rc::clone(self),
            member.id(),
            member.name.clone(),
            host.to_string(),
        );
        boltq_shards::spawn(async move {
            match boltq_io::connect::resolve(&host, port, 1).await {
                Ok(addrs) => node.outbound.borrow_mut().add_peer(id, addrs[0]),
                Err(e) => log::warn!("member {name}: {e}"),
            }
        })
        .detach();
    }

    /// Sends the directory to every peer (links that are down drop it; the next round
    /// sends it again).
    fn gossip(&self) {
        let Some(encoded) = self.directory.borrow().as_ref().map(Directory::encode) else {
            return;
        };
        let outbound = self.outbound.borrow();
        for to in outbound.peers() {
            outbound.send_directory(to, &encoded);
        }
    }

    /// The member directory this node follows (None without `NodeConfig::membership`).
    pub fn directory(&self) -> Option<Directory> {
        self.directory.borrow().clone()
    }

    /// Hosted groups whose applied membership does not yet have `name` as the directory
    /// wants it: in the group (as a learner at least) for a member, absent for one that
    /// left.
    pub fn groups_unsettled(&self, name: &str) -> usize {
        let Some(role) = self
            .directory
            .borrow()
            .as_ref()
            .and_then(|d| d.get(name).map(|m| m.role))
        else {
            return 0;
        };
        let id = super::directory::raft_id(name);
        self.host
            .borrow()
            .replicas()
            .filter(|(_, r)| {
                let conf = r.group().conf_state();
                let voter = conf.voters.contains(&id) && conf.voters_outgoing.is_empty();
                let learner = conf.learners.contains(&id);
                let absent = !voter
                    && !learner
                    && !conf.voters.contains(&id)
                    && !conf.voters_outgoing.contains(&id);
                // A joining voter counts once added: it is a learner until it caught up,
                // and it catches up only once its join was answered (`admitted`).
                let settled = match role {
                    Role::Voter | Role::NonVoter => voter || learner,
                    Role::Gone => absent,
                };
                !settled
            })
            .count()
    }

    /// Waits until every hosted group has `name` as the directory wants it, or `timeout`
    /// passes; returns the groups still unsettled.
    pub async fn settle(&self, name: &str, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let ticket = self.members_moved.ticket();
            let left = self.groups_unsettled(name);
            let now = Instant::now();
            if left == 0 || now >= deadline {
                return left;
            }
            // Applied entries notify too, but a poll bounds the wait if none come.
            let step = (deadline - now).min(Duration::from_millis(200));
            boltq_shards::timeout(step, self.members_moved.wait(ticket)).await;
        }
    }

    fn stop(&self, why: String) {
        *self.failed.borrow_mut() = Some(why);
        for waiter in self.waiting.borrow().values() {
            *waiter.answer.borrow_mut() = Some(Err(NotApplied::Unknown));
            waiter.ready.notify();
        }
    }
}

#[cfg(test)]
mod tests;
