//! Single-shard wake-ups: a task parks until a condition holds, and whoever
//! changes the condition wakes it. No timers and no polling, so an idle shard
//! never wakes up; no atomics, because everything here lives on one thread.

use std::cell::RefCell;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// Tasks parked until "something changed". Condition-variable style: waking
/// is a hint and every waiter re-checks its own condition, so a spurious or
/// shared wake-up is harmless and a missed one is impossible (the check and
/// the registration happen in the same poll, with no other task in between).
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    wakers: RefCell<Vec<Waker>>,
}

impl WaitList {
    /// Wakes every parked waiter.
    pub(crate) fn wake_all(&self) {
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers {
            waker.wake();
        }
    }

    fn register(&self, waker: &Waker) {
        let mut wakers = self.wakers.borrow_mut();
        // The same task polled twice must not grow the list without bound.
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }
}

/// Resolves once `ready()` returns true, re-checking each time `list` is woken.
pub(crate) async fn wait_until(list: &WaitList, mut ready: impl FnMut() -> bool) {
    poll_fn(|cx| {
        if ready() {
            Poll::Ready(())
        } else {
            list.register(cx.waker());
            Poll::Pending
        }
    })
    .await
}
