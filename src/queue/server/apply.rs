//! Applying a command on the owner of its slot: apply it to the broker, append it to the
//! slot's command log when it changed durable state, and answer once that append is
//! durable (or fdatasync'ed, in confirm mode). A command for another shard's slot is sent
//! there and answered from there.

use super::long_poll::Parked;
use super::mesh::{QueueMsg, QueueReply, RemoteReply};
use super::plane::{slot_command_timeout_ms, Plane};
use super::room::Turn;
use super::wal;
use crate::queue::broker::{Command, Outcome};
use boltq_shards::{MeshError, ReplyToken, ShardId};
use std::rc::Rc;

/// A command on its way: applied here (outcome known, durability pending) or sent to its
/// owner shard (answer pending).
pub enum Submitted {
    Local(Outcome, Option<u64>),
    /// Applied here; the reply waits for an fdatasync whatever the policy (confirm mode).
    LocalSynced(Outcome, Option<u64>),
    Remote(ShardId, RemoteReply),
    /// A long-poll parked on this shard, or a command waiting for room in the journal.
    Parked(Rc<Parked>),
    /// Waiting for room in the journal; the reply waits for an fdatasync (confirm mode).
    ParkedSynced(Rc<Parked>),
}

impl Submitted {
    /// The outcome once it is durable.
    pub async fn outcome(self, plane: &Plane) -> Outcome {
        match self {
            Submitted::Local(outcome, lsn) => plane.when_durable(outcome, lsn).await,
            Submitted::LocalSynced(outcome, lsn) => plane.when_synced(outcome, lsn).await,
            Submitted::Parked(parked) => {
                let (outcome, lsn) = parked.answered().await;
                plane.when_durable(outcome, lsn).await
            }
            Submitted::ParkedSynced(parked) => {
                let (outcome, lsn) = parked.answered().await;
                plane.when_synced(outcome, lsn).await
            }
            Submitted::Remote(owner, reply) => match reply.await {
                Ok(QueueReply::Applied(outcome)) => outcome,
                Ok(_) | Err(MeshError::UnexpectedReply) => {
                    Outcome::Error("internal error: unexpected reply between shards".into())
                }
                // Delivered but not answered in time: the owner may be holding it in its
                // line for the journal (`room.rs`) and apply it later. Said, so that a
                // client checks before it publishes again.
                Err(e @ MeshError::Timeout { .. }) => Outcome::Error(format!(
                    "shard {owner} did not answer: {e}; the command may still be applied"
                )),
                Err(e) => Outcome::Error(format!("shard {owner} did not answer: {e}")),
            },
        }
    }
}

#[derive(Clone, Copy)]
enum CmdKind {
    Consume,
    Other,
}

impl Plane {
    /// Applies `cmd` on this shard, which must own `slot`. Returns the outcome and the
    /// journal position the reply must wait for (None: nothing was written).
    pub fn apply_local(&self, slot: u16, cmd: Command) -> (Outcome, Option<u64>) {
        assert_eq!(
            self.owner_of(slot),
            self.shard.id(),
            "slot {slot} applied off its owner"
        );
        let cell = Rc::clone(
            self.slots
                .borrow()
                .get(&slot)
                .expect("owned slots are open"),
        );
        let cmd_kind = if matches!(cmd, Command::Consume { .. }) {
            CmdKind::Consume
        } else {
            CmdKind::Other
        };
        // Refuse before applying: a command applied in memory but not logged would be
        // visible now and gone after a restart (and a client retry would duplicate it).
        // A tick or a disconnect is applied and written whatever the backlog (`room.rs`).
        let needs_room = super::room::needs_room(&cmd);
        if let Some(store) = &self.store {
            if let Err(e) = store.check_room() {
                if needs_room {
                    return (Outcome::Error(format!("storage write: {e}")), None);
                }
            }
        }
        let (outcome, effects, lsn, timers_earlier) = {
            let mut st = cell.borrow_mut();
            let st = &mut *st;
            let deadline_before = st.broker.next_deadline_ns();
            let applied = st.broker.apply_logged(&cmd);
            let timers_earlier = st
                .broker
                .next_deadline_ns()
                .is_some_and(|after| deadline_before.is_none_or(|before| after < before));
            let (outcome, effects) = (applied.outcome, applied.effects);
            let lsn = match (&self.store, &mut st.logs) {
                (Some(store), Some(logs)) if applied.logged => {
                    match wal::append(store, &logs.wal, &cmd, !needs_room) {
                        Ok((lsn, bytes)) => {
                            logs.bytes_since_snapshot += bytes;
                            Some(lsn)
                        }
                        Err(e) => {
                            // The state changed in memory but could not be logged: refuse to
                            // acknowledge, and say why. The storage layer has failed; it
                            // accepts nothing more, so memory and log cannot drift further.
                            return (Outcome::Error(format!("storage write: {e}")), None);
                        }
                    }
                }
                _ => None,
            };
            (outcome, effects, lsn, timers_earlier)
        };
        let lsn = self.lsn_to_wait_for(&cmd, &outcome, lsn);
        self.maybe_snapshot(slot, &cell);
        if !matches!(cmd_kind, CmdKind::Consume) {
            self.serve_waiters(slot);
        }
        // Only a deadline earlier than the slot's last one can make the timer loop's sleep
        // too long; waking it for every command cost a scan of the shard's slots per
        // command (2 % of a shard's samples at 8,000 publishes/s, docs/benchmarks.md).
        if timers_earlier {
            self.timers_changed.notify();
        }
        for effect in effects {
            self.route_effect(effect);
        }
        (outcome, lsn)
    }

    /// The journal position the reply to `cmd` waits for, given the position of its own
    /// record. A publish is remembered until durable; a delivery waits for the publishes of
    /// the messages it carries, not for its own pending record (`unsynced.rs` says why).
    pub(super) fn lsn_to_wait_for(
        &self,
        cmd: &Command,
        outcome: &Outcome,
        own: Option<u64>,
    ) -> Option<u64> {
        let Some(store) = &self.store else {
            return own;
        };
        let mut unsynced = self.unsynced.borrow_mut();
        unsynced.forget_durable(store.journal().durable());
        match (cmd, outcome, own) {
            (Command::Publish { msg }, Outcome::Published, Some(lsn)) => {
                unsynced.note(msg.id, lsn);
                own
            }
            (Command::Consume { .. }, Outcome::Delivered(msgs), _) => {
                unsynced.wait_for(msgs.iter().map(|m| m.id))
            }
            _ => own,
        }
    }

    /// Applies `cmd` on the owner of `slot`, wherever it is. Local commands are applied
    /// now; remote ones are queued to their owner now (so pipelined commands keep their
    /// order per owner). Await [`Submitted::outcome`] for the durable result.
    pub fn submit(&self, slot: u16, cmd: Command) -> Submitted {
        self.submit_with(slot, cmd, false)
    }

    /// As `submit`, but the outcome waits for an fdatasync even when `storage.fsync` is
    /// `interval` or `never`: v1's confirm mode promised an fsync before the reply.
    pub fn submit_synced(&self, slot: u16, cmd: Command) -> Submitted {
        self.submit_with(slot, cmd, true)
    }

    pub(super) fn submit_with(&self, slot: u16, cmd: Command, sync: bool) -> Submitted {
        let owner = self.owner_of(slot);
        if let (Some(replication), true) = (self.replication.get(), owner == self.shard.id()) {
            // A quorum's fdatasync is behind every committed command, whatever `sync` says.
            let (parked, answer) = Parked::with_answer();
            replication.submit(slot, cmd, answer);
            return Submitted::Parked(parked);
        }
        if owner == self.shard.id() {
            return match self.turn_of(&cmd) {
                Turn::Now => {
                    let (outcome, lsn) = self.apply_local(slot, cmd);
                    match sync {
                        true => Submitted::LocalSynced(outcome, lsn),
                        false => Submitted::Local(outcome, lsn),
                    }
                }
                Turn::Refuse(why) => Submitted::Local(Outcome::Error(why), None),
                Turn::Wait(place) => {
                    let (parked, answer) = Parked::with_answer();
                    self.wait_turn(
                        place,
                        Box::new(move |plane| {
                            let (outcome, lsn) = plane.apply_local(slot, cmd);
                            answer(outcome, lsn);
                        }),
                    );
                    match sync {
                        true => Submitted::ParkedSynced(parked),
                        false => Submitted::Parked(parked),
                    }
                }
            };
        }
        let req = QueueMsg::Apply { slot, cmd, sync };
        Submitted::Remote(
            owner,
            self.shard.request(owner, req, slot_command_timeout_ms()),
        )
    }

    pub async fn when_synced(&self, outcome: Outcome, lsn: Option<u64>) -> Outcome {
        if let (Some(store), Some(lsn)) = (&self.store, lsn) {
            if let Err(e) = store.wait_synced(lsn).await {
                return Outcome::Error(format!("storage write: {e}"));
            }
        }
        outcome
    }

    pub async fn when_durable(&self, outcome: Outcome, lsn: Option<u64>) -> Outcome {
        if let (Some(store), Some(lsn)) = (&self.store, lsn) {
            if let Err(e) = store.wait_durable(lsn).await {
                return Outcome::Error(format!("storage write: {e}"));
            }
        }
        outcome
    }

    /// Answers a remote shard's command once its outcome is durable.
    pub(super) fn reply_when_durable(
        self: &Rc<Self>,
        token: ReplyToken,
        outcome: Outcome,
        lsn: Option<u64>,
    ) {
        let plane = Rc::clone(self);
        boltq_shards::spawn(async move {
            let outcome = plane.when_durable(outcome, lsn).await;
            let reply = QueueReply::Applied(outcome);
            plane.shard.reply(token, reply);
        })
        .detach();
    }
}
