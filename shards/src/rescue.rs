//! A timer that keeps a shard from sleeping on runnable work.
//!
//! glommio 0.9 runs its task queues only after checking `need_preempt()`, and reads a
//! `true` there before any queue ran as "nothing to run": it then parks the executor,
//! although tasks were woken moments before. The executor sleeps in `io_uring_enter` until
//! some completion or timer arrives. The check turns `true` when the preempt timer
//! (`PREEMPT_TIMER_US`) fired between the executor arming it and looking at its queues:
//! the thread lost its CPU for that long, or submitting the ring's queued I/O took that
//! long. Rare on a dedicated core, it came within a few thousand reads with another thread
//! busy on the same CPU (`shards/tests/stranded.rs`), and three cluster nodes sharing one
//! core had a node hang at startup in 4 of 42 starts, for good: at startup nothing else was
//! pending to wake it.
//!
//! The fix belongs in glommio's scheduler loop; until a release carries one, each shard
//! runs this task. Its pending timer gives every park an end, so a stranded task waits at
//! most one interval: [`RESCUE_BUSY_MS`] while the shard runs other tasks, backing off to
//! [`RESCUE_IDLE_MS`] after an interval in which nothing else ran, so that an idle shard
//! wakes four times a second and no more.
//!
//! The same first look can strand an executor's *main* task, before it has spawned this
//! one: the executor then sleeps with no timer at all, for good (seen in the cluster
//! tests: a shard asleep in `io_uring_enter` whose peer timed out connecting to it, while
//! its own connect deadline, armed in its main task's first run, never fired; the process
//! never ready). So the thread that starts executors runs a
//! [`Nudger`] beside them: an executor that has been running for [`NUDGE_INTERVAL_MS`]
//! without its main task having been polled gets a signal, which ends its sleep (glommio
//! takes `EINTR` as a wake-up) and makes it look at its queues again. Once the main task
//! ran, it has spawned this one and waits on something that will wake the executor, so
//! signals go only to a thread that is inside glommio's own loop.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::Duration;

/// The interval while the shard runs other tasks: the longest a stranded task waits then.
pub const RESCUE_BUSY_MS: u64 = 10;
/// The interval after one in which no other task ran (an idle shard's only wake-ups).
pub const RESCUE_IDLE_MS: u64 = 250;

/// Runs for the life of the executor; spawned detached when a shard starts.
pub async fn rescue_stranded_tasks() {
    let mut executed = tasks_executed();
    let mut interval_ms = RESCUE_BUSY_MS;
    loop {
        glommio::timer::sleep(Duration::from_millis(interval_ms)).await;
        let now = tasks_executed();
        // This task's own poll is one execution per interval.
        let others_ran = now.saturating_sub(executed) > 1;
        executed = now;
        interval_ms = if others_ran {
            RESCUE_BUSY_MS
        } else {
            RESCUE_IDLE_MS
        };
    }
}

fn tasks_executed() -> u64 {
    glommio::executor().executor_stats().tasks_executed()
}

/// Runs `main` on `executor` as every executor of ours runs: `start` marked running, then
/// started at the main task's first poll, which spawns the rescue task before anything
/// else. (Marking the thread done, for a start that failed or panicked, is its caller's.)
pub fn run_rescued<T>(
    executor: glommio::LocalExecutor,
    start: &Start,
    main: impl std::future::Future<Output = T>,
) -> T {
    start.running();
    executor.run(async {
        start.started();
        glommio::spawn_local(rescue_stranded_tasks()).detach();
        main.await
    })
}

/// How often the [`Nudger`] looks, and how long an executor may run before its rescue task
/// has started without being nudged (a healthy start takes microseconds).
pub const NUDGE_INTERVAL_MS: u64 = 50;

const MAKING: u8 = 0;
const RUNNING: u8 = 1;
const STARTED: u8 = 2;

/// Where a starting executor thread is, for its [`Nudger`].
#[derive(Debug, Default)]
pub struct Start(AtomicU8);

impl Start {
    pub fn new() -> Arc<Self> {
        Arc::new(Self(AtomicU8::new(MAKING)))
    }

    /// The executor is made and about to run its main task: from here a signal can only
    /// interrupt glommio's own calls, which take `EINTR` as a wake-up.
    pub fn running(&self) {
        let _ = self
            .0
            .compare_exchange(MAKING, RUNNING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The main task was polled (it spawns the rescue task first), or the thread is done.
    pub fn started(&self) {
        self.0.store(STARTED, Ordering::Release);
    }

    fn state(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}

/// One starting executor thread the [`Nudger`] watches.
pub struct Watched<T> {
    pub name: String,
    pub start: Arc<Start>,
    pub thread: JoinHandle<T>,
}

/// Signals executors stranded before their first task ran (see the module doc), until each
/// has started. It owns their join handles, so no thread can be joined (and its `pthread_t`
/// freed) while it may still be signalled; [`Nudger::stop`] gives them back.
pub struct Nudger<T> {
    stop: Arc<AtomicBool>,
    watcher: JoinHandle<Vec<Watched<T>>>,
}

impl<T: Send + 'static> Nudger<T> {
    /// Starts watching `watched`; if no thread can be started for it, they come back with
    /// the error.
    #[allow(clippy::type_complexity)]
    pub fn spawn(watched: Vec<Watched<T>>) -> Result<Self, (std::io::Error, Vec<Watched<T>>)> {
        install_nudge_handler();
        let stop = Arc::new(AtomicBool::new(false));
        // The threads are handed over once the watcher exists, so a failed spawn keeps them.
        let (hand_over, handed) = std::sync::mpsc::channel::<Vec<Watched<T>>>();
        let spawned = std::thread::Builder::new()
            .name("boltq-nudger".into())
            .spawn({
                let stop = Arc::clone(&stop);
                move || {
                    let watched = handed.recv().unwrap_or_default();
                    nudge_until_started(&watched, &stop);
                    watched
                }
            });
        match spawned {
            Ok(watcher) => {
                hand_over
                    .send(watched)
                    .expect("the watcher waits for its threads");
                Ok(Self { stop, watcher })
            }
            Err(e) => Err((e, watched)),
        }
    }

    /// Stops watching and hands back the threads, in the order given.
    pub fn stop(self) -> Vec<Watched<T>> {
        self.stop.store(true, Ordering::Release);
        self.join()
    }

    /// Waits until every thread has started (or finished) and hands them back.
    pub fn join(self) -> Vec<Watched<T>> {
        self.watcher.join().expect("the nudger does not panic")
    }
}

fn nudge_until_started<T>(watched: &[Watched<T>], stop: &AtomicBool) {
    let mut running_before = vec![false; watched.len()];
    let mut nudged = vec![0u64; watched.len()];
    while !stop.load(Ordering::Acquire) {
        let mut all_started = true;
        for (i, w) in watched.iter().enumerate() {
            let state = w.start.state();
            all_started &= state == STARTED;
            if state == RUNNING && running_before[i] {
                if nudged[i] == 0 {
                    log::warn!(
                        "{}: executor parked before its first task ran; waking it by signal",
                        w.name
                    );
                }
                nudged[i] += 1;
                nudge(&w.thread);
            }
            running_before[i] = state == RUNNING;
        }
        if all_started {
            return;
        }
        std::thread::sleep(Duration::from_millis(NUDGE_INTERVAL_MS));
    }
}

/// The signal that ends a stranded executor's sleep; its handler does nothing.
fn nudge_signal() -> libc::c_int {
    libc::SIGRTMIN()
}

extern "C" fn on_nudge(_signal: libc::c_int) {}

fn install_nudge_handler() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value (no flags, empty mask, no handler)
        // that is filled in before use.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_nudge as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // No SA_RESTART: the interrupted io_uring_enter must return EINTR, not resume.
        action.sa_flags = 0;
        // SAFETY: `action.sa_mask` is a valid sigset_t owned by us; sigemptyset only writes
        // it. sigaction gets a valid action for a real-time signal nothing else in the
        // process uses, with a handler that is async-signal-safe (it does nothing); the
        // old action is not wanted (null).
        let rc = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(nudge_signal(), &action, std::ptr::null_mut())
        };
        assert_eq!(rc, 0, "sigaction: {}", std::io::Error::last_os_error());
    });
}

fn nudge<T>(thread: &JoinHandle<T>) {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: the pthread_t comes from a JoinHandle the nudger owns and has not joined, so
    // it names a thread whose resources are still held (pthread_kill on one that already
    // exited returns ESRCH, harmlessly); the signal has a handler installed
    // (install_nudge_handler ran in Nudger::spawn), so it cannot kill the process.
    let rc = unsafe { libc::pthread_kill(thread.as_pthread_t(), nudge_signal()) };
    if rc != 0 && rc != libc::ESRCH {
        log::warn!("pthread_kill: {}", std::io::Error::from_raw_os_error(rc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn voluntary_switches(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// An executor that runs but never started its rescue task, asleep with no timer (the
    /// stranded start's state): the nudger's signal wakes it again and again, and glommio
    /// takes each as a wake-up (the thread lives on).
    #[test]
    fn a_running_executor_that_never_started_is_woken_by_signals_and_survives() {
        let start = Start::new();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn({
            let start = Arc::clone(&start);
            move || {
                let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
                    .make()
                    .unwrap();
                start.running();
                executor.run(async move {
                    // SAFETY: gettid has no preconditions.
                    tid_tx.send(unsafe { libc::gettid() }).unwrap();
                    // Parks for good: nothing can wake this task.
                    futures_lite::future::pending::<()>().await;
                })
            }
        });
        let tid = tid_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let nudger = Nudger::spawn(vec![Watched {
            name: "test".into(),
            start,
            thread,
        }])
        .map_err(|(e, _)| e)
        .unwrap();
        let before = voluntary_switches(tid);
        let watched_since = Instant::now();
        std::thread::sleep(Duration::from_millis(20 * NUDGE_INTERVAL_MS));
        let woken = voluntary_switches(tid) - before;
        let watched = nudger.stop();
        assert!(
            woken >= 5,
            "{woken} wake-ups in {:?} of nudging",
            watched_since.elapsed()
        );
        assert!(
            !watched[0].thread.is_finished(),
            "the executor died of a nudge"
        );
    }
}
