//! The deadline index of one broker: every message that has to change state at a given time
//! (delayed publish, retry backoff, ack deadline, TTL expiry) has exactly one entry here,
//! keyed by `(due_ns, seq)`. The shard ticker asks for the earliest due time and ticks the
//! broker then; there is never a task or timer object per message.
//!
//! `seq` is a per-broker counter, so entries with the same due time fire in the order they
//! were scheduled, and keys never collide. Entries are removed exactly when the thing they
//! point at leaves its state (ack, consume, ...), so the index never holds stale entries:
//! its first key is exactly the next time a tick changes something.

use super::queue::ReadyKey;
use crate::queue::message::MessageId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Position of one entry in the index; stored by the owner of the entry so it can cancel it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct TimerKey {
    pub due_ns: i64,
    pub seq: u64,
}

/// What an entry points at. The owner's maps hold the data; the index only says where.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) enum TimerTarget {
    /// A delayed or retry-waiting message, keyed in `Waiting` by this same `TimerKey`.
    Waiting,
    /// The TTL of a ready message.
    Ready { queue: String, key: ReadyKey },
    /// The ack deadline (or TTL, whichever comes first) of a pending message.
    Pending { id: MessageId },
    /// When an undeclared queue may have been idle and empty for `idle_queue_ttl_ns`; the
    /// queue's `idle_timer` is this entry.
    IdleQueue { queue: String },
}

#[derive(Default)]
pub(super) struct Timers {
    index: BTreeMap<TimerKey, TimerTarget>,
    next_seq: u64,
}

impl Timers {
    pub fn schedule(&mut self, due_ns: i64, target: TimerTarget) -> TimerKey {
        let key = TimerKey {
            due_ns,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        let previous = self.index.insert(key, target);
        assert!(previous.is_none(), "timer seq {} issued twice", key.seq);
        key
    }

    pub fn cancel(&mut self, key: TimerKey) -> TimerTarget {
        self.index
            .remove(&key)
            .unwrap_or_else(|| panic!("cancelled timer {key:?} is not scheduled"))
    }

    /// Removes and returns the earliest entry due at or before `now_ns`.
    pub fn pop_due(&mut self, now_ns: i64) -> Option<(TimerKey, TimerTarget)> {
        let entry = self.index.first_entry()?;
        if entry.key().due_ns > now_ns {
            return None;
        }
        Some(entry.remove_entry())
    }

    pub fn next_due_ns(&self) -> Option<i64> {
        self.index.keys().next().map(|k| k.due_ns)
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Rebuilds the index from a snapshot: same keys, same counter, so a restored broker
    /// fires timers in exactly the order the original would have.
    pub fn restored(next_seq: u64) -> Timers {
        Timers {
            index: BTreeMap::new(),
            next_seq,
        }
    }

    pub fn insert_restored(&mut self, key: TimerKey, target: TimerTarget) -> Result<(), String> {
        if key.seq >= self.next_seq {
            return Err(format!(
                "timer seq {} not below next seq {}",
                key.seq, self.next_seq
            ));
        }
        if self.index.insert(key, target).is_some() {
            return Err(format!("timer {key:?} appears twice"));
        }
        Ok(())
    }

    pub fn get(&self, key: &TimerKey) -> Option<&TimerTarget> {
        self.index.get(key)
    }
}
