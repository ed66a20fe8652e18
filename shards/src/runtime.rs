//! Starting the shards: one pinned glommio executor thread per shard.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures_lite::{future, FutureExt};
use glommio::timer::Timer;
use glommio::{LocalExecutorBuilder, Placement};

use crate::clock::Clock;
use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::links::{self, ShardLinks};
use crate::memlock;
use crate::ownership::ShardId;
use crate::shard::Shard;
use crate::shutdown::ShutdownHandle;

/// Bound on the flush done for a shard after its `init` future returns, so
/// messages queued at the very end still leave, but a stuck peer cannot hold
/// the process open.
pub const FINAL_FLUSH_TIMEOUT_MS: u64 = 1_000;

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
    let mut threads: Vec<JoinHandle<()>> = Vec::with_capacity(config.shard_count);
    let mut first_error = None;
    let all_links = links::build::<M>(config.shard_count, config.channel_capacity);
    for (shard, links) in all_links.into_iter().enumerate() {
        let start = ShardStart {
            shard,
            placing: placings[shard],
            io_memory_bytes,
            config: config.clone(),
            links,
            clock,
            shutdown: shutdown.clone(),
        };
        let init = init.clone();
        let results_tx = results_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("boltq-shard-{shard}"))
            .spawn(move || {
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| start.run(init)));
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
            Ok(thread) => threads.push(thread),
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
    let outputs = collect(config.shard_count, &results_rx, &shutdown, &mut first_error);
    for thread in threads {
        // Panics were caught inside the thread, so join cannot fail.
        let _ = thread.join();
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
/// the first failure so that no shard keeps serving alone.
fn collect<T>(
    shard_count: usize,
    results: &mpsc::Receiver<(ShardId, Result<T, RuntimeError>)>,
    shutdown: &ShutdownHandle,
    first_error: &mut Option<RuntimeError>,
) -> Vec<Option<T>> {
    let mut outputs: Vec<Option<T>> = (0..shard_count).map(|_| None).collect();
    while let Ok((shard, result)) = results.recv() {
        match result {
            Ok(output) => outputs[shard] = Some(output),
            Err(error) => {
                log::error!("{error}");
                if first_error.is_none() {
                    *first_error = Some(error);
                    shutdown.trigger();
                }
            }
        }
    }
    outputs
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
        executor.run(async move {
            glommio::spawn_local(crate::rescue::rescue_stranded_tasks()).detach();
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
