//! The server's own view of a run (`--http host:port`): `/metrics` is scraped before the
//! measured phase and after it, and the report gets the deltas of the series below (with
//! rates per second over the time between the two scrapes) and the resident memory after.
//!
//! A small blocking HTTP/1.1 GET over a std socket rather than an HTTP client crate: one
//! request per scrape, `Connection: close`, the whole answer bounded by
//! [`RESPONSE_BYTES_MAX`] and every socket step by [`HTTP_TIMEOUT_MS`]. Parsing the answer
//! and the Prometheus text is pure ([`parse_response`], [`parse_metrics`]).

use super::transport::Stream;
use boltq::client::{ClientTls, TlsSession};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest `/metrics` answer read (headers and body). A server with the most per-queue series
/// it exports writes well under 1 MiB.
pub const RESPONSE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Bound on connecting, on each write and on each read of a scrape.
pub const HTTP_TIMEOUT_MS: u64 = 5_000;
/// Headers of the answer parsed at most.
const HEADERS_MAX: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Only grows: reported as delta and per second.
    Counter,
    /// A level: reported before, after and as delta.
    Gauge,
}

/// What the report calls a series, the metric it is read from, and how it is reported.
const SERIES: [(&str, &str, Kind); 11] = [
    (
        "messages_published",
        "boltq_messages_published",
        Kind::Counter,
    ),
    (
        "messages_consumed",
        "boltq_messages_consumed",
        Kind::Counter,
    ),
    ("messages_acked", "boltq_messages_acked", Kind::Counter),
    ("pushes", "boltq_pushes_total", Kind::Counter),
    ("gateway_sends", "boltq_gateway_sends_total", Kind::Counter),
    (
        "stream_appends",
        "boltq_stream_appends_total",
        Kind::Counter,
    ),
    // The shard journals' fdatasyncs and group-commit rounds (equal under fsync = "always").
    ("fsyncs", "boltq_journal_fsyncs_total", Kind::Counter),
    (
        "commit_rounds",
        "boltq_journal_commit_rounds_total",
        Kind::Counter,
    ),
    (
        "disk_write_bytes",
        "process_disk_write_bytes_total",
        Kind::Counter,
    ),
    ("storage_bytes", "boltq_storage_bytes", Kind::Gauge),
    ("rss_bytes", "process_resident_memory_bytes", Kind::Gauge),
];

/// Where `/metrics` is served.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub addr: String,
    pub api_key: Option<String>,
    /// HTTPS: the server's `[server.tls]` covers its HTTP listener too.
    pub tls: Option<ClientTls>,
}

/// One scrape: every metric name with the sum of its samples (over all label sets), and when
/// it was taken (`poll::now_ns` clock).
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    pub at_ns: u64,
    pub values: BTreeMap<String, f64>,
}

impl Scrape {
    fn get(&self, metric: &str) -> Option<f64> {
        self.values.get(metric).copied()
    }
}

/// The two scrapes around a run.
#[derive(Clone, Debug)]
pub struct Window {
    pub before: Scrape,
    pub after: Scrape,
}

impl Window {
    /// How much the series called `key` (see [`SERIES`]) grew; `None` when the server does
    /// not export it.
    pub fn delta(&self, key: &str) -> Option<u64> {
        let (_, metric, _) = SERIES.iter().find(|(k, _, _)| *k == key)?;
        let (b, a) = (self.before.get(metric)?, self.after.get(metric)?);
        Some((a - b).max(0.0).round() as u64)
    }

    /// The report's `server` section.
    pub fn section(&self) -> Value {
        let secs = self.after.at_ns.saturating_sub(self.before.at_ns) as f64 / 1e9;
        let mut o = Map::new();
        o.insert("secs".into(), json!((secs * 1000.0).round() / 1000.0));
        let mut missing = Vec::new();
        for (key, metric, kind) in SERIES {
            let (Some(b), Some(a)) = (self.before.get(metric), self.after.get(metric)) else {
                missing.push(json!(format!("{key} ({metric})")));
                continue;
            };
            let delta = a - b;
            let v = match kind {
                Kind::Counter => {
                    let per_sec = if secs > 0.0 { delta / secs } else { 0.0 };
                    json!({"delta": delta.round() as i64, "per_sec": (per_sec * 10.0).round() / 10.0})
                }
                Kind::Gauge => json!({
                    "before": b.round() as i64, "after": a.round() as i64,
                    "delta": delta.round() as i64,
                }),
            };
            o.insert(key.into(), v);
        }
        o.insert("missing".into(), Value::Array(missing));
        Value::Object(o)
    }
}

/// Scrapes `/metrics` once.
pub fn scrape(ep: &Endpoint, now_ns: u64) -> Result<Scrape, String> {
    let raw = http_get(ep, "/metrics")?;
    let body = parse_response(&raw).map_err(|e| format!("--http {}: /metrics: {e}", ep.addr))?;
    let text = std::str::from_utf8(body)
        .map_err(|_| format!("--http {}: /metrics is not UTF-8 text", ep.addr))?;
    let values = parse_metrics(text);
    if values.is_empty() {
        return Err(format!(
            "--http {}: /metrics has no samples (is this a BoltQ admin port?)",
            ep.addr
        ));
    }
    Ok(Scrape {
        at_ns: now_ns,
        values,
    })
}

/// One `GET path` with `Connection: close`; returns the raw answer (at most
/// [`RESPONSE_BYTES_MAX`]).
fn http_get(ep: &Endpoint, path: &str) -> Result<Vec<u8>, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("--http {}: {what}: {e}", ep.addr);
    let timeout = Duration::from_millis(HTTP_TIMEOUT_MS);
    let addr = ep
        .addr
        .to_socket_addrs()
        .map_err(|e| fail("cannot resolve", &e))?
        .next()
        .ok_or_else(|| format!("--http {}: no address", ep.addr))?;
    let sock =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| fail("cannot connect", &e))?;
    sock.set_read_timeout(Some(timeout))
        .and_then(|_| sock.set_write_timeout(Some(timeout)))
        .map_err(|e| fail("socket", &e))?;
    let session = match &ep.tls {
        Some(t) => Some(TlsSession::new(t, &ep.addr).map_err(|e| fail("TLS", &e))?),
        None => None,
    };
    let mut s = Stream::new(sock, session.as_ref()).map_err(|e| fail("TLS", &e))?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        ep.addr
    );
    if let Some(k) = ep.api_key.as_deref().filter(|k| !k.is_empty()) {
        req += &format!("X-API-Key: {k}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).map_err(|e| fail("write", &e))?;
    let mut raw = Vec::new();
    (&mut s)
        .take(RESPONSE_BYTES_MAX as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| fail("read", &e))?;
    if raw.len() > RESPONSE_BYTES_MAX {
        return Err(format!(
            "--http {}: answer larger than {RESPONSE_BYTES_MAX} bytes",
            ep.addr
        ));
    }
    Ok(raw)
}

/// The body of a complete `200` answer read until the server closed the connection.
pub fn parse_response(raw: &[u8]) -> Result<&[u8], String> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("answer cut short (no complete head)".into()),
        Err(e) => return Err(format!("not an HTTP answer ({e})")),
    };
    let code = resp.code.unwrap_or(0);
    if code != 200 {
        let reason = resp.reason.unwrap_or("");
        return Err(format!("HTTP {code} {reason}"));
    }
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if header("transfer-encoding").is_some_and(|v| v != "identity") {
        return Err("chunked answers are not supported".into());
    }
    let body = &raw[head_len..];
    match header("content-length") {
        None => Ok(body),
        Some(v) => {
            let len: usize = v.parse().map_err(|_| format!("bad Content-Length {v:?}"))?;
            body.get(..len)
                .ok_or_else(|| format!("body cut short: {} of {len} bytes", body.len()))
        }
    }
}

/// Prometheus text → metric name → sum of its samples over all label sets. Comments, blank
/// lines and samples whose value does not parse are skipped; a summary's quantile lines sum
/// into its name too, which no series of [`SERIES`] is.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((name, value)) = sample(line) {
            *out.entry(name.to_string()).or_insert(0.0) += value;
        }
    }
    out
}

/// `name{labels} value [timestamp]` → (name, value). Label values may hold spaces, braces
/// and escaped quotes.
fn sample(line: &str) -> Option<(&str, f64)> {
    let name_end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    if rest.starts_with('{') {
        rest = &rest[labels_end(rest)?..];
    }
    let value = rest.split_whitespace().next()?;
    let v: f64 = value.parse().ok()?;
    v.is_finite().then_some((name, v))
}

/// Index just past the `}` closing the label set `s` starts with.
fn labels_end(s: &str) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, b) in s.bytes().enumerate() {
        match (quoted, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (_, _, b'"') => quoted = !quoted,
            (false, _, b'}') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_sums_label_sets_and_skips_the_rest() {
        let text = "# HELP boltq_messages_published Messages\n\
            # TYPE boltq_messages_published counter\n\
            boltq_messages_published 42\n\
            \n\
            boltq_gateway_sends_total{node=\"a b}\\\"c\"} 5\n\
            boltq_gateway_sends_total{node=\"n2\"} 7 1700000000000\n\
            boltq_weird{x=\"unclosed} 3\n\
            boltq_nan NaN\n\
            boltq_words twelve\n\
            process_resident_memory_bytes 1.5e6\n";
        let m = parse_metrics(text);
        assert_eq!(m["boltq_messages_published"], 42.0);
        assert_eq!(m["boltq_gateway_sends_total"], 12.0);
        assert_eq!(m["process_resident_memory_bytes"], 1_500_000.0);
        for skipped in ["boltq_weird", "boltq_nan", "boltq_words"] {
            assert!(!m.contains_key(skipped), "{skipped}: {m:?}");
        }
    }

    #[test]
    fn metrics_text_of_random_bytes_never_panics() {
        let mut rng = boltq_io::testutil::Rng::new(7);
        let alphabet = b"ab_{}\"\\= 1.e\n#";
        for _ in 0..20_000 {
            let len = rng.below(40) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char)
                .collect();
            let _ = parse_metrics(&s);
        }
    }

    #[test]
    fn answers_are_checked() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef";
        assert_eq!(parse_response(ok).unwrap(), b"abc");
        let to_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc";
        assert_eq!(parse_response(to_close).unwrap(), b"abc");
        let err = |raw: &[u8]| parse_response(raw).unwrap_err();
        assert!(err(b"HTTP/1.1 401 Unauthorized\r\n\r\n").contains("401"));
        assert!(err(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc").contains("cut short"));
        assert!(err(b"HTTP/1.1 200 OK\r\nContent-Le").contains("cut short"));
        assert!(err(b"\x00\x00\x00\x00\x02{}").contains("not an HTTP answer"));
        assert!(
            err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc")
                .contains("chunked")
        );
    }

    #[test]
    fn window_deltas_rates_and_missing_series() {
        let scrape = |at_ns, pairs: &[(&str, f64)]| Scrape {
            at_ns,
            values: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        };
        let w = Window {
            before: scrape(
                0,
                &[
                    ("boltq_messages_published", 10.0),
                    ("boltq_storage_bytes", 1000.0),
                ],
            ),
            after: scrape(
                2_000_000_000,
                &[
                    ("boltq_messages_published", 110.0),
                    ("boltq_storage_bytes", 5000.0),
                    ("process_resident_memory_bytes", 9.0),
                ],
            ),
        };
        assert_eq!(w.delta("messages_published"), Some(100));
        assert_eq!(w.delta("fsyncs"), None);
        let s = w.section();
        assert_eq!(s["messages_published"]["delta"], 100);
        assert_eq!(s["messages_published"]["per_sec"], 50.0);
        assert_eq!(s["storage_bytes"]["delta"], 4000);
        // Only in the after scrape: not a delta, so reported missing.
        let missing = s["missing"].to_string();
        assert!(
            missing.contains("rss_bytes") && missing.contains("fsyncs"),
            "{s}"
        );
    }
}
