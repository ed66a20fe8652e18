//! The replicas one node hosts on one shard, driven together (design §9): one tick drives
//! every group; the messages all groups produce in one `collect` leave as one batch per
//! destination node (split at `wire::BATCH_MESSAGES_MAX`); one sync — the shard journal's
//! group commit — covers every group's writes.

use super::balance::{self, GroupView};
use super::directory::Role;
use super::group::ElectionTicks;
use super::image_log::{Recovered, Written};
use super::quiesce::Liveness;
use super::replica::{
    Answer, Output, ProposalId, ProposalRefused, Replica, RestoreJob, Restored, SnapshotJob,
};
use super::wire::{SlotMessage, BATCH_MESSAGES_MAX};
use crate::messaging::slot::{Appended, StreamCommand, StreamSlotConfig};
use crate::queue::broker::{BrokerConfig, Command, Effect, Outcome};
use raft::prelude::Message;
use std::collections::{BTreeMap, BTreeSet};

/// Batches for each destination node, in order.
pub type Batches = BTreeMap<u64, Vec<Vec<SlotMessage>>>;

/// What one `collect` of all groups produced.
#[derive(Debug, Default)]
pub struct HostOutput {
    pub batches: Batches,
    /// Outcomes of this node's own proposals, by slot.
    pub answers: Vec<(u16, Answer)>,
    /// The brokers' effects, by slot: every replica has them, and each node carries out
    /// those for its own connections.
    pub effects: Vec<(u16, Effect)>,
    /// Stream records appended by applied messaging commands, by slot, in order.
    pub appended: Vec<(u16, Appended)>,
    /// (slot, index, term) of every entry applied.
    pub applied: Vec<(u16, u64, u64)>,
    /// The groups collected: the only ones whose leader, term or progress can have moved
    /// since the last round (a group changes only when stepped, ticked or proposed to,
    /// which makes it dirty).
    pub collected: Vec<u16>,
    /// Each group's raft log records to append (groups that changed nothing are left out).
    pub written: Vec<(u16, Written)>,
    /// Slots whose state a snapshot from the leader replaced in this collect.
    pub installed: Vec<u16>,
    /// Snapshots taken, by slot, to encode off the loop and hand back with
    /// [`Host::snapshot_encoded`].
    pub snapshot_jobs: Vec<(u16, SnapshotJob)>,
    /// Snapshots installed from leaders, by slot, to decode off the loop and hand back
    /// with [`Host::restored`].
    pub restore_jobs: Vec<(u16, RestoreJob)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRefused {
    /// This node hosts no replica of the slot.
    UnknownSlot(u16),
    Proposal(ProposalRefused),
}

pub struct Host {
    node_id: u64,
    replicas: BTreeMap<u16, Replica>,
    /// The member directory's wants (`directory::Directory::wants`): each leader moves its
    /// group's membership towards them on every tick. Empty: memberships are left alone.
    wants: BTreeMap<u64, Role>,
    /// Groups that may have something to collect: every group at start, then those
    /// stepped, proposed to, synced or told of a snapshot since their last `collect`, or
    /// awake at a tick. A round collects those alone, not all 256 groups for a message.
    dirty: BTreeSet<u16>,
    /// Groups whose writes wait for `synced` (only `collect` makes them).
    unsynced: BTreeSet<u16>,
    /// When each peer node was last heard (`quiesce.rs`).
    live: Liveness,
    /// A tick happened since the last `collect`: every member gets a batch from it.
    keepalives_due: bool,
}

impl Host {
    /// Node `node_id`'s replicas of `slots`, each from its durable image (`image(slot)`: a
    /// new group's or the one a restart replayed).
    pub fn new(
        node_id: u64,
        slots: &[u16],
        mut image: impl FnMut(u16) -> Recovered,
        cfg: &BrokerConfig,
        streams: &StreamSlotConfig,
        snapshot_every_entries: u64,
        mut election: impl FnMut() -> ElectionTicks,
    ) -> Result<Host, String> {
        let mut replicas = BTreeMap::new();
        for &slot in slots {
            let replica = Replica::new(
                node_id,
                image(slot),
                cfg.clone(),
                streams.clone(),
                snapshot_every_entries,
                election(),
            )
            .map_err(|e| format!("slot {slot}: {e}"))?;
            replicas.insert(slot, replica);
        }
        Ok(Host {
            node_id,
            replicas,
            wants: BTreeMap::new(),
            dirty: slots.iter().copied().collect(),
            unsynced: BTreeSet::new(),
            live: Liveness::default(),
            keepalives_due: false,
        })
    }

    pub fn replica(&self, slot: u16) -> Option<&Replica> {
        self.replicas.get(&slot)
    }

    pub fn replicas(&self) -> impl Iterator<Item = (u16, &Replica)> {
        self.replicas.iter().map(|(slot, r)| (*slot, r))
    }

    /// The outcome of `cmd` when this node can give it without a log entry: it leads the
    /// slot and may answer from its applied state (`Group::reads_locally`), and the command
    /// would change nothing there (`Broker::finds_nothing`: an empty poll). Polling an
    /// empty queue then costs no entry on every member; the answer is as of this leader's
    /// applied state (an entry in flight is ordered after it).
    pub fn answered_without_entry(&self, slot: u16, cmd: &Command) -> Option<Outcome> {
        let replica = self.replicas.get(&slot)?;
        (replica.group().reads_locally()
            && !replica.is_restoring()
            && replica.broker().finds_nothing(cmd))
        .then_some(Outcome::Empty)
    }

    pub fn propose(&mut self, slot: u16, cmd: &Command) -> Result<ProposalId, HostRefused> {
        self.dirty.insert(slot);
        let replica = self
            .replicas
            .get_mut(&slot)
            .ok_or(HostRefused::UnknownSlot(slot))?;
        replica.propose(cmd).map_err(HostRefused::Proposal)
    }

    pub fn propose_stream(
        &mut self,
        slot: u16,
        cmd: &StreamCommand,
    ) -> Result<ProposalId, HostRefused> {
        self.dirty.insert(slot);
        let replica = self
            .replicas
            .get_mut(&slot)
            .ok_or(HostRefused::UnknownSlot(slot))?;
        replica.propose_stream(cmd).map_err(HostRefused::Proposal)
    }

    pub fn propose_membership(
        &mut self,
        slot: u16,
        changes: &[super::membership::MemberChange],
    ) -> Result<ProposalId, HostRefused> {
        self.dirty.insert(slot);
        let replica = self
            .replicas
            .get_mut(&slot)
            .ok_or(HostRefused::UnknownSlot(slot))?;
        replica
            .propose_membership(changes)
            .map_err(HostRefused::Proposal)
    }

    /// Starts the leadership transfers `balance::plan` asks of this node; how many.
    pub fn balance_leaders(&mut self) -> usize {
        let views: Vec<GroupView> = self
            .replicas
            .iter()
            .map(|(&slot, r)| GroupView {
                slot,
                leader: r.group().leader(),
                voters: r.group().conf_state().voters,
                targets: r.group().transfer_targets(),
            })
            .collect();
        let transfers = balance::plan(self.node_id, &views);
        for &(slot, to) in &transfers {
            if let Some(replica) = self.replicas.get_mut(&slot) {
                replica.transfer_leadership(to);
                self.dirty.insert(slot);
            }
        }
        transfers.len()
    }

    /// One tick of every group. Those quiescent before and after it have nothing to
    /// collect; the rest are collected next (a quiescing leader's notices among them).
    pub fn tick(&mut self, now_ns: i64) {
        self.live.tick();
        self.keepalives_due = true;
        for (&slot, replica) in self.replicas.iter_mut() {
            let resting = replica.group().is_quiesced();
            replica.tick(now_ns, &self.live);
            if !self.wants.is_empty() {
                replica.follow_wants(&self.wants);
            }
            if !(resting && replica.group().is_quiesced()) {
                self.dirty.insert(slot);
            }
        }
    }

    pub fn set_wants(&mut self, wants: BTreeMap<u64, Role>) {
        self.wants = wants;
    }

    /// Steps each message of a batch from node `from` into its slot's group (an empty
    /// batch is a keepalive: `from` is live). Returns how many were not for this node
    /// (another `to`) or for a slot it does not host: dropped, as a misrouted message
    /// must be.
    pub fn receive(&mut self, from: u64, batch: Vec<SlotMessage>) -> usize {
        self.live.heard(from);
        let mut dropped = 0;
        for SlotMessage { slot, msg } in batch {
            match self.replicas.get_mut(&slot) {
                Some(replica) if msg.to == self.node_id => {
                    replica.step(msg, &self.live);
                    self.dirty.insert(slot);
                }
                _ => dropped += 1,
            }
        }
        dropped
    }

    pub fn report_snapshot(&mut self, slot: u16, to: u64, delivered: bool) {
        if let Some(replica) = self.replicas.get_mut(&slot) {
            replica.report_snapshot(to, delivered);
            self.dirty.insert(slot);
        }
    }

    /// Whether some group may have something to collect (the node's loop then runs a
    /// round at once instead of waiting for a message or the next tick).
    pub fn has_dirty(&self) -> bool {
        self.keepalives_due || !self.dirty.is_empty()
    }

    /// Collects every group that may have something (see `dirty`): what to send (batched
    /// per destination), answers, effects.
    pub fn collect(&mut self) -> HostOutput {
        let mut out = HostOutput::default();
        for slot in std::mem::take(&mut self.dirty) {
            let Some(replica) = self.replicas.get_mut(&slot) else {
                continue;
            };
            let installed_before = replica.snapshots_installed();
            let Output {
                messages,
                answers,
                effects,
                appended,
                applied,
                written,
                snapshot_job,
                restore_job,
            } = replica.collect();
            if let Some(job) = snapshot_job {
                out.snapshot_jobs.push((slot, job));
            }
            if let Some(job) = restore_job {
                out.restore_jobs.push((slot, job));
            }
            out.collected.push(slot);
            if replica.needs_sync() {
                self.unsynced.insert(slot);
            }
            if !written.records.is_empty() {
                out.written.push((slot, written));
            }
            if replica.snapshots_installed() > installed_before {
                out.installed.push(slot);
            }
            add_to_batches(&mut out.batches, slot, messages);
            out.answers.extend(answers.into_iter().map(|a| (slot, a)));
            out.effects.extend(effects.into_iter().map(|e| (slot, e)));
            out.appended.extend(appended.into_iter().map(|a| (slot, a)));
            out.applied
                .extend(applied.into_iter().map(|(index, term)| (slot, index, term)));
        }
        if std::mem::take(&mut self.keepalives_due) {
            self.add_keepalives(&mut out.batches);
        }
        out
    }

    /// After a tick: an empty batch to every member of this host's groups that this
    /// round sends nothing else, so it keeps hearing from this node while groups are
    /// quiescent (`quiesce.rs`).
    fn add_keepalives(&self, batches: &mut Batches) {
        // Few distinct members across many groups: a short list beats a map per member.
        let mut peers: Vec<u64> = Vec::new();
        for replica in self.replicas.values() {
            let conf = replica.group().storage().conf_state();
            let members = conf
                .voters
                .iter()
                .chain(&conf.learners)
                .chain(&conf.voters_outgoing)
                .chain(&conf.learners_next);
            for &member in members {
                if member != self.node_id && !peers.contains(&member) {
                    peers.push(member);
                }
            }
        }
        for peer in peers {
            batches.entry(peer).or_insert_with(|| vec![Vec::new()]);
        }
    }

    /// True when every group rests (`quiesce.rs`) and no leader's broker has a timer due
    /// (a delayed message, an ack timeout) by `until_ns`: the node may sleep until then.
    pub fn at_rest_until(&self, until_ns: i64) -> bool {
        self.replicas.values().all(|r| {
            r.group().is_quiesced()
                && !(r.group().is_leader()
                    && r.broker()
                        .next_deadline_ns()
                        .is_some_and(|due| due <= until_ns))
        })
    }

    /// How many of this host's groups are quiescent: for reports.
    pub fn quiesced(&self) -> usize {
        self.replicas
            .values()
            .filter(|r| r.group().is_quiesced())
            .count()
    }

    /// Hands a slot's encoded snapshot back (`HostOutput::snapshot_jobs`); the next collect
    /// writes it.
    pub fn snapshot_encoded(
        &mut self,
        slot: u16,
        encoded: Result<raft::prelude::Snapshot, String>,
    ) {
        if let Some(replica) = self.replicas.get_mut(&slot) {
            replica.snapshot_encoded(encoded);
            self.dirty.insert(slot);
        }
    }

    /// Hands a slot's decoded snapshot back (`HostOutput::restore_jobs`); the next collect
    /// installs it and applies what was committed after it.
    pub fn restored(&mut self, slot: u16, restored: Restored) {
        if let Some(replica) = self.replicas.get_mut(&slot) {
            replica.restored(restored);
            self.dirty.insert(slot);
        }
    }

    /// True while some group's writes wait for `synced`.
    pub fn needs_sync(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// Every group's writes are durable (one group commit): the messages that waited.
    /// The groups that synced are collected again: a leader's own write being durable can
    /// commit entries.
    pub fn synced(&mut self) -> Batches {
        let mut batches = Batches::new();
        for slot in std::mem::take(&mut self.unsynced) {
            let Some(replica) = self.replicas.get_mut(&slot) else {
                continue;
            };
            debug_assert!(replica.needs_sync());
            let messages = replica.synced();
            add_to_batches(&mut batches, slot, messages);
            self.dirty.insert(slot);
        }
        batches
    }
}

fn add_to_batches(batches: &mut Batches, slot: u16, messages: Vec<Message>) {
    for msg in super::coalesce::coalesce_appends(messages) {
        let to = batches.entry(msg.to).or_default();
        if to.last().is_none_or(|b| b.len() >= BATCH_MESSAGES_MAX) {
            to.push(Vec::new());
        }
        to.last_mut()
            .expect("pushed above")
            .push(SlotMessage { slot, msg });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::group::ELECTION_TICKS;

    fn msg(to: u64) -> Message {
        Message {
            to,
            from: 1,
            ..Message::default()
        }
    }

    #[test]
    fn messages_go_out_in_batches_per_destination_split_at_the_limit() {
        let mut batches = Batches::new();
        let to_2: Vec<Message> = (0..BATCH_MESSAGES_MAX + 1).map(|_| msg(2)).collect();
        add_to_batches(&mut batches, 7, to_2);
        add_to_batches(&mut batches, 8, vec![msg(3), msg(2)]);
        let sizes: Vec<usize> = batches[&2].iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![BATCH_MESSAGES_MAX, 2]);
        assert_eq!(batches[&3].len(), 1);
        assert_eq!(batches[&3][0][0].slot, 8);
        assert_eq!(batches[&2][1][1].slot, 8);
    }

    #[test]
    fn misrouted_messages_are_dropped_and_counted() {
        let mut host = Host::new(
            1,
            &[4, 5],
            |_| Recovered::new_group(&[1, 2, 3], 1),
            &BrokerConfig::default(),
            &StreamSlotConfig::default(),
            100,
            || ELECTION_TICKS,
        )
        .unwrap();
        let batch = vec![
            SlotMessage {
                slot: 9,
                msg: msg(1),
            },
            SlotMessage {
                slot: 4,
                msg: msg(2),
            },
        ];
        assert_eq!(host.receive(2, batch), 2);
        assert_eq!(
            host.propose(9, &Command::Tick { now_ns: 0 }),
            Err(HostRefused::UnknownSlot(9))
        );
        assert!(matches!(
            host.propose(4, &Command::Tick { now_ns: 0 }),
            Err(HostRefused::Proposal(ProposalRefused::NotLeader { .. }))
        ));
    }
}
