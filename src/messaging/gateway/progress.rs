//! Send progress of one gateway socket: when the kernel last accepted bytes of it.
//!
//! A slow consumer is judged by this, not by the outbound queue's length (issue 17): the
//! writer moves the queue into its batch as soon as the previous write completes, so while
//! the socket is stuck the queue can look roomy and a "queue full for N s" rule never fires.
//! Bytes the socket accepted are what a device that stopped reading stops producing.

use futures_lite::{AsyncRead, AsyncWrite};
use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// When bytes were last accepted by the socket (or data last started waiting).
pub struct SendProgress {
    last: Cell<Instant>,
    accepted_bytes: Cell<u64>,
}

impl Default for SendProgress {
    fn default() -> Self {
        SendProgress {
            last: Cell::new(Instant::now()),
            accepted_bytes: Cell::new(0),
        }
    }
}

impl SendProgress {
    /// Data starts waiting now. The stall clock counts from the later of this and the last
    /// accepted byte, so an idle spell before the write is not held against the device.
    pub fn restart(&self) {
        self.last.set(Instant::now());
    }

    fn accepted(&self, n: usize) {
        if n > 0 {
            self.accepted_bytes
                .set(self.accepted_bytes.get() + n as u64);
            self.last.set(Instant::now());
        }
    }

    /// Bytes the socket accepted since the connection began.
    pub fn accepted_bytes(&self) -> u64 {
        self.accepted_bytes.get()
    }

    /// Resolves once `timeout` has passed without the socket accepting a byte. Meant to race
    /// a write: it re-arms itself on every byte accepted meanwhile.
    pub async fn stalled(&self, timeout: Duration) {
        loop {
            let due = self.last.get() + timeout;
            let now = Instant::now();
            if now >= due {
                return;
            }
            boltq_shards::sleep(due - now).await;
        }
    }
}

/// A socket whose writes report to a [`SendProgress`]; reads pass through untouched.
pub struct Metered<S> {
    inner: S,
    progress: Rc<SendProgress>,
}

impl<S> Metered<S> {
    pub fn new(inner: S, progress: Rc<SendProgress>) -> Metered<S> {
        Metered { inner, progress }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            this.progress.accepted(*n);
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes at most `room` bytes, then reports it would block.
    struct Sink {
        room: usize,
    }

    impl AsyncWrite for Sink {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.room);
            if n == 0 {
                return Poll::Pending;
            }
            self.room -= n;
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn only_accepted_bytes_count_as_progress() {
        let progress = Rc::new(SendProgress::default());
        let mut s = Metered::new(Sink { room: 10 }, Rc::clone(&progress));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let before = progress.last.get();
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(
            Pin::new(&mut s).poll_write(&mut cx, &[0; 4]),
            Poll::Ready(Ok(4))
        ));
        assert_eq!(progress.accepted_bytes(), 4);
        let after_write = progress.last.get();
        assert!(after_write > before, "an accepted write moves the clock");
        assert!(matches!(
            Pin::new(&mut s).poll_write(&mut cx, &[0; 20]),
            Poll::Ready(Ok(6))
        ));
        let full = progress.last.get();
        std::thread::sleep(Duration::from_millis(2));
        assert!(Pin::new(&mut s).poll_write(&mut cx, &[0; 20]).is_pending());
        assert_eq!(progress.accepted_bytes(), 10);
        assert_eq!(progress.last.get(), full, "a blocked write is no progress");
    }
}
