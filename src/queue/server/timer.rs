//! The shard's timer loop: applies `Tick` to every slot whose next deadline passed and
//! expires long-polls, sleeping in between (without any wake-up while nothing is due).

use super::long_poll::Parked;
use super::plane::{now_ns, Plane};
use super::room::Place;
use crate::queue::broker::{Command, Outcome};
use std::rc::Rc;
use std::time::Duration;

/// Timer resolution: deadlines are rounded up to this, so one wake-up serves many timers.
pub const TICK_NS: i64 = 10_000_000;

impl Plane {
    /// Applies `Tick` to every slot whose next deadline has passed, sleeping in between.
    /// Sleeps without any wake-up while no slot has a deadline (an idle server stays idle).
    pub(super) async fn timer_loop(self: Rc<Self>) {
        loop {
            let ticket = self.timers_changed.ticket();
            let next = self.next_deadline_ns();
            let Some(deadline) = next else {
                self.timers_changed.wait(ticket).await;
                continue;
            };
            let now = now_ns();
            if deadline > now {
                let wait_ns = (deadline - now + TICK_NS - 1) / TICK_NS * TICK_NS;
                let sleep = boltq_shards::sleep(Duration::from_nanos(wait_ns as u64));
                futures_lite::future::or(sleep, self.timers_changed.wait(ticket)).await;
                continue;
            }
            self.tick_in_turn(now).await;
        }
    }

    /// Runs [`Plane::tick_due`] in its turn (`room.rs`): at once, or behind the commands
    /// waiting for the journal. Applied before them, a tick would be logged out of their
    /// order; left until none waits, the timers could stand still for as long as producers
    /// outrun the disk.
    async fn tick_in_turn(&self, now: i64) {
        if self.room.is_empty() {
            return self.tick_due(now);
        }
        let (parked, answer) = Parked::with_answer();
        let step = move |plane: &Rc<Plane>| {
            plane.tick_due(now);
            answer(Outcome::Empty, None);
        };
        self.wait_turn(Place::without_room(), Box::new(step));
        parked.answered().await;
    }

    pub(super) fn next_deadline_ns(&self) -> Option<i64> {
        let brokers = self
            .slots
            .borrow()
            .values()
            .filter_map(|c| c.borrow().broker.next_deadline_ns())
            .min();
        let waiters = self.waiters.borrow().next_deadline_ns();
        brokers.into_iter().chain(waiters).min()
    }

    pub(super) fn tick_due(&self, now: i64) {
        self.expire_waiters(now);
        let due: Vec<u16> = self
            .slots
            .borrow()
            .iter()
            .filter(|(_, c)| {
                c.borrow()
                    .broker
                    .next_deadline_ns()
                    .is_some_and(|d| d <= now)
            })
            .map(|(s, _)| *s)
            .collect();
        for slot in due {
            // Tick outcomes are not replies: nobody waits for their durability. A crash
            // before the tick is durable replays to the state before it, and the next tick
            // redoes the same work.
            let _ = self.apply_local(slot, Command::Tick { now_ns: now });
        }
    }
}
