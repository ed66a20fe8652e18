//! An idle runtime must cost (almost) no CPU: no spinning, no periodic
//! wake-ups. In its own test binary so that no other test's work is
//! counted in this process's CPU time.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use boltq_shards::{run_shards, RuntimeConfig, Shard, ShutdownHandle};
use common::{run_within, TEST_LIMIT};

/// utime + stime of this whole process, in clock ticks.
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name, which may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let utime: u64 = fields[11].parse().unwrap();
    let stime: u64 = fields[12].parse().unwrap();
    utime + stime
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).unwrap()
}

/// Two shards with connected channels, a handler, a shutdown watcher and a
/// ticker that was armed and disarmed: over ~3 s the whole process must
/// use under 1% of one CPU, and the tickers must not have woken.
#[test]
fn idle_runtime_uses_under_one_percent_cpu() {
    let shutdown = ShutdownHandle::new();
    let handle = shutdown.clone();
    let (started_tx, started_rx) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        run_shards(RuntimeConfig::new(2), handle, move |shard: Shard<u64>| {
            let started_tx = started_tx.clone();
            async move {
                shard.set_handler(|_, _| {});
                let ticker = shard.ticker().clone();
                let id = ticker.schedule_at(ticker.now_ms() + 50, |_| {}).unwrap();
                ticker.cancel(id);
                started_tx.send(()).unwrap();
                shard.shutdown_requested().await;
                ticker.wakeups()
            }
        })
    });
    for _ in 0..2 {
        started_rx.recv_timeout(TEST_LIMIT).expect("shard started");
    }
    // Let startup work (thread creation, ring setup) finish.
    std::thread::sleep(Duration::from_millis(200));
    let before_ticks = process_cpu_ticks();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let spent_ticks = process_cpu_ticks() - before_ticks;
    let elapsed = started.elapsed();
    shutdown.trigger();
    let wakeups = run_within(TEST_LIMIT, move || runner.join().unwrap()).unwrap();
    let cpu_percent =
        spent_ticks as f64 / ticks_per_second() as f64 / elapsed.as_secs_f64() * 100.0;
    assert!(
        cpu_percent < 1.0,
        "idle runtime used {cpu_percent:.2}% CPU ({spent_ticks} ticks in {elapsed:?})"
    );
    assert_eq!(wakeups, vec![0, 0], "an idle ticker woke up");
}
