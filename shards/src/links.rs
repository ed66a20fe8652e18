//! The cross-shard channels: one bounded channel per ordered pair of shards.
//!
//! Built on glommio `shared_channel` directly rather than `channel_mesh`: the
//! mesh numbers peers by executor id (a process-wide counter, not our shard
//! index) and its builder shares an `Rc` across threads. Creating the N×(N-1)
//! channels ourselves on the starting thread makes the index mapping explicit.
//!
//! A `connect()` that is still waiting for its peer re-polls on every reactor
//! loop (89% of a core, platform.md §2), so every end is connected once, at
//! startup, concurrently, behind a timeout; a shard whose peers do not show
//! up fails instead of spinning.

use std::time::Duration;

use futures_lite::future;
use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};
use glommio::timer::Timer;

use crate::envelope::Batch;
use crate::ownership::ShardId;

/// One shard's unconnected channel ends; `Send`, so they can be handed to
/// the shard's thread. Index = peer shard; `None` at the shard's own index.
pub(crate) struct ShardLinks<M: Send + 'static> {
    senders: Vec<Option<SharedSender<Batch<M>>>>,
    receivers: Vec<Option<SharedReceiver<Batch<M>>>>,
}

/// One shard's connected channel ends, same indexing.
pub(crate) struct ConnectedLinks<M: Send + 'static> {
    pub(crate) senders: Vec<Option<ConnectedSender<Batch<M>>>>,
    pub(crate) receivers: Vec<Option<ConnectedReceiver<Batch<M>>>>,
}

/// Creates every channel of a full mesh of `shard_count` shards, each holding
/// at most `capacity_batches` batches.
pub(crate) fn build<M: Send + 'static>(
    shard_count: usize,
    capacity_batches: usize,
) -> Vec<ShardLinks<M>> {
    let mut links: Vec<ShardLinks<M>> = (0..shard_count)
        .map(|_| ShardLinks {
            senders: (0..shard_count).map(|_| None).collect(),
            receivers: (0..shard_count).map(|_| None).collect(),
        })
        .collect();
    for from in 0..shard_count {
        for to in 0..shard_count {
            if from != to {
                let (sender, receiver) = shared_channel::new_bounded(capacity_batches);
                links[from].senders[to] = Some(sender);
                links[to].receivers[from] = Some(receiver);
            }
        }
    }
    links
}

impl<M: Send + 'static> ShardLinks<M> {
    /// Connects every end of this shard, all at once (each connect waits for
    /// the peer's matching connect). `None` if not all connected within
    /// `timeout_ms`; the pending connects are then cancelled, so nothing is
    /// left spinning.
    pub(crate) async fn connect(
        self,
        shard: ShardId,
        timeout_ms: u64,
    ) -> Option<ConnectedLinks<M>> {
        assert!(self.senders[shard].is_none() && self.receivers[shard].is_none());
        // Spawned so they progress concurrently; dropping a `Task` cancels it.
        let senders: Vec<_> = self
            .senders
            .into_iter()
            .map(|end| end.map(|end| glommio::spawn_local(end.connect())))
            .collect();
        let receivers: Vec<_> = self
            .receivers
            .into_iter()
            .map(|end| end.map(|end| glommio::spawn_local(end.connect())))
            .collect();
        let all = async move {
            let mut connected = ConnectedLinks {
                senders: Vec::with_capacity(senders.len()),
                receivers: Vec::with_capacity(receivers.len()),
            };
            for task in senders {
                connected.senders.push(match task {
                    Some(task) => Some(task.await),
                    None => None,
                });
            }
            for task in receivers {
                connected.receivers.push(match task {
                    Some(task) => Some(task.await),
                    None => None,
                });
            }
            Some(connected)
        };
        let deadline = async {
            Timer::new(Duration::from_millis(timeout_ms)).await;
            None
        };
        future::or(all, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glommio::{LocalExecutorBuilder, Placement};
    use std::time::Instant;

    fn thread_cpu_ms() -> u64 {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` points to writable memory sized for one rusage,
        // which getrusage fills in; zeroed is a valid rusage bit pattern.
        let usage = unsafe {
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()), 0);
            usage.assume_init()
        };
        let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
        ms(usage.ru_utime) + ms(usage.ru_stime)
    }

    /// A peer that never connects must make startup fail within the bound,
    /// and the abandoned connects must stop spinning (they burn ~89% of a
    /// core while pending).
    #[test]
    fn connect_times_out_and_stops_spinning() {
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .make()
            .unwrap();
        executor.run(async {
            let mut all = build::<u64>(2, CAPACITY);
            let _silent_peer = all.pop().unwrap();
            let mine = all.pop().unwrap();
            let started = Instant::now();
            assert!(mine.connect(0, 100).await.is_none());
            assert!(started.elapsed() >= Duration::from_millis(100));
            let cpu_before_ms = thread_cpu_ms();
            Timer::new(Duration::from_millis(300)).await;
            let spent_ms = thread_cpu_ms() - cpu_before_ms;
            assert!(
                spent_ms < 30,
                "idle executor used {spent_ms} ms CPU in 300 ms"
            );
        });
    }

    const CAPACITY: usize = 1024;

    #[test]
    fn build_wires_every_ordered_pair_once() {
        let links = build::<u64>(3, CAPACITY);
        for (shard, link) in links.iter().enumerate() {
            for peer in 0..3 {
                assert_eq!(link.senders[peer].is_some(), peer != shard);
                assert_eq!(link.receivers[peer].is_some(), peer != shard);
            }
        }
    }
}
