//! The byte stream under a TCP scenario's connection: plain, or TLS over the same socket.
//!
//! TLS is a rustls client session driven by hand on the event loop's non-blocking socket:
//! reads pull records with `read_tls` and decrypt them with `process_new_packets` only when
//! the session has no plaintext left; writes hand plaintext to the session and push records
//! out with `write_tls` as far as the socket takes them, and the rest waits in the session
//! ([`Stream::wants_write`]) until the socket is writable again. The same code serves the
//! blocking setup steps (handshake, AUTH, PING) of the TCP scenarios before the socket turns
//! non-blocking, and the gateway's non-blocking handshakes ([`Stream::start_tls`]).
//!
//! An enum rather than a trait object: the plain case stays a direct call on the socket.

use boltq::client::TlsSession;
use rustls::ClientConnection;
use std::io::{self, Read, Write};
use std::net::TcpStream;

/// Plaintext handed to a TLS session per write call. The session encrypts it at once, so
/// this bounds the ciphertext a connection keeps buffered when the socket is full.
pub const TLS_PLAINTEXT_CHUNK_BYTES: usize = 256 * 1024;

pub enum Stream {
    Plain(TcpStream),
    /// Boxed: a session is tens of KiB and the plain case should not pay for it.
    Tls(Box<Tls>),
}

pub struct Tls {
    sock: TcpStream,
    conn: ClientConnection,
}

impl Stream {
    /// Wraps a connected socket; with `tls`, runs the handshake blocking (bounded by the
    /// socket's read and write timeouts, which the caller sets).
    pub fn new(sock: TcpStream, tls: Option<&TlsSession>) -> Result<Stream, String> {
        let Some(session) = tls else {
            return Ok(Stream::Plain(sock));
        };
        let mut t = Tls::start(sock, session)?;
        while t.conn.is_handshaking() {
            t.conn
                .complete_io(&mut t.sock)
                .map_err(|e| format!("TLS handshake: {e}"))?;
        }
        Ok(Stream::Tls(Box::new(t)))
    }

    /// Starts a TLS session on a non-blocking socket without waiting for the handshake: it
    /// runs as the stream is read and flushed, and what is written meanwhile is sent once it
    /// is done (the gateway's devices connect thousands at a time from one loop).
    pub fn start_tls(sock: TcpStream, session: &TlsSession) -> Result<Stream, String> {
        Ok(Stream::Tls(Box::new(Tls::start(sock, session)?)))
    }

    pub fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.sock,
        }
    }

    /// TLS records encrypted but not yet taken by the socket.
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t.conn.wants_write(),
        }
    }

    /// Pushes pending TLS records to the socket; `WouldBlock` when it is full.
    pub fn flush_records(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.flush_records(),
        }
    }
}

impl Tls {
    fn start(sock: TcpStream, session: &TlsSession) -> Result<Tls, String> {
        let conn = session.connection().map_err(|e| e.to_string())?;
        Ok(Tls { sock, conn })
    }

    fn flush_records(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut self.sock)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Plaintext into `buf`; `Ok(0)` when the server closed the connection.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // No plaintext left: decrypt whatever the socket has (WouldBlock when nothing).
            if self.conn.read_tls(&mut self.sock)? == 0 {
                return Ok(0);
            }
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // Records the session must answer (a key update) go out with the next flush.
            match self.flush_records() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
    }

    /// Takes up to [`TLS_PLAINTEXT_CHUNK_BYTES`] of `buf` once earlier records are out.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_records()?;
        let n = buf.len().min(TLS_PLAINTEXT_CHUNK_BYTES);
        let n = self.conn.writer().write(&buf[..n])?;
        match self.flush_records() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_records()
    }
}
