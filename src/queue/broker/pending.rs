//! Consumed, not yet acknowledged messages. Keyed by id because ACK and NACK name only the id
//! (from any connection, v1 §2.2); an ordered map so snapshots list them in a stable order,
//! persistent so a snapshot copies it in O(1) (see `queue.rs`).

use super::timers::TimerKey;
use super::ConsumerRef;
use crate::queue::message::{Message, MessageId};
use imbl::OrdMap;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(super) struct PendingEntry {
    pub msg: Message,
    /// Who consumed it: handed back in `Effect::Released` if it leaves without an ack.
    pub consumer: ConsumerRef,
    pub ack_deadline_ns: i64,
    /// Fires at `min(ack_deadline_ns, expires_at_ns)`.
    pub timer: TimerKey,
}

impl PendingEntry {
    /// When this entry's timer is due: the ack deadline, or the TTL if that comes first.
    pub fn due_ns(msg: &Message, ack_deadline_ns: i64) -> i64 {
        match msg.expires_at_ns {
            0 => ack_deadline_ns,
            expires_at_ns => ack_deadline_ns.min(expires_at_ns),
        }
    }
}

#[derive(Clone, Default)]
pub(super) struct Pending {
    /// Values behind an `Arc`, for the reason given in `queue.rs`.
    by_id: OrdMap<MessageId, Arc<PendingEntry>>,
}

impl Pending {
    pub fn insert(&mut self, entry: PendingEntry) {
        assert_eq!(
            entry.timer.due_ns,
            PendingEntry::due_ns(&entry.msg, entry.ack_deadline_ns)
        );
        let id = entry.msg.id;
        let previous = self.by_id.insert(id, Arc::new(entry));
        assert!(previous.is_none(), "message {id} is already pending");
    }

    pub fn remove(&mut self, id: &MessageId) -> Option<PendingEntry> {
        self.by_id.remove(id).map(super::queue::unshare)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &PendingEntry> {
        self.by_id.values().map(|entry| &**entry)
    }
}
