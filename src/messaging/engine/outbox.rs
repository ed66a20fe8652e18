//! The leader's side of the replicated outbox (`messaging::slot`, issue 15): in a cluster
//! the node leading a conversation's slot writes the inbox pointers of every send in the
//! slot's outbox, then reports them written (`FannedOut`), which takes the send out.
//!
//! A send enters the outbox in the same applied command that stores it, so its pointers
//! are owed from the moment it is committed, whoever proposed it. The leader starts a
//! send's pointers as soon as it applies it; a node that becomes leader finds the sends
//! its predecessor left unreported on its next look ([`OUTBOX_CHECK_MS`]) and writes them
//! again. Pointers written twice that way are stored once: each goes through its inbox's
//! pointer claim (`pointers.rs`), which answers the second copy as a duplicate.
//!
//! Trade-off: a send's pointers wait for the conversation's leader to apply it (it is the
//! leader that answers the send, so no later than the `sent` reply), and reports cost
//! replicated commands: one per slot per [`REPORT_INTERVAL_MS`] at most (up to
//! `FANNED_OUT_PER_COMMAND_MAX` sends each), not one per send. Reporting at once cost one
//! more command per send: with three nodes on one core at 2,000 sends/s, 1,684 sends/s
//! were acknowledged instead of 2,040 (docs/benchmarks.md). The price of waiting is that a
//! new leader writes again up to that much more of its predecessor's sends, which their
//! pointer claims answer as duplicates.

use super::mesh::StreamError;
use super::pointers::POINTER_RETRY_WINDOW_MS;
use super::Engine;
use crate::messaging::slot::command::FANNED_OUT_PER_COMMAND_MAX;
use crate::messaging::slot::{FanOut, OutboxKey, StreamCommand, StreamOutcome};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

/// How often the leader of a slot looks for sends in its outbox that nobody on this node is
/// writing (left by a previous leader, or by a report that was lost).
pub const OUTBOX_CHECK_MS: u64 = 500;
/// Most pointers one shard writes at a time (each is a request to its inbox's owner shard,
/// well inside the mesh's 65,536 outstanding requests); the sends past it wait for the
/// next look.
pub const POINTERS_IN_FLIGHT_MAX: usize = 16_384;
const _: () = assert!(POINTERS_IN_FLIGHT_MAX >= crate::messaging::slot::FANOUT_MEMBERS_MAX);
/// How long written sends gather before they are reported (per slot, in one command).
pub const REPORT_INTERVAL_MS: u64 = 1_000;
// A new leader writes again what was written and not reported: that must stay well inside
// the pointer claims' window, or a second writing would store a second pointer.
const _: () = assert!(
    (REPORT_INTERVAL_MS + POINTER_RETRY_WINDOW_MS) as i64 * 1_000_000
        < crate::messaging::slot::POINTER_CLAIM_TTL_NS
);

/// What this shard is doing about the outboxes of the slots it leads.
#[derive(Default)]
pub(super) struct OutboxWork {
    /// Sends whose pointers are being written here, or written and not yet reported.
    writing: RefCell<HashSet<OutboxKey>>,
    /// Sends written, by slot, waiting for the next report.
    written: RefCell<BTreeMap<u16, Vec<OutboxKey>>>,
    /// Whether a task is proposing reports.
    reporting: Cell<bool>,
    /// Pointers asked of the inboxes' owners and not answered yet.
    pointers_in_flight: Cell<usize>,
    /// Slots whose committed records an apply is writing here, with how many applies: that
    /// apply writes their outboxes when it ends (as this node's own sends, not taken over),
    /// so the periodic look leaves them alone meanwhile.
    applying: RefCell<HashMap<u16, u32>>,
}

/// Marks slots as being applied for as long as it lives (`OutboxWork::applying`).
pub(super) struct Applying<'a> {
    work: &'a OutboxWork,
    slots: Vec<u16>,
}

impl OutboxWork {
    pub(super) fn applying(&self, slots: impl IntoIterator<Item = u16>) -> Applying<'_> {
        let slots: Vec<u16> = slots.into_iter().collect();
        let mut applying = self.applying.borrow_mut();
        for slot in &slots {
            *applying.entry(*slot).or_insert(0) += 1;
        }
        Applying { work: self, slots }
    }

    fn is_applying(&self, slot: u16) -> bool {
        self.applying.borrow().contains_key(&slot)
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        let mut applying = self.work.applying.borrow_mut();
        for slot in &self.slots {
            let count = applying.get_mut(slot).expect("marked by `applying`");
            *count -= 1;
            if *count == 0 {
                applying.remove(slot);
            }
        }
    }
}

impl Engine {
    /// Starts writing the pointers of the sends in slot `slot`'s outbox that nobody here is
    /// writing, if this node leads the slot. `resumed` counts them as taken over.
    pub(super) fn write_outbox(self: &Rc<Self>, slot: u16, resumed: bool) {
        let Some(replication) = self.replication() else {
            return;
        };
        if self.closing.get() || !replication.leads(slot) {
            return;
        }
        let mut started: Vec<(OutboxKey, FanOut)> = Vec::new();
        let work = &self.outbox_work;
        replication.with_slot(slot, &mut |s| {
            let writing = work.writing.borrow();
            let mut in_flight = work.pointers_in_flight.get();
            for (key, fan_out) in s.outbox() {
                if in_flight + fan_out.members.len() > POINTERS_IN_FLIGHT_MAX {
                    break;
                }
                if !writing.contains(key) {
                    in_flight += fan_out.members.len();
                    started.push((key.clone(), fan_out.clone()));
                }
            }
        });
        if started.is_empty() {
            return;
        }
        if !resumed {
            // Tests stop a leader here: its sends are committed, their pointers not written.
            crate::faults::crash_point("before-fan-out");
        }
        let mut stats = self.stats.borrow_mut();
        stats.fan_outs += started.len() as u64;
        if resumed {
            stats.fan_outs_resumed += started.len() as u64;
        }
        drop(stats);
        for (key, fan_out) in started {
            let in_flight = work.pointers_in_flight.get() + fan_out.members.len();
            work.pointers_in_flight.set(in_flight);
            work.writing.borrow_mut().insert(key.clone());
            let me = Rc::clone(self);
            boltq_shards::spawn(
                async move { me.write_pointers(slot, key, fan_out, resumed).await },
            )
            .detach();
        }
    }

    /// Looks at the outboxes of the slots this node leads every [`OUTBOX_CHECK_MS`], so a
    /// new leader takes over the sends its predecessor left (runs while the engine does).
    pub(super) async fn outbox_loop(self: Rc<Self>) {
        while !self.closing.get() {
            boltq_shards::sleep(Duration::from_millis(OUTBOX_CHECK_MS)).await;
            for slot in self.led_slots().unwrap_or_default() {
                if !self.outbox_work.is_applying(slot) {
                    self.write_outbox(slot, true);
                }
            }
        }
    }

    /// Writes one send's pointers, one per member, each on its inbox's owner shard (which
    /// retries one without an outcome under its claim, and counts one it gives up), then
    /// has the send reported. A request the owner never answered (the mesh refused or
    /// timed it out) leaves the send unreported for the next look to write again.
    async fn write_pointers(
        self: Rc<Self>,
        slot: u16,
        key: OutboxKey,
        fan_out: FanOut,
        resumed: bool,
    ) {
        let (_, partition, seq) = &key;
        let sender = fan_out
            .headers
            .iter()
            .find(|(k, _)| k.as_ref() == b"sender")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default();
        let answered = self
            .write_pointers_to(
                &fan_out.members,
                &fan_out.headers,
                (*seq, *partition),
                &sender,
            )
            .await;
        let members = fan_out.members.len();
        let work = &self.outbox_work;
        work.pointers_in_flight
            .set(work.pointers_in_flight.get() - members);
        if !answered {
            work.writing.borrow_mut().remove(&key);
            return;
        }
        if !resumed {
            // Tests stop a leader here: the pointers are written, the send is still owed.
            crate::faults::crash_point("before-fan-out-report");
        }
        self.outbox_work
            .written
            .borrow_mut()
            .entry(slot)
            .or_default()
            .push(key);
        if !self.outbox_work.reporting.replace(true) {
            boltq_shards::spawn(Rc::clone(&self).report_written()).detach();
        }
    }

    /// Proposes what was written every [`REPORT_INTERVAL_MS`], one `FannedOut` per slot,
    /// until nothing is left to report. A report without an outcome is proposed again at
    /// the next turn while this node leads the slot; otherwise the next leader writes those
    /// sends again (claims make that harmless).
    async fn report_written(self: Rc<Self>) {
        loop {
            boltq_shards::sleep(Duration::from_millis(REPORT_INTERVAL_MS)).await;
            let written = std::mem::take(&mut *self.outbox_work.written.borrow_mut());
            if written.is_empty() {
                break;
            }
            let reports = written.into_iter().flat_map(|(slot, sends)| {
                let chunks: Vec<Vec<OutboxKey>> = sends
                    .chunks(FANNED_OUT_PER_COMMAND_MAX)
                    .map(<[OutboxKey]>::to_vec)
                    .collect();
                chunks.into_iter().map(move |sends| (slot, sends))
            });
            let outcomes = futures_util::future::join_all(reports.map(|(slot, sends)| {
                let me = Rc::clone(&self);
                async move {
                    let outcome = me.report(slot, sends.clone()).await;
                    (slot, sends, outcome)
                }
            }))
            .await;
            for (slot, sends, outcome) in outcomes {
                let leads = self.replication().is_some_and(|r| r.leads(slot));
                if outcome.is_err() && leads && !self.closing.get() {
                    let mut written = self.outbox_work.written.borrow_mut();
                    written.entry(slot).or_default().extend(sends);
                    continue;
                }
                let mut writing = self.outbox_work.writing.borrow_mut();
                for key in &sends {
                    writing.remove(key);
                }
            }
        }
        self.outbox_work.reporting.set(false);
    }

    async fn report(&self, slot: u16, sends: Vec<OutboxKey>) -> Result<(), StreamError> {
        let replication = self
            .replication()
            .ok_or_else(|| StreamError::Internal("no replication".into()))?;
        match replication
            .submit(slot, StreamCommand::FannedOut { sends })
            .await
        {
            Ok(StreamOutcome::FannedOut { .. }) => Ok(()),
            Ok(other) => Err(StreamError::Internal(format!(
                "a fan-out report answered {other:?}"
            ))),
            Err(e) => {
                log::debug!("[stream] fan-out report of slot {slot}: {e}; again");
                Err(e)
            }
        }
    }
}
