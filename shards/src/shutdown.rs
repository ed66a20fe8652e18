//! Shutdown requests: SIGINT/SIGTERM or a programmatic trigger reach every
//! shard without any shard polling for them.
//!
//! Each shard owns one end of a socketpair and has a task awaiting a read on
//! it through glommio's reactor, which costs nothing while idle. Triggering
//! writes one byte into every shard's other end. Signals are received by a
//! plain std thread (`signal_hook::iterator::Signals`), which only calls
//! `trigger`, so no async-signal-unsafe code runs in a handler.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use futures_lite::AsyncReadExt;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle as SignalsHandle, Signals};

use crate::notify::{wait_until, WaitList};

#[derive(Debug, Default)]
struct Shared {
    triggered: AtomicBool,
    /// Write ends, one per running shard. Locked only when a shard starts and
    /// when shutdown is triggered, never on a hot path.
    shard_ends: Mutex<Vec<StdUnixStream>>,
}

/// Asks every shard to shut down. Cheap to clone and `Send`: hand it to
/// whatever decides (signal thread, admin route, test).
#[derive(Clone, Debug, Default)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// A handle not yet triggered and with no shards attached.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every shard's `shutdown_requested()` resolve, including shards
    /// that attach later. Idempotent.
    pub fn trigger(&self) {
        self.shared.triggered.store(true, Ordering::SeqCst);
        let mut ends = self
            .shared
            .shard_ends
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        ends.retain(poke);
    }

    /// True once `trigger` has been called.
    pub fn is_triggered(&self) -> bool {
        self.shared.triggered.load(Ordering::SeqCst)
    }

    /// Starts a thread that calls `trigger` on SIGINT or SIGTERM. Keep the
    /// returned listener alive for as long as signals should be handled.
    pub fn listen_for_signals(&self) -> io::Result<SignalListener> {
        let mut signals = Signals::new([SIGINT, SIGTERM])?;
        let signals_handle = signals.handle();
        let handle = self.clone();
        let thread = std::thread::Builder::new()
            .name("boltq-signals".to_owned())
            .spawn(move || {
                for signal in signals.forever() {
                    log::info!("signal {signal} received: shutting down");
                    handle.trigger();
                }
            })?;
        Ok(SignalListener {
            signals_handle,
            thread: Some(thread),
        })
    }

    /// Creates a shard's socketpair: keeps the write end, returns the read end.
    fn attach_shard(&self) -> io::Result<StdUnixStream> {
        let (read_end, write_end) = StdUnixStream::pair()?;
        // A full socket buffer means a byte is already pending, which is all
        // a trigger needs, so writes must never block.
        write_end.set_nonblocking(true)?;
        read_end.set_nonblocking(true)?;
        let mut ends = self
            .shared
            .shard_ends
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Checked under the lock: a trigger either sees this end or set the
        // flag before we look at it.
        if self.is_triggered() {
            poke(&write_end);
        }
        ends.push(write_end);
        Ok(read_end)
    }
}

/// Writes one byte to a shard's end. `MSG_NOSIGNAL`: the shard may have
/// exited and closed its end, and that must not raise SIGPIPE in a library.
/// Returns false once the end is dead, so `trigger` can prune it.
fn poke(end: &StdUnixStream) -> bool {
    let byte = [1_u8];
    // SAFETY: `end` is a live socket we own for the duration of the call, and
    // the buffer pointer and length describe the 1-byte local array.
    let written = unsafe {
        libc::send(
            end.as_raw_fd(),
            byte.as_ptr().cast(),
            byte.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if written >= 0 {
        return true;
    }
    let error = io::Error::last_os_error();
    // A full buffer already holds a pending byte, which is all we need.
    if error.kind() == io::ErrorKind::WouldBlock {
        return true;
    }
    log::debug!("shutdown poke failed (shard already gone): {error}");
    false
}

/// Stops the signal thread on drop, restoring nothing else: signal-hook's
/// handlers stay registered but only feed the closed iterator.
pub struct SignalListener {
    signals_handle: SignalsHandle,
    thread: Option<JoinHandle<()>>,
}

impl Drop for SignalListener {
    fn drop(&mut self) {
        self.signals_handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One shard's view of shutdown: a flag plus waiters, set by a watcher task.
#[derive(Default)]
pub(crate) struct ShutdownLocal {
    requested: Cell<bool>,
    waiters: WaitList,
}

impl ShutdownLocal {
    /// Attaches this shard to `handle` and spawns the watcher task. Must run
    /// inside the shard's executor.
    pub(crate) fn start(handle: &ShutdownHandle) -> io::Result<Rc<Self>> {
        let read_end = handle.attach_shard()?;
        // SAFETY: `into_raw_fd` gives up ownership of a valid, open socket fd
        // that nothing else refers to; glommio's `UnixStream` takes that
        // ownership and closes it exactly once, on drop.
        let mut stream = unsafe { glommio::net::UnixStream::from_raw_fd(read_end.into_raw_fd()) };
        let local = Rc::new(Self::default());
        let watcher = local.clone();
        glommio::spawn_local(async move {
            let mut byte = [0_u8; 1];
            // Any outcome means stop: a byte, EOF (the handle was dropped
            // with every clone), or an error we cannot recover from.
            if let Err(e) = stream.read(&mut byte).await {
                log::warn!("shutdown watcher read failed, shutting down: {e}");
            }
            watcher.requested.set(true);
            watcher.waiters.wake_all();
        })
        .detach();
        Ok(local)
    }

    pub(crate) fn is_requested(&self) -> bool {
        self.requested.get()
    }

    pub(crate) async fn wait(&self) {
        wait_until(&self.waiters, || self.requested.get()).await;
    }
}
