//! Per-destination outboxes.
//!
//! `send` is synchronous: it appends to the destination's outbox and, if the
//! outbox was empty, wakes that destination's flusher task. A woken task goes
//! to the back of the run queue, so the flusher runs after every task that is
//! runnable now, and takes everything they queued as one batch: one batch per
//! destination per loop iteration, without any timer. While a flusher waits
//! for room in a full channel, new messages keep accumulating into the next
//! batch, so batches grow exactly when the receiver falls behind.

use std::cell::{Cell, RefCell};
use std::mem;

use crate::envelope::{Batch, Envelope};
use crate::notify::{wait_until, WaitList};
use crate::ownership::ShardId;

/// Largest capacity pre-reserved for the next batch, so one burst does not
/// pin a big buffer per destination forever.
const BATCH_CAPACITY_HINT_MAX: usize = 4_096;

struct Outbox<M> {
    queued: RefCell<Batch<M>>,
    /// A batch was taken and is not yet handed over (channel send pending or
    /// local delivery running). Part of "drained", so `flush` really waits.
    in_flight: Cell<bool>,
    /// The flusher parks here until the outbox is non-empty.
    flusher: WaitList,
    /// Senders waiting for room, and `flush` waiting for drained, park here.
    room: WaitList,
}

/// One outbox per destination shard (including this shard itself).
pub(crate) struct Outboxes<M> {
    boxes: Vec<Outbox<M>>,
    messages_max: usize,
}

impl<M> Outboxes<M> {
    /// `messages_max` caps each outbox, so a slow or stuck destination costs
    /// bounded memory and pushes back on the senders instead.
    pub(crate) fn new(shard_count: usize, messages_max: usize) -> Self {
        assert!(shard_count > 0);
        assert!(messages_max > 0);
        let boxes = (0..shard_count)
            .map(|_| Outbox {
                queued: RefCell::new(Vec::new()),
                in_flight: Cell::new(false),
                flusher: WaitList::default(),
                room: WaitList::default(),
            })
            .collect();
        Self {
            boxes,
            messages_max,
        }
    }

    /// Queues one envelope, or gives it back if the outbox is at its cap.
    pub(crate) fn push(&self, dest: ShardId, envelope: Envelope<M>) -> Result<(), Envelope<M>> {
        if !self.has_room(dest) {
            return Err(envelope);
        }
        self.push_uncapped(dest, envelope);
        Ok(())
    }

    /// Queues one envelope past the cap. For replies (their number is already
    /// bounded by the requesters' `requests_max`, and refusing one would turn
    /// backpressure into a timeout on another shard) and for messages whose
    /// sender bounds their number itself and may neither drop nor reorder them.
    pub(crate) fn push_uncapped(&self, dest: ShardId, envelope: Envelope<M>) {
        let outbox = &self.boxes[dest];
        let was_empty = {
            let mut queued = outbox.queued.borrow_mut();
            queued.push(envelope);
            queued.len() == 1
        };
        if was_empty {
            outbox.flusher.wake_all();
        }
    }

    /// True if `push` to `dest` would succeed now.
    pub(crate) fn has_room(&self, dest: ShardId) -> bool {
        self.boxes[dest].queued.borrow().len() < self.messages_max
    }

    /// Waits until `dest`'s outbox has room.
    pub(crate) async fn ready(&self, dest: ShardId) {
        wait_until(&self.boxes[dest].room, || self.has_room(dest)).await;
    }

    /// Flusher side: waits for a non-empty outbox and takes all of it. The
    /// caller must call [`Outboxes::batch_done`] once the batch is handed over.
    pub(crate) async fn next_batch(&self, dest: ShardId) -> Batch<M> {
        let outbox = &self.boxes[dest];
        wait_until(&outbox.flusher, || !outbox.queued.borrow().is_empty()).await;
        assert!(!outbox.in_flight.get(), "one flusher per destination");
        outbox.in_flight.set(true);
        // The next batch is likely about as big as this one: start it with
        // that capacity (bounded) instead of regrowing from zero.
        let mut queued = outbox.queued.borrow_mut();
        let capacity = queued.len().min(BATCH_CAPACITY_HINT_MAX);
        let batch = mem::replace(&mut *queued, Vec::with_capacity(capacity));
        drop(queued);
        outbox.room.wake_all();
        assert!(!batch.is_empty());
        batch
    }

    /// Flusher side: the batch taken by `next_batch` has been handed over.
    pub(crate) fn batch_done(&self, dest: ShardId) {
        let outbox = &self.boxes[dest];
        assert!(outbox.in_flight.get());
        outbox.in_flight.set(false);
        outbox.room.wake_all();
    }

    fn drained(&self, dest: ShardId) -> bool {
        let outbox = &self.boxes[dest];
        !outbox.in_flight.get() && outbox.queued.borrow().is_empty()
    }

    /// Waits until everything queued so far (and anything queued meanwhile)
    /// has been handed to the channels or delivered locally.
    pub(crate) async fn flush(&self) {
        // Handing over one batch may cause more sends (a local delivery that
        // replies, say), so repeat until all outboxes are drained at once.
        while !(0..self.boxes.len()).all(|dest| self.drained(dest)) {
            for dest in 0..self.boxes.len() {
                wait_until(&self.boxes[dest].room, || self.drained(dest)).await;
            }
        }
    }

    /// Messages currently queued for `dest`, for metrics and tests.
    pub(crate) fn queued(&self, dest: ShardId) -> usize {
        self.boxes[dest].queued.borrow().len()
    }
}
