//! The shard ticker: one timer driver per shard, for every subsystem.
//!
//! Subsystems arm deadlines here (a broker arms its next expiry, Raft arms its
//! next tick) instead of each running a periodic task. One driver task sleeps
//! until the earliest deadline rounded up to the tick, fires everything due,
//! and sleeps again. With nothing armed it parks without a timer, so an idle
//! shard never wakes up (a free-running 10 ms tick would cost 0.7% CPU per
//! shard, platform.md §7). Rounding to the tick coalesces nearby deadlines
//! into one wake-up, and the tick is at least [`TICK_MS_MIN`].

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::future;
use glommio::timer::Timer;

use crate::clock::Clock;
use crate::notify::{wait_until, WaitList};
use crate::timer::{TimerId, Timers, TimersFull};

/// Smallest tick: below 10 ms the wake-ups themselves cost noticeable CPU.
pub const TICK_MS_MIN: u64 = 10;

/// Limit on callbacks armed on one shard's ticker. Subsystems arm one
/// deadline each (their own next expiry), not one per message, so this is
/// generous; per-message timers live in the subsystems' own [`Timers`].
pub const TICKER_TIMERS_MAX: usize = 65_536;

/// A callback fired with the current time once its deadline has passed.
pub type TickCallback = Box<dyn FnOnce(u64)>;

/// One shard's timer driver. Shared as `Rc`; lives on one shard.
pub struct Ticker {
    tick_ms: u64,
    clock: Clock,
    timers: RefCell<Timers<TickCallback>>,
    /// The driver parks here; woken when the earliest deadline changes.
    driver: WaitList,
    wakeups: Cell<u64>,
}

impl Ticker {
    pub(crate) fn new(tick_ms: u64, clock: Clock) -> Rc<Self> {
        assert!(tick_ms >= TICK_MS_MIN, "tick_ms {tick_ms} < {TICK_MS_MIN}");
        Rc::new(Self {
            tick_ms,
            clock,
            timers: RefCell::new(Timers::new(TICKER_TIMERS_MAX)),
            driver: WaitList::default(),
            wakeups: Cell::new(0),
        })
    }

    /// Milliseconds on the runtime's shared monotonic clock.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The tick in milliseconds; deadlines fire at most this late (plus
    /// scheduling delay).
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// How many times the driver woke up to fire timers; lets tests prove an
    /// idle shard does not tick.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.get()
    }

    /// Number of armed callbacks.
    pub fn armed(&self) -> usize {
        self.timers.borrow().len()
    }

    /// Runs `callback(now_ms)` on this shard once `now_ms >= deadline_ms`,
    /// within one tick. Callbacks run outside any borrow, so they may arm or
    /// cancel timers.
    pub fn schedule_at(
        &self,
        deadline_ms: u64,
        callback: impl FnOnce(u64) + 'static,
    ) -> Result<TimerId, TimersFull<TickCallback>> {
        let id = self
            .timers
            .borrow_mut()
            .insert(deadline_ms, Box::new(callback))?;
        self.driver.wake_all();
        Ok(id)
    }

    /// Disarms a callback; false if it already fired or was cancelled.
    pub fn cancel(&self, id: TimerId) -> bool {
        let cancelled = self.timers.borrow_mut().cancel(id).is_some();
        if cancelled {
            self.driver.wake_all();
        }
        cancelled
    }

    /// Resolves once `now_ms >= deadline_ms` (within one tick). Dropping the
    /// future disarms it. For periodic loops such as Raft ticks, without a
    /// timer task of their own.
    pub fn sleep_until_ms(
        self: &Rc<Self>,
        deadline_ms: u64,
    ) -> impl Future<Output = Result<(), TimersFull<()>>> + 'static {
        let ticker = self.clone();
        async move {
            let fired = Rc::new(Cell::new(false));
            let waiter = Rc::new(WaitList::default());
            let (fired_cb, waiter_cb) = (fired.clone(), waiter.clone());
            let id = ticker
                .schedule_at(deadline_ms, move |_| {
                    fired_cb.set(true);
                    waiter_cb.wake_all();
                })
                .map_err(|_| TimersFull(()))?;
            let _disarm = CancelOnDrop {
                ticker: &ticker,
                id,
            };
            wait_until(&waiter, || fired.get()).await;
            Ok(())
        }
    }

    /// Deadline rounded up to the next tick boundary of the shared clock, so
    /// deadlines within one tick share a wake-up.
    fn wake_at_ms(&self, deadline_ms: u64) -> u64 {
        deadline_ms
            .div_ceil(self.tick_ms)
            .saturating_mul(self.tick_ms)
    }

    fn next_wake_ms(&self) -> Option<u64> {
        let next = self.timers.borrow().next_deadline_ms();
        next.map(|deadline_ms| self.wake_at_ms(deadline_ms))
    }

    /// The driver task: sleeps until the next rounded deadline (or forever,
    /// if nothing is armed), fires what is due, repeats. Never returns.
    pub(crate) async fn drive(self: Rc<Self>) {
        loop {
            let Some(wake_ms) = self.next_wake_ms() else {
                wait_until(&self.driver, || self.next_wake_ms().is_some()).await;
                continue;
            };
            let now_ms = self.now_ms();
            if wake_ms > now_ms {
                let sleep = async {
                    Timer::new(Duration::from_millis(wake_ms - now_ms)).await;
                };
                // Re-plan when the earliest deadline changes (earlier arm,
                // or the armed one cancelled), so cancelling everything
                // leaves no wake-up behind.
                let replan = wait_until(&self.driver, || self.next_wake_ms() != Some(wake_ms));
                future::or(sleep, replan).await;
                continue;
            }
            self.fire_due(now_ms);
        }
    }

    fn fire_due(&self, now_ms: u64) {
        self.wakeups.set(self.wakeups.get() + 1);
        // Collected first: callbacks may arm timers, which borrows `timers`.
        let due: Vec<TickCallback> = self.timers.borrow_mut().pop_expired(now_ms).collect();
        for callback in due {
            callback(now_ms);
        }
    }
}

struct CancelOnDrop<'a> {
    ticker: &'a Ticker,
    id: TimerId,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        self.ticker.cancel(self.id);
    }
}
