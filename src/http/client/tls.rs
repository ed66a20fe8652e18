//! TLS for `https://` calls: whom to trust (the system's CAs plus an optional CA file),
//! the handshake, and what a failure looks like (an error, a log line, a metric — never a
//! retry in plain text).

use super::error::HttpError;
use super::url::ParsedUrl;
use boltq_io::listener::Conn;
use boltq_shards::metrics::Counter;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use std::cell::OnceCell;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The `/metrics` counter of failed outbound TLS handshakes.
pub const TLS_ERRORS_METRIC: &str = "boltq_http_client_tls_errors_total";

/// Trust settings of one client.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM CAs trusted besides the system's (`messaging.http_client.ca_file`).
    pub ca_file: Option<PathBuf>,
    /// Counts failed handshakes; a detached counter when `None`.
    pub errors: Option<Counter>,
}

/// The client side of TLS for one `HttpClient`: the rustls configuration is built on the
/// first `https://` call, so plain-HTTP users never read the system's trust store.
pub(super) struct TlsClient {
    ca_file: Option<PathBuf>,
    errors: Counter,
    config: OnceCell<Arc<ClientConfig>>,
}

impl TlsClient {
    pub(super) fn new(options: TlsOptions) -> TlsClient {
        TlsClient {
            ca_file: options.ca_file,
            errors: options.errors.unwrap_or_default(),
            config: OnceCell::new(),
        }
    }

    /// TLS over `conn` for `url`, the certificate checked against the trusted CAs and the
    /// URL's host, within `timeout`.
    pub(super) async fn handshake(
        &self,
        url: &ParsedUrl,
        conn: Conn,
        timeout: Duration,
    ) -> Result<futures_rustls::client::TlsStream<Conn>, HttpError> {
        let result = self.try_handshake(url, conn, timeout).await;
        if let Err(e) = &result {
            self.errors.inc();
            log::warn!("[http-client] {url}: {e}");
        }
        result
    }

    async fn try_handshake(
        &self,
        url: &ParsedUrl,
        conn: Conn,
        timeout: Duration,
    ) -> Result<futures_rustls::client::TlsStream<Conn>, HttpError> {
        let config = self.config()?;
        let name = server_name(&url.host)?;
        boltq_io::tls::connect_as_client(config, name, &url.authority(), conn, timeout)
            .await
            .map_err(|e| HttpError::Tls(e.to_string()))
    }

    fn config(&self) -> Result<Arc<ClientConfig>, HttpError> {
        if let Some(c) = self.config.get() {
            return Ok(Arc::clone(c));
        }
        let built = client_config(self.ca_file.as_deref())
            .map_err(|e| HttpError::Tls(format!("TLS: {e}")))?;
        Ok(Arc::clone(self.config.get_or_init(|| built)))
    }
}

/// A rustls client trusting the system's CAs and those of `ca_file`.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_file {
        for cert in boltq_io::tls::read_certificates(path, "CA")? {
            roots
                .add(cert)
                .map_err(|e| format!("CA file {}: unusable certificate: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        return Err(
            "no trusted CA: the system store is empty and messaging.http_client.ca_file is unset"
                .to_string(),
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The name the certificate must carry: an IP literal or a DNS name.
fn server_name(host: &str) -> Result<ServerName<'static>, HttpError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(host.to_string())
        .map_err(|e| HttpError::Url(format!("{host:?} is not a TLS server name: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_take_ips_and_dns_names() {
        assert!(matches!(
            server_name("127.0.0.1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(server_name("::1"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(
            server_name("hooks.example"),
            Ok(ServerName::DnsName(_))
        ));
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let path = std::env::temp_dir().join(format!("boltq-empty-ca-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = client_config(Some(&path)).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains("no certificate"), "{err}");
    }
}
