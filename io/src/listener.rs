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
