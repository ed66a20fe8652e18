//! A slot's replica: its Raft group and the broker that group's committed commands build.
//!
//! Propose → commit → apply: a command is proposed on the leader, and every replica applies
//! it once committed, in log order, with the time it carries (design §9: time is proposed,
//! never read in apply) — so every replica computes the same outcome, and the proposer
//! answers its client with the outcome of its own entry only once a quorum has it. A
//! proposal whose index a new leader's entry took was never applied: the client hears so
//! and may retry.
//!
//! Only the leader proposes `Tick`s, when the broker says a timer is due. Snapshots are the
//! slot's state (`slot_snapshot`), taken once `snapshot_every_entries` entries were applied
//! since the last one *and* their bytes reached the last snapshot's size
//! ([`Replica::snapshot_due`]); a follower too far behind gets one from the leader and
//! replaces its state with it. A snapshot is taken in O(1) between two entries (the
//! broker's state frozen, [`SnapshotJob`]) and encoded by whoever drives the replica, off
//! its loop; it replaces the log's front only once handed back
//! ([`Replica::snapshot_encoded`]). Encoding a large slot on the loop stopped the node's
//! every group for as long (seconds per gigabyte: no heartbeats, elections elsewhere).
//! Likewise a snapshot installed from the leader is decoded off the loop ([`RestoreJob`]):
//! until it is back the replica keeps its old state and applied index, holds the entries
//! committed after the snapshot, and answers nothing from its state.

use super::directory::Role;
use super::group::{Collected, ElectionTicks, Group, ProposeError};
use super::image_log::{ImageLog, Recovered, Written};
use super::membership::{self, MemberChange};
use super::quiesce::Liveness;
use super::slot_snapshot;
use crate::messaging::slot::{self as streams, Appended, StreamCommand, StreamOutcome, StreamSlot};
use crate::queue::broker::{Broker, BrokerConfig, Command, Effect, Frozen, Outcome};
use crate::queue::server::wal::record;
use raft::prelude::{ConfState, Entry, EntryType, Message, Snapshot};
use std::collections::BTreeMap;

/// A learner is made a voter once it is at most this many entries behind the leader's log:
/// close enough that it does not hold the quorum up while it catches the rest.
pub const CAUGHT_UP_LAG_ENTRIES_MAX: u64 = 64;

/// Most proposals of one replica waiting for their entry to be applied.
pub const PROPOSALS_MAX: usize = 65_536;

/// A proposal's place in the log: committed there with that term, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId {
    pub index: u64,
    pub term: u64,
}

/// Why a proposal has no outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotApplied {
    /// Another entry was committed at its index: it was never applied anywhere.
    Superseded,
    /// A snapshot from the leader replaced the log around it: it may or may not have been
    /// applied (the client cannot know; a v1 client treats it like a lost reply).
    Unknown,
}

/// What applying a proposal's entry gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    Command(Outcome),
    /// A messaging command's outcome (`messaging::slot`).
    Stream(StreamOutcome),
    /// The membership after the change, or why it was refused (identically everywhere).
    Membership(Result<ConfState, String>),
}

#[derive(Debug)]
pub struct Answer {
    pub id: ProposalId,
    pub outcome: Result<Applied, NotApplied>,
}

/// What one `collect` produced.
#[derive(Debug, Default)]
pub struct Output {
    /// Raft messages for the peers.
    pub messages: Vec<Message>,
    /// Outcomes of this replica's own proposals.
    pub answers: Vec<Answer>,
    /// The broker's effects (pushes, prefetch releases) of the commands applied, for the
    /// leader to carry out.
    pub effects: Vec<Effect>,
    /// Stream records the applied messaging commands appended, in order: every replica
    /// writes them into its own log of the partition.
    pub appended: Vec<Appended>,
    /// (index, term) of every entry applied, in order: what observers compare across
    /// replicas.
    pub applied: Vec<(u64, u64)>,
    /// The raft log's records for what this collect changed in the image; the messages
    /// `synced` releases wait for them to be durable.
    pub written: Written,
    /// A snapshot to encode and hand back with [`Replica::snapshot_encoded`].
    pub snapshot_job: Option<SnapshotJob>,
    /// A snapshot from the leader to decode and hand back with [`Replica::restored`].
    pub restore_job: Option<RestoreJob>,
}

/// A snapshot installed from the leader, to be decoded anywhere (`Send`).
pub struct RestoreJob {
    index: u64,
    data: bytes::Bytes,
    cfg: BrokerConfig,
    streams_cfg: streams::StreamSlotConfig,
}

/// A [`RestoreJob`] done: the state it decoded, for the snapshot at `index`.
pub struct Restored {
    index: u64,
    state: Result<(Broker, StreamSlot), String>,
}

impl std::fmt::Debug for RestoreJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoreJob")
            .field("index", &self.index)
            .field("bytes", &self.data.len())
            .finish_non_exhaustive()
    }
}

impl RestoreJob {
    /// The state the snapshot holds: O(state), meant for off the loop.
    pub fn decode(self) -> Restored {
        Restored {
            index: self.index,
            state: slot_snapshot::decode(&self.data, &self.cfg, &self.streams_cfg),
        }
    }
}

/// A snapshot from the leader being decoded, and what was committed after it meanwhile.
struct Restoring {
    index: u64,
    bytes: u64,
    held: Vec<Entry>,
    decoded: Option<Result<(Broker, StreamSlot), String>>,
}

/// A slot's state at one applied index, frozen in O(1), to be encoded anywhere (`Send`).
pub struct SnapshotJob {
    broker: Frozen,
    /// The messaging state's snapshot, encoded at once on the loop: it is bounded by the
    /// slot's caps (`messaging::slot`; usually small, though a million partitions would
    /// be tens of MB), where the broker's grows with its queues.
    streams: Vec<u8>,
    index: u64,
    term: u64,
    conf_state: ConfState,
}

impl std::fmt::Debug for SnapshotJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotJob")
            .field("index", &self.index)
            .field("term", &self.term)
            .finish_non_exhaustive()
    }
}

impl SnapshotJob {
    /// The snapshot, encoded: O(state), meant for off the loop.
    pub fn encode(self) -> Result<Snapshot, String> {
        let data = slot_snapshot::encode_parts(&self.broker.snapshot(), &self.streams)?;
        let mut snapshot = Snapshot {
            data: data.into(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = self.index;
        meta.term = self.term;
        meta.set_conf_state(self.conf_state);
        Ok(snapshot)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposalRefused {
    NotLeader {
        leader: Option<u64>,
    },
    /// A membership change is proposed and not yet applied: one at a time.
    MembershipPending,
    /// `PROPOSALS_MAX` proposals wait already.
    TooMany,
    /// The command does not encode within its limits (the proposer checks them first).
    Malformed,
}

pub struct Replica {
    group: Group,
    log: ImageLog,
    broker: Broker,
    cfg: BrokerConfig,
    /// The messaging plane's state of the slot's partitions.
    streams: StreamSlot,
    streams_cfg: streams::StreamSlotConfig,
    applied: u64,
    /// This replica's proposals not yet applied, by index.
    proposals: BTreeMap<u64, ProposalId>,
    /// The Tick this replica proposed and has not seen applied.
    tick_in_flight: Option<ProposalId>,
    snapshot_every_entries: u64,
    applied_since_snapshot: u64,
    /// Bytes of the entries applied since the last snapshot, and that snapshot's size.
    applied_bytes_since_snapshot: u64,
    snapshot_bytes: u64,
    snapshots_installed: u64,
    /// A [`SnapshotJob`] is out and not yet handed back: no other is taken meanwhile.
    encoding: bool,
    /// A [`RestoreJob`] is out: the state is older than the group's snapshot.
    restoring: Option<Restoring>,
}

impl Replica {
    /// Member `node_id` of a group whose durable image and raft log are `recovered`: a new
    /// group's, or what a restart replayed. The broker is restored from the image's newest
    /// snapshot; the committed entries after it are applied again by the next `collect`s.
    pub fn new(
        node_id: u64,
        recovered: Recovered,
        cfg: BrokerConfig,
        streams_cfg: streams::StreamSlotConfig,
        snapshot_every_entries: u64,
        election: ElectionTicks,
    ) -> Result<Replica, String> {
        assert!(snapshot_every_entries > 0);
        let Recovered { storage, log } = recovered;
        let snapshot = storage.newest_snapshot();
        let applied = snapshot.get_metadata().index;
        let (broker, streams) = slot_snapshot::decode(&snapshot.data, &cfg, &streams_cfg)?;
        let snapshot_bytes = snapshot.data.len() as u64;
        let group = Group::new(node_id, storage, applied, election)?;
        Ok(Replica {
            group,
            log,
            broker,
            cfg,
            streams,
            streams_cfg,
            applied,
            proposals: BTreeMap::new(),
            tick_in_flight: None,
            snapshot_every_entries,
            applied_since_snapshot: 0,
            applied_bytes_since_snapshot: 0,
            snapshot_bytes,
            snapshots_installed: 0,
            encoding: false,
            restoring: None,
        })
    }

    pub fn group(&self) -> &Group {
        &self.group
    }

    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    pub fn streams(&self) -> &StreamSlot {
        &self.streams
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Snapshots received from a leader and installed since this replica started.
    pub fn snapshots_installed(&self) -> u64 {
        self.snapshots_installed
    }

    /// Proposes `cmd`; its outcome comes back in a later `collect` under the returned id.
    pub fn propose(&mut self, cmd: &Command) -> Result<ProposalId, ProposalRefused> {
        if self.proposals.len() >= PROPOSALS_MAX {
            return Err(ProposalRefused::TooMany);
        }
        let mut data = Vec::new();
        record::encode(cmd, &mut data);
        let placed = self.group.propose(data);
        self.track(placed)
    }

    /// Proposes a messaging command (`messaging::slot`); its outcome comes back as
    /// `Applied::Stream`.
    pub fn propose_stream(&mut self, cmd: &StreamCommand) -> Result<ProposalId, ProposalRefused> {
        if self.proposals.len() >= PROPOSALS_MAX {
            return Err(ProposalRefused::TooMany);
        }
        let mut data = Vec::new();
        streams::command::encode(cmd, &mut data).map_err(|_| ProposalRefused::Malformed)?;
        let placed = self.group.propose(data);
        self.track(placed)
    }

    /// Proposes a membership change (`membership.rs`); its outcome comes back like a
    /// command's, as `Applied::Membership`.
    pub fn propose_membership(
        &mut self,
        changes: &[MemberChange],
    ) -> Result<ProposalId, ProposalRefused> {
        if self.proposals.len() >= PROPOSALS_MAX {
            return Err(ProposalRefused::TooMany);
        }
        let placed = self.group.propose_membership(changes);
        self.track(placed)
    }

    fn track(
        &mut self,
        placed: Result<(u64, u64), ProposeError>,
    ) -> Result<ProposalId, ProposalRefused> {
        let (index, term) = placed.map_err(|e| match e {
            ProposeError::NotLeader { leader } => ProposalRefused::NotLeader { leader },
            ProposeError::MembershipPending => ProposalRefused::MembershipPending,
        })?;
        let id = ProposalId { index, term };
        self.proposals.insert(index, id);
        Ok(id)
    }

    pub fn transfer_leadership(&mut self, to: u64) {
        self.group.transfer_leadership(to);
    }

    /// Advances the group's clock by one tick (unless it rests, `quiesce.rs`), and, on the
    /// leader, proposes a `Tick` when a broker timer is due at `now_ns` (one at a time).
    pub fn tick(&mut self, now_ns: i64, live: &Liveness) {
        self.group.tick(live);
        if !self.group.is_leader() {
            return;
        }
        self.leave_joint_membership();
        if self.tick_in_flight.is_some() {
            return;
        }
        let due = self
            .broker
            .next_deadline_ns()
            .is_some_and(|due_ns| due_ns <= now_ns);
        if due {
            if let Ok(id) = self.propose(&Command::Tick { now_ns }) {
                // Nobody waits for a tick's outcome: no answer comes out for it.
                self.proposals.remove(&id.index);
                self.tick_in_flight = Some(id);
            }
        }
    }

    /// A leader finds the group in a joint membership (a change of several members was
    /// applied) with nothing pending: it proposes the leave. Whoever leads does this, so a
    /// leader change in between cannot leave the group joint for good. A leader the leave
    /// would remove hands leadership to a voter that stays instead, which then leaves.
    fn leave_joint_membership(&mut self) {
        let joint = !self.group.storage().conf_state().voters_outgoing.is_empty();
        if joint && !self.group.membership_pending() {
            if !self.group.votes_in_incoming() {
                self.group.hand_over_leadership();
                return;
            }
            if let Ok(id) = self.propose_membership(&[]) {
                // Nobody waits for the leave's outcome.
                self.proposals.remove(&id.index);
            }
        }
    }

    /// As leader with no membership change pending, starts the next change towards
    /// `wants` (the member directory, `membership::plan`).
    pub fn follow_wants(&mut self, wants: &BTreeMap<u64, Role>) {
        if !self.group.is_leader() || self.group.membership_pending() {
            return;
        }
        let conf = self.group.storage().conf_state().clone();
        let me = self.group.id();
        let group = &self.group;
        let active = group.recently_active();
        let step = membership::plan(
            me,
            &conf,
            wants,
            |id| group.caught_up(id, CAUGHT_UP_LAG_ENTRIES_MAX),
            |id| active.contains(&id),
        );
        match step {
            Some(membership::Step::Propose(changes)) => {
                if let Ok(id) = self.propose_membership(&changes) {
                    // Nobody waits for it: the directory is the request, and the next
                    // step follows once it is applied.
                    self.proposals.remove(&id.index);
                }
            }
            Some(membership::Step::HandOver) => self.group.hand_over_leadership(),
            None => {}
        }
    }

    /// True while the group's writes wait for `synced`.
    pub fn needs_sync(&self) -> bool {
        self.group.needs_sync()
    }

    /// The writes `collect` made are durable: returns the messages that waited for that.
    pub fn synced(&mut self) -> Vec<Message> {
        self.group.synced()
    }

    pub fn step(&mut self, msg: Message, live: &Liveness) {
        self.group.step(msg, live);
    }

    /// Whether a snapshot sent to `to` arrived; a lost one is sent again.
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        self.group.report_snapshot(to, delivered);
    }

    /// Persists what the group decided, applies what it committed, and says what to send.
    pub fn collect(&mut self) -> Output {
        let Collected {
            messages,
            snapshot,
            committed,
        } = self.group.collect();
        let mut out = Output {
            messages,
            ..Output::default()
        };
        if let Some(snapshot) = snapshot {
            out.restore_job = Some(self.begin_restore(&snapshot));
        }
        let Some(committed) = self.after_restoring(committed, &mut out) else {
            out.written = self.log.write(self.group.take_writes());
            return out;
        };
        for entry in committed {
            if entry.index <= self.applied {
                continue; // covered by an installed snapshot
            }
            assert_eq!(entry.index, self.applied + 1, "entries apply in log order");
            self.applied = entry.index;
            out.applied.push((entry.index, entry.term));
            self.resolve_superseded(entry.index, entry.term, &mut out);
            let Some(applied) = self.apply_entry(&entry, &mut out) else {
                continue; // a new leader's empty entry
            };
            let id = ProposalId {
                index: entry.index,
                term: entry.term,
            };
            if self.proposals.get(&entry.index) == Some(&id) {
                self.proposals.remove(&entry.index);
                out.answers.push(Answer {
                    id,
                    outcome: Ok(applied),
                });
            }
            if self.tick_in_flight.is_some_and(|t| t.index <= entry.index) {
                self.tick_in_flight = None;
            }
            self.applied_since_snapshot += 1;
            self.applied_bytes_since_snapshot += entry.data.len() as u64;
            if self.snapshot_due() {
                out.snapshot_job = Some(self.take_snapshot(entry.term));
            }
        }
        if out.snapshot_job.is_none()
            && !self.encoding
            && self.restoring.is_none()
            && self.group.storage().take_snapshot_wanted()
            && self.applied > 0
        {
            let term = raft::Storage::term(self.group.storage(), self.applied)
                .expect("the applied entry is in the image");
            out.snapshot_job = Some(self.take_snapshot(term));
        }
        out.written = self.log.write(self.group.take_writes());
        out
    }

    /// Applies one committed entry: a command to the broker, a membership change to the
    /// group. None for an empty entry (a new leader's first).
    fn apply_entry(&mut self, entry: &Entry, out: &mut Output) -> Option<Applied> {
        match entry.get_entry_type() {
            EntryType::EntryConfChangeV2 => {
                Some(Applied::Membership(self.group.apply_membership(entry)))
            }
            // Never proposed by this server: refused alike by every replica.
            EntryType::EntryConfChange => Some(Applied::Membership(Err(
                "membership change of the first raft-rs format".into(),
            ))),
            EntryType::EntryNormal if entry.data.is_empty() => None,
            EntryType::EntryNormal if streams::command::is_stream_command(&entry.data) => Some(
                Applied::Stream(match streams::command::decode(&entry.data) {
                    Ok(cmd) => {
                        let (outcome, appended) = self.streams.apply(&cmd);
                        out.appended.extend(appended);
                        outcome
                    }
                    Err(e) => StreamOutcome::Refused(format!(
                        "undecodable messaging command at index {}: {e}",
                        entry.index
                    )),
                }),
            ),
            EntryType::EntryNormal => Some(Applied::Command(match record::decode(&entry.data) {
                Ok(cmd) => {
                    let (outcome, effects) = self.broker.apply(&cmd);
                    out.effects.extend(effects);
                    outcome
                }
                // Every replica has the same bytes and refuses them the same way.
                Err(e) => {
                    Outcome::Error(format!("undecodable command at index {}: {e}", entry.index))
                }
            })),
        }
    }

    /// Proposals at `index` with another term, or below it, were never applied.
    fn resolve_superseded(&mut self, index: u64, term: u64, out: &mut Output) {
        while let Some((&at, &id)) = self.proposals.first_key_value() {
            if at > index || (at == index && id.term == term) {
                break;
            }
            self.proposals.remove(&at);
            out.answers.push(Answer {
                id,
                outcome: Err(NotApplied::Superseded),
            });
        }
        if self
            .tick_in_flight
            .is_some_and(|t| t.index < index || (t.index == index && t.term != term))
        {
            self.tick_in_flight = None;
        }
    }

    /// Starts decoding a snapshot the group installed (replacing one still decoding).
    fn begin_restore(&mut self, snapshot: &Snapshot) -> RestoreJob {
        let index = snapshot.get_metadata().index;
        self.restoring = Some(Restoring {
            index,
            bytes: snapshot.data.len() as u64,
            held: Vec::new(),
            decoded: None,
        });
        RestoreJob {
            index,
            data: snapshot.data.clone(),
            cfg: self.cfg.clone(),
            streams_cfg: self.streams_cfg.clone(),
        }
    }

    /// Takes back a decoded snapshot; the next `collect` installs it. One for a snapshot
    /// since replaced by a newer one is dropped.
    pub fn restored(&mut self, restored: Restored) {
        match self.restoring.as_mut() {
            Some(r) if r.index == restored.index && r.decoded.is_none() => {
                r.decoded = Some(restored.state);
            }
            _ => {}
        }
    }

    /// True while a snapshot from the leader is being decoded: the state is not the
    /// group's, and nothing may be answered from it.
    pub fn is_restoring(&self) -> bool {
        self.restoring.is_some()
    }

    /// The entries to apply now: `committed` at once when no snapshot is being decoded;
    /// none while one is (they are held); the held ones and `committed` once it is back,
    /// after installing it.
    fn after_restoring(&mut self, committed: Vec<Entry>, out: &mut Output) -> Option<Vec<Entry>> {
        let Some(r) = self.restoring.as_mut() else {
            return Some(committed);
        };
        // Entries the snapshot covers were committed before it: never held.
        let index = r.index;
        let after = committed.into_iter().filter(|e| e.index > index);
        if r.decoded.is_none() {
            r.held.extend(after);
            return None;
        }
        let r = self.restoring.take().expect("seen above");
        let state = r.decoded.expect("checked above");
        let (broker, streams) =
            state.unwrap_or_else(|e| panic!("snapshot at index {index} from the leader: {e}"));
        self.install(index, r.bytes, broker, streams, out);
        let mut entries = r.held;
        entries.extend(after);
        Some(entries)
    }

    fn install(
        &mut self,
        index: u64,
        bytes: u64,
        broker: Broker,
        streams: StreamSlot,
        out: &mut Output,
    ) {
        self.broker = broker;
        self.streams = streams;
        self.applied = index;
        self.applied_since_snapshot = 0;
        self.applied_bytes_since_snapshot = 0;
        self.snapshot_bytes = bytes;
        self.snapshots_installed += 1;
        // What this replica proposed up to there may or may not be in the state now.
        let covered: Vec<u64> = self.proposals.range(..=index).map(|(i, _)| *i).collect();
        for at in covered {
            let id = self.proposals.remove(&at).expect("listed above");
            out.answers.push(Answer {
                id,
                outcome: Err(NotApplied::Unknown),
            });
        }
        self.tick_in_flight = None;
    }

    /// Whether to snapshot now: `snapshot_every_entries` applied since the last snapshot,
    /// and as many bytes of entries as that snapshot had. A snapshot costs the whole state
    /// (a queue's backlog, every message of it); the entries since the last one cost what
    /// was written. Waiting until the log outgrew the last snapshot (the rule of Redis's
    /// AOF rewrite at 100 %) keeps snapshotting's cost a constant factor of what is
    /// written, however large the state: a backlog of 30,000 messages was serialised
    /// whole every 8,192 entries, a fifth of a 3-node cluster's CPU (docs/benchmarks.md).
    /// The price: the log behind a snapshot holds up to the state's size again, in memory
    /// and on disk, and a restart or a lagging follower replays it.
    pub fn snapshot_due(&self) -> bool {
        !self.encoding
            && self.applied_since_snapshot >= self.snapshot_every_entries
            && self.applied_bytes_since_snapshot >= self.snapshot_bytes
    }

    /// Freezes the state at the applied index (entry of `term`) for a snapshot.
    fn take_snapshot(&mut self, term: u64) -> SnapshotJob {
        let mut streams = Vec::new();
        self.streams.encode_snapshot(&mut streams);
        self.encoding = true;
        self.applied_since_snapshot = 0;
        self.applied_bytes_since_snapshot = 0;
        SnapshotJob {
            broker: self.broker.freeze(),
            streams,
            index: self.applied,
            term,
            conf_state: self.group.conf_state(),
        }
    }

    /// Takes back the snapshot of the last [`SnapshotJob`]: it replaces the log's front,
    /// unless a newer one (installed from the leader meanwhile) already did, or the log
    /// around its index was replaced.
    pub fn snapshot_encoded(&mut self, encoded: Result<Snapshot, String>) {
        assert!(self.encoding, "a snapshot handed back that was not taken");
        self.encoding = false;
        let snapshot = match encoded {
            Ok(snapshot) => snapshot,
            Err(e) => {
                log::error!("encode a slot snapshot: {e}; the raft log keeps growing");
                return;
            }
        };
        let (index, term) = (snapshot.get_metadata().index, snapshot.get_metadata().term);
        let storage = self.group.storage();
        let newest = storage.newest_snapshot().get_metadata().index;
        if index < newest || raft::Storage::term(storage, index).ok() != Some(term) {
            return;
        }
        self.snapshot_bytes = snapshot.data.len() as u64;
        self.group.compact(snapshot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::group::ELECTION_TICKS;
    use crate::cluster::image_log::Recovered;

    /// A one-voter group that leads itself, snapshotting by `snapshot_every_entries`.
    fn leading(snapshot_every_entries: u64) -> Replica {
        let recovered = Recovered::new_group(&[1], 1);
        let cfg = BrokerConfig::default();
        let streams = streams::StreamSlotConfig::default();
        let mut r = Replica::new(
            1,
            recovered,
            cfg,
            streams,
            snapshot_every_entries,
            ELECTION_TICKS,
        )
        .unwrap();
        for _ in 0..100 {
            r.tick(0, &Liveness::default());
            round(&mut r);
            if r.group().is_leader() {
                return r;
            }
        }
        panic!("a one-voter group elects itself");
    }

    fn round(r: &mut Replica) {
        collect_and_encode(r);
        r.synced();
        collect_and_encode(r);
    }

    /// Collects, and hands a snapshot taken back encoded at once.
    fn collect_and_encode(r: &mut Replica) {
        if let Some(job) = r.collect().snapshot_job {
            r.snapshot_encoded(job.encode());
        }
    }

    fn snapshot_index(r: &Replica) -> u64 {
        r.group().storage().newest_snapshot().get_metadata().index
    }

    /// Publishes one 1 KiB message and runs a round by hand, keeping the snapshot taken.
    fn publish_keeping_job(
        r: &mut Replica,
        ids: &mut crate::queue::message::IdGenerator,
    ) -> Option<SnapshotJob> {
        let mut msg = crate::queue::server::wal::tests::message("jobs");
        msg.id = ids.next(0);
        msg.payload = bytes::Bytes::from(vec![b'x'; 1024]);
        r.propose(&Command::Publish { msg }).unwrap();
        let first = r.collect().snapshot_job;
        r.synced();
        let second = r.collect().snapshot_job;
        assert!(first.is_none() || second.is_none(), "one job at a time");
        first.or(second)
    }

    /// The loop only freezes a snapshot: the log's front moves when it comes back encoded,
    /// to the index it was taken at, with what was applied meanwhile still in the log; no
    /// other is taken while one is out.
    #[test]
    fn a_snapshot_replaces_the_log_front_only_once_handed_back_encoded() {
        let mut r = leading(4);
        let mut ids = crate::queue::message::IdGenerator::new([5; 7]);
        let before = snapshot_index(&r);
        let (job, taken_at) = loop {
            if let Some(job) = publish_keeping_job(&mut r, &mut ids) {
                break (job, r.applied());
            }
        };
        for _ in 0..64 {
            let again = publish_keeping_job(&mut r, &mut ids);
            assert!(again.is_none(), "a second snapshot while one is encoded");
        }
        assert_eq!(
            snapshot_index(&r),
            before,
            "nothing replaced before it is back"
        );
        r.snapshot_encoded(job.encode());
        assert_eq!(snapshot_index(&r), taken_at);
        assert!(r.applied() >= taken_at + 64);
        let next = (0..64).find_map(|_| publish_keeping_job(&mut r, &mut ids));
        assert!(next.is_some(), "snapshots are taken again once it is back");
    }

    /// A queue that only grows: after every 4 entries a snapshot would serialise the whole
    /// backlog; it waits instead until the entries since the last one add up to its size,
    /// so the snapshots taken over 64 publishes are a handful, each at least as far from
    /// the previous as the previous snapshot was large.
    #[test]
    fn a_growing_state_is_snapshotted_once_the_log_outgrew_the_last_snapshot() {
        let mut r = leading(4);
        let mut taken = vec![snapshot_index(&r)];
        let mut ids = crate::queue::message::IdGenerator::new([3; 7]);
        for _ in 0..64 {
            let mut msg = crate::queue::server::wal::tests::message("jobs");
            msg.id = ids.next(0);
            msg.payload = bytes::Bytes::from(vec![b'x'; 1024]);
            r.propose(&Command::Publish { msg }).unwrap();
            round(&mut r);
            if snapshot_index(&r) != *taken.last().unwrap() {
                taken.push(snapshot_index(&r));
            }
        }
        assert!(taken.len() >= 3, "snapshots are still taken: {taken:?}");
        let gaps: Vec<u64> = taken.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| *g >= 4),
            "never before 4 entries: {gaps:?}"
        );
        assert!(
            taken.len() <= 8,
            "every 4 entries would be 16 snapshots, each of the whole queue: {taken:?}"
        );
        assert!(
            gaps.windows(2).any(|w| w[1] > w[0]),
            "the gaps grow with the state: {gaps:?}"
        );
    }
}
