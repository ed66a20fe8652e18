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

    /// Takes up to [`TLS_PLAINTEXT_CHUNK_BYTES`] of `buf` (the session takes at most its
    /// buffer limit, 64 KiB by default) once earlier records are out.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_records()?;
        let n = buf.len().min(TLS_PLAINTEXT_CHUNK_BYTES);
        let n = self.conn.writer().write(&buf[..n])?;
        if n == 0 && !buf.is_empty() {
            // The session's buffer is full (plaintext written while the handshake is still
            // running waits there): not a closed connection, so "try again later".
            return Err(io::ErrorKind::WouldBlock.into());
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use boltq::client::ClientTls;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A TLS echo server on a loopback port (one connection, blocking rustls stream).
    fn echo_server() -> std::net::SocketAddr {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (sock, _) = l.accept().unwrap();
            let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut s = rustls::StreamOwned::new(conn, sock);
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        addr
    }

    #[test]
    fn tls_on_a_nonblocking_socket_moves_megabytes_both_ways() {
        let addr = echo_server();
        let tls = ClientTls {
            insecure: true,
            ..Default::default()
        };
        let session = TlsSession::new(&tls, "localhost:1").unwrap();
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_nonblocking(true).unwrap();
        // No blocking handshake: it happens while writing and reading below.
        let mut s = Stream::start_tls(sock, &session).unwrap();
        let mut rng = boltq_io::testutil::Rng::new(5);
        let sent: Vec<u8> = (0..3 * 1024 * 1024).map(|_| rng.below(256) as u8).collect();
        let (mut out_pos, mut got) = (0, Vec::new());
        let mut buf = vec![0u8; 100_000];
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < sent.len() {
            assert!(Instant::now() < deadline, "stuck at {} bytes", got.len());
            let mut progressed = false;
            if out_pos < sent.len() {
                match s.write(&sent[out_pos..]) {
                    Ok(n) => {
                        assert!(n > 0 && n <= TLS_PLAINTEXT_CHUNK_BYTES);
                        out_pos += n;
                        progressed = true;
                    }
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
                }
            } else if s.wants_write() {
                match s.flush_records() {
                    Ok(()) => progressed = true,
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
                }
            }
            match s.read(&mut buf) {
                Ok(0) => panic!("closed after {} bytes", got.len()),
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    progressed = true;
                }
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
            if !progressed {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(got == sent, "echo differs");
        assert!(!s.wants_write());
    }

    #[test]
    fn a_plain_stream_is_the_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut server, _) = l.accept().unwrap();
        let mut s = Stream::new(c, None).unwrap();
        assert!(matches!(s, Stream::Plain(_)));
        s.write_all(b"abc").unwrap();
        assert!(!s.wants_write());
        s.flush_records().unwrap();
        let mut b = [0u8; 3];
        server.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"abc");
    }
}
