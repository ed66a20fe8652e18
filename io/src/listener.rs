//! Shared listening sockets (platform.md §3).
//!
//! glommio's own bind sets SO_REUSEPORT, which lets a second server process bind the same
//! port silently and take connections away. So the process binds once with std (no
//! reuseport: a duplicate gets EADDRINUSE), and every shard accepts from a `dup` of that
//! one socket; the kernel hands each connection to whichever shard accepts first.

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};

/// A bound listening socket, shareable across shard threads by descriptor.
pub struct SharedListener {
    std: StdListener,
}

impl SharedListener {
    pub fn bind(addr: SocketAddr) -> io::Result<SharedListener> {
        let std = StdListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        std.set_nonblocking(true)?;
        Ok(SharedListener { std })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.std.local_addr()
    }

    /// A new descriptor for the same socket, to be turned into a listener on one shard.
    pub fn dup_fd(&self) -> io::Result<RawFd> {
        // SAFETY: dup reads no memory; the source descriptor is owned by `self.std`.
        let fd = unsafe { libc::dup(self.std.as_raw_fd()) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// Wraps a descriptor from [`SharedListener::dup_fd`] as this shard's glommio listener.
pub fn shard_listener(fd: RawFd) -> glommio::net::TcpListener {
    // SAFETY: `fd` comes from `dup_fd`: a valid listening TCP socket that nothing else owns,
    // so the glommio listener becomes its sole owner and closes it once.
    unsafe { glommio::net::TcpListener::from_raw_fd(fd) }
}

/// A shard's accepting end of a [`SharedListener`].
pub struct Listener(glommio::net::TcpListener);

impl Listener {
    pub fn for_shard(shared: &SharedListener) -> io::Result<Listener> {
        Ok(Listener(shard_listener(shared.dup_fd()?)))
    }

    /// Accepts the next connection, with `TCP_NODELAY` set: replies are coalesced by the
    /// server itself, so Nagle's delay would only add latency.
    pub async fn accept(&self) -> io::Result<Conn> {
        let stream = self
            .0
            .accept()
            .await
            .map_err(|e| io::Error::other(format!("accept: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| io::Error::other(format!("set TCP_NODELAY: {e}")))?;
        Ok(Conn(stream))
    }
}

/// An accepted connection: futures-io `AsyncRead + AsyncWrite`.
pub struct Conn(glommio::net::TcpStream);

impl Conn {
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0
            .peer_addr()
            .map_err(|e| io::Error::other(e.to_string()))
    }
}

impl futures_lite::AsyncRead for Conn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl futures_lite::AsyncWrite for Conn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_close(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_close(cx)
    }
}
