//! The adapter between our sockets and hyper: the futures-io streams the listeners and
//! `boltq_io::connect` hand out (plain, or TLS through futures-rustls) seen through
//! `hyper::rt::{Read, Write}`, so hyper needs no runtime of its own.

use boltq_io::listener::Conn;
use futures_lite::{AsyncRead, AsyncWrite};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Bytes asked from the socket per read.
pub const READ_BYTES_MAX: usize = 16 * 1024;

/// An outbound connection: plain TCP, or TLS over it.
pub(super) enum Stream {
    Plain(Conn),
    /// Boxed: a TLS session is a few KiB and the plain case should not pay for it.
    Tls(Box<futures_rustls::client::TlsStream<Conn>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_flush(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_close(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_close(cx),
        }
    }
}

/// A futures-io stream as hyper's IO. Reads go through a small buffer of our own and are
/// copied into hyper's with `put_slice`: hyper's cursor hands out uninitialised memory
/// only through `unsafe`, and one copy of an HTTP answer costs nothing next to the call.
pub(super) struct HyperIo<S> {
    inner: S,
    scratch: Vec<u8>,
}

impl<S> HyperIo<S> {
    pub(super) fn new(inner: S) -> HyperIo<S> {
        HyperIo {
            inner,
            scratch: vec![0; READ_BYTES_MAX],
        }
    }
}

impl<S: AsyncRead + Unpin> hyper::rt::Read for HyperIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let want = buf.remaining().min(this.scratch.len());
        match Pin::new(&mut this.inner).poll_read(cx, &mut this.scratch[..want]) {
            Poll::Ready(Ok(n)) => {
                buf.put_slice(&this.scratch[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> hyper::rt::Write for HyperIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}
