//! Long-polls: a CONSUME that finds its queue empty parks on the queue's owner until a
//! message arrives or its wait runs out (`waiters.rs` keeps the parked consumers).

use super::apply::Submitted;
use super::mesh::QueueMsg;
use super::plane::{now_ns, Plane, REMOTE_TIMEOUT_MS};
use super::room::Turn;
use super::waiters::{Answer, Waiter};
use crate::queue::broker::{Command, Outcome};
use boltq_io::event::Event;
use std::cell::RefCell;
use std::rc::Rc;

/// The answer slot of a long-poll parked on this shard.
#[derive(Default)]
pub struct Parked {
    pub(super) answer: RefCell<Option<(Outcome, Option<u64>)>>,
    pub(super) ready: Event,
}

impl Parked {
    /// A parked answer slot and the `Answer` that fills it.
    pub(super) fn with_answer() -> (Rc<Parked>, Answer) {
        let parked = Rc::new(Parked::default());
        let fill = Rc::clone(&parked);
        let answer: Answer = Box::new(move |outcome, lsn| {
            *fill.answer.borrow_mut() = Some((outcome, lsn));
            fill.ready.notify();
        });
        (parked, answer)
    }

    /// The answer, once it is given.
    pub(super) async fn answered(&self) -> (Outcome, Option<u64>) {
        loop {
            let ticket = self.ready.ticket();
            if let Some(answer) = self.answer.borrow_mut().take() {
                return answer;
            }
            self.ready.wait(ticket).await;
        }
    }
}

impl Plane {
    /// A consume that parks on this shard (the owner) when nothing is ready and `wait_ms`
    /// allows; `answer` is called once, with the messages or EMPTY at the deadline.
    pub(super) fn consume_or_park(&self, slot: u16, cmd: Command, wait_ms: u64, answer: Answer) {
        if let Some(replication) = self.replication.get() {
            return replication.consume_waiting(slot, cmd, wait_ms, answer);
        }
        match self.turn_of(&cmd) {
            Turn::Now => self.consume_or_park_now(slot, cmd, wait_ms, answer),
            Turn::Refuse(why) => answer(Outcome::Error(why), None),
            Turn::Wait(place) => self.wait_turn(
                place,
                Box::new(move |plane| plane.consume_or_park_now(slot, cmd, wait_ms, answer)),
            ),
        }
    }

    fn consume_or_park_now(&self, slot: u16, cmd: Command, wait_ms: u64, answer: Answer) {
        let (outcome, lsn) = self.apply_local(slot, cmd.clone());
        let Command::Consume {
            queue,
            consumer,
            max,
            now_ns,
        } = cmd
        else {
            unreachable!("consume_or_park takes consumes")
        };
        if outcome != Outcome::Empty || wait_ms == 0 || self.waiters.borrow().is_full() {
            return answer(outcome, lsn);
        }
        let waiter = Waiter {
            consumer,
            max,
            deadline_ns: now_ns.saturating_add(wait_ms as i64 * 1_000_000),
            answer,
        };
        self.waiters.borrow_mut().park(slot, queue, waiter);
        self.timers_changed.notify();
    }

    /// Submits a CONSUME that may long-poll (`wait_ms` > 0) on the queue's owner.
    pub fn submit_consume(&self, slot: u16, cmd: Command, wait_ms: u64) -> Submitted {
        if wait_ms == 0 {
            return self.submit(slot, cmd);
        }
        let owner = self.owner_of(slot);
        if owner != self.shard.id() {
            let req = QueueMsg::ConsumeWait { slot, cmd, wait_ms };
            return Submitted::Remote(owner, self.shard.request(owner, req, REMOTE_TIMEOUT_MS));
        }
        let (parked, answer) = Parked::with_answer();
        self.consume_or_park(slot, cmd, wait_ms, answer);
        Submitted::Parked(parked)
    }

    /// Serves parked consumers of `slot`, oldest first, while their queues have messages.
    /// Their consumes append, so at a full journal they are served in the line's turn, once
    /// there is room (`room.rs`): served at once, a consume would be refused "storage is
    /// behind" where the client waited for a message (a tick at a full journal did that).
    pub(super) fn serve_waiters(&self, slot: u16) {
        if self.serving_waiters.get() {
            return;
        }
        let queues = self.waiters.borrow().queues_of(slot);
        if queues.is_empty() {
            return;
        }
        self.serving_waiters.set(true);
        'queues: for queue in queues {
            loop {
                if self
                    .store
                    .as_ref()
                    .is_some_and(|s| super::room::backlogged(s))
                {
                    self.serve_waiters_in_turn(slot);
                    break 'queues;
                }
                let Some(w) = self.waiters.borrow_mut().pop(slot, &queue) else {
                    break;
                };
                let cmd = Command::Consume {
                    queue: queue.clone(),
                    consumer: w.consumer,
                    max: w.max,
                    now_ns: now_ns(),
                };
                let (outcome, lsn) = self.apply_local(slot, cmd);
                if outcome == Outcome::Empty {
                    self.waiters.borrow_mut().unpop(slot, queue.clone(), w);
                    break;
                }
                (w.answer)(outcome, lsn);
            }
        }
        self.serving_waiters.set(false);
    }

    /// Queues the serving of `slot`'s long-polls in the line, once per slot at a time.
    fn serve_waiters_in_turn(&self, slot: u16) {
        if self.waiters_served_in_turn.borrow_mut().insert(slot) {
            let step = move |plane: &Rc<Plane>| {
                plane.waiters_served_in_turn.borrow_mut().remove(&slot);
                plane.serve_waiters(slot);
            };
            self.wait_turn(super::room::Place::with_room(), Box::new(step));
        }
    }

    /// Answers EMPTY to parked consumers whose deadline passed (all of them at shutdown).
    pub fn expire_waiters(&self, now_ns: i64) {
        let expired = self.waiters.borrow_mut().take_expired(now_ns);
        for w in expired {
            (w.answer)(Outcome::Empty, None);
        }
    }
}
