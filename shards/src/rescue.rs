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
