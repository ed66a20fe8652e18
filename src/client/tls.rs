//! TLS for the blocking client: rustls's own blocking stream over a `std` socket (ring
//! backend, like the server).
//!
//! Trust follows v1's CLI: the CAs of `ca_file` when given, else the system's store; and
//! `insecure` skips certificate verification (the handshake's signatures are still checked,
//! so the session key is bound to whatever certificate the server sent, just not to a
//! trusted one).

use super::error::{ClientError, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// TLS settings of a connection (`ClientOptions::tls`). Build with `..Default::default()`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientTls {
    /// PEM file of the CAs that may sign the server's certificate. `None`: the system's
    /// trust store.
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate. Only for tests and throwaway setups: anyone on the
    /// path can then read and change the traffic.
    pub insecure: bool,
    /// Name the certificate must carry (and SNI sends). `None`: the host part of the address
    /// given to `connect` (a DNS name or an IP address).
    pub server_name: Option<String>,
    /// Certificate to present, for servers that require one (`server.tls.ca_file`).
    pub client_certificate: Option<ClientCertificate>,
}

/// A client certificate chain (leaf first) and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// The connection under the protocol: plain, or TLS over the same socket.
pub(super) enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS session is a few KiB and the plain case should not pay for it.
    Tls(Box<rustls::StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// Bounds each blocking read of the socket (TLS records are read through it too).
    pub(super) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A TLS setup checked before any connection is made: CA and certificate files are read
/// and the server name settled, so a mistake there is reported as such. Public for callers
/// that drive their own (non-blocking) sockets, such as boltq-bench's event loop.
pub struct TlsSession {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
}

impl TlsSession {
    /// The setup `tls` describes for a server at `addr` (`host:port`).
    pub fn new(tls: &ClientTls, addr: &str) -> Result<TlsSession> {
        let name = tls
            .server_name
            .clone()
            .unwrap_or_else(|| host_of(addr).to_string());
        let server_name = ServerName::try_from(name.clone()).map_err(|_| {
            ClientError::InvalidArgument(format!(
                "TLS server name {name:?} is neither a DNS name nor an IP address"
            ))
        })?;
        Ok(TlsSession {
            config: Arc::new(client_config(tls)?),
            server_name,
        })
    }

    /// A fresh client session (not yet handshaken) for one connection.
    pub fn connection(&self) -> Result<ClientConnection> {
        ClientConnection::new(Arc::clone(&self.config), self.server_name.clone())
            .map_err(|e| ClientError::Io(io::Error::other(format!("TLS setup: {e}"))))
    }

    /// Runs the handshake on a connected socket (whose read and write timeouts bound it), so
    /// that a certificate problem is reported by `connect` rather than by the first request.
    ///
    /// With TLS 1.3 a server that refuses our client certificate says so only after the
    /// client's side of the handshake is done; that refusal arrives as an I/O error on the
    /// first request instead.
    pub(super) fn handshake(self, socket: TcpStream) -> Result<Stream> {
        let conn = self.connection()?;
        let mut stream = rustls::StreamOwned::new(conn, socket);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Stream::Tls(Box::new(stream)))
    }
}

fn client_config(tls: &ClientTls) -> Result<ClientConfig> {
    let bad_file = ClientError::InvalidArgument;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Io(io::Error::other(format!("TLS setup: {e}"))))?;
    let builder = if tls.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCertificate { provider }))
    } else {
        let roots = match &tls.ca_file {
            Some(path) => boltq_io::tls::root_store(path).map_err(bad_file)?,
            None => system_roots()?,
        };
        builder.with_root_certificates(roots)
    };
    match &tls.client_certificate {
        None => Ok(builder.with_no_client_auth()),
        Some(c) => {
            let chain =
                boltq_io::tls::read_certificates(&c.cert_file, "certificate").map_err(bad_file)?;
            let key = boltq_io::tls::read_private_key(&c.key_file).map_err(bad_file)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                ClientError::InvalidArgument(format!(
                    "client certificate {} with key {}: {e}",
                    c.cert_file.display(),
                    c.key_file.display()
                ))
            })
        }
    }
}

/// The operating system's trusted CAs. Unreadable entries are skipped as long as some load
/// (a system store often holds a few certificates that do not parse).
fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (_added, _skipped) = roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_string(), |e| e.to_string());
        return Err(ClientError::InvalidArgument(format!(
            "TLS: no trusted CA certificates in the system store ({why}); give a CA file"
        )));
    }
    Ok(roots)
}

/// The host of `host:port`, `[v6]:port` or a bare host.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 address, no port.
        Some((host, _)) if !host.contains(':') => host,
        _ => addr,
    }
}

/// `ClientTls::insecure`: any certificate is accepted, but the handshake signatures are
/// verified with it, as without this option.
#[derive(Debug)]
struct AnyServerCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn server_name_defaults_to_the_host_of_the_address() {
        assert_eq!(host_of("localhost:9091"), "localhost");
        assert_eq!(host_of("127.0.0.1:9091"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9091"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("queue.example.com"), "queue.example.com");
    }
}
