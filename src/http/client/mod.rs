//! The outbound HTTP/1.1 client of the messaging plane: the operator's membership service
//! and the push webhook (spec/messaging-edge.md §5, §10).
//!
//! hyper's `client::conn::http1` does the protocol (request encoding, response parsing,
//! body framing); this module keeps what is ours to decide:
//! - `http://` and `https://`; TLS through rustls, trusting the system's CAs plus
//!   `messaging.http_client.ca_file`. A failed handshake is an error, a warning in the log
//!   and [`tls::TLS_ERRORS_METRIC`], never a retry in plain text; a redirect from https to
//!   http is refused.
//! - Limits: response heads and header counts bounded, the decoded body capped by the
//!   caller (an answer over the cap is an error, never a huge allocation).
//! - Keep-alive: a small pool of idle connections per host ([`pool`]). A connection that
//!   failed, or whose answer was not read to its end, is never pooled. A pooled connection
//!   the server has meanwhile closed fails before its answer, and the request is sent again
//!   once on a fresh connection (outbound receivers deduplicate; see §10.2).
//! - Redirects ([`redirect`]), one total timeout per call covering resolution, connecting,
//!   every redirect and the whole body; connecting alone also has its own shorter timeout.
//! - The socket is ours ([`io`]): hyper runs over the shard's streams and its connection
//!   task is spawned on the shard, with no second runtime.

mod body;
mod connect;
pub mod error;
mod io;
pub mod pool;
pub mod redirect;
pub mod request;
pub mod tls;
pub mod url;

#[cfg(test)]
pub(crate) mod test_server;
#[cfg(test)]
mod tests;

pub use body::STATUS_BODY_PREVIEW_BYTES_MAX;
pub use connect::{RESOLVED_ADDRS_MAX, RESPONSE_HEADERS_MAX, RESPONSE_HEAD_BYTES_MAX};
pub use error::HttpError;
pub use io::READ_BYTES_MAX;
pub use pool::{POOL_HOSTS_MAX, POOL_IDLE_MS_MAX, POOL_IDLE_PER_HOST_MAX};
pub use redirect::REDIRECTS_MAX;
pub use request::{HttpRequest, HttpResponse, Method, REQUEST_HEADERS_MAX};
pub use tls::{TlsOptions, TLS_ERRORS_METRIC};
pub use url::{parse_url, percent_encode_query, ParsedUrl, URL_BYTES_MAX};

use pool::{Pool, PoolKey, Sender};
use request::header_value;
use std::time::Duration;

/// Connect timeout unless [`HttpClient::with_connect_timeout`] says otherwise.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;

/// An answer as read off the wire, before success/redirect/error is decided.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    /// For non-2xx: at most [`STATUS_BODY_PREVIEW_BYTES_MAX`] bytes.
    body: Vec<u8>,
}

/// A failed exchange, and whether it failed before any answer arrived (then a pooled
/// connection was probably closed by the server meanwhile, and a retry is safe).
struct Failed {
    error: HttpError,
    before_answer: bool,
}

impl Failed {
    fn during_answer(error: HttpError) -> Failed {
        Failed {
            error,
            before_answer: false,
        }
    }
}

/// HTTP/1.1 client with a keep-alive pool, for one shard (not `Send`: each shard owns its
/// own).
pub struct HttpClient {
    connect_timeout: Duration,
    pool: Pool,
    tls: tls::TlsClient,
}

impl HttpClient {
    /// A client keeping at most `max_idle_per_host` idle connections per host and port
    /// (0 = no keep-alive; capped at [`POOL_IDLE_PER_HOST_MAX`]), trusting the system's CAs.
    pub fn new(max_idle_per_host: usize) -> HttpClient {
        HttpClient {
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            pool: Pool::new(max_idle_per_host),
            tls: tls::TlsClient::new(TlsOptions::default()),
        }
    }

    /// Bounds each TCP connect and TLS handshake (the total timeout of a call still
    /// applies). Zero keeps the current value.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> HttpClient {
        if !timeout.is_zero() {
            self.connect_timeout = timeout;
        }
        self
    }

    /// Whom `https://` calls trust, and where their failures are counted.
    pub fn with_tls(mut self, options: TlsOptions) -> HttpClient {
        self.tls = tls::TlsClient::new(options);
        self
    }

    /// Idle connections currently pooled, all hosts together.
    pub fn idle_connections(&self) -> usize {
        self.pool.len()
    }

    /// Sends `req` and returns its 2xx answer, following redirects, all within `timeout`.
    /// A body over `body_bytes_max` is [`HttpError::TooLarge`]; any other final status is
    /// [`HttpError::Status`].
    pub async fn request(
        &self,
        req: &HttpRequest,
        timeout: Duration,
        body_bytes_max: usize,
    ) -> Result<HttpResponse, HttpError> {
        boltq_shards::timeout(timeout, self.follow(req, body_bytes_max))
            .await
            .unwrap_or(Err(HttpError::Timeout))
    }

    async fn follow(
        &self,
        req: &HttpRequest,
        body_bytes_max: usize,
    ) -> Result<HttpResponse, HttpError> {
        let mut redirected: Option<HttpRequest> = None;
        let mut hops = 0;
        loop {
            let current = redirected.as_ref().unwrap_or(req);
            let answer = self.round_trip(current, body_bytes_max).await?;
            if (200..300).contains(&answer.status) {
                return Ok(HttpResponse {
                    status: answer.status,
                    headers: answer.headers,
                    body: answer.body,
                });
            }
            if hops < REDIRECTS_MAX {
                let location = header_value(&answer.headers, "location");
                if let Some(next) = redirect::redirect(current, answer.status, location)? {
                    hops += 1;
                    redirected = Some(next);
                    continue;
                }
            }
            return Err(HttpError::Status {
                code: answer.status,
                body_preview: body::body_preview(&answer.body),
            });
        }
    }

    /// One request and its answer: on a pooled connection when there is one (sent again on
    /// a fresh one if the pooled one turns out closed), else on a new connection.
    async fn round_trip(
        &self,
        req: &HttpRequest,
        body_bytes_max: usize,
    ) -> Result<Answer, HttpError> {
        // Checked before any connection is taken: a refused header is the caller's error.
        request::to_hyper(req)?;
        let key: PoolKey = (req.url.tls, req.url.host.clone(), req.url.port);
        if let Some(sender) = self.pool.take(&key) {
            match self.exchange(sender, &key, req, body_bytes_max).await {
                Ok(answer) => return Ok(answer),
                Err(failed) if failed.before_answer => {
                    log::debug!(
                        "pooled connection to {} failed ({}); reconnecting",
                        req.url,
                        failed.error
                    );
                }
                Err(failed) => return Err(failed.error),
            }
        }
        let sender = connect::open(&req.url, self.connect_timeout, &self.tls).await?;
        self.exchange(sender, &key, req, body_bytes_max)
            .await
            .map_err(|f| f.error)
    }

    /// Sends `req` on `sender`, reads the answer, and pools the connection again if it can
    /// carry another request.
    async fn exchange(
        &self,
        mut sender: Sender,
        key: &PoolKey,
        req: &HttpRequest,
        body_bytes_max: usize,
    ) -> Result<Answer, Failed> {
        let mut response = send(&mut sender, req).await?;
        let status = response.status().as_u16();
        let success = (200..300).contains(&status);
        let cap = if success {
            body_bytes_max
        } else {
            STATUS_BODY_PREVIEW_BYTES_MAX
        };
        let declared = hyper::body::Body::size_hint(response.body()).exact();
        if success && declared.is_some_and(|n| n > cap as u64) {
            return Err(Failed::during_answer(HttpError::TooLarge {
                bytes_max: cap,
            }));
        }
        let headers = header_pairs(response.headers());
        let reusable = pool::reusable(&response);
        let mut body = Vec::new();
        match body::read_capped(response.body_mut(), &mut body, cap).await {
            Ok(()) if reusable => self.pool.put(key, sender),
            Ok(()) => {}
            // An unsuccessful answer keeps the start of its body; the rest is left unread
            // and the connection closed.
            Err(HttpError::TooLarge { .. }) if !success => {}
            Err(e) => return Err(Failed::during_answer(e)),
        }
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

/// Sends `req` once `sender`'s connection is free, up to the answer's head.
async fn send(
    sender: &mut Sender,
    req: &HttpRequest,
) -> Result<hyper::Response<hyper::body::Incoming>, Failed> {
    if let Err(e) = sender.ready().await {
        return Err(Failed {
            error: HttpError::from_hyper(&e),
            before_answer: true,
        });
    }
    let hyper_req = request::to_hyper(req).map_err(Failed::during_answer)?;
    sender.try_send_request(hyper_req).await.map_err(|mut e| {
        let unsent = e.take_message().is_some();
        let e = e.into_error();
        // Unsent, or sent and the connection closed or reset with no answer at all: what a
        // server closing an idle connection looks like (a reset when our request met the
        // closed socket).
        Failed {
            error: HttpError::from_hyper(&e),
            before_answer: unsent
                || e.is_canceled()
                || e.is_incomplete_message()
                || e.is_closed()
                || reset_by_peer(&e),
        }
    })
}

/// True when `e` comes from the peer closing or resetting the socket under us.
fn reset_by_peer(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        source = cause.source();
    }
    false
}

/// The answer's headers as text pairs (names lower-case, values trimmed).
fn header_pairs(headers: &hyper::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            let value = String::from_utf8_lossy(v.as_bytes()).trim().to_string();
            (n.as_str().to_string(), value)
        })
        .collect()
}
