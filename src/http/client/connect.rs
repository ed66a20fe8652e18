//! Opening a connection: name resolution, TCP, TLS for `https://`, and the hyper
//! handshake whose connection task runs on the shard.

use super::error::HttpError;
use super::io::{HyperIo, Stream};
use super::pool::Sender;
use super::tls::TlsClient;
use super::url::ParsedUrl;
use boltq_io::connect::connect_tcp;
use boltq_io::listener::Conn;
use std::net::SocketAddr;
use std::time::Duration;

/// Longest response head (status line and headers), in bytes.
pub const RESPONSE_HEAD_BYTES_MAX: usize = 64 * 1024;
/// Most headers in one response.
pub const RESPONSE_HEADERS_MAX: usize = 64;
/// Most resolved addresses tried for one host name.
pub const RESOLVED_ADDRS_MAX: usize = 4;

/// A new connection to `url`, ready for a request. TCP and the TLS handshake each get
/// `connect_timeout`.
pub(super) async fn open(
    url: &ParsedUrl,
    connect_timeout: Duration,
    tls: &TlsClient,
) -> Result<Sender, HttpError> {
    let conn = connect_any(url, connect_timeout).await?;
    let stream = if url.tls {
        Stream::Tls(Box::new(tls.handshake(url, conn, connect_timeout).await?))
    } else {
        Stream::Plain(conn)
    };
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_headers(RESPONSE_HEADERS_MAX)
        .max_header_size(RESPONSE_HEAD_BYTES_MAX)
        .handshake(HyperIo::new(stream))
        .await
        .map_err(|e| HttpError::Io(format!("{}: {e}", url.authority())))?;
    let authority = url.authority();
    // Ends when the connection closes or its sender is dropped (out of the pool).
    boltq_shards::spawn(async move {
        if let Err(e) = connection.await {
            log::debug!("[http-client] connection to {authority} ended: {e}");
        }
    })
    .detach();
    Ok(sender)
}

async fn connect_any(url: &ParsedUrl, timeout: Duration) -> Result<Conn, HttpError> {
    let addrs = resolve(&url.host, url.port).await?;
    let mut last = String::new();
    for addr in addrs {
        match connect_tcp(addr, timeout).await {
            Ok(conn) => return Ok(conn),
            Err(e) => last = e.to_string(),
        }
    }
    Err(HttpError::Connect(format!("{}: {last}", url.authority())))
}

/// Addresses for `host` (`boltq_io::connect::resolve`), at most `RESOLVED_ADDRS_MAX`.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, HttpError> {
    boltq_io::connect::resolve(host, port, RESOLVED_ADDRS_MAX)
        .await
        .map_err(|e| HttpError::Connect(e.to_string()))
}
