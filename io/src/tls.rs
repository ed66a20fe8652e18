//! TLS for the listeners (`server.tls.*`): PEM files loaded into a rustls server
//! configuration (ring backend, platform.md §6), and the server side of one connection.
//!
//! The handshake of an accepted connection runs on that connection's first read or write,
//! in the task that serves it, not in the accept loop: a client that connects and then says
//! nothing (or trickles its hello) would otherwise stop the shard from accepting anyone else
//! for as long as it likes. It is bounded by [`HANDSHAKE_TIMEOUT`]; a failed or timed-out
//! handshake is logged at debug and ends that connection only.

use futures_lite::{AsyncRead, AsyncWrite};
use futures_rustls::rustls::server::WebPkiClientVerifier;
use futures_rustls::rustls::{self, RootCertStore, ServerConfig};
use futures_rustls::server::TlsStream;
use futures_rustls::{Accept, TlsAcceptor};
use glommio::net::TcpStream;
use glommio::timer::Timer;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Longest a client may take to complete the handshake after connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Server-side TLS material, loaded once and shared by every shard's listeners.
#[derive(Clone)]
pub struct TlsConfig {
    acceptor: TlsAcceptor,
    client_certificates_required: bool,
}

impl TlsConfig {
    /// Loads the certificate chain (`cert_file`, leaf first) and its private key (`key_file`,
    /// PKCS#8, PKCS#1 or SEC1 PEM). With `client_ca_file`, every client must present a
    /// certificate that chains to one of its CAs (mTLS); without it, clients are anonymous.
    ///
    /// Errors are one line naming the file and what is wrong with it.
    pub fn load(
        cert_file: &Path,
        key_file: &Path,
        client_ca_file: Option<&Path>,
    ) -> Result<TlsConfig, String> {
        let chain = read_certificates(cert_file, "certificate")?;
        let key = read_private_key(key_file)?;
        // Name the provider instead of relying on a process default, so that another crate
        // enabling a second backend can never change (or break) what we use.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?;
        let builder = match client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca_file) => {
                let roots = root_store(ca_file)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| format!("CA file {}: {e}", ca_file.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
                "private key file {} does not match the certificate in {}",
                key_file.display(),
                cert_file.display()
            ),
            other => format!(
                "certificate file {} with private key file {}: {other}",
                cert_file.display(),
                key_file.display()
            ),
        })?;
        Ok(TlsConfig {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            client_certificates_required: client_ca_file.is_some(),
        })
    }

    /// Whether clients must present a certificate (a CA file was given).
    pub fn client_certificates_required(&self) -> bool {
        self.client_certificates_required
    }

    /// Starts the server side of a connection; the handshake itself runs on first I/O.
    pub(crate) fn start(&self, stream: TcpStream, peer: Option<SocketAddr>) -> TlsConn {
        TlsConn {
            state: State::Handshaking {
                accept: self.acceptor.accept(stream),
                deadline: Timer::new(HANDSHAKE_TIMEOUT),
            },
            peer,
        }
    }
}

/// The client side of TLS over `conn`: the peer's certificate checked against `config`'s
/// trusted CAs and `name`, within `timeout`. Errors name `peer` (as the log should show it)
/// and say whether the handshake failed or ran out of time.
pub async fn connect_as_client(
    config: Arc<rustls::ClientConfig>,
    name: rustls_pki_types::ServerName<'static>,
    peer: &str,
    conn: crate::listener::Conn,
    timeout: Duration,
) -> io::Result<futures_rustls::client::TlsStream<crate::listener::Conn>> {
    let handshake = async {
        Some(
            futures_rustls::TlsConnector::from(config)
                .connect(name, conn)
                .await,
        )
    };
    let expiry = async {
        Timer::new(timeout).await;
        None
    };
    match futures_lite::future::or(handshake, expiry).await {
        Some(Ok(stream)) => Ok(stream),
        Some(Err(e)) => Err(io::Error::new(
            e.kind(),
            format!("TLS handshake with {peer} failed: {e}"),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "TLS handshake with {peer} not done within {} ms",
                timeout.as_millis()
            ),
        )),
    }
}

/// Every certificate in the PEM file at `path`, in file order. `what` names the file's role
/// in errors ("certificate", "CA").
pub fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = read_file(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} file {}: bad PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} file {} holds no certificate (no -----BEGIN CERTIFICATE----- block)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key in the PEM file at `path`.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let text = read_file(path, "private key")?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        pem::Error::NoItemsFound => format!(
            "private key file {} holds no private key (expected an unencrypted PKCS#8, \
             PKCS#1 RSA or SEC1 EC PEM block)",
            path.display()
        ),
        other => format!("private key file {}: bad PEM: {other}", path.display()),
    })
}

/// The CAs of the PEM file at `path` as trust anchors.
pub fn root_store(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(path, "CA")? {
        roots
            .add(cert)
            .map_err(|e| format!("CA file {}: unusable certificate: {e}", path.display()))?;
    }
    Ok(roots)
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {what} file {}: {e}", path.display()))
}

/// The server side of one TLS connection.
pub(crate) struct TlsConn {
    state: State,
    /// Taken at accept: the stream is inside the handshake future until it completes.
    peer: Option<SocketAddr>,
}

enum State {
    Handshaking {
        accept: Accept<TcpStream>,
        deadline: Timer,
    },
    Established(TlsStream<TcpStream>),
    /// The handshake failed or timed out; the socket is closed.
    Failed,
}

impl TlsConn {
    /// Shuts the socket down in both directions (see `Conn::abort`).
    pub(crate) async fn abort(&self) {
        if let State::Established(s) = &self.state {
            let _ = s.get_ref().0.shutdown(std::net::Shutdown::Both).await;
        }
    }

    /// The socket under an established session (`None` while handshaking or failed).
    pub(crate) fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        use std::os::unix::io::AsRawFd;
        match &self.state {
            State::Established(s) => Some(s.get_ref().0.as_raw_fd()),
            State::Handshaking { .. } | State::Failed => None,
        }
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.peer
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "peer address unknown"))
    }

    /// Drives the handshake; ready with the established stream, or with the error that ended
    /// the connection.
    fn poll_established(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<&mut TlsStream<TcpStream>>> {
        if let State::Handshaking { accept, deadline } = &mut self.state {
            let failure = match Pin::new(accept).poll(cx) {
                Poll::Ready(Ok(stream)) => {
                    self.state = State::Established(stream);
                    None
                }
                Poll::Ready(Err(e)) => Some(e),
                Poll::Pending => match Pin::new(deadline).poll(cx) {
                    Poll::Ready(_) => Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("not completed within {} s", HANDSHAKE_TIMEOUT.as_secs()),
                    )),
                    Poll::Pending => return Poll::Pending,
                },
            };
            if let Some(e) = failure {
                // Scanners, plain-text clients and clients that distrust our certificate all
                // end here: common and harmless, so not worth more than debug.
                log::debug!("TLS handshake with {} failed: {e}", self.describe_peer());
                self.state = State::Failed; // drops the socket now, not when the task ends
                return Poll::Ready(Err(e));
            }
        }
        match &mut self.state {
            State::Established(stream) => Poll::Ready(Ok(stream)),
            State::Failed => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "TLS handshake failed",
            ))),
            State::Handshaking { .. } => unreachable!("handled above"),
        }
    }

    fn describe_peer(&self) -> String {
        self.peer
            .map_or_else(|| "an unknown peer".to_string(), |p| p.to_string())
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let stream = match self.get_mut().poll_established(cx) {
            Poll::Ready(Ok(stream)) => stream,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        // rustls may still hold bytes of an earlier write that the socket did not take (a
        // write returns once rustls has them). A caller that now waits for the peer's next
        // request would otherwise hold back the reply the peer is waiting for, so keep
        // pushing them out while reading; a pending flush just registers for writability.
        if let Poll::Ready(Err(e)) = Pin::new(&mut *stream).poll_flush(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().poll_established(cx) {
            Poll::Ready(Ok(stream)) => Pin::new(stream).poll_write(cx, buf),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Established(stream) => Pin::new(stream).poll_flush(cx),
            // Nothing was written before the handshake completed, so there is nothing to
            // flush; and after a failure there is no stream left.
            State::Handshaking { .. } | State::Failed => Poll::Ready(Ok(())),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            // Sends close_notify, then shuts the socket for writing.
            State::Established(stream) => Pin::new(stream).poll_close(cx),
            State::Handshaking { .. } | State::Failed => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listener::{Listener, SharedListener};
    use crate::testutil::TempDir;
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    use std::io::{Read, Write};
    use std::os::fd::RawFd;

    const REPLY_BYTES: usize = 1 << 20;

    fn set_buffer(fd: RawFd, option: libc::c_int, bytes: libc::c_int) {
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local; `fd` is an
        // open socket for the duration of the call.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "setsockopt: {}", io::Error::last_os_error());
    }

    /// Reads the whole reply slowly, then sends one byte (the "next request").
    fn slow_client(addr: SocketAddr, ca: &Path) -> Result<usize, String> {
        let roots = root_store(ca)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let conn =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let sock = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        set_buffer(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            libc::SO_RCVBUF,
            16 * 1024,
        );
        let mut tls = rustls::StreamOwned::new(conn, sock);
        let mut got = 0;
        let mut chunk = [0u8; 16 * 1024];
        while got < REPLY_BYTES {
            match tls.read(&mut chunk) {
                Ok(0) => return Err(format!("closed after {got} bytes")),
                Ok(n) => got += n,
                Err(e) => return Err(format!("after {got} bytes: {e}")),
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        tls.write_all(b"k").map_err(|e| e.to_string())?;
        tls.flush().map_err(|e| e.to_string())?;
        Ok(got)
    }

    /// The protocol handlers write a reply and then wait for the next request without a
    /// flush. With a full socket, rustls keeps the tail of the reply; reading must push it
    /// out, or the client waits for it forever while the server waits for the client.
    #[test]
    fn a_reply_tail_left_in_rustls_goes_out_while_the_connection_reads() {
        let dir = TempDir::new("tls-tail");
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let tls = TlsConfig::load(&cert, &key, None).unwrap();
        let shared = SharedListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        // Accepted sockets inherit a small, fixed send buffer: the kernel then signals
        // writability with little room, so writes end with bytes left inside rustls.
        let fd = shared.dup_fd().unwrap();
        set_buffer(fd, libc::SO_SNDBUF, 8 * 1024);
        // SAFETY: `fd` is our own duplicate, closed once here.
        unsafe { libc::close(fd) };
        let addr = shared.local_addr().unwrap();
        let client = std::thread::spawn(move || slow_client(addr, &cert));
        let served = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let listener = Listener::for_shard(&shared, Some(&tls)).unwrap();
                let mut conn = listener.accept().await.unwrap();
                conn.write_all(&vec![7u8; REPLY_BYTES]).await.unwrap();
                let mut next = [0u8; 1];
                conn.read(&mut next).await.map(|n| next[..n].to_vec())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(client.join().unwrap(), Ok(REPLY_BYTES));
        assert_eq!(served.unwrap(), b"k");
    }

    #[test]
    fn load_names_the_file_and_the_problem() {
        let dir = TempDir::new("tls-load");
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".to_string()]).unwrap();
        let p = |name: &str| dir.path().join(name);
        std::fs::write(p("a.pem"), a.cert.pem()).unwrap();
        std::fs::write(p("a.key"), a.signing_key.serialize_pem()).unwrap();
        std::fs::write(p("b.key"), b.signing_key.serialize_pem()).unwrap();
        std::fs::write(p("junk.pem"), "hello\n").unwrap();
        assert!(TlsConfig::load(&p("a.pem"), &p("a.key"), None).is_ok());
        let err = |cert: &str, key: &str, ca: Option<&str>| {
            let ca = ca.map(p);
            TlsConfig::load(&p(cert), &p(key), ca.as_deref())
                .err()
                .unwrap()
        };
        let e = err("none.pem", "a.key", None);
        assert!(
            e.starts_with("cannot read certificate file ") && e.contains("none.pem"),
            "{e}"
        );
        let e = err("junk.pem", "a.key", None);
        assert!(e.contains("junk.pem holds no certificate"), "{e}");
        let e = err("a.pem", "a.pem", None);
        assert!(e.contains("a.pem holds no private key"), "{e}");
        let e = err("a.pem", "b.key", None);
        assert!(e.contains("b.key does not match the certificate in"), "{e}");
        let e = err("a.pem", "a.key", Some("junk.pem"));
        assert!(
            e.starts_with("CA file ") && e.contains("holds no certificate"),
            "{e}"
        );
        let e = err("a.pem", "a.key", Some("none.pem"));
        assert!(e.starts_with("cannot read CA file "), "{e}");
        let mtls = TlsConfig::load(&p("a.pem"), &p("a.key"), Some(&p("a.pem"))).unwrap();
        assert!(mtls.client_certificates_required());
    }
}
