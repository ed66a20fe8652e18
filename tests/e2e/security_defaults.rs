//! Safe defaults (issue 17 item 3), against the real binary: no CORS headers unless a
//! request comes from an origin in `admin.cors_origins`; `/metrics` behind
//! `security.api_key` unless `admin.metrics_public`; the messaging plane's stream commands
//! (TCP `0x1D`–`0x20`) refused before AUTH; no start with the messaging plane on, no key,
//! and a TCP listener other hosts reach; a warning naming the listeners that are open
//! without a key.

use crate::support::{get, http, run_to_exit, HttpResponse, Server};
use boltq::queue::protocol::frame::{self, op, status};
use boltq_io::testutil::TempDir;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const KEY: &str = "safe-defaults-key";
const OPS: &str = "https://ops.example";
const EVIL: &str = "https://evil.example";

/// A server started with `toml` as its config file.
fn start_with(toml: &str, extra: &[&str]) -> (Server, TempDir) {
    let dir = TempDir::new("safe-defaults");
    let path = dir.path().join("boltq.toml");
    std::fs::write(&path, toml).unwrap();
    let mut args = vec!["--config", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    (Server::start(&args), dir)
}

/// Every `Access-Control-*` and `Vary` header of `r`.
fn cors_lines(r: &HttpResponse) -> Vec<(String, String)> {
    r.headers
        .iter()
        .filter(|(k, _)| k.starts_with("access-control-") || k == "vary")
        .cloned()
        .collect()
}

fn from(s: &Server, method: &str, path: &str, origin: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
    http(s.http_port, method, path, &headers, b"")
}

/// The head of a `/subscribe` event stream opened from `origin` (the stream itself is
/// left at once).
fn event_stream_head(s: &Server, origin: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", s.http_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET /subscribe?topic=t&id=sub HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n\r\n"
    )
    .unwrap();
    let mut head = String::new();
    let mut reader = BufReader::new(c);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}

#[test]
fn cors_headers_are_absent_by_default() {
    let s = Server::start(&[]);
    for (method, path) in [
        ("OPTIONS", "/queues/purge"),
        ("GET", "/stats"),
        ("GET", "/health"),
    ] {
        for origin in [None, Some(EVIL)] {
            let r = from(&s, method, path, origin);
            assert_eq!(r.status, if method == "OPTIONS" { 204 } else { 200 });
            assert_eq!(cors_lines(&r), vec![], "{method} {path} from {origin:?}");
        }
    }
    // Refusals and the event stream too.
    assert_eq!(cors_lines(&from(&s, "GET", "/nowhere", Some(EVIL))), vec![]);
    let head = event_stream_head(&s, EVIL);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("access-control"),
        "{head}"
    );
}

#[test]
fn cors_headers_are_echoed_only_for_a_configured_origin() {
    let (s, _dir) = start_with(
        &format!("[admin]\ncors_origins = [\"{OPS}\", \"http://localhost:3000\"]\n"),
        &[],
    );
    let pre = from(&s, "OPTIONS", "/queues/purge", Some(OPS));
    assert_eq!(pre.status, 204);
    assert_eq!(
        cors_lines(&pre),
        [
            ("access-control-allow-origin", OPS),
            ("access-control-allow-methods", "GET, POST, DELETE, OPTIONS"),
            ("access-control-allow-headers", "Content-Type, X-API-Key"),
            ("vary", "Origin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    let other = from(&s, "GET", "/stats", Some("http://localhost:3000"));
    assert_eq!(
        other.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    // Not listed, listed only by a prefix or another scheme, or no Origin at all: nothing a
    // browser would accept (the answer still says it depends on the origin).
    for origin in [
        Some(EVIL),
        Some("https://ops.example.evil.example"),
        Some("http://ops.example"),
        Some("null"),
        None,
    ] {
        for method in ["OPTIONS", "GET"] {
            let r = from(&s, method, "/stats", origin);
            assert_eq!(
                cors_lines(&r),
                vec![("vary".to_string(), "Origin".to_string())],
                "{method} from {origin:?}"
            );
        }
    }
    let head = event_stream_head(&s, OPS);
    assert!(
        head.contains(&format!("Access-Control-Allow-Origin: {OPS}\r\n")),
        "{head}"
    );
    assert!(
        !event_stream_head(&s, EVIL).contains("Access-Control"),
        "an event stream opened from another origin"
    );
}

#[test]
fn a_star_in_cors_origins_restores_v1s_headers() {
    let (s, _dir) = start_with("[admin]\ncors_origins = [\"*\"]\n", &[]);
    for origin in [None, Some(EVIL)] {
        let r = from(&s, "OPTIONS", "/publish", origin);
        assert_eq!(r.status, 204);
        assert_eq!(
            cors_lines(&r),
            [
                ("access-control-allow-origin", "*"),
                ("access-control-allow-methods", "GET, POST, DELETE, OPTIONS"),
                ("access-control-allow-headers", "Content-Type, X-API-Key"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }
    assert!(event_stream_head(&s, EVIL).contains("Access-Control-Allow-Origin: *\r\n"));
}

#[test]
fn metrics_need_the_key_unless_metrics_public() {
    let (s, _dir) = start_with(&format!("[security]\napi_key = \"{KEY}\"\n"), &[]);
    for headers in [&[][..], &[("X-API-Key", "wrong")][..]] {
        for accept in [None, Some("application/json")] {
            let mut h = headers.to_vec();
            h.extend(accept.map(|a| ("Accept", a)));
            let r = http(s.http_port, "GET", "/metrics", &h, b"");
            assert_eq!(
                (r.status, r.body.as_str()),
                (401, "{\"error\":\"unauthorized\"}\n"),
                "{h:?}"
            );
        }
    }
    let with_key = http(s.http_port, "GET", "/metrics", &[("X-API-Key", KEY)], b"");
    assert_eq!(with_key.status, 200);
    assert!(
        with_key.body.contains("boltq_http_requests_total"),
        "{}",
        with_key.body
    );
    for path in ["/health", "/livez", "/readyz"] {
        assert_eq!(get(&s, path).status, 200, "{path} stays open");
    }
    drop(s);

    let (s, _dir) = start_with(
        &format!("[security]\napi_key = \"{KEY}\"\n[admin]\nmetrics_public = true\n"),
        &[],
    );
    let open = get(&s, "/metrics");
    assert_eq!(open.status, 200);
    assert!(open.body.contains("boltq_http_requests_total"));
    assert_eq!(get(&s, "/stats").status, 401, "only /metrics is opened");
}

/// One frame's reply (status, payload), or `None` when the server closed instead.
fn call(c: &mut TcpStream, code: u8, payload: &[u8]) -> Option<(u8, String)> {
    let mut req = Vec::new();
    frame::encode(code, payload, &mut req);
    c.write_all(&req).ok()?;
    let mut head = [0u8; 5];
    c.read_exact(&mut head).ok()?;
    let len = u32::from_le_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).ok()?;
    Some((head[0], String::from_utf8_lossy(&body).into_owned()))
}

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", s.tcp_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// Whether the server closed `c` (EOF or reset).
fn closed(c: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(c.read(&mut byte), Ok(0) | Err(_))
}

#[test]
fn stream_commands_are_refused_without_auth_when_a_key_is_set() {
    let (s, _dir) = start_with(
        &format!("[security]\napi_key = \"{KEY}\"\n[messaging.stream]\nenabled = true\n"),
        &[],
    );
    let requests: [(u8, &str); 4] = [
        (0x1D, r#"{"topic":"secret.t","payload":"x"}"#),
        (0x1E, r#"{"topic":"secret.t","from":0,"max":10}"#),
        (
            0x1F,
            r#"{"topic":"secret.t","from":0,"max":10,"wait_ms":0}"#,
        ),
        (0x20, r#"{"topic":"secret.t","group":"g","seq":1}"#),
    ];
    let auth_with = |key: &str| format!(r#"{{"api_key":"{key}"}}"#);
    for (code, payload) in requests {
        // No AUTH at all, then a refused AUTH: both answered with an error and closed.
        for auth in [None, Some(auth_with("wrong"))] {
            let mut c = connect(&s);
            if let Some(auth) = &auth {
                let (st, body) = call(&mut c, op::AUTH, auth.as_bytes()).unwrap();
                assert_eq!(
                    (st, body.as_str()),
                    (status::ERROR, r#"{"error":"unauthorized"}"#)
                );
            }
            let (st, body) = call(&mut c, code, payload.as_bytes())
                .unwrap_or_else(|| panic!("0x{code:02X}: closed without an answer"));
            assert_eq!(st, status::ERROR, "0x{code:02X} after {auth:?}: {body}");
            assert!(
                body.contains("authentication required"),
                "0x{code:02X}: {body}"
            );
            assert!(closed(&mut c), "0x{code:02X}: the connection is closed");
        }
    }
    // With the key, the same commands reach the messaging plane.
    let mut c = connect(&s);
    let (st, body) = call(&mut c, op::AUTH, auth_with(KEY).as_bytes()).unwrap();
    assert_eq!(st, status::OK, "{body}");
    for (code, payload) in requests {
        let (st, body) = call(&mut c, code, payload.as_bytes()).unwrap();
        assert_eq!(st, status::OK, "0x{code:02X} after AUTH: {body}");
    }
}

#[test]
fn the_messaging_plane_refuses_to_start_off_loopback_without_a_key() {
    let dir = TempDir::new("safe-defaults-refuse");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(&cfg, "[messaging.stream]\nenabled = true\n").unwrap();
    let data = dir.path().join("data");
    let args = |host: &'static str| {
        vec![
            "--config".to_string(),
            cfg.to_str().unwrap().to_string(),
            "--data-dir".to_string(),
            data.to_str().unwrap().to_string(),
            "--tcp-port".to_string(),
            "0".to_string(),
            "--http-port".to_string(),
            "0".to_string(),
            "--host".to_string(),
            host.to_string(),
        ]
    };
    for host in ["0.0.0.0", "::"] {
        let a = args(host);
        let (code, out) = run_to_exit(&a.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, Some(2), "{host}: {out}");
        let line = out
            .lines()
            .find(|l| l.starts_with("config error: security.api_key:"))
            .unwrap_or_else(|| panic!("{host}: no refusal naming security.api_key: {out}"));
        assert!(line.contains("messaging.stream.enabled"), "{line}");
        assert!(!out.contains("ready:"), "{host}: served: {out}");
    }
    // The same plane with a key, or on loopback, starts.
    std::fs::write(
        &cfg,
        format!("[security]\napi_key = \"{KEY}\"\n[messaging.stream]\nenabled = true\n"),
    )
    .unwrap();
    let keyed = Server::start(&["--config", cfg.to_str().unwrap(), "--host", "0.0.0.0"]);
    assert!(
        !keyed.log().contains("no security.api_key"),
        "{}",
        keyed.log()
    );
    drop(keyed);
    std::fs::write(&cfg, "[messaging.stream]\nenabled = true\n").unwrap();
    Server::start(&["--config", cfg.to_str().unwrap(), "--host", "127.0.0.1"]);
}

#[test]
fn listeners_open_to_other_hosts_without_a_key_are_warned_about() {
    let open = Server::start(&["--host", "0.0.0.0"]);
    let log = open.log();
    let warning = log
        .lines()
        .find(|l| l.contains("no security.api_key is set"))
        .unwrap_or_else(|| panic!("no warning:\n{log}"));
    for listener in [
        format!("tcp 0.0.0.0:{}", open.tcp_port),
        format!("http 0.0.0.0:{}", open.http_port),
    ] {
        assert!(
            warning.contains(&listener),
            "{listener} not named: {warning}"
        );
    }
    assert!(warning.contains("WARN"), "{warning}");
    drop(open);
    // On loopback (the harness's BOLTQ_HOST) nothing to warn about.
    let local = Server::start(&[]);
    assert!(
        !local.log().contains("no security.api_key"),
        "{}",
        local.log()
    );
}
