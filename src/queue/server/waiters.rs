//! Long-poll consumers (CONSUME with `wait_ms`, a BoltQ addition): parked on the owner of
//! their queue until a message is ready or their deadline passes.
//!
//! The owner retries parked consumers after every command that can make a message ready in
//! their slot (publish, nack, tick, dead-letter requeue), oldest first, so the longest
//! waiter is served first. A waiter that gets nothing by its deadline is answered EMPTY.

use crate::queue::broker::{ConsumerRef, Outcome};
use std::collections::{BTreeMap, VecDeque};

/// Most consumers parked on one shard; beyond it a long-poll is answered EMPTY at once
/// rather than holding more memory.
pub const WAITERS_MAX: usize = 65_536;

/// How a parked consumer is answered: with the outcome and the journal position it must
/// wait for (the consume that served it was logged).
pub type Answer = Box<dyn FnOnce(Outcome, Option<u64>)>;

pub struct Waiter {
    pub consumer: ConsumerRef,
    pub max: u32,
    pub deadline_ns: i64,
    pub answer: Answer,
}

/// Parked consumers of one shard, by (slot, queue).
#[derive(Default)]
pub struct Waiters {
    by_queue: BTreeMap<(u16, String), VecDeque<Waiter>>,
    count: usize,
}

impl Waiters {
    pub fn is_full(&self) -> bool {
        self.count >= WAITERS_MAX
    }

    pub fn park(&mut self, slot: u16, queue: String, waiter: Waiter) {
        assert!(!self.is_full());
        self.by_queue
            .entry((slot, queue))
            .or_default()
            .push_back(waiter);
        self.count += 1;
    }

    /// Queues of `slot` that have parked consumers.
    pub fn queues_of(&self, slot: u16) -> Vec<String> {
        self.by_queue
            .range((slot, String::new())..)
            .take_while(|((s, _), _)| *s == slot)
            .map(|((_, q), _)| q.clone())
            .collect()
    }

    /// The oldest parked consumer of a queue.
    pub fn pop(&mut self, slot: u16, queue: &str) -> Option<Waiter> {
        let key = (slot, queue.to_string());
        let list = self.by_queue.get_mut(&key)?;
        let w = list.pop_front();
        if list.is_empty() {
            self.by_queue.remove(&key);
        }
        if w.is_some() {
            self.count -= 1;
        }
        w
    }

    /// Puts a consumer back at the front (it was popped but nothing was ready).
    pub fn unpop(&mut self, slot: u16, queue: String, waiter: Waiter) {
        self.by_queue
            .entry((slot, queue))
            .or_default()
            .push_front(waiter);
        self.count += 1;
    }

    pub fn next_deadline_ns(&self) -> Option<i64> {
        self.by_queue
            .values()
            .flat_map(|l| l.iter().map(|w| w.deadline_ns))
            .min()
    }

    /// Removes every waiter whose deadline has passed, or every one at all (`now_ns` =
    /// `i64::MAX`, at shutdown).
    pub fn take_expired(&mut self, now_ns: i64) -> Vec<Waiter> {
        self.take_where(|w| w.deadline_ns <= now_ns)
    }

    /// Removes the waiters of a closed connection.
    pub fn take_of(&mut self, consumer: ConsumerRef) -> Vec<Waiter> {
        self.take_where(|w| w.consumer == consumer)
    }

    fn take_where(&mut self, mut pred: impl FnMut(&Waiter) -> bool) -> Vec<Waiter> {
        let mut out = Vec::new();
        for list in self.by_queue.values_mut() {
            let mut keep = VecDeque::with_capacity(list.len());
            for w in list.drain(..) {
                if pred(&w) {
                    out.push(w);
                } else {
                    keep.push_back(w);
                }
            }
            *list = keep;
        }
        self.by_queue.retain(|_, l| !l.is_empty());
        self.count -= out.len();
        out
    }
}
