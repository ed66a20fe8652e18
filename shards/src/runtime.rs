//! Starting the shards: one pinned glommio executor thread per shard.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use futures_lite::{future, FutureExt};
use glommio::timer::Timer;
use glommio::{LocalExecutorBuilder, Placement};

use crate::clock::Clock;
use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::links::{self, ShardLinks};
use crate::memlock;
use crate::ownership::ShardId;
use crate::rescue::{self, Nudger, Start, Watched};
use crate::shard::Shard;
use crate::shutdown::ShutdownHandle;

/// Bound on the flush done for a shard after its `init` future returns, so
/// messages queued at the very end still leave, but a stuck peer cannot hold
/// the process open.
pub const FINAL_FLUSH_TIMEOUT_MS: u64 = 1_000;

/// Once a shard failed, how long the others get to stop before the process gives up on
/// them: a shard stuck where it cannot see the shutdown (a peer that never connects, a
/// wedged executor) must not keep a failed server running without serving.
pub const SHARD_STOP_AFTER_FAILURE_MS: u64 = 10_000;

/// CPUs this process may run on (its affinity mask), in increasing order.
/// The default shard count is the length of this list.
pub fn usable_cpus() -> Result<Vec<usize>, RuntimeError> {
    // SAFETY: cpu_set_t is a plain bitmask for which all-zero is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t and we pass its exact size;
    // pid 0 means the calling thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(RuntimeError::NoCpus(
            std::io::Error::last_os_error().to_string(),
        ));
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, the bit count of `set`.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    if cpus.is_empty() {
        return Err(RuntimeError::NoCpus("affinity mask is empty".to_owned()));
    }
    Ok(cpus)
}

/// Where and how one shard runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placing {
    cpu: usize,
    spin_before_park_us: Option<u64>,
}

/// Shard `i` goes to `cpus[i % cpus.len()]`. Spinning is dropped when shards
/// share CPUs: a spinning shard steals the core from its neighbour (1 ms
/// spin turned 49 µs round trips into 2 ms, platform.md §2).
fn place(config: &RuntimeConfig, cpus: &[usize]) -> Vec<Placing> {
    assert!(!cpus.is_empty());
    let shared = config.shard_count > cpus.len();
    if shared {
        log::warn!(
            "{} shards on {} usable CPUs: shards will share cores (fine for tests, \
             slower in production)",
            config.shard_count,
            cpus.len()
        );
        if config.spin_before_park_us.is_some() {
            log::warn!("spin_before_park ignored: shards outnumber CPUs");
        }
    }
    let spin_before_park_us = config.spin_before_park_us.filter(|us| !shared && *us > 0);
    (0..config.shard_count)
        .map(|shard| Placing {
            cpu: cpus[shard % cpus.len()],
            spin_before_park_us,
        })
        .collect()
}

/// Runs `init` on every shard and returns the shards' outputs, indexed by
/// shard id, once all have returned.
///
/// Each shard is a thread named `boltq-shard-{i}` with one glommio executor
/// pinned to one CPU. Before `init` runs, every cross-shard channel is
/// connected (within `mesh_connect_timeout_ms`) and the shard's background
/// tasks are running. `init` should serve until
/// [`Shard::shutdown_requested`] resolves, then drain. After it returns,
/// the shard's outboxes are flushed (bounded by [`FINAL_FLUSH_TIMEOUT_MS`]).
///
/// If any shard fails or panics, shutdown is triggered on `shutdown` so the
/// others stop too, and the first failure is returned, naming its shard.
pub fn run_shards<M, T, F, Fut>(
    config: RuntimeConfig,
    shutdown: ShutdownHandle,
    init: F,
) -> Result<Vec<T>, RuntimeError>
where
    M: Send + 'static,
    T: Send + 'static,
    F: Fn(Shard<M>) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = T> + 'static,
{
    config.validate()?;
    let limit = memlock::current_limit()
        .map_err(|e| RuntimeError::InvalidConfig(format!("cannot read memlock limit: {e}")))?;
    let io_memory_bytes =
        memlock::io_memory_bytes(limit, config.shard_count, config.io_memory_bytes)?;
    let placings = place(&config, &usable_cpus()?);
    let clock = Clock::start();
    let (results_tx, results_rx) = mpsc::channel();
    let mut threads: Vec<Watched<()>> = Vec::with_capacity(config.shard_count);
    let mut first_error = None;
    let all_links = links::build::<M>(config.shard_count, config.channel_capacity);
    for (shard, links) in all_links.into_iter().enumerate() {
        let start = ShardStart {
            shard,
            progress: Start::new(),
            placing: placings[shard],
            io_memory_bytes,
            config: config.clone(),
            links,
            clock,
            shutdown: shutdown.clone(),
        };
        let init = init.clone();
        let results_tx = results_tx.clone();
        let name = format!("boltq-shard-{shard}");
        let started = Arc::clone(&start.progress);
        let spawned = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let start_state = Arc::clone(&start.progress);
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| start.run(init)));
                start_state.started();
                let result = outcome.unwrap_or_else(|payload| {
                    Err(RuntimeError::ShardPanicked {
                        shard,
                        message: panic_message(payload.as_ref()),
                    })
                });
                // The receiver outlives every shard thread.
                let _ = results_tx.send((shard, result));
            });
        match spawned {
            Ok(thread) => threads.push(Watched {
                name,
                start: started,
                thread,
            }),
            Err(e) => {
                // Links of shards not started are dropped here, which lets
                // their peers' connects finish (as closed) instead of hanging.
                first_error = Some(RuntimeError::ShardStart {
                    shard,
                    reason: e.to_string(),
                });
                shutdown.trigger();
                break;
            }
        }
    }
    drop(results_tx);
    let nudger = Nudger::spawn(threads);
    let (outputs, reported) = collect(
        config.shard_count,
        &results_rx,
        &shutdown,
        &mut first_error,
        Duration::from_millis(SHARD_STOP_AFTER_FAILURE_MS),
    );
    let threads = match nudger {
        Ok(nudger) => nudger.stop(),
        Err((e, threads)) => {
            log::warn!("cannot watch the shards' start ({e}); a stranded one stays asleep");
            threads
        }
    };
    for (shard, watched) in threads.into_iter().enumerate() {
        // A shard that never reported is stuck (collect gave up on it after a failure):
        // joining it would hang; the process exit ends it.
        if reported[shard] {
            // Panics were caught inside the thread, so join cannot fail.
            let _ = watched.thread.join();
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(outputs
            .into_iter()
            .map(|output| output.expect("every shard reported an output"))
            .collect()),
    }
}

/// Gathers results as shards finish (in any order), triggering shutdown at
/// the first failure so that no shard keeps serving alone. After a failure the
/// others get `stop_after_failure` to report; those that do not are named and
/// left behind.
fn collect<T>(
    shard_count: usize,
    results: &mpsc::Receiver<(ShardId, Result<T, RuntimeError>)>,
    shutdown: &ShutdownHandle,
    first_error: &mut Option<RuntimeError>,
    stop_after_failure: Duration,
) -> (Vec<Option<T>>, Vec<bool>) {
    let mut outputs: Vec<Option<T>> = (0..shard_count).map(|_| None).collect();
    let mut reported = vec![false; shard_count];
    let mut give_up_at: Option<Instant> = None;
    loop {
        let next = match give_up_at {
            None => results
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(at) => results.recv_timeout(at.saturating_duration_since(Instant::now())),
        };
        let (shard, result) = match next {
            Ok(report) => report,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let stuck: Vec<ShardId> = (0..shard_count).filter(|&s| !reported[s]).collect();
                log::error!(
                    "shards {stuck:?} did not stop within {} ms of the failure; exiting without them",
                    stop_after_failure.as_millis()
                );
                break;
            }
        };
        reported[shard] = true;
        match result {
            Ok(output) => outputs[shard] = Some(output),
            Err(error) => {
                log::error!("{error}");
                if first_error.is_none() {
                    *first_error = Some(error);
                    shutdown.trigger();
                    give_up_at = Some(Instant::now() + stop_after_failure);
                }
            }
        }
    }
    (outputs, reported)
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Everything a shard thread needs; moved into the thread.
struct ShardStart<M: Send + 'static> {
    shard: ShardId,
    progress: Arc<Start>,
    placing: Placing,
    io_memory_bytes: Option<usize>,
    config: RuntimeConfig,
    links: ShardLinks<M>,
    clock: Clock,
    shutdown: ShutdownHandle,
}

impl<M: Send + 'static> ShardStart<M> {
    fn run<T, F, Fut>(self, init: F) -> Result<T, RuntimeError>
    where
        F: Fn(Shard<M>) -> Fut,
        Fut: Future<Output = T>,
    {
        let shard = self.shard;
        let start_error = |reason: String| RuntimeError::ShardStart { shard, reason };
        let mut builder = LocalExecutorBuilder::new(Placement::Fixed(self.placing.cpu))
            .ring_depth(self.config.ring_depth)
            .preempt_timer(Duration::from_micros(crate::config::PREEMPT_TIMER_US));
        if let Some(bytes) = self.io_memory_bytes {
            builder = builder.io_memory(bytes);
        }
        if let Some(us) = self.placing.spin_before_park_us {
            builder = builder.spin_before_park(Duration::from_micros(us));
        }
        let executor = builder.make().map_err(|e| start_error(e.to_string()))?;
        log::debug!("shard {shard} started on cpu {}", self.placing.cpu);
        let progress = Arc::clone(&self.progress);
        rescue::run_rescued(executor, &progress, async move {
            let timeout_ms = self.config.mesh_connect_timeout_ms;
            let links = self
                .links
                .connect(shard, timeout_ms)
                .await
                .ok_or(RuntimeError::MeshConnectTimeout { shard, timeout_ms })?;
            let handle = Shard::start(shard, &self.config, links, self.clock, self.shutdown)
                .map_err(|e| start_error(e.to_string()))?;
            // Caught here, not only around the thread: glommio turns a panic
            // of the main future into an `Option::unwrap` panic of its own,
            // which would lose the message that says what went wrong.
            let output = AssertUnwindSafe(init(handle.clone())).catch_unwind().await;
            let output = output.map_err(|payload| RuntimeError::ShardPanicked {
                shard,
                message: panic_message(payload.as_ref()),
            });
            if output.is_ok() {
                final_flush(&handle).await;
            }
            handle.stop();
            output
        })
    }
}

async fn final_flush<M: Send + 'static>(shard: &Shard<M>) {
    let flushed = async {
        shard.flush().await;
        true
    };
    let timed_out = async {
        Timer::new(Duration::from_millis(FINAL_FLUSH_TIMEOUT_MS)).await;
        false
    };
    if !future::or(flushed, timed_out).await {
        log::warn!(
            "shard {}: outboxes not flushed within {FINAL_FLUSH_TIMEOUT_MS} ms at stop",
            shard.id()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard that fails while another never reports (stuck where it cannot see the
    /// shutdown): the failure comes back after the bound, not never, and the stuck shard
    /// is the one not marked as reported (its thread is not joined).
    #[test]
    fn a_failure_returns_without_waiting_for_a_stuck_shard() {
        let (tx, rx) = mpsc::channel::<(ShardId, Result<(), RuntimeError>)>();
        tx.send((
            0,
            Err(RuntimeError::MeshConnectTimeout {
                shard: 0,
                timeout_ms: 1,
            }),
        ))
        .unwrap();
        let shutdown = ShutdownHandle::new();
        let mut first_error = None;
        let started = Instant::now();
        let (outputs, reported) = collect(
            2,
            &rx,
            &shutdown,
            &mut first_error,
            Duration::from_millis(200),
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(matches!(
            first_error,
            Some(RuntimeError::MeshConnectTimeout { shard: 0, .. })
        ));
        assert!(shutdown.is_triggered());
        assert_eq!(reported, [true, false]);
        assert!(outputs.iter().all(Option::is_none));
        drop(tx);
    }

    #[test]
    fn placement_wraps_and_drops_spin_when_shared() {
        let config = RuntimeConfig {
            spin_before_park_us: Some(50),
            ..RuntimeConfig::new(4)
        };
        let placings = place(&config, &[3, 5]);
        let cpus: Vec<usize> = placings.iter().map(|p| p.cpu).collect();
        assert_eq!(cpus, [3, 5, 3, 5]);
        assert!(placings.iter().all(|p| p.spin_before_park_us.is_none()));
    }

    #[test]
    fn placement_keeps_spin_with_dedicated_cores() {
        let config = RuntimeConfig {
            spin_before_park_us: Some(50),
            ..RuntimeConfig::new(2)
        };
        let placings = place(&config, &[0, 1, 2]);
        assert_eq!(placings[1].cpu, 1);
        assert!(placings.iter().all(|p| p.spin_before_park_us == Some(50)));
    }

    #[test]
    fn usable_cpus_is_not_empty() {
        let cpus = usable_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }
}
