//! Commands that wait for the journal (single node). A shard's journal holds at most
//! `journal_backlog_bytes_max` (256 MiB) appended but not yet durable; a command that would
//! change state past that waits here, in arrival order, until the disk has caught up. The
//! client is slowed to the disk's pace instead of being refused: until 2026-12-07 a
//! producer writing faster than the disk (fsync `never` or `interval`) got "storage is
//! behind; retry later" for some of its publishes.
//!
//! While any command waits, every later one waits behind it, also those that need no room
//! (a disconnect, which must not overtake its connection's waiting SUBSCRIBE and leave the
//! registration live on a closed connection), and a tick (`timer.rs`: a tick waits its
//! turn rather than for an empty line, which producers outrunning the disk could keep from
//! ever coming). A waiting command keeps the time it was made at, as a reply in flight
//! does. A command another shard sent keeps that shard's client waiting at most `REMOTE_TIMEOUT_MS` (30 s),
//! as a slow fdatasync would; past it the client gets an error saying the command may
//! still be applied, as it is: it still waits here and is applied in its turn.
//!
//! The wait is bounded: past [`WAITING_COMMANDS_MAX`] commands or [`WAITING_BYTES_MAX`]
//! bytes of payload waiting on a shard, a command that needs room is refused with the
//! error it got before. A connection waits for its replies before it reads much more, so
//! the bound is met only by thousands of connections writing at once.

use super::plane::Plane;
use crate::queue::broker::{Command, Outcome};
use boltq_io::event::Event;
use boltq_io::{AppendError, Store};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

/// Commands that waited for room in the journal (counter).
pub const WAITED_FOR_ROOM_METRIC: &str = "boltq_queue_commands_waited_for_room_total";
/// Commands that may wait for the journal on one shard.
pub const WAITING_COMMANDS_MAX: usize = 65_536;
/// Payload bytes (messages' bodies) that may wait for the journal on one shard.
pub const WAITING_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Commands applied in one go once there is room, before other tasks get a turn.
const TURNS_PER_YIELD: usize = 1024;

/// What runs in a command's turn: it applies the command and answers whoever waits.
pub type Step = Box<dyn FnOnce(&Rc<Plane>)>;

/// When a command may be applied.
pub enum Turn {
    Now,
    /// After the commands already waiting, and, if it needs room, once there is room.
    Wait(Place),
    /// Too much waits already: the error to answer.
    Refuse(String),
}

/// A place in the line, taken by [`Plane::wait_turn`].
pub struct Place {
    needs_room: bool,
    bytes: u64,
}

impl Place {
    /// For a step that writes only once there is room (serving long-polls).
    pub fn with_room() -> Place {
        Place {
            needs_room: true,
            bytes: 0,
        }
    }

    /// For a step that writes whatever the backlog (a tick).
    pub fn without_room() -> Place {
        Place {
            needs_room: false,
            bytes: 0,
        }
    }
}

struct Waiting {
    place: Place,
    step: Step,
}

/// The commands of one shard waiting for the journal, oldest first.
#[derive(Default)]
pub struct Room {
    waiting: RefCell<VecDeque<Waiting>>,
    bytes: Cell<u64>,
    /// Notified when a command starts waiting.
    changed: Event,
}

impl Room {
    pub fn is_empty(&self) -> bool {
        self.waiting.borrow().is_empty()
    }

    fn pop_if(&self, may_run: impl Fn(&Place) -> bool) -> Option<Waiting> {
        let mut waiting = self.waiting.borrow_mut();
        if !may_run(&waiting.front()?.place) {
            return None;
        }
        let w = waiting.pop_front().expect("front seen");
        self.bytes.set(self.bytes.get() - w.place.bytes);
        Some(w)
    }
}

/// Whether `cmd` appends to the log when applied and so must find room in the journal.
/// A disconnect is written whatever the backlog (a connection that is gone cannot be
/// told to retry), as a tick is (time passing cannot be refused): `apply.rs` appends them
/// past the backlog limit (`Store::append_past_backlog`).
pub(super) fn needs_room(cmd: &Command) -> bool {
    !matches!(cmd, Command::Tick { .. } | Command::Disconnect { .. })
}

/// The payload bytes `cmd` holds while it waits.
fn held_bytes(cmd: &Command) -> u64 {
    match cmd {
        Command::Publish { msg } | Command::PublishTopic { msg } => msg.payload.len() as u64,
        _ => 0,
    }
}

/// Whether a command holding `bytes` of payload may join a line of `waiting` commands
/// holding `waiting_bytes`: within both bounds once it has joined.
fn line_admits(waiting: usize, waiting_bytes: u64, bytes: u64) -> bool {
    waiting < WAITING_COMMANDS_MAX && waiting_bytes + bytes <= WAITING_BYTES_MAX
}

pub(super) fn backlogged(store: &Store) -> bool {
    matches!(store.check_room(), Err(AppendError::Backlogged { .. }))
}

impl Plane {
    /// When `cmd` may be applied on this shard: now, when no command waits and the journal
    /// has room for it; else after those waiting.
    pub(super) fn turn_of(&self, cmd: &Command) -> Turn {
        let Some(store) = &self.store else {
            return Turn::Now;
        };
        let needs_room = needs_room(cmd);
        if self.room.is_empty() && !(needs_room && backlogged(store)) {
            return Turn::Now;
        }
        let bytes = held_bytes(cmd);
        let waiting = self.room.waiting.borrow().len();
        if needs_room && !line_admits(waiting, self.room.bytes.get(), bytes) {
            return Turn::Refuse(format!(
                "storage write: storage is behind by {} bytes and {waiting} commands wait \
                 for it (at most {WAITING_COMMANDS_MAX} commands, {WAITING_BYTES_MAX} bytes \
                 of payload); retry later",
                store.journal().backlog_bytes()
            ));
        }
        Turn::Wait(Place { needs_room, bytes })
    }

    /// Queues `step` at `place`; [`Plane::room_loop`] runs it in its turn.
    pub(super) fn wait_turn(&self, place: Place, step: Step) {
        self.room.bytes.set(self.room.bytes.get() + place.bytes);
        self.room
            .waiting
            .borrow_mut()
            .push_back(Waiting { place, step });
        self.waited_for_room.inc();
        self.room.changed.notify();
    }

    /// Applies `cmd` in its turn and hands the outcome and the journal position to wait
    /// for to `answer`: at once, or after the commands waiting before it.
    pub(super) fn apply_in_turn(
        &self,
        slot: u16,
        cmd: Command,
        answer: impl FnOnce(Outcome, Option<u64>) + 'static,
    ) {
        match self.turn_of(&cmd) {
            Turn::Now => {
                let (outcome, lsn) = self.apply_local(slot, cmd);
                answer(outcome, lsn);
            }
            Turn::Refuse(why) => answer(Outcome::Error(why), None),
            Turn::Wait(place) => self.wait_turn(
                place,
                Box::new(move |plane| {
                    let (outcome, lsn) = plane.apply_local(slot, cmd);
                    answer(outcome, lsn);
                }),
            ),
        }
    }

    /// Runs the waiting commands in order as the journal makes room. One per shard with
    /// storage, for the plane's life (clustered, nothing waits here: a slot's commands go
    /// through its group).
    pub(super) async fn room_loop(self: Rc<Self>) {
        let Some(store) = self.store.clone() else {
            return;
        };
        loop {
            let ticket = self.room.changed.ticket();
            if self.room.is_empty() {
                self.room.changed.wait(ticket).await;
                continue;
            }
            if let Err(e) = store.wait_for_room().await {
                // The journal failed: the waiting commands are applied now, and refused
                // with the failure (`apply_local` checks the store first).
                log::error!("waiting for room in the journal: {e}");
            }
            let mut turns = 0;
            while let Some(w) = self
                .room
                .pop_if(|place| !(place.needs_room && backlogged(&store)))
            {
                (w.step)(&self);
                turns += 1;
                if turns % TURNS_PER_YIELD == 0 {
                    futures_lite::future::yield_now().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_admits_up_to_its_bounds_and_not_one_past() {
        assert!(
            line_admits(0, 0, WAITING_BYTES_MAX),
            "one command of the whole budget"
        );
        assert!(line_admits(WAITING_COMMANDS_MAX - 1, 0, 0));
        assert!(
            !line_admits(WAITING_COMMANDS_MAX, 0, 0),
            "the 65,537th command"
        );
        assert!(line_admits(1, WAITING_BYTES_MAX - 10, 10));
        assert!(!line_admits(1, WAITING_BYTES_MAX - 10, 11), "one byte past");
        assert!(
            !line_admits(0, 0, WAITING_BYTES_MAX + 1),
            "one payload past the budget"
        );
    }

    #[test]
    fn only_commands_that_append_need_room() {
        let consumer = crate::queue::broker::ConsumerRef { shard: 0, conn: 1 };
        assert!(!needs_room(&Command::Tick { now_ns: 1 }));
        assert!(!needs_room(&Command::Disconnect { consumer }));
        assert!(needs_room(&Command::Purge { queue: "q".into() }));
        let confirm = Command::Confirm {
            consumer,
            topic: "t".into(),
            sub_id: "s".into(),
            delivery: 1,
        };
        assert!(
            needs_room(&confirm),
            "a confirmation appends: it waits its turn"
        );
    }
}
