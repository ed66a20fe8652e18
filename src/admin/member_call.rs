//! Calls from this node to another member's admin API: a join or leave through a seed, and
//! the numbers only each node has (its gateway's), gathered for a cluster-wide answer.
//!
//! A member serves its admin API the way this node does (members share `server.tls` and
//! `security.api_key`: docs/clustering.md), so a call speaks HTTPS when this node serves
//! TLS, trusting `server.tls.ca_file` besides the system's CAs, and presents this node's
//! API key when one is set. Each call opens its own connection: these calls are rare (an
//! operator's request, a join), and a pool would keep sockets to every member open for
//! nothing.

use crate::config::Config;
use crate::http::client::{parse_url, HttpClient, HttpRequest, Method, TlsOptions};
use std::path::PathBuf;
use std::time::Duration;

/// How this node reaches its members' admin APIs.
#[derive(Debug, Clone)]
pub struct MemberCall {
    https: bool,
    ca_file: Option<PathBuf>,
    api_key: Option<String>,
}

impl MemberCall {
    pub fn from_config(config: &Config) -> MemberCall {
        let tls = &config.server.tls;
        MemberCall {
            https: tls.enabled,
            ca_file: Some(tls.ca_file.clone()).filter(|p| !p.as_os_str().is_empty()),
            api_key: Some(config.security.api_key.clone()).filter(|k| !k.is_empty()),
        }
    }

    /// GETs `path` of the member whose admin API listens at `addr` (`host:port`); its
    /// answer's body when it is a 2xx of at most `answer_bytes_max` bytes.
    pub async fn get(
        &self,
        addr: &str,
        path: &str,
        timeout_ms: u64,
        answer_bytes_max: usize,
    ) -> Result<Vec<u8>, String> {
        self.call(
            addr,
            Method::Get,
            path,
            Vec::new(),
            timeout_ms,
            answer_bytes_max,
        )
        .await
    }

    /// POSTs the JSON `body` to `path` of the member at `addr`; its answer's body as
    /// [`MemberCall::get`].
    pub async fn post(
        &self,
        addr: &str,
        path: &str,
        body: &serde_json::Value,
        timeout_ms: u64,
        answer_bytes_max: usize,
    ) -> Result<Vec<u8>, String> {
        let body = body.to_string().into_bytes();
        self.call(addr, Method::Post, path, body, timeout_ms, answer_bytes_max)
            .await
    }

    async fn call(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Vec<u8>,
        timeout_ms: u64,
        answer_bytes_max: usize,
    ) -> Result<Vec<u8>, String> {
        let scheme = if self.https { "https" } else { "http" };
        let url = parse_url(&format!("{scheme}://{addr}{path}")).map_err(|e| e.to_string())?;
        let mut req = HttpRequest::get(url);
        req.method = method;
        if !body.is_empty() {
            req.headers
                .push(("Content-Type".into(), "application/json".into()));
            req.body = body;
        }
        if let Some(key) = &self.api_key {
            req.headers.push(("X-API-Key".into(), key.clone()));
        }
        let client = HttpClient::new(0).with_tls(TlsOptions {
            ca_file: self.ca_file.clone(),
            errors: None,
        });
        client
            .request(&req, Duration::from_millis(timeout_ms), answer_bytes_max)
            .await
            .map(|answer| answer.body)
            .map_err(|e| e.to_string())
    }
}
