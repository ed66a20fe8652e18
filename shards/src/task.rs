//! Spawning and sleeping on the current shard, so the server never names glommio.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::rescue::{self, Nudger, Start, Watched};

/// A task running on the current shard; dropping it cancels the task unless detached.
pub struct Task<T>(glommio::Task<T>);

impl<T> Task<T> {
    /// Lets the task run to completion on its own.
    pub fn detach(self) {
        self.0.detach();
    }
}

impl<T> Future for Task<T> {
    type Output = T;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Spawns `future` on the current shard's executor. Must be called from inside a shard.
pub fn spawn<T: 'static>(future: impl Future<Output = T> + 'static) -> Task<T> {
    Task(glommio::spawn_local(future))
}

/// Sleeps on the current shard for `duration`.
pub async fn sleep(duration: Duration) {
    glommio::timer::sleep(duration).await;
}

/// Runs `future` with a deadline; `None` if it did not finish in time.
pub async fn timeout<T>(duration: Duration, future: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(duration).await;
        None
    })
    .await
}

/// Runs `future` to completion on a temporary single executor on this thread: for startup
/// work (such as storage recovery) that must finish before the shards start. It gets a
/// shard's rescue timer too (`rescue`): recovery is one task awaiting one read after
/// another, the shape glommio can park for good.
pub fn block_on<T: Send + 'static>(
    name: &str,
    future: impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = T>>> + Send + 'static,
) -> std::io::Result<T> {
    let start = Start::new();
    let thread = std::thread::Builder::new().name(name.to_owned()).spawn({
        let start = Arc::clone(&start);
        move || {
            let made = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).make();
            let output = made.map(|executor| rescue::run_rescued(executor, &start, future()));
            start.started();
            output.map_err(|e| std::io::Error::other(format!("start startup executor: {e}")))
        }
    })?;
    let watched = vec![Watched {
        name: name.to_owned(),
        start,
        thread,
    }];
    let watched = match Nudger::spawn(watched) {
        Ok(nudger) => nudger.join(),
        Err((_, watched)) => watched,
    };
    let thread = watched
        .into_iter()
        .next()
        .expect("one thread watched")
        .thread;
    thread
        .join()
        .map_err(|_| std::io::Error::other("startup executor panicked"))?
}

/// Runs `func` on the shard's blocking-thread pool (pinned like the shard) and resolves with
/// its result, so long CPU work (serialising a large snapshot) time-slices with the shard
/// instead of stopping its event loop.
pub async fn spawn_blocking<R: Send + 'static>(func: impl FnOnce() -> R + Send + 'static) -> R {
    glommio::executor().spawn_blocking(func).await
}
