//! Shared listening sockets (platform.md §3).
//!
//! glommio's own bind sets SO_REUSEPORT, which lets a second server process bind the same
//! port silently and take connections away. So the process binds once with std (no
//! reuseport: a duplicate gets EADDRINUSE), and every shard accepts from a `dup` of that
//! one socket; the kernel hands each connection to whichever shard accepts first.
//!
//! A listener given a [`TlsConfig`] yields TLS connections behind the same [`Conn`] type, so
//! the protocol handlers do not know or care which they serve.

use crate::tls::{TlsConfig, TlsConn};
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A bound listening socket, shareable across shard threads by descriptor.
/// Pending connections a listener queues before the kernel drops new ones.
pub const LISTEN_BACKLOG: i32 = 4096;

pub struct SharedListener {
    std: StdListener,
}

impl SharedListener {
    pub fn bind(addr: SocketAddr) -> io::Result<SharedListener> {
        let std = StdListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        // std listens with a backlog of 128: a mass reconnect of devices overflows it and
        // the kernel drops connects that then retry a second later. Listening again on a
        // listening socket only changes the backlog (the kernel caps it at somaxconn).
        // SAFETY: listen reads no memory; the descriptor is owned by `std` and valid.
        if unsafe { libc::listen(std.as_raw_fd(), LISTEN_BACKLOG) } != 0 {
            return Err(io::Error::last_os_error());
        }
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

/// A shard's accepting end of a [`SharedListener`], plain or TLS.
pub struct Listener {
    tcp: glommio::net::TcpListener,
    tls: Option<TlsConfig>,
}

impl Listener {
    /// With `tls`, every accepted connection is a TLS server connection.
    pub fn for_shard(shared: &SharedListener, tls: Option<&TlsConfig>) -> io::Result<Listener> {
        Ok(Listener {
            tcp: shard_listener(shared.dup_fd()?),
            tls: tls.cloned(),
        })
    }

    /// Accepts the next connection, with `TCP_NODELAY` set: replies are coalesced by the
    /// server itself, so Nagle's delay would only add latency.
    ///
    /// An error here is about the listening socket (e.g. out of descriptors), never about
    /// one client: with TLS the handshake has not run yet. It runs on the connection's first
    /// read or write, in the task serving it (see [`crate::tls`]), so a failed handshake
    /// shows up as an I/O error on that connection alone.
    pub async fn accept(&self) -> io::Result<Conn> {
        let stream = self
            .tcp
            .accept()
            .await
            .map_err(|e| io::Error::other(format!("accept: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| io::Error::other(format!("set TCP_NODELAY: {e}")))?;
        Ok(Conn(match &self.tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let peer = stream.peer_addr().ok();
                Stream::Tls(Box::new(tls.start(stream, peer)))
            }
        }))
    }
}

/// An accepted or dialled connection: futures-io `AsyncRead + AsyncWrite`, in plain text or TLS.
pub struct Conn(Stream);

enum Stream {
    Plain(glommio::net::TcpStream),
    /// Boxed: a TLS session is large, and connections are moved into their tasks.
    Tls(Box<TlsConn>),
}

impl Conn {
    /// A plain-text connection over `stream`, e.g. one this process dialled out
    /// ([`crate::connect::connect_tcp`]).
    pub fn plain(stream: glommio::net::TcpStream) -> Conn {
        Conn(Stream::Plain(stream))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            Stream::Plain(s) => s.peer_addr().map_err(|e| io::Error::other(e.to_string())),
            Stream::Tls(s) => s.peer_addr(),
        }
    }

    /// Shuts the socket down in both directions now. Dropping a connection is not enough
    /// when a write is still posted to the kernel for a peer that stopped reading: the
    /// descriptor stays open until that write completes, which may be never. After this the
    /// peer sees the connection end and posted operations fail.
    pub async fn abort(&self) {
        match &self.0 {
            Stream::Plain(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both).await;
            }
            Stream::Tls(s) => s.abort().await,
        }
    }

    /// The mark (see [`crate::peer_ack`]) at which every byte written so far ends, counting
    /// TLS records as sent; call it after a write and a flush. `None` when the connection is
    /// no longer established or its TLS handshake has not completed.
    pub fn written_mark(&self) -> io::Result<Option<u64>> {
        match self.raw_fd() {
            Some(fd) => crate::peer_ack::written_mark(fd),
            None => Ok(None),
        }
    }

    /// Bytes the peer's TCP has acknowledged, comparable with [`Conn::written_mark`];
    /// `None` when the connection is no longer established.
    pub fn acked_bytes(&self) -> io::Result<Option<u64>> {
        match self.raw_fd() {
            Some(fd) => crate::peer_ack::acked_bytes(fd),
            None => Ok(None),
        }
    }

    /// Makes the kernel end this connection once the peer has not answered for
    /// `unresponsive_max`: data written but unacknowledged that long (TCP_USER_TIMEOUT), or,
    /// while idle, keepalive probes unanswered (one every third of it). Without this a
    /// connection across a network that stops delivering stays open for many minutes
    /// (retransmissions back off towards two minutes apart), writes pile up behind it, and
    /// a peer reachable again is not heard until the next retransmission.
    pub fn close_when_unresponsive(&self, unresponsive_max: Duration) -> io::Result<()> {
        let Some(fd) = self.raw_fd() else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "no established socket to set liveness options on",
            ));
        };
        let max_ms = unresponsive_max.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        let probe_every_s = (max_ms / 3 / 1_000).max(1);
        set_option(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
        set_option(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, probe_every_s)?;
        set_option(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, probe_every_s)?;
        set_option(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)?;
        set_option(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, max_ms)
    }

    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        match &self.0 {
            Stream::Plain(s) => Some(s.as_raw_fd()),
            Stream::Tls(s) => s.raw_fd(),
        }
    }

    /// Whether this connection came from a TLS listener.
    pub fn is_tls(&self) -> bool {
        matches!(self.0, Stream::Tls(_))
    }

    /// Gives up this plain-text connection's socket as an owned descriptor, for another
    /// shard to serve with [`Conn::from_handed_over`]. Call it only with no read or write
    /// posted (between awaits of the connection's own loop): the socket changes rings.
    /// A TLS connection (its session lives in this thread) is given back unchanged, as is
    /// one whose descriptor could not be duplicated.
    pub fn hand_over(self) -> Result<std::os::fd::OwnedFd, Conn> {
        let Stream::Plain(stream) = self.0 else {
            return Err(self);
        };
        // SAFETY: the descriptor belongs to `stream`, which is alive for the whole borrow
        // (it is dropped only after the duplicate exists).
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) };
        match borrowed.try_clone_to_owned() {
            // Dropping the stream closes its descriptor only; the socket stays open
            // through the duplicate (close is not shutdown).
            Ok(owned) => Ok(owned),
            Err(e) => {
                log::debug!(
                    "a connection stays on its shard: its socket could not be duplicated: {e}"
                );
                Err(Conn(Stream::Plain(stream)))
            }
        }
    }

    /// A plain-text connection over a socket another shard handed over ([`Conn::hand_over`]).
    pub fn from_handed_over(fd: std::os::fd::OwnedFd) -> Conn {
        use std::os::fd::IntoRawFd;
        // SAFETY: `fd` is an open TCP socket this process owns (it came from `hand_over`),
        // and ownership passes to the stream, which closes it once.
        let stream = unsafe { glommio::net::TcpStream::from_raw_fd(fd.into_raw_fd()) };
        Conn(Stream::Plain(stream))
    }
}

/// Sets an integer socket option.
fn set_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `value`, a live local, and
    // keeps no pointer; `fd` is the connection's socket, open while `self` is borrowed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("setsockopt({level}, {name}): {e}"),
        ))
    }
}

/// Reads an integer socket option (for tests of the options set).
#[cfg(test)]
pub(crate) fn get_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> libc::c_int {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`, a live local, and updates
    // `len`, another; `fd` is an open socket for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockopt: {}", io::Error::last_os_error());
    value
}

/// Gives the executor back, once, when it wants to look at its rings (its preempt timer
/// fired, or a socket of another task has input): the task is woken again at once and runs
/// after that look.
///
/// A read from a socket that already holds bytes, and a write to one with room, complete
/// without waiting, and glommio only looks at its rings between task polls. So a client that
/// pipelines requests faster than they are answered (a flood of PINGs, a consumer polling an
/// empty queue) never made its connection wait, and that one task held its shard until the
/// client paused: no other connection was accepted or read, no timer fired and no journal
/// commit completed. Checking here covers every protocol (queue TCP, HTTP, WebSocket, the
/// cluster links) in plain text and TLS. The check is two loads from the latency ring.
fn give_way(cx: &mut Context<'_>) -> bool {
    if !glommio::executor().need_preempt() {
        return false;
    }
    cx.waker().wake_by_ref();
    true
}

impl futures_lite::AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if give_way(cx) {
            return Poll::Pending;
        }
        match &mut self.get_mut().0 {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl futures_lite::AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if give_way(cx) {
            return Poll::Pending;
        }
        match &mut self.get_mut().0 {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Stream::Plain(s) => Pin::new(s).poll_close(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}
