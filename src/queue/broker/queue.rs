//! One work queue: its ready messages and the count of everything it holds.
//!
//! Ready messages are ordered by `(rank, seq)`: `rank = 9 - level`, so the highest priority
//! level comes first, and `seq` is the queue's enqueue counter, so each level is FIFO and a
//! requeued message goes to the tail of its level.
//!
//! Why a B-tree and not ten `VecDeque`s: a ready message whose TTL passes is removed at the
//! next tick (so expired messages neither hold capacity nor memory), which needs removal
//! from the middle by key. A B-tree does that in O(log n) with no tombstones, grows node by
//! node as messages arrive (nothing is allocated for an empty queue or an unused level), and
//! shrinks as they leave — memory stays proportional to the messages actually held. It is a
//! persistent one (`imbl::OrdMap`), so a snapshot copies a queue of any length in O(1) and
//! serialises the copy off the shard (`Broker::freeze`); a node is copied only when it
//! changes while a snapshot still shares it.

use super::timers::TimerKey;
use crate::queue::message::Message;
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Number of priority levels (v1: 0..=9, higher first).
pub const PRIORITY_LEVELS: usize = 10;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct ReadyKey {
    /// `9 - level`: the smallest rank is served first.
    pub rank: u8,
    pub seq: u64,
}

impl ReadyKey {
    pub fn level(&self) -> usize {
        PRIORITY_LEVELS - 1 - self.rank as usize
    }
}

#[derive(Clone, Debug)]
pub(super) struct Ready {
    pub msg: Message,
    /// The TTL entry in the timer index, when the message has a TTL.
    pub expiry: Option<TimerKey>,
}

#[derive(Clone)]
pub(super) struct WorkQueue {
    /// The queue's name, which every message it holds points at (`Message::topic`): one
    /// copy per queue, not one per message.
    name: Arc<str>,
    /// Values behind an `Arc`: a persistent B-tree node holds its entries inline and shifts
    /// them on every insert and removal, and a message is ~200 B (measured: a deep queue's
    /// publish+consume+ack cycle cost a third more with inline values).
    ready: OrdMap<ReadyKey, Arc<Ready>>,
    next_seq: u64,
    /// Messages of this queue the broker holds in any state but dead-lettered: ready,
    /// delayed, retry-waiting and pending. This is what the capacity limits (see the module
    /// docs of `broker`).
    held: usize,
    /// The queue's entry in the timer index when it is forgotten once idle and empty (a
    /// queue a publish or CONSUME created); `None` for one declared (BIND, `/queues`
    /// declare), restored from an older snapshot, or with forgetting off.
    pub idle_timer: Option<TimerKey>,
    /// When a logged command last used the queue: created it, published to it, or
    /// delivered from it.
    pub last_used_ns: i64,
}

impl WorkQueue {
    pub fn new(name: &str) -> WorkQueue {
        WorkQueue::restored(name, 0, 0)
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The key the next message of `level` will take; call `insert` with it.
    pub fn next_key(&mut self, level: usize) -> ReadyKey {
        assert!(level < PRIORITY_LEVELS, "level {level} out of range");
        let key = ReadyKey {
            rank: (PRIORITY_LEVELS - 1 - level) as u8,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        key
    }

    pub fn insert(&mut self, key: ReadyKey, ready: Ready) {
        assert!(self.insert_new(key, ready), "ready key {key:?} used twice");
    }

    /// [`WorkQueue::insert`], false if `key` was used already (its message is replaced:
    /// a restore that meets this refuses the whole snapshot).
    pub fn insert_new(&mut self, key: ReadyKey, ready: Ready) -> bool {
        assert_eq!(
            key.level(),
            ready.msg.level(),
            "message queued at the wrong level"
        );
        assert!(
            key.seq < self.next_seq,
            "ready key {key:?} was not issued by this queue"
        );
        assert!(
            self.ready.len() < self.held,
            "a ready message must already be held"
        );
        self.ready.insert(key, Arc::new(ready)).is_none()
    }

    /// The next message to deliver: highest level first, FIFO within the level.
    pub fn pop_first(&mut self) -> Option<(ReadyKey, Ready)> {
        let key = self.ready.get_min()?.0;
        self.ready
            .remove_with_key(&key)
            .map(|(key, ready)| (key, unshare(ready)))
    }

    pub fn remove(&mut self, key: &ReadyKey) -> Option<Ready> {
        self.ready.remove(key).map(unshare)
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub fn held(&self) -> usize {
        self.held
    }

    /// Marks a use at `now_ns` (the command's time), which keeps the queue from being
    /// forgotten for another idle period.
    pub fn touch(&mut self, now_ns: i64) {
        self.last_used_ns = self.last_used_ns.max(now_ns);
    }

    pub fn hold(&mut self) {
        self.held += 1;
    }

    pub fn release(&mut self) {
        assert!(
            self.held > self.ready.len(),
            "released a message the queue does not hold"
        );
        self.held -= 1;
    }

    pub fn iter_ready(&self) -> impl Iterator<Item = (&ReadyKey, &Ready)> {
        self.ready.iter().map(|(key, ready)| (key, &**ready))
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// An empty queue that continues numbering at `next_seq` (snapshot restore); `held` is
    /// rebuilt by the caller as it restores each message.
    pub fn restored(name: &str, next_seq: u64, last_used_ns: i64) -> WorkQueue {
        WorkQueue {
            name: name.into(),
            ready: OrdMap::new(),
            next_seq,
            held: 0,
            idle_timer: None,
            last_used_ns,
        }
    }
}

/// The value itself: moved out when no snapshot shares it (the usual case), cloned when one
/// does.
pub(super) fn unshare<T: Clone>(value: Arc<T>) -> T {
    Arc::try_unwrap(value).unwrap_or_else(|shared| (*shared).clone())
}
