//! The server's outbound calls over `https://` (issue 12): the push webhook and the
//! membership service played by one stand-in service speaking TLS with a certificate of a
//! test CA, the real binary trusting that CA through `messaging.http_client.ca_file`. With
//! another CA configured, the calls fail — never in plain text — with a log line naming the
//! TLS failure and `boltq_http_client_tls_errors_total` moving.

use crate::support::gateway::{connect, messaging_toml, start_with_toml};

use crate::support::pki::Pki;
use crate::support::stub::{StubServer, TlsConn};
use crate::support::Server;
use boltq::client::gateway::GatewayClient;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SIGNING_SECRET: &str = "push-signing-secret-of-at-least-32-bytes";
const GROUP: &str = "team";
const WAIT: Duration = Duration::from_secs(15);
const TLS_ERRORS: &str = "boltq_http_client_tls_errors_total";

/// One request the stand-in service got: request line and body.
type Seen = (String, Vec<u8>);

/// Webhook (`POST /push`) and membership service (`/is-member`, `/members`: alice and bob
/// are in the group) behind one TLS listener; every request is recorded.
struct Service {
    seen: Arc<Mutex<Vec<Seen>>>,
    stub: StubServer,
}

impl Service {
    fn start(pki: &Pki) -> Service {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let s = Arc::clone(&seen);
        let stub = StubServer::start_tls("https service", pki.rustls_server(), move |conn| {
            serve(conn, &s)
        });
        Service { seen, stub }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.stub.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn wait_for(&self, s: &Server, what: &str, done: impl Fn(&[Seen]) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(&self.seen()) {
            assert!(
                Instant::now() < deadline,
                "{what}: seen {:?}\nserver log:\n{}",
                self.seen(),
                s.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Answers one request and closes. A failed handshake ends here without a request.
fn serve(mut conn: TlsConn, seen: &Mutex<Vec<Seen>>) {
    conn.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match conn.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    }
    let request_line = head.lines().next().unwrap_or_default().to_string();
    let body = buf[head_end..head_end + length].to_vec();
    seen.lock().unwrap().push((request_line.clone(), body));
    let target = request_line.split_whitespace().nth(1).unwrap_or("");
    let member = ["alice", "bob"]
        .iter()
        .any(|u| target.contains(&format!("user={u}&")));
    let answer = match target.split_once('?').map_or(target, |(p, _)| p) {
        "/push" => json!({}),
        "/is-member" => json!({ "member": member }),
        "/members" => json!({ "members": ["alice", "bob"] }),
        _ => json!({ "error": "no such route" }),
    }
    .to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = conn.write_all(reply.as_bytes());
    let _ = conn.flush();
    conn.conn.send_close_notify();
    let _ = conn.flush();
}

/// A server with the gateway, push and the membership service all pointed at `service`,
/// trusting the CAs of `ca_file`.
fn start(service: &Service, ca_file: &Path) -> (Server, TempDir) {
    let toml = format!(
        "{base}[messaging.chat]\nmembership_url = \"{url}\"\nmembership_timeout = \"2s\"\n\
         [messaging.push]\nenabled = true\nwebhook_url = \"{url}/push\"\n\
         signing_secret = \"{SIGNING_SECRET}\"\ngrace_delay = \"0s\"\ntimeout = \"2s\"\n\
         [messaging.http_client]\nca_file = {ca:?}\n",
        base = messaging_toml(),
        url = service.url(),
        ca = ca_file.to_str().unwrap(),
    );
    start_with_toml(&toml)
}

/// `boltq_http_client_tls_errors_total` summed over its series in `/metrics`.
fn tls_errors(s: &Server) -> u64 {
    let (status, body) = crate::support::http_get(s.http_port, "/metrics").unwrap();
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| l.starts_with(TLS_ERRORS))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

fn send(c: &mut GatewayClient, conversation: &str, kind: &str, text: &str) -> Value {
    c.send_text(conversation, kind, "", text).unwrap()
}

#[test]
fn push_and_membership_reach_an_https_service_signed_by_the_configured_ca() {
    let pki = Pki::new("https-clients-ok");
    let service = Service::start(&pki);
    let (s, _tmp) = start(&service, &pki.ca_file());
    let mut alice = connect(&s, "alice", "a-phone");

    let reply = send(&mut alice, GROUP, "group", "hello team");
    assert_eq!(reply["op"], "sent", "the membership check passed: {reply}");
    assert!(
        service
            .seen()
            .iter()
            .any(|(line, _)| line.starts_with("GET /is-member?") && line.contains("user=alice")),
        "{:?}",
        service.seen()
    );

    let reply = send(&mut alice, "alice:bob", "direct", "hello bob");
    assert_eq!(reply["op"], "sent", "{reply}");
    service.wait_for(&s, "bob's push", |seen| {
        seen.iter().any(|(line, body)| {
            line == "POST /push HTTP/1.1"
                && serde_json::from_slice::<Value>(body).is_ok_and(|b| {
                    b["notifications"]
                        .as_array()
                        .is_some_and(|n| n.iter().any(|n| n["user_id"] == "bob"))
                })
        })
    });
    assert_eq!(tls_errors(&s), 0, "{}", s.log());
}

#[test]
fn a_certificate_of_another_ca_fails_the_calls_with_a_log_line_and_a_metric() {
    let pki = Pki::new("https-clients-service");
    let other = Pki::new("https-clients-other");
    let service = Service::start(&pki);
    let (s, _tmp) = start(&service, &other.ca_file());
    assert_eq!(tls_errors(&s), 0);
    let mut alice = connect(&s, "alice", "a-phone");

    let reply = send(&mut alice, GROUP, "group", "hello team");
    assert_eq!(
        reply["op"], "error",
        "no membership answer, no send: {reply}"
    );
    let reply = send(&mut alice, "alice:bob", "direct", "hello bob");
    assert_eq!(reply["op"], "sent", "{reply}");

    let deadline = Instant::now() + WAIT;
    loop {
        let log = s.log();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("TLS handshake with 127.0.0.1:"))
            .collect();
        let push_failed = lines.iter().any(|l| l.contains("/push"));
        let membership_failed = lines.iter().any(|l| l.contains("/is-member"));
        if push_failed && membership_failed {
            assert!(
                lines.iter().all(|l| l.contains("certificate")),
                "the line names the certificate problem: {lines:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no TLS failure logged:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tls_errors(&s) >= 2, "{}", s.log());
    assert!(
        service.seen().is_empty(),
        "no request went out past a failed handshake: {:?}",
        service.seen()
    );
}
