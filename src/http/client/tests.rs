//! The client against a real (test) server: redirects, the pool, limits, errors.

use super::test_server::{self, Reply};
use super::*;

fn url(s: &str) -> ParsedUrl {
    parse_url(s).unwrap()
}

/// Runs `f` on a temporary glommio executor and returns its result.
fn run<T: Send + 'static>(
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> T {
    boltq_shards::block_on("http-client-test", f).unwrap()
}

async fn get(client: &HttpClient, u: &str) -> Result<HttpResponse, HttpError> {
    let req = HttpRequest::get(url(u));
    client.request(&req, Duration::from_secs(5), 1 << 20).await
}

#[test]
fn redirects_are_followed_up_to_the_limit() {
    let server = test_server::serve(|r| match r.request_line() {
        l if l.starts_with("GET /start ") => Reply::Raw(
            b"HTTP/1.1 302 Found\r\nLocation: /end\r\nContent-Length: 3\r\n\r\nbye".to_vec(),
        ),
        l if l.starts_with("GET /end ") => test_server::json("{\"ok\":1}"),
        _ => Reply::Raw(
            b"HTTP/1.1 301 Moved\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ),
    });
    let base = server.url();
    let (ok, looped) = run(move || {
        Box::pin(async move {
            let client = HttpClient::new(4);
            let ok = get(&client, &format!("{base}/start")).await;
            let looped = get(&client, &format!("{base}/loop")).await;
            (ok, looped)
        })
    });
    assert_eq!(ok.unwrap().body, b"{\"ok\":1}");
    assert!(
        matches!(looped, Err(HttpError::Status { code: 301, .. })),
        "{looped:?}"
    );
    let loops = server
        .received()
        .iter()
        .filter(|r| r.request_line().starts_with("GET /loop "))
        .count();
    assert_eq!(loops, 1 + REDIRECTS_MAX);
    assert_eq!(
        server.connections(),
        1,
        "redirect answers with a body still keep the connection"
    );
}

#[test]
fn a_pooled_connection_closed_by_the_server_is_replaced() {
    // Closes after every answer without saying so: the second call finds its pooled
    // connection dead and must send again on a new one.
    let server = test_server::serve(|_| {
        Reply::RawThenClose(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
    });
    let base = server.url();
    let results = run(move || {
        Box::pin(async move {
            let client = HttpClient::new(4);
            let mut results = Vec::new();
            for _ in 0..3 {
                results.push(get(&client, &base).await.map(|r| r.body));
            }
            results
        })
    });
    assert!(
        results.iter().all(|r| r.as_deref() == Ok(&b"ok"[..])),
        "{results:?}"
    );
    assert_eq!(server.connections(), 3);
}

#[test]
fn a_connection_that_broke_http_is_not_pooled() {
    let server = test_server::serve(|r| {
        if r.connection == 0 {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok".to_vec(),
            )
        } else {
            test_server::json("{}")
        }
    });
    let base = server.url();
    let (first, second, idle) = run(move || {
        Box::pin(async move {
            let client = HttpClient::new(4);
            let first = get(&client, &base).await;
            let second = get(&client, &base).await;
            (first, second, client.idle_connections())
        })
    });
    assert!(matches!(first, Err(HttpError::Malformed(_))), "{first:?}");
    assert_eq!(second.unwrap().body, b"{}");
    assert_eq!(server.connections(), 2);
    assert_eq!(idle, 1);
}

#[test]
fn error_answers_keep_a_bounded_preview_and_the_status() {
    let big = "e".repeat(100_000);
    let server = test_server::serve(move |_| test_server::status(503, &big));
    let base = server.url();
    let got = run(move || Box::pin(async move { get(&HttpClient::new(4), &base).await }));
    match got {
        Err(HttpError::Status {
            code: 503,
            body_preview,
        }) => {
            assert_eq!(body_preview.len(), STATUS_BODY_PREVIEW_BYTES_MAX);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn post_bodies_go_out_with_their_length() {
    let server = test_server::serve(|r| test_server::json(&String::from_utf8_lossy(&r.body)));
    let base = server.url();
    let echoed = run(move || {
        Box::pin(async move {
            let mut req = HttpRequest::get(url(&base));
            req.method = Method::Post;
            req.body = b"{\"n\":1}".to_vec();
            req.headers
                .push(("Content-Type".into(), "application/json".into()));
            HttpClient::new(1)
                .request(&req, Duration::from_secs(5), 1024)
                .await
        })
    });
    assert_eq!(echoed.unwrap().body, b"{\"n\":1}");
    let received = &server.received()[0];
    assert_eq!(received.request_line(), "POST / HTTP/1.1");
    assert_eq!(received.header("content-length").as_deref(), Some("7"));
    assert_eq!(
        received.header("content-type").as_deref(),
        Some("application/json")
    );
}

/// Chunked encoding of `body` in chunks of at most `size` bytes, with an extension and a
/// trailer.
fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in body.chunks(size) {
        out.extend_from_slice(format!("{:x};ext=1\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    out
}

fn raw_answer(head: &str, body: &[u8]) -> Vec<u8> {
    let mut out = head.as_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

#[test]
fn chunked_and_until_close_bodies_decode_and_keep_alive_is_honoured() {
    let body: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let wire = chunked(&body, 37);
    let server = test_server::serve(move |r| match r.request_line() {
        l if l.starts_with("GET /chunked ") => Reply::Raw(raw_answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            &wire,
        )),
        _ => Reply::RawThenClose(raw_answer("HTTP/1.1 200 OK\r\n\r\n", b"to the end")),
    });
    let base = server.url();
    let (chunked_body, again, until_close, idle) = run(move || {
        Box::pin(async move {
            let client = HttpClient::new(4);
            let a = get(&client, &format!("{base}/chunked")).await;
            let b = get(&client, &format!("{base}/chunked")).await;
            let c = get(&client, &format!("{base}/close")).await;
            (a, b, c, client.idle_connections())
        })
    });
    assert_eq!(chunked_body.unwrap().body, body);
    assert_eq!(again.unwrap().body, body);
    assert_eq!(until_close.unwrap().body, b"to the end");
    assert_eq!(
        server.connections(),
        1,
        "all three went on one kept-alive connection"
    );
    assert_eq!(
        idle, 0,
        "a body framed by the connection's end is not pooled"
    );
}

#[test]
fn bodies_over_the_cap_are_refused_whatever_their_framing() {
    let big = vec![b'z'; 1000];
    let wire = chunked(&big, 100);
    let server = test_server::serve(move |r| match r.request_line() {
        l if l.starts_with("GET /chunked ") => Reply::Raw(raw_answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            &wire,
        )),
        l if l.starts_with("GET /length ") => test_server::json(&"z".repeat(1000)),
        _ => Reply::RawThenClose(raw_answer("HTTP/1.1 200 OK\r\n\r\n", &[b'z'; 1000])),
    });
    let base = server.url();
    let got = run(move || {
        Box::pin(async move {
            let client = HttpClient::new(4);
            let mut got = Vec::new();
            for path in ["/chunked", "/length", "/close"] {
                let req = HttpRequest::get(url(&format!("{base}{path}")));
                got.push(client.request(&req, Duration::from_secs(5), 100).await);
            }
            got
        })
    });
    for g in got {
        assert_eq!(g, Err(HttpError::TooLarge { bytes_max: 100 }));
    }
}

#[test]
fn broken_or_oversized_answers_are_malformed() {
    let server = test_server::serve(|r| match r.request_line() {
        l if l.starts_with("GET /many ") => {
            let mut head = String::from("HTTP/1.1 200 OK\r\n");
            for i in 0..=RESPONSE_HEADERS_MAX {
                head.push_str(&format!("X-{i}: v\r\n"));
            }
            head.push_str("Content-Length: 0\r\n\r\n");
            Reply::Raw(head.into_bytes())
        }
        l if l.starts_with("GET /long ") => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nX: {}\r\nContent-Length: 0\r\n\r\n",
                "a".repeat(RESPONSE_HEAD_BYTES_MAX)
            );
            Reply::Raw(head.into_bytes())
        }
        l if l.starts_with("GET /chunk ") => Reply::Raw(raw_answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"zz\r\nab\r\n0\r\n\r\n",
        )),
        l if l.starts_with("GET /cut ") => Reply::RawThenClose(raw_answer(
            "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
            b"short",
        )),
        _ => Reply::Raw(b"garbage\r\n\r\n".to_vec()),
    });
    let base = server.url();
    let got = run(move || {
        Box::pin(async move {
            let client = HttpClient::new(4);
            let mut got = Vec::new();
            for path in ["/many", "/long", "/chunk", "/cut", "/garbage"] {
                got.push((path, get(&client, &format!("{base}{path}")).await));
            }
            got
        })
    });
    for (path, g) in got {
        assert!(matches!(g, Err(HttpError::Malformed(_))), "{path}: {g:?}");
    }
}

#[test]
fn https_to_a_plain_server_fails_as_tls_and_is_counted() {
    let server = test_server::serve(|_| test_server::json("{}"));
    let base = server.url().replace("http://", "https://");
    let (got, counted) = run(move || {
        Box::pin(async move {
            let errors = boltq_shards::metrics::Counter::default();
            let client = HttpClient::new(4).with_tls(TlsOptions {
                ca_file: None,
                errors: Some(errors.clone()),
            });
            // A generous deadline: the refusal must come from the handshake, not a timer,
            // even on a loaded machine.
            let req = HttpRequest::get(url(&base));
            let got = client.request(&req, Duration::from_secs(60), 1 << 20).await;
            (got, errors.get())
        })
    });
    assert!(matches!(&got, Err(HttpError::Tls(_))), "{got:?}");
    assert_eq!(counted, 1);
}

/// A server certificate for 127.0.0.1, self-signed (so its PEM is also the CA file that
/// trusts it), written to a file; and a rustls server presenting it.
fn self_signed() -> (
    boltq_io::testutil::TempDir,
    std::path::PathBuf,
    std::sync::Arc<rustls::ServerConfig>,
) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let dir = boltq_io::testutil::TempDir::new("http-client-tls");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, cert.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    (dir, ca_file, std::sync::Arc::new(config))
}

#[test]
fn https_works_with_its_ca_file_and_fails_with_another_never_in_plain_text() {
    let (_dir, ca_file, config) = self_signed();
    let (_other_dir, other_ca_file, _) = self_signed();
    let server = test_server::serve_tls(config, |_| test_server::json("{\"ok\":1}"));
    let base = server.url().replace("http://", "https://");
    let (trusted, reused, untrusted, counted) = run(move || {
        Box::pin(async move {
            let trusting = HttpClient::new(4).with_tls(TlsOptions {
                ca_file: Some(ca_file),
                errors: None,
            });
            let trusted = get(&trusting, &base).await;
            let reused = get(&trusting, &base).await;
            let errors = boltq_shards::metrics::Counter::default();
            let other_ca = HttpClient::new(4).with_tls(TlsOptions {
                ca_file: Some(other_ca_file),
                errors: Some(errors.clone()),
            });
            let untrusted = get(&other_ca, &base).await;
            (trusted, reused, untrusted, errors.get())
        })
    });
    assert_eq!(trusted.unwrap().body, b"{\"ok\":1}");
    assert_eq!(reused.unwrap().body, b"{\"ok\":1}");
    assert!(
        matches!(&untrusted, Err(HttpError::Tls(m)) if m.contains("certificate")),
        "{untrusted:?}"
    );
    assert_eq!(counted, 1);
    assert_eq!(
        server.received().len(),
        2,
        "nothing was sent past the failed handshake"
    );
    assert_eq!(
        server.connections(),
        2,
        "the trusted calls shared one TLS connection"
    );
}
