//! Single-shard wake-ups: a task parks until a condition holds, and whoever
//! changes the condition wakes it. No timers and no polling, so an idle shard
//! never wakes up; no atomics, because everything here lives on one thread.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Tasks parked until "something changed". Condition-variable style: waking
/// is a hint and every waiter re-checks its own condition, so a spurious or
/// shared wake-up is harmless and a missed one is impossible (the check and
/// the registration happen in the same poll, with no other task in between).
///
/// Each wait holds one entry, refreshed on every poll and removed when the
/// wait is dropped: waits raced against other futures (a connection waiting
/// for shutdown *or* its next request) come and go by the thousand, and must
/// not leave their wakers behind.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    next: Cell<u64>,
    wakers: RefCell<HashMap<u64, Waker>>,
}

impl WaitList {
    /// Wakes every parked waiter.
    pub(crate) fn wake_all(&self) {
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for (_, waker) in wakers {
            waker.wake();
        }
    }

    fn new_slot(&self) -> u64 {
        let slot = self.next.get();
        self.next.set(slot + 1);
        slot
    }

    #[cfg(test)]
    fn parked(&self) -> usize {
        self.wakers.borrow().len()
    }
}

/// Resolves once `ready()` returns true, re-checking each time `list` is woken.
pub(crate) fn wait_until<F: FnMut() -> bool>(list: &WaitList, ready: F) -> WaitUntil<'_, F> {
    WaitUntil {
        list,
        ready,
        slot: None,
    }
}

pub(crate) struct WaitUntil<'a, F> {
    list: &'a WaitList,
    ready: F,
    slot: Option<u64>,
}

impl<F: FnMut() -> bool + Unpin> Future for WaitUntil<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if (self.ready)() {
            if let Some(slot) = self.slot.take() {
                self.list.wakers.borrow_mut().remove(&slot);
            }
            return Poll::Ready(());
        }
        let slot = match self.slot {
            Some(slot) => slot,
            None => {
                let slot = self.list.new_slot();
                self.slot = Some(slot);
                slot
            }
        };
        self.list
            .wakers
            .borrow_mut()
            .insert(slot, cx.waker().clone());
        Poll::Pending
    }
}

impl<F> Drop for WaitUntil<'_, F> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.list.wakers.borrow_mut().remove(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn dropped_waits_deregister() {
        let list = WaitList::default();
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..10_000 {
            let mut w = Box::pin(wait_until(&list, || false));
            assert!(w.as_mut().poll(&mut cx).is_pending());
            assert!(w.as_mut().poll(&mut cx).is_pending());
            assert_eq!(list.parked(), 1);
        }
        assert_eq!(list.parked(), 0);
    }
}
