//! Requests this shard sent and is still waiting on.
//!
//! The waiting side stores only a slot keyed by request id; the reply comes
//! back through the normal batched stream and fills the slot. Borrows of the
//! map last for one poll or one delivery, never across an `.await`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::task::{Context, Poll, Waker};

struct Slot<M> {
    reply: Option<M>,
    waker: Option<Waker>,
}

/// Outstanding requests of one shard, at most `requests_max` at a time.
pub(crate) struct PendingReplies<M> {
    slots: RefCell<HashMap<u64, Slot<M>>>,
    next_request_id: Cell<u64>,
    requests_max: usize,
}

impl<M> PendingReplies<M> {
    pub(crate) fn new(requests_max: usize) -> Self {
        assert!(requests_max > 0);
        Self {
            slots: RefCell::new(HashMap::new()),
            next_request_id: Cell::new(0),
            requests_max,
        }
    }

    /// Reserves a slot and returns its request id, or `None` at the limit.
    pub(crate) fn begin(&self) -> Option<u64> {
        let mut slots = self.slots.borrow_mut();
        if slots.len() >= self.requests_max {
            return None;
        }
        let request_id = self.next_request_id.get();
        self.next_request_id.set(request_id + 1);
        let slot = Slot {
            reply: None,
            waker: None,
        };
        assert!(slots.insert(request_id, slot).is_none(), "ids never repeat");
        Some(request_id)
    }

    /// Stores a reply and wakes its waiter. Returns false for a reply nobody
    /// waits for any more (timed out or cancelled): the caller counts it.
    pub(crate) fn complete(&self, request_id: u64, msg: M) -> bool {
        let waker = {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(&request_id) else {
                return false;
            };
            if slot.reply.is_some() {
                return false;
            }
            slot.reply = Some(msg);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// Takes the reply if it arrived, else parks the caller's waker.
    pub(crate) fn poll_reply(&self, request_id: u64, cx: &mut Context<'_>) -> Poll<M> {
        let mut slots = self.slots.borrow_mut();
        let slot = slots
            .get_mut(&request_id)
            .expect("polled request is pending");
        if let Some(msg) = slot.reply.take() {
            slots.remove(&request_id);
            return Poll::Ready(msg);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Drops a slot (timeout or cancellation). Idempotent.
    pub(crate) fn forget(&self, request_id: u64) {
        self.slots.borrow_mut().remove(&request_id);
    }

    /// Number of requests awaiting replies.
    pub(crate) fn len(&self) -> usize {
        self.slots.borrow().len()
    }
}
