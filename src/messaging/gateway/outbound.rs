//! A connection's outbound queue: every frame for one socket goes through it, in order,
//! written by one writer task (so pings never race data frames).
//!
//! Bounded in frames and bytes. Producers (subscriptions, the request loop) wait for room
//! instead of overflowing it, so a client that keeps reading is never dropped for the
//! server's own pace; a client that stops reading stalls its own producers only, and is
//! closed as a slow consumer when the queue stays full past a deadline.

use crate::messaging::gateway::session::SubKey;
use async_tungstenite::tungstenite::Message;
use boltq_io::event::Event;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

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

    pub fn pop(&self) -> Option<Out> {
        let o = self.queue.borrow_mut().pop_front()?;
        self.bytes.set(self.bytes.get() - o.bytes);
        self.room.notify();
        Some(o)
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
