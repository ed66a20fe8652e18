//! Keep-alive: a small pool of idle connections per scheme, host and port, newest first.

use bytes::Bytes;
use http_body_util::Full;
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most distinct hosts with idle connections in one pool.
pub const POOL_HOSTS_MAX: usize = 64;
/// Largest `max_idle_per_host` accepted by [`super::HttpClient::new`].
pub const POOL_IDLE_PER_HOST_MAX: usize = 1024;
/// An idle pooled connection older than this is closed instead of reused.
pub const POOL_IDLE_MS_MAX: u64 = 90_000;

/// The sending half of one HTTP/1.1 connection; its connection task runs on the shard.
pub(super) type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// TLS or not, host, port.
pub(super) type PoolKey = (bool, String, u16);

/// Whether the connection that carried `response` can carry another request once its body
/// is read: HTTP/1.1, no `Connection: close`, and a body that ends before the connection
/// (a length, chunked, or no body by its status).
pub(super) fn reusable<B>(response: &hyper::Response<B>) -> bool {
    let headers = response.headers();
    let close = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("close"));
    let status = response.status().as_u16();
    let framed = headers.contains_key(hyper::header::CONTENT_LENGTH)
        || headers.contains_key(hyper::header::TRANSFER_ENCODING)
        || status == 204
        || status == 304;
    response.version() == hyper::Version::HTTP_11 && !close && framed
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// Idle connections of one client (one shard; no borrow is held across an `.await`).
pub(super) struct Pool {
    max_idle_per_host: usize,
    idle: RefCell<HashMap<PoolKey, Vec<Idle>>>,
}

impl Pool {
    pub(super) fn new(max_idle_per_host: usize) -> Pool {
        Pool {
            max_idle_per_host: max_idle_per_host.min(POOL_IDLE_PER_HOST_MAX),
            idle: RefCell::new(HashMap::new()),
        }
    }

    /// Idle connections pooled, all hosts together.
    pub(super) fn len(&self) -> usize {
        self.idle.borrow().values().map(Vec::len).sum()
    }

    /// The newest idle connection to `key` that is neither too old nor closed.
    pub(super) fn take(&self, key: &PoolKey) -> Option<Sender> {
        let mut pool = self.idle.borrow_mut();
        let idle = pool.get_mut(key)?;
        let idle_max = Duration::from_millis(POOL_IDLE_MS_MAX);
        idle.retain(|i| i.since.elapsed() < idle_max && !i.sender.is_closed());
        let sender = idle.pop().map(|i| i.sender);
        if idle.is_empty() {
            pool.remove(key);
        }
        sender
    }

    /// Keeps `sender` for the next call to `key`, if there is room and it can carry one.
    pub(super) fn put(&self, key: &PoolKey, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut pool = self.idle.borrow_mut();
        if !pool.contains_key(key) && pool.len() >= POOL_HOSTS_MAX {
            return;
        }
        let idle = pool.entry(key.clone()).or_default();
        if idle.len() < self.max_idle_per_host {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
        if idle.is_empty() {
            pool.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(version: hyper::Version, status: u16, headers: &[(&str, &str)]) -> bool {
        let mut b = hyper::Response::builder().version(version).status(status);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        reusable(&b.body(()).unwrap())
    }

    #[test]
    fn only_framed_http_1_1_answers_without_close_keep_their_connection() {
        use hyper::Version;
        assert!(answer(Version::HTTP_11, 200, &[("content-length", "2")]));
        assert!(answer(
            Version::HTTP_11,
            200,
            &[("transfer-encoding", "chunked")]
        ));
        assert!(answer(Version::HTTP_11, 204, &[]));
        assert!(
            !answer(Version::HTTP_11, 200, &[]),
            "framed by the connection's end"
        );
        assert!(!answer(Version::HTTP_10, 200, &[("content-length", "2")]));
        assert!(!answer(
            Version::HTTP_11,
            200,
            &[("content-length", "2"), ("connection", "keep-alive, Close")]
        ));
    }
}
