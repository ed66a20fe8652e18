//! Dead-letter queues: one FIFO per source work queue, holding messages whose retries ran out.
//! Keyed by the *source* queue name (the v1 stat key is `<queue>_dead_letter`); a queue that
//! happens to be named `x_dead_letter` therefore never mixes with the dead letters of `x`.
//!
//! Dead letters do not expire (they are kept for an operator to read), and are never
//! consumed: they can be listed, read, requeued to their source queue, or purged.
//!
//! A dead-letter queue, once it held a message, stays listed (at 0) after it is purged or
//! drained, as v1's STATS keeps `<queue>_dead_letter: 0`; their number is bounded by the
//! work queues, which are.

use crate::queue::message::Message;
use imbl::{OrdMap, Vector};

/// Suffix of the stat key, literally as v1 names dead-letter queues.
pub const DEAD_LETTER_SUFFIX: &str = "_dead_letter";

/// Persistent, so a snapshot copies it in O(1) (see `queue.rs`).
#[derive(Clone)]
pub(super) struct DeadLetters {
    by_queue: OrdMap<String, Vector<Message>>,
    capacity_per_queue: usize,
}

impl DeadLetters {
    pub fn new(capacity_per_queue: usize) -> DeadLetters {
        assert!(capacity_per_queue > 0);
        DeadLetters {
            by_queue: OrdMap::new(),
            capacity_per_queue,
        }
    }

    pub fn len(&self, queue: &str) -> usize {
        self.by_queue.get(queue).map_or(0, Vector::len)
    }

    pub fn has_room(&self, queue: &str) -> bool {
        self.len(queue) < self.capacity_per_queue
    }

    pub fn push(&mut self, msg: Message) {
        assert!(
            self.has_room(&msg.topic),
            "dead-letter queue of {:?} is full",
            msg.topic
        );
        self.by_queue
            .entry(msg.topic.to_string())
            .or_default()
            .push_back(msg);
    }

    /// Drops the (empty) dead-letter queue of a queue that is forgotten.
    pub fn forget(&mut self, queue: &str) {
        let dropped = self.by_queue.remove(queue);
        assert!(
            dropped.is_none_or(|dlq| dlq.is_empty()),
            "dead letters of {queue:?} dropped with their queue"
        );
    }

    /// Restores a dead-letter queue that is listed with nothing in it.
    pub fn restore_empty(&mut self, queue: &str) {
        self.by_queue.entry(queue.to_string()).or_default();
    }

    /// Restores one dead letter; a snapshot taken under a larger capacity may exceed ours.
    pub fn push_restored(&mut self, msg: Message) {
        self.by_queue
            .entry(msg.topic.to_string())
            .or_default()
            .push_back(msg);
    }

    /// Oldest first, without removing.
    pub fn list(&self, queue: &str, offset: usize, limit: usize) -> Vec<Message> {
        let Some(dlq) = self.by_queue.get(queue) else {
            return Vec::new();
        };
        dlq.iter().skip(offset).take(limit).cloned().collect()
    }

    /// Removes and returns the `n` oldest dead letters of `queue`.
    pub fn take_front(&mut self, queue: &str, n: usize) -> Vec<Message> {
        let Some(dlq) = self.by_queue.get_mut(queue) else {
            return Vec::new();
        };
        dlq.slice(..n.min(dlq.len())).into_iter().collect()
    }

    /// `(source queue, count)` for every dead-letter queue that ever held a message, by name.
    pub fn counts(&self) -> impl Iterator<Item = (&String, usize)> {
        self.by_queue.iter().map(|(q, dlq)| (q, dlq.len()))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Vector<Message>)> {
        self.by_queue.iter()
    }
}
