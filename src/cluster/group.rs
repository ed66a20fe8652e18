//! One Raft group (raft-rs `RawNode`) and the handling of its Ready, sans-IO: the caller
//! ticks it, steps it with messages from peers, proposes commands, and after each of those
//! calls `collect` to get what to send and which entries are committed.
//!
//! The Ready order follows raft-rs's rules: messages a leader may send before persisting go
//! out at once; a received snapshot is installed; new entries and the HardState are written
//! into the image (`storage.rs`); committed entries are handed to the caller to apply, in
//! log order, before the next `collect`. Persistence is asynchronous, as a journal with
//! group commit makes it: the messages that must follow persistence (votes, append
//! responses) are held until the caller reports the writes durable (`synced`), and only
//! then does the replica count its own copy of new entries.

use super::membership::{self, MemberChange};
use super::quiesce::{self, Liveness};
use super::storage::GroupStorage;
use raft::prelude::{ConfState, Entry, EntryType, Message, Snapshot};
use raft::{ProgressState, RawNode, StateRole};

/// Ticks without a heartbeat before a follower campaigns: raft-rs draws it in `[min, max)`
/// at every term. With the server's 100 ms tick an election starts 1–2 s after the leader
/// went silent (issue 14).
pub const ELECTION_TICKS: ElectionTicks = ElectionTicks { min: 10, max: 20 };

/// The range a replica's election timeout is drawn from, in ticks. raft-rs draws with the
/// thread's random generator; the deterministic simulator gives each replica a range of one
/// value (drawn from its seed) instead, so that a seed replays exactly.
#[derive(Clone, Copy, Debug)]
pub struct ElectionTicks {
    pub min: usize,
    pub max: usize,
}

/// Ticks between a leader's heartbeats (100 ms with the server's tick).
pub const HEARTBEAT_TICKS: usize = 1;
/// Most entry bytes in one append message.
pub const APPEND_BYTES_MAX: u64 = 1024 * 1024;
/// Most append messages in flight to one follower.
pub const INFLIGHT_APPENDS_MAX: usize = 256;

/// What one `collect` produced.
#[derive(Default, Debug)]
pub struct Collected {
    /// To send to peers (each names its `to`).
    pub messages: Vec<Message>,
    /// A snapshot received from the leader: the state machine must be replaced by it
    /// before the committed entries (which follow it) are applied.
    pub snapshot: Option<Snapshot>,
    /// Committed entries, in log order, to apply now.
    pub committed: Vec<Entry>,
}

/// Why a proposal was refused (nothing was appended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// Only the leader appends; `leader` is the one this replica knows, if any.
    NotLeader { leader: Option<u64> },
    /// A membership change is proposed and not yet applied: one at a time.
    MembershipPending,
}

pub struct Group {
    node: RawNode<GroupStorage>,
    /// Readies written into the image but not yet durable: their numbers, and the messages
    /// that must wait until they are.
    unsynced: std::collections::VecDeque<(u64, Vec<Message>)>,
    /// A snapshot installed by `collect`, applied in raft-rs's books once synced.
    snapshot_applied_at_sync: Option<u64>,
    /// Not ticking (`quiesce.rs`).
    quiesced: bool,
    /// A follower woken by its leader's silence alone, and the term then: it may rest
    /// again when the leader's node is heard before anything else happens.
    woken_by_silence: Option<u64>,
    /// A quiescing leader's notices, sent with the next `collect`'s messages.
    notices: Vec<Message>,
    election: ElectionTicks,
}

impl Group {
    /// A member `id` of the group whose image is `storage` (a new one, or the one that
    /// survived a restart). `applied` is the index the state machine already reflects (its
    /// restored snapshot's): entries after it are handed out again as committed.
    pub fn new(
        id: u64,
        storage: GroupStorage,
        applied: u64,
        election: ElectionTicks,
    ) -> Result<Group, String> {
        let config = raft::Config {
            id,
            election_tick: election.min,
            min_election_tick: election.min,
            max_election_tick: election.max,
            heartbeat_tick: HEARTBEAT_TICKS,
            applied,
            max_size_per_msg: APPEND_BYTES_MAX,
            max_inflight_msgs: INFLIGHT_APPENDS_MAX,
            // A node cut off from the others does not raise the term on its return, and a
            // leader that lost its quorum steps down instead of believing it still leads.
            pre_vote: true,
            check_quorum: true,
            ..raft::Config::default()
        };
        config.validate().map_err(|e| format!("raft config: {e}"))?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node =
            RawNode::new(&config, storage, &logger).map_err(|e| format!("raft group {id}: {e}"))?;
        Ok(Group {
            node,
            unsynced: std::collections::VecDeque::new(),
            snapshot_applied_at_sync: None,
            quiesced: false,
            woken_by_silence: None,
            notices: Vec::new(),
            election,
        })
    }

    pub fn id(&self) -> u64 {
        self.node.raft.id
    }

    /// Advances raft-rs's clock by one tick unless the group is quiescent (`quiesce.rs`): a
    /// leader at rest quiesces instead, telling its members; a quiesced follower wakes
    /// only when its leader's node has gone silent.
    pub fn tick(&mut self, live: &Liveness) {
        if self.is_leader() {
            // Nothing but a member's silence changes a quiescent leader's rest without
            // waking it (a proposal or message does), so only that is checked again.
            let rest = if self.quiesced {
                self.members_heard_within(live, quiesce::LEADER_PATIENCE_TICKS_MAX)
            } else {
                self.at_rest(live)
            };
            if rest {
                if !self.quiesced {
                    self.quiesce_members();
                }
                return;
            }
            self.quiesced = false;
        } else if self.quiesced {
            if self.leader().is_some_and(|leader| live.is_live(leader)) {
                return;
            }
            self.wake(live);
            self.woken_by_silence = Some(self.node.raft.term);
        } else if self.may_rest_again(live) {
            self.quiesced = true;
            self.woken_by_silence = None;
            return;
        }
        self.node.tick();
    }

    /// A follower woken by its leader's silence alone hears from the leader's node again,
    /// still its follower in the same term with the whole committed log and nothing more.
    fn may_rest_again(&self, live: &Liveness) -> bool {
        let raft = &self.node.raft;
        self.woken_by_silence == Some(raft.term)
            && raft.state == StateRole::Follower
            && self.leader().is_some_and(|leader| live.is_live(leader))
            && raft.raft_log.committed == raft.raft_log.last_index()
    }

    /// Leaves quiescence. A follower first counts the ticks it missed since its leader's
    /// node was last heard, so it campaigns when it would have had it never stopped.
    pub fn wake(&mut self, live: &Liveness) {
        self.woken_by_silence = None;
        if !std::mem::replace(&mut self.quiesced, false) || self.is_leader() {
            return;
        }
        let missed = self
            .leader()
            .map_or(u64::MAX, |leader| live.silent_ticks(leader))
            .min(self.election.max as u64);
        for _ in 0..missed {
            self.node.tick();
        }
    }

    pub fn is_quiesced(&self) -> bool {
        self.quiesced
    }

    /// As leader: nothing to replicate, apply, persist or change, and every member has
    /// the whole log and is heard from. Only then may the group stop ticking.
    fn at_rest(&self, live: &Liveness) -> bool {
        let raft = &self.node.raft;
        let last = raft.raft_log.last_index();
        let members_have_all = raft.prs().iter().all(|(id, pr)| {
            *id == raft.id
                || (pr.matched == last
                    && pr.state == ProgressState::Replicate
                    && pr.pending_request_snapshot == raft::INVALID_INDEX)
        });
        raft.lead_transferee.is_none()
            && !raft.has_pending_conf()
            && self.node.store().conf_state().voters_outgoing.is_empty()
            && raft.raft_log.committed == last
            && raft.raft_log.applied == last
            && self.unsynced.is_empty()
            && self.snapshot_applied_at_sync.is_none()
            && !self.node.has_ready()
            && members_have_all
            && self.members_heard_within(live, quiesce::LIVENESS_TICKS_MAX)
    }

    fn members_heard_within(&self, live: &Liveness, ticks: u64) -> bool {
        let raft = &self.node.raft;
        raft.prs()
            .iter()
            .all(|(id, _)| *id == raft.id || live.heard_within(*id, ticks))
    }

    fn quiesce_members(&mut self) {
        let raft = &self.node.raft;
        let (me, term, commit) = (raft.id, raft.term, raft.raft_log.committed);
        for &id in raft.prs().iter().map(|(id, _)| id).filter(|id| **id != me) {
            self.notices.push(quiesce::notice(me, id, term, commit));
        }
        self.quiesced = true;
    }

    /// A follower told by its leader to quiesce does so if it has the whole committed log
    /// and nothing past it (else it keeps ticking, and its leader hears of it).
    fn quiesce_on_notice(&mut self, from: u64, term: u64, commit: u64) {
        let raft = &self.node.raft;
        let committed = raft.raft_log.committed;
        self.quiesced = raft.state == StateRole::Follower
            && raft.leader_id == from
            && raft.term == term
            && committed == commit
            && raft.raft_log.last_index() == committed;
    }

    /// Steps a message from a peer. Messages of other groups or from unknown peers are the
    /// caller's to filter; raft-rs ignores stale terms itself. Anything but a quiescence
    /// notice (or its answer) wakes the group.
    pub fn step(&mut self, msg: Message, live: &Liveness) {
        let notice = quiesce::is_notice_or_answer(&msg);
        if !notice {
            self.wake(live);
        }
        let notice_to_follow = (notice
            && msg.get_msg_type() == raft::prelude::MessageType::MsgHeartbeat)
            .then_some((msg.from, msg.term, msg.commit));
        let last = self.node.raft.raft_log.last_index();
        if msg.get_msg_type() == raft::prelude::MessageType::MsgHeartbeat && msg.commit > last {
            // A leader only sends a commit index the follower has (the least of its matched
            // index and the commit): this replica lost entries it had acknowledged (its data
            // was lost or replaced). raft-rs would panic on it; it is dropped instead.
            log::warn!(
                "raft group {}: heartbeat commits index {} past this replica's last {last}: its log was lost; ignored",
                self.id(),
                msg.commit
            );
            return;
        }
        if let Err(e) = self.node.step(msg) {
            // Only messages raft-rs considers invalid for its state (a response from a peer
            // it does not know): dropping them is what it expects.
            log::debug!("raft group {}: message dropped: {e}", self.id());
            return;
        }
        if let Some((from, term, commit)) = notice_to_follow {
            self.quiesce_on_notice(from, term, commit);
        }
    }

    /// Appends `data` (a command) if this replica leads. Returns the index and term the
    /// entry got: it is committed with that term at that index, or never, which is how the
    /// proposer tells its own entries apart.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<(u64, u64), ProposeError> {
        if self.node.raft.state != StateRole::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader(),
            });
        }
        self.quiesced = false;
        if self.node.propose(Vec::new(), data).is_err() {
            // A leader refuses while it transfers leadership.
            return Err(ProposeError::NotLeader { leader: None });
        }
        let index = self.node.raft.raft_log.last_index();
        Ok((index, self.node.raft.term))
    }

    /// Proposes a membership change (`membership.rs`) if this replica leads and none is
    /// pending. Like `propose`, returns the index and term its entry got.
    pub fn propose_membership(
        &mut self,
        changes: &[MemberChange],
    ) -> Result<(u64, u64), ProposeError> {
        if self.node.raft.state != StateRole::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader(),
            });
        }
        self.quiesced = false;
        let context = membership::encode(changes);
        if self
            .node
            .propose_conf_change(context, membership::to_raft(changes))
            .is_err()
        {
            return Err(ProposeError::NotLeader { leader: None });
        }
        // raft-rs turns a change proposed while another is pending into an empty entry.
        let index = self.node.raft.raft_log.last_index();
        let is_change = self
            .node
            .raft
            .raft_log
            .entries(index, 1, raft::GetEntriesContext::empty(false))
            .ok()
            .and_then(|e| {
                e.first()
                    .map(|e| e.get_entry_type() == EntryType::EntryConfChangeV2)
            })
            .unwrap_or(false);
        if !is_change {
            return Err(ProposeError::MembershipPending);
        }
        Ok((index, self.node.raft.term))
    }

    /// Applies a committed membership entry: raft-rs's view of the group and the image's
    /// membership (which the next snapshot carries) change. A change raft-rs refuses (one
    /// that would leave no voter) changes nothing, on every replica alike.
    pub fn apply_membership(&mut self, entry: &Entry) -> Result<ConfState, String> {
        let changes = membership::decode(&entry.context)?;
        let conf_state = self
            .node
            .apply_conf_change(&membership::to_raft(&changes))
            .map_err(|e| format!("membership change refused: {e}"))?;
        self.node.mut_store().set_conf_state(conf_state.clone());
        let member = conf_state.voters.contains(&self.id())
            || conf_state.voters_outgoing.contains(&self.id());
        if self.is_leader() && !member {
            // A leader outside its own group: raft-rs would keep leading and panic on the
            // next answer from a follower (it has no progress of its own any more). It
            // steps down at once; the voters elect one of them after an election timeout.
            let term = self.node.raft.term;
            self.node.raft.become_follower(term, raft::INVALID_ID);
        }
        Ok(conf_state)
    }

    /// Hands leadership to the voter of the applied membership that is furthest along
    /// (raft-rs sends it a TimeoutNow once it has the whole log). For a leader that a
    /// membership change is about to remove.
    pub fn hand_over_leadership(&mut self) {
        let conf = self.node.raft.prs().conf().to_conf_state();
        let target = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != self.id() && conf.voters.contains(id))
            .max_by_key(|(id, pr)| (pr.matched, **id))
            .map(|(id, _)| *id);
        if let Some(target) = target {
            self.quiesced = false;
            self.node.transfer_leader(target);
        }
    }

    /// As leader with no transfer under way: the other voters a leadership transfer may go
    /// to now (heard from within the election timeout; raft-rs catches a lagging one up
    /// before it sends TimeoutNow).
    pub fn transfer_targets(&self) -> Vec<u64> {
        let raft = &self.node.raft;
        if raft.state != StateRole::Leader || raft.lead_transferee.is_some() {
            return Vec::new();
        }
        let voters = raft.prs().conf().to_conf_state().voters;
        raft.prs()
            .iter()
            .filter(|(id, pr)| **id != self.id() && voters.contains(id) && pr.recent_active)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Starts handing leadership to `to` (raft-rs sends it TimeoutNow once it is caught up,
    /// and gives up after an election timeout).
    pub fn transfer_leadership(&mut self, to: u64) {
        self.quiesced = false;
        self.node.transfer_leader(to);
    }

    /// True when the applied membership has this replica as a voter of the configuration
    /// being entered (the only one, outside joint consensus).
    pub fn votes_in_incoming(&self) -> bool {
        self.node
            .raft
            .prs()
            .conf()
            .to_conf_state()
            .voters
            .contains(&self.id())
    }

    /// True while a membership change is proposed and not yet applied here.
    pub fn membership_pending(&self) -> bool {
        self.node.raft.has_pending_conf()
    }

    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// Whether this replica may answer from its applied state: it leads and has applied an
    /// entry of its own term, so everything earlier leaders committed is applied here too.
    /// A leader cut off from the majority passes until check-quorum makes it step down
    /// (an election timeout), so such an answer can be that much behind.
    pub fn reads_locally(&self) -> bool {
        self.is_leader() && self.node.raft.apply_to_current_term()
    }

    pub fn leader(&self) -> Option<u64> {
        match self.node.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    /// Whether raft-rs lets this replica campaign (a voter of its applied membership), and
    /// ticks since it last heard a leader: for reports.
    pub fn election_state(&self) -> (bool, usize) {
        (self.node.raft.promotable(), self.node.raft.election_elapsed)
    }

    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The leader's view of each follower (matched index, state), for reports and tests.
    pub fn progress(&self) -> Vec<(u64, u64, String)> {
        let mut out: Vec<(u64, u64, String)> = self
            .node
            .raft
            .prs()
            .iter()
            .map(|(id, pr)| (*id, pr.matched, format!("{:?}", pr.state)))
            .collect();
        out.sort();
        out
    }

    /// As leader, the entries the furthest-behind follower (or learner) lacks; 0 otherwise.
    pub fn follower_lag_max(&self) -> u64 {
        if !self.is_leader() {
            return 0;
        }
        let raft = &self.node.raft;
        let last = raft.raft_log.last_index();
        raft.prs()
            .iter()
            .filter(|(id, _)| **id != raft.id)
            .map(|(_, pr)| last.saturating_sub(pr.matched))
            .max()
            .unwrap_or(0)
    }

    /// As leader: the members heard from within the last election timeout (raft-rs keeps
    /// this with check-quorum on); empty otherwise.
    pub fn recently_active(&self) -> Vec<u64> {
        if !self.is_leader() {
            return Vec::new();
        }
        self.node
            .raft
            .prs()
            .iter()
            .filter(|(_, pr)| pr.recent_active)
            .map(|(id, _)| *id)
            .collect()
    }

    /// As leader: whether follower `id` has the log up to `lag_max` entries from its end.
    pub fn caught_up(&self, id: u64, lag_max: u64) -> bool {
        let raft = &self.node.raft;
        let last = raft.raft_log.last_index();
        self.is_leader()
            && raft
                .prs()
                .get(id)
                .is_some_and(|pr| pr.matched + lag_max >= last)
    }

    pub fn commit_index(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    pub fn storage(&self) -> &GroupStorage {
        self.node.store()
    }

    pub fn conf_state(&self) -> raft::prelude::ConfState {
        self.node.store().conf_state().clone()
    }

    /// Whether a snapshot sent to `to` arrived. Until told, the leader sends that follower
    /// nothing else, so a lost snapshot must be reported to be sent again.
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        let status = if delivered {
            raft::SnapshotStatus::Finish
        } else {
            raft::SnapshotStatus::Failure
        };
        self.quiesced = false;
        self.node.report_snapshot(to, status);
    }

    /// The image changes made since the last call, for the raft log to record.
    pub fn take_writes(&mut self) -> Vec<super::storage::ImageWrite> {
        self.node.mut_store().take_writes()
    }

    /// Keeps a snapshot of the state machine taken at an applied index (see
    /// `GroupStorage::compact`).
    pub fn compact(&mut self, snapshot: Snapshot) {
        self.node.mut_store().compact(snapshot);
    }

    /// Handles the Ready, if any: writes what it asks to persist into the image, and returns
    /// what may be sent now and what to apply. What had to wait for the write to be durable
    /// (a follower's votes and append responses) comes out of `synced`.
    pub fn collect(&mut self) -> Collected {
        let mut out = Collected {
            messages: std::mem::take(&mut self.notices),
            ..Collected::default()
        };
        if !self.node.has_ready() {
            return out;
        }
        let mut ready = self.node.ready();
        // A leader sends its appends before its own write is durable (Raft thesis 10.2.1).
        out.messages.extend(ready.take_messages());
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            self.node.mut_store().install_snapshot(snapshot.clone());
            out.snapshot = Some(snapshot);
        }
        // Only entries this replica has persisted are handed out as committed, so applying
        // them never runs ahead of the local log.
        out.committed.extend(ready.take_committed_entries());
        self.node.mut_store().append(ready.entries());
        if let Some(hard_state) = ready.hs() {
            self.node.mut_store().set_hard_state(hard_state.clone());
        }
        let number = ready.number();
        let held = ready.take_persisted_messages();
        self.node.advance_append_async(ready);
        self.unsynced.push_back((number, held));
        // The caller applies every committed entry before it calls anything else. A
        // snapshot counts as applied only once it is durable too (raft-rs never lets the
        // applied index pass the persisted one), so its turn comes in `synced`.
        match (&out.snapshot, out.committed.last()) {
            (Some(snapshot), _) => {
                self.snapshot_applied_at_sync = Some(snapshot.get_metadata().index);
            }
            (None, Some(last)) => self.node.advance_apply_to(last.index),
            (None, None) => {}
        }
        out
    }

    /// True while writes wait for `synced`.
    pub fn needs_sync(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// Everything `collect` wrote is durable now (the journal's fdatasync returned): the
    /// messages that had to wait for it may go.
    pub fn synced(&mut self) -> Vec<Message> {
        let mut messages = Vec::new();
        let mut newest = None;
        for (number, held) in self.unsynced.drain(..) {
            newest = Some(number);
            messages.extend(held);
        }
        if let Some(number) = newest {
            self.node.on_persist_ready(number);
        }
        if let Some(index) = self.snapshot_applied_at_sync.take() {
            self.node.advance_apply_to(index);
        }
        messages
    }
}
