//! Frames waiting to be written to one connection: replies in request order, then pushes.
//!
//! Pushes (pub/sub deliveries) may be produced at any time by any shard. They are held back
//! while replies are outstanding, so a push can never overtake the reply a client is waiting
//! for (a v1 Go client would take the push for the reply; the `subscribed` reply must precede
//! every push of its subscription).

use boltq_io::event::Event;
use std::cell::{Cell, RefCell};

/// Most push bytes held for one connection. Pub/sub delivery is at-most-once (v1): past this,
/// pushes to a client that does not read are dropped and counted, never buffered without end.
pub const PUSH_BYTES_MAX: usize = 16 * 1024 * 1024;

#[derive(Default)]
pub struct Outbound {
    pushes: RefCell<Vec<u8>>,
    pushes_dropped: Cell<u64>,
    /// Wakes the connection task when pushes arrive.
    pub push_event: Event,
    closed: Cell<bool>,
    /// Who is on the other end and since when, for `/connections`.
    pub peer: std::cell::RefCell<String>,
    pub since_ms: Cell<u64>,
    /// Work-queue messages this connection consumed and has not acked or nacked yet
    /// (v1 PREFETCH counts these per connection).
    unacked: Cell<u64>,
}

impl Outbound {
    /// An outbound for a client at `peer` (e.g. `127.0.0.1:5555`), connected now.
    pub fn for_peer(peer: String) -> Outbound {
        let out = Outbound::default();
        *out.peer.borrow_mut() = peer;
        out.since_ms.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        );
        out
    }

    /// Queues one encoded push frame; false if dropped for lack of room or a closed client.
    pub fn push(&self, frame: &[u8]) -> bool {
        if self.closed.get() {
            return false;
        }
        let mut p = self.pushes.borrow_mut();
        if p.len() + frame.len() > PUSH_BYTES_MAX {
            self.pushes_dropped.set(self.pushes_dropped.get() + 1);
            return false;
        }
        let was_empty = p.is_empty();
        p.extend_from_slice(frame);
        drop(p);
        if was_empty {
            self.push_event.notify();
        }
        true
    }

    pub fn has_pushes(&self) -> bool {
        !self.pushes.borrow().is_empty()
    }

    /// Moves every held push frame to the end of `out`.
    pub fn take_pushes(&self, out: &mut Vec<u8>) {
        out.append(&mut self.pushes.borrow_mut());
    }

    pub fn pushes_dropped(&self) -> u64 {
        self.pushes_dropped.get()
    }

    pub fn unacked(&self) -> u64 {
        self.unacked.get()
    }

    pub fn add_unacked(&self, n: u64) {
        self.unacked.set(self.unacked.get() + n);
    }

    /// One consumed message left the connection's hands (ack, nack, timeout or expiry):
    /// the prefetch window reopens by one. Floors at 0 because an ack may come from a
    /// connection that did not consume the message (v1 allows acking from anywhere).
    pub fn release_prefetch(&self) {
        self.unacked.set(self.unacked.get().saturating_sub(1));
    }

    pub fn close(&self) {
        self.closed.set(true);
        self.pushes.borrow_mut().clear();
    }
}
