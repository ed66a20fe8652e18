//! Spawning and sleeping on the current shard, so the server never names glommio.

use std::future::Future;
use std::time::Duration;

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
    let handle = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name(name)
        .spawn(move || async move {
            glommio::spawn_local(crate::rescue::rescue_stranded_tasks()).detach();
            future().await
        })
        .map_err(|e| std::io::Error::other(format!("start {}: {e}", "startup executor")))?;
    handle
        .join()
        .map_err(|e| std::io::Error::other(format!("startup executor failed: {e}")))
}

/// Runs `func` on the shard's blocking-thread pool (pinned like the shard) and resolves with
/// its result, so long CPU work (serialising a large snapshot) time-slices with the shard
/// instead of stopping its event loop.
pub async fn spawn_blocking<R: Send + 'static>(func: impl FnOnce() -> R + Send + 'static) -> R {
    glommio::executor().spawn_blocking(func).await
}
