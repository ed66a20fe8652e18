//! A single-threaded broadcast wake-up: every listener registered before `notify` wakes.
//!
//! Listeners take a ticket (the generation) *before* checking their condition, so a notify
//! that lands between the check and the wait is never lost.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Event {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Event {
    pub fn ticket(&self) -> u64 {
        self.generation.get()
    }

    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            w.wake();
        }
    }

    /// Completes once `notify` has run after `ticket` was taken.
    pub fn wait(&self, ticket: u64) -> EventWait<'_> {
        EventWait {
            event: self,
            ticket,
        }
    }
}

pub struct EventWait<'a> {
    event: &'a Event,
    ticket: u64,
}

impl Future for EventWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.event.generation.get() != self.ticket {
            return Poll::Ready(());
        }
        // A task is polled again only after a wake, so one push per wait suffices.
        self.event.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}
