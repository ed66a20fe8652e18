//! A single-threaded broadcast wake-up: every listener registered before `notify` wakes.
//!
//! Listeners take a ticket (the generation) *before* checking their condition, so a notify
//! that lands between the check and the wait is never lost. A wait registers its waker once
//! and removes it when dropped: waits are often raced against other futures (a connection
//! waits for a push *or* a read), and a dropped wait must not leave its waker behind, or
//! wakers pile up without bound (glommio counts waker clones in an `i16`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Event {
    generation: Cell<u64>,
    next_waiter: Cell<u64>,
    waiters: RefCell<HashMap<u64, Waker>>,
}

impl Event {
    pub fn ticket(&self) -> u64 {
        self.generation.get()
    }

    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for (_, w) in waiters {
            w.wake();
        }
    }

    /// Completes once `notify` has run after `ticket` was taken.
    pub fn wait(&self, ticket: u64) -> EventWait<'_> {
        EventWait {
            event: self,
            ticket,
            slot: None,
        }
    }

    /// Wakers currently registered (tests: a dropped wait leaves none behind).
    pub fn waiting(&self) -> usize {
        self.waiters.borrow().len()
    }
}

pub struct EventWait<'a> {
    event: &'a Event,
    ticket: u64,
    /// Our entry in `event.waiters`, once registered.
    slot: Option<u64>,
}

impl Future for EventWait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.event.generation.get() != self.ticket {
            return Poll::Ready(());
        }
        let slot = match self.slot {
            Some(slot) => slot,
            None => {
                let slot = self.event.next_waiter.get();
                self.event.next_waiter.set(slot + 1);
                self.slot = Some(slot);
                slot
            }
        };
        // Insert or refresh: a notify may have drained our entry while we stayed pending
        // only if the generation moved, which returned Ready above.
        self.event
            .waiters
            .borrow_mut()
            .insert(slot, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for EventWait<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.event.waiters.borrow_mut().remove(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Noop;
    impl Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    #[test]
    fn dropped_waits_leave_no_waker_behind() {
        let event = Event::default();
        let waker = Waker::from(std::sync::Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..100_000 {
            let mut w = Box::pin(event.wait(event.ticket()));
            assert!(w.as_mut().poll(&mut cx).is_pending());
            assert!(
                w.as_mut().poll(&mut cx).is_pending(),
                "re-polls refresh, not add"
            );
            assert_eq!(event.waiting(), 1);
        }
        assert_eq!(event.waiting(), 0);
    }

    #[test]
    fn notify_wakes_waits_taken_before_it() {
        let event = Event::default();
        let waker = Waker::from(std::sync::Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let ticket = event.ticket();
        let mut w = Box::pin(event.wait(ticket));
        assert!(w.as_mut().poll(&mut cx).is_pending());
        event.notify();
        assert!(w.as_mut().poll(&mut cx).is_ready());
        // A notify between the ticket and the first poll is not lost either.
        let ticket = event.ticket();
        event.notify();
        assert!(Box::pin(event.wait(ticket))
            .as_mut()
            .poll(&mut cx)
            .is_ready());
    }
}
