//! A connection's outbound queue: every frame for one socket goes through it, in order,
//! written by one writer task (so pings never race data frames).
//!
//! Bounded in frames and bytes. Producers (subscriptions, the request loop) wait for room
//! instead of overflowing it, so a client that keeps reading is never dropped for the
//! server's own pace; a client that stops reading stalls its own producers only. Whether
//! it is a slow consumer is judged by what its socket accepts (`progress`), not by this
//! queue: the writer empties it into a batch, so it may look roomy while the socket is stuck.
//!
//! The writer takes the queue in batches ([`Outbound::pop_batch`]): everything queued since
//! its last write, up to [`WRITE_BATCH_BYTES_MAX`] on the wire, goes to the socket in one
//! write. A chat send puts two or three frames on a socket at once (`sent`, the echo, a
//! record), and a write per frame costed a syscall and a TCP segment each.

use crate::messaging::gateway::session::SubKey;
use async_tungstenite::tungstenite::Message;
use boltq_io::event::Event;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// Wire bytes the writer hands the socket in one write. Frames queued together go out
/// together up to this; a single larger frame goes out alone. It is also the most the
/// WebSocket layer buffers before writing, and the capacity its write buffer may keep
/// between batches: large enough to carry a burst of chat frames in one write, small next
/// to the queue's own byte bound (`send_buffer_bytes`, 4 MiB by default).
pub const WRITE_BATCH_BYTES_MAX: usize = 64 * 1024;

/// Bytes a frame of `payload_bytes` takes on the wire from the server: the unmasked header
/// (2, 4 or 10 bytes by payload length, RFC 6455 §5.2) plus the payload.
pub fn wire_bytes(payload_bytes: usize) -> usize {
    let header_bytes = match payload_bytes {
        0..=125 => 2,
        126..=65_535 => 4,
        _ => 10,
    };
    header_bytes + payload_bytes
}

pub struct Out {
    pub msg: Message,
    /// The subscription this batch advances, and its next position once written.
    pub mark: Option<(SubKey, u64)>,
    bytes: usize,
}

pub struct Outbound {
    queue: RefCell<VecDeque<Out>>,
    bytes: Cell<usize>,
    frames_max: usize,
    bytes_max: usize,
    pub has_work: Event,
    pub room: Event,
    /// Set once: the close code and reason, and whether queued frames go out first.
    closing: RefCell<Option<(u16, String, bool)>>,
    /// The writer ended (socket closed or failed).
    pub done: Event,
    finished: Cell<bool>,
}

impl Outbound {
    pub fn new(frames_max: usize, bytes_max: usize) -> Outbound {
        assert!(frames_max > 0 && bytes_max > 0);
        Outbound {
            queue: RefCell::new(VecDeque::new()),
            bytes: Cell::new(0),
            frames_max,
            bytes_max,
            has_work: Event::default(),
            room: Event::default(),
            closing: RefCell::new(None),
            done: Event::default(),
            finished: Cell::new(false),
        }
    }

    /// Queues a frame. Callers wait for `has_room` first; one frame past the bound is
    /// allowed so a large frame can always go out.
    pub fn push(&self, msg: Message, mark: Option<(SubKey, u64)>) {
        if self.closing.borrow().is_some() {
            return;
        }
        let bytes = msg.len();
        self.bytes.set(self.bytes.get() + bytes);
        self.queue.borrow_mut().push_back(Out { msg, mark, bytes });
        self.has_work.notify();
    }

    pub fn has_room(&self) -> bool {
        self.queue.borrow().len() < self.frames_max && self.bytes.get() < self.bytes_max
    }

    pub fn is_closing(&self) -> bool {
        self.closing.borrow().is_some() || self.finished.get()
    }

    /// Waits until there is room; false if the connection is closing instead.
    pub async fn wait_room(&self) -> bool {
        loop {
            let t = self.room.ticket();
            if self.is_closing() {
                return false;
            }
            if self.has_room() {
                return true;
            }
            self.room.wait(t).await;
        }
    }

    /// Moves the oldest queued frames into `batch`, in order, while their wire size stays
    /// within `wire_bytes_max`; the first frame is always taken, so a frame larger than the
    /// cap goes out alone and the writer always progresses. Returns the batch's wire bytes
    /// (0 when the queue was empty). Producers waiting for room are woken once per batch.
    pub fn pop_batch(&self, batch: &mut Vec<Out>, wire_bytes_max: usize) -> usize {
        assert!(wire_bytes_max > 0);
        let mut queue = self.queue.borrow_mut();
        let mut taken_bytes = 0;
        while let Some(front) = queue.front() {
            let size = wire_bytes(front.bytes);
            if taken_bytes > 0 && taken_bytes + size > wire_bytes_max {
                break;
            }
            let o = queue.pop_front().expect("front exists");
            self.bytes.set(self.bytes.get() - o.bytes);
            taken_bytes += size;
            batch.push(o);
        }
        drop(queue);
        if taken_bytes > 0 {
            self.room.notify();
        }
        taken_bytes
    }

    /// Frees the queue's buffer when nothing is queued: an idle connection keeps none (the
    /// writer calls this as it goes idle; the next frame allocates it again, one allocation
    /// per burst, next to a syscall per batch).
    pub fn release_idle_buffer(&self) {
        let mut queue = self.queue.borrow_mut();
        if queue.is_empty() {
            *queue = VecDeque::new();
        }
    }

    /// Asks the writer to close with `code`; with `drain`, queued frames go out first.
    pub fn close(&self, code: u16, reason: &str, drain: bool) {
        let mut c = self.closing.borrow_mut();
        if c.is_some() {
            return;
        }
        if !drain {
            self.queue.borrow_mut().clear();
            self.bytes.set(0);
        }
        *c = Some((code, reason.to_string(), drain));
        self.has_work.notify();
        self.room.notify();
    }

    pub fn closing(&self) -> Option<(u16, String)> {
        self.closing
            .borrow()
            .as_ref()
            .map(|(c, r, _)| (*c, r.clone()))
    }

    pub fn finish(&self) {
        self.finished.set(true);
        self.done.notify();
        self.room.notify();
    }

    pub fn finished(&self) -> bool {
        self.finished.get()
    }

    pub fn queued_bytes(&self) -> usize {
        self.bytes.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    fn text(tag: usize, len: usize) -> Message {
        let mut s = format!("{tag}:");
        s.push_str(&"x".repeat(len.saturating_sub(s.len())));
        Message::Text(s.into())
    }

    fn tag(m: &Message) -> usize {
        let Message::Text(t) = m else {
            panic!("text frames only")
        };
        t.as_str().split(':').next().unwrap().parse().unwrap()
    }

    #[test]
    fn wire_bytes_adds_the_unmasked_header_by_payload_length() {
        assert_eq!(wire_bytes(0), 2);
        assert_eq!(wire_bytes(125), 127);
        assert_eq!(wire_bytes(126), 130);
        assert_eq!(wire_bytes(65_535), 65_539);
        assert_eq!(wire_bytes(65_536), 65_546);
    }

    #[test]
    fn small_frames_queued_together_leave_in_one_batch_in_order() {
        let out = Outbound::new(1000, 1 << 20);
        for i in 0..100 {
            out.push(text(i, 300), None);
        }
        let mut batch = Vec::new();
        let taken = out.pop_batch(&mut batch, WRITE_BATCH_BYTES_MAX);
        assert_eq!(batch.len(), 100);
        assert_eq!(taken, 100 * wire_bytes(300));
        assert!(batch.iter().enumerate().all(|(i, o)| tag(&o.msg) == i));
        assert_eq!(out.queued_bytes(), 0);
        assert!(out.has_room());
        assert_eq!(
            out.pop_batch(&mut batch, WRITE_BATCH_BYTES_MAX),
            0,
            "empty queue"
        );
        assert_eq!(batch.len(), 100, "an empty pop adds nothing");
    }

    #[test]
    fn a_frame_larger_than_the_cap_leaves_alone() {
        let out = Outbound::new(10, 1 << 20);
        out.push(text(0, 10), None);
        out.push(text(1, 5000), None);
        out.push(text(2, 10), None);
        let mut batch = Vec::new();
        assert_eq!(out.pop_batch(&mut batch, 1000), wire_bytes(10));
        assert_eq!(out.pop_batch(&mut batch, 1000), wire_bytes(5000));
        assert_eq!(out.pop_batch(&mut batch, 1000), wire_bytes(10));
        let tags: Vec<usize> = batch.iter().map(|o| tag(&o.msg)).collect();
        assert_eq!(tags, [0, 1, 2]);
    }

    #[test]
    fn batches_never_exceed_the_cap_keep_order_and_lose_nothing() {
        let mut rng = Rng::new(7);
        for round in 0..200 {
            let cap = 64 + rng.below(4096) as usize;
            let out = Outbound::new(usize::MAX, usize::MAX);
            let mut sent = 0;
            let mut seen = Vec::new();
            let mut batch = Vec::new();
            while sent < 300 || out.queued_bytes() > 0 {
                // Producers and the writer interleave at random.
                for _ in 0..rng.below(8) {
                    if sent < 300 {
                        out.push(text(sent, rng.below(2 * cap as u64) as usize), None);
                        sent += 1;
                    }
                }
                let taken = out.pop_batch(&mut batch, cap);
                let wire: usize = batch.iter().map(|o| wire_bytes(o.msg.len())).sum();
                assert_eq!(taken, wire, "round {round}");
                assert!(
                    wire <= cap || batch.len() == 1,
                    "round {round}: {} frames, {wire} bytes over the cap {cap}",
                    batch.len()
                );
                seen.extend(batch.drain(..).map(|o| tag(&o.msg)));
            }
            assert_eq!(seen, (0..300).collect::<Vec<_>>(), "round {round}");
        }
    }

    #[test]
    fn an_idle_queue_keeps_no_buffer_and_a_busy_one_keeps_its_frames() {
        let out = Outbound::new(10, 1 << 20);
        out.push(text(0, 10), None);
        out.push(text(1, 10), None);
        out.release_idle_buffer();
        assert_eq!(
            out.queue.borrow().len(),
            2,
            "queued frames are never dropped"
        );
        let mut batch = Vec::new();
        out.pop_batch(&mut batch, WRITE_BATCH_BYTES_MAX);
        assert!(out.queue.borrow().capacity() > 0);
        out.release_idle_buffer();
        assert_eq!(out.queue.borrow().capacity(), 0);
        out.push(text(2, 10), None);
        out.pop_batch(&mut batch, WRITE_BATCH_BYTES_MAX);
        let tags: Vec<usize> = batch.iter().map(|o| tag(&o.msg)).collect();
        assert_eq!(tags, [0, 1, 2]);
    }

    #[test]
    fn taking_a_batch_makes_room_and_wakes_producers() {
        let out = Outbound::new(2, 1 << 20);
        out.push(text(0, 10), None);
        out.push(text(1, 10), None);
        assert!(!out.has_room());
        let t = out.room.ticket();
        let mut batch = Vec::new();
        out.pop_batch(&mut batch, WRITE_BATCH_BYTES_MAX);
        assert!(out.has_room());
        assert_ne!(
            out.room.ticket(),
            t,
            "producers waiting for room are notified"
        );
    }
}
