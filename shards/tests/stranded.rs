//! A shard whose CPU another thread keeps busy still runs the tasks it woke
//! (`shards/src/rescue.rs`). In its own test binary: the busy thread would slow
//! the other runtime tests down.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boltq_shards::{run_shards, usable_cpus, RuntimeConfig, Shard, ShutdownHandle};

/// Reads each awaited one after another, so that a task parked on runnable work has no
/// other completion to wake it.
const READS: u64 = 50_000;

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: cpu_set_t is a plain bitmask for which all-zero is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE (it came from the affinity mask); `set` is valid.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// One shard on the same CPU as a thread that never sleeps, so the shard keeps losing its
/// CPU for a few milliseconds (longer than the preempt timer) at arbitrary points: glommio
/// then parks it now and then with its reading task woken but not run. Without the rescue
/// timer the reads stopped within a few thousand, every run, and the shard slept for good.
#[test]
fn a_shard_sharing_its_cpu_with_a_busy_thread_finishes_its_reads() {
    let cpu = usable_cpus().unwrap()[0];
    let dir = std::env::temp_dir().join(format!("boltq-stranded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    std::fs::write(&path, vec![7u8; 4096]).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            pin_to(cpu);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let done = Arc::new(AtomicU64::new(0));
    let runtime = std::thread::spawn({
        let done = Arc::clone(&done);
        move || {
            run_shards(
                RuntimeConfig::new(1),
                ShutdownHandle::new(),
                move |_shard: Shard<u64>| {
                    let (path, done) = (path.clone(), Arc::clone(&done));
                    async move {
                        let file = glommio::io::BufferedFile::open(&path).await.unwrap();
                        for _ in 0..READS {
                            let bytes = file.read_at(0, 64).await.unwrap();
                            assert_eq!(bytes.len(), 64);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        file.close().await.unwrap();
                    }
                },
            )
            .unwrap();
        }
    });
    let finished = wait_while_progressing(&done, &runtime);
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        finished,
        "the shard stopped after {} of {READS} reads",
        done.load(Ordering::Relaxed)
    );
    runtime.join().unwrap();
    assert_eq!(done.load(Ordering::Relaxed), READS);
}

/// True once `runtime` ended; false as soon as `done` stood still for `STALL_LIMIT` (a
/// read takes microseconds: standing still that long is a shard asleep for good).
fn wait_while_progressing(done: &AtomicU64, runtime: &std::thread::JoinHandle<()>) -> bool {
    const STALL_LIMIT: Duration = Duration::from_secs(5);
    let mut seen = done.load(Ordering::Relaxed);
    let mut still_since = Instant::now();
    while !runtime.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        let now = done.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            still_since = Instant::now();
        } else if still_since.elapsed() > STALL_LIMIT {
            return false;
        }
    }
    true
}
