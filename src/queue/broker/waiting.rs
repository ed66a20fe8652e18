//! Messages of work queues waiting for a time before they become ready: published with a
//! delay, or backing off before a retry. Keyed by their own timer key, so the timer that
//! fires finds its message directly and the map iterates in firing order.
//!
//! Both kinds count in the v1 `DelayedCount` stat and hold a place in their queue's capacity.

use super::timers::TimerKey;
use crate::queue::message::Message;
use imbl::OrdMap;

/// Persistent, so a snapshot copies it in O(1) (see `queue.rs`).
#[derive(Clone, Default)]
pub(super) struct Waiting {
    by_timer: OrdMap<TimerKey, Message>,
}

impl Waiting {
    /// When a waiting message's timer is due: at `wake_ns`, or at its TTL if that comes
    /// first (a message whose TTL passes while it waits is discarded then, not at wake-up).
    pub fn due_ns(msg: &Message, wake_ns: i64) -> i64 {
        match msg.expires_at_ns {
            0 => wake_ns,
            expires_at_ns => wake_ns.min(expires_at_ns),
        }
    }

    pub fn insert(&mut self, timer: TimerKey, msg: Message) {
        let previous = self.by_timer.insert(timer, msg);
        assert!(previous.is_none(), "waiting timer {timer:?} used twice");
    }

    pub fn remove(&mut self, timer: &TimerKey) -> Message {
        self.by_timer
            .remove(timer)
            .unwrap_or_else(|| panic!("waiting timer {timer:?} has no message"))
    }

    pub fn len(&self) -> usize {
        self.by_timer.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&TimerKey, &Message)> {
        self.by_timer.iter()
    }
}
