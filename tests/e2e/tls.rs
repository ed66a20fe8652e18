//! TLS on the TCP and HTTP listeners (`[server.tls]`), against the real binary, with a
//! throwaway CA and certificates generated for each test.

use crate::support;

use crate::support::pki::Pki;
use crate::support::{ReadyBy, Server};
use boltq::client::{
    Client, ClientCertificate, ClientError, ClientOptions, ClientTls, PublishOptions,
};
use rcgen::ExtendedKeyUsagePurpose;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What only these tests ask of the test CA: client certificates and a TLS config.
impl Pki {
    fn client_cert(&self, stem: &str) -> ClientCertificate {
        let (cert_file, key_file) = self.leaf(stem, &[], ExtendedKeyUsagePurpose::ClientAuth);
        ClientCertificate {
            cert_file,
            key_file,
        }
    }

    /// A `boltq.toml` turning TLS on with the server certificate (and `ca_file` for mTLS).
    fn config(&self, client_ca: Option<&Path>) -> PathBuf {
        let (cert, key) = self.server_cert();
        let mut text = format!(
            "[server.tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}\n",
            cert.to_str().unwrap(),
            key.to_str().unwrap()
        );
        if let Some(ca) = client_ca {
            text += &format!("ca_file = {:?}\n", ca.to_str().unwrap());
        }
        let path = self.dir.path().join("boltq.toml");
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn start_tls_server(config: &Path) -> Server {
    Server::start_until(&["--config", config.to_str().unwrap()], ReadyBy::LogLine)
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn tls_options(tls: ClientTls) -> ClientOptions {
    ClientOptions {
        timeout_ms: 5_000,
        tls: Some(tls),
        ..Default::default()
    }
}

fn trusting(ca_file: PathBuf) -> ClientTls {
    ClientTls {
        ca_file: Some(ca_file),
        ..Default::default()
    }
}

/// A PING, or the error of connecting and pinging (a refused client certificate shows up
/// on the first request under TLS 1.3).
fn connect_and_ping(port: u16, options: ClientOptions) -> Result<Client, ClientError> {
    let mut client = Client::connect(&addr(port), options)?;
    client.ping()?;
    Ok(client)
}

/// A raw HTTPS GET with `Connection: close`; returns the status and body.
fn https_get(port: u16, path: &str, ca_file: &Path) -> std::io::Result<(u16, String)> {
    let mut tls = raw_tls(port, ca_file);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    // The server closes after the response; whether or not it sends close_notify first, all
    // bytes before the close are the response.
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {text:?}")))?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Ok((status, body))
}

/// Sends `bytes` in plain text and returns what comes back until the server closes (or 5 s
/// pass).
fn plain_exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[test]
fn tls_client_publishes_consumes_and_acks_plain_clients_get_no_protocol_reply() {
    let pki = Pki::new("tls-basic");
    let server = start_tls_server(&pki.config(None));
    let log = server.log();
    let tcp_line = format!("listening tcp on 127.0.0.1:{} (tls)", server.tcp_port);
    let http_line = format!("listening http on 127.0.0.1:{} (tls)", server.http_port);
    assert!(log.contains(&tcp_line), "{log}");
    assert!(log.contains(&http_line), "{log}");

    let mut client = Client::connect(&addr(server.tcp_port), tls_options(trusting(pki.ca_file())))
        .expect("TLS connect verifying the server by its IP address");
    let published = client
        .publish("jobs", r#"{"n":1}"#, None, PublishOptions::default())
        .unwrap();
    let got = client.consume("jobs").unwrap().expect("a message");
    assert_eq!(got.id, published.id);
    client.ack(&got.id).unwrap();
    assert!(client.consume("jobs").unwrap().is_none());

    // The name in the address or an explicit name both verify.
    let by_name = ClientTls {
        server_name: Some("localhost".into()),
        ..trusting(pki.ca_file())
    };
    connect_and_ping(server.tcp_port, tls_options(by_name)).unwrap();

    // A v1 PING frame in plain text gets no protocol reply: at most a TLS alert, then the
    // connection is closed.
    let got = plain_exchange(server.tcp_port, &frame(0x06, b"{}"));
    assert!(
        got.is_empty() || got[0] == 0x15,
        "expected nothing or a TLS alert record, got {got:?}"
    );
    let plain = ClientOptions {
        timeout_ms: 5_000,
        ..Default::default()
    };
    assert!(connect_and_ping(server.tcp_port, plain).is_err());

    // The TLS client's connection, and new ones, are unaffected.
    client.ping().unwrap();
    connect_and_ping(server.tcp_port, tls_options(trusting(pki.ca_file()))).unwrap();
    let (code, log) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn http_admin_is_served_over_tls_with_the_same_certificate() {
    let pki = Pki::new("tls-http");
    let server = start_tls_server(&pki.config(None));
    let (status, body) = https_get(server.http_port, "/livez", &pki.ca_file()).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _) = https_get(server.http_port, "/readyz", &pki.ca_file()).unwrap();
    assert_eq!(status, 200);
    // Plain HTTP gets no HTTP answer.
    let got = plain_exchange(server.http_port, b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        !got.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // …and HTTPS still works afterwards.
    assert_eq!(
        https_get(server.http_port, "/livez", &pki.ca_file())
            .unwrap()
            .0,
        200
    );
}

#[test]
fn clients_verify_the_server_certificate() {
    let pki = Pki::new("tls-verify");
    let other = Pki::new("tls-verify-other");
    let server = start_tls_server(&pki.config(None));

    let wrong_ca = connect_and_ping(server.tcp_port, tls_options(trusting(other.ca_file())));
    let err = wrong_ca
        .err()
        .expect("a server signed by another CA is refused");
    assert!(err.to_string().contains("certificate"), "{err}");

    let wrong_name = ClientTls {
        server_name: Some("queue.example.com".into()),
        ..trusting(pki.ca_file())
    };
    let err = connect_and_ping(server.tcp_port, tls_options(wrong_name))
        .err()
        .expect("a certificate for other names is refused");
    assert!(err.to_string().contains("certificate"), "{err}");

    // `insecure` skips verification (v1's BOLTQ_TLS_INSECURE).
    let insecure = ClientTls {
        insecure: true,
        ..Default::default()
    };
    connect_and_ping(server.tcp_port, tls_options(insecure)).unwrap();

    // A CA file that is not there is reported before connecting.
    let missing = pki.dir.path().join("nope.pem");
    let err = connect_and_ping(server.tcp_port, tls_options(trusting(missing.clone())))
        .err()
        .unwrap();
    assert!(err.to_string().contains(missing.to_str().unwrap()), "{err}");
}

#[test]
fn with_ca_file_clients_need_a_certificate_signed_by_it() {
    let pki = Pki::new("tls-mtls");
    let server = start_tls_server(&pki.config(Some(&pki.ca_file())));
    let log = server.log();
    assert!(log.contains("(tls, client certificates required)"), "{log}");

    assert!(
        connect_and_ping(server.tcp_port, tls_options(trusting(pki.ca_file()))).is_err(),
        "a client without a certificate is refused"
    );

    let with_cert = ClientTls {
        client_certificate: Some(pki.client_cert("worker")),
        ..trusting(pki.ca_file())
    };
    let mut client = connect_and_ping(server.tcp_port, tls_options(with_cert)).unwrap();
    client
        .publish("jobs", "1", None, PublishOptions::default())
        .unwrap();

    // A certificate from another CA is refused too.
    let other = Pki::new("tls-mtls-other");
    let foreign = ClientTls {
        client_certificate: Some(other.client_cert("intruder")),
        ..trusting(pki.ca_file())
    };
    assert!(connect_and_ping(server.tcp_port, tls_options(foreign)).is_err());

    // HTTP demands the certificate as well.
    assert!(https_get(server.http_port, "/livez", &pki.ca_file()).is_err());
    client.ping().unwrap();
}

#[test]
fn a_silent_client_neither_blocks_accepting_nor_stays_forever() {
    let pki = Pki::new("tls-silent");
    let server = start_tls_server(&pki.config(None));
    // Several, so that every shard holds at least one whatever the kernel's choice.
    let mut silent: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(("127.0.0.1", server.tcp_port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    for _ in 0..8 {
        connect_and_ping(server.tcp_port, tls_options(trusting(pki.ca_file()))).unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "handshakes waited for silent clients: {:?}",
        started.elapsed()
    );
    // The server gives up on them after its handshake timeout (10 s).
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut byte = [0u8; 1];
        let t0 = Instant::now();
        let n = s.read(&mut byte).unwrap_or(0);
        assert_eq!(n, 0, "silent connection closed by the server");
        assert!(t0.elapsed() < Duration::from_secs(19));
    }
}

#[test]
fn large_replies_reach_a_slow_reader_whole_over_tls() {
    const REPLIES: usize = 3;
    let pki = Pki::new("tls-large");
    let server = start_tls_server(&pki.config(None));
    let mut client =
        Client::connect(&addr(server.tcp_port), tls_options(trusting(pki.ca_file()))).unwrap();
    let payload = format!("\"{}\"", "x".repeat(3 << 20));
    for _ in 0..REPLIES {
        client
            .publish("big", &payload, None, PublishOptions::default())
            .unwrap();
    }
    // Several replies in one batch, more than the kernel buffers hold, to a reader slower
    // than the server: the server's writes block and resume many times, and the connection
    // then waits for a next request that the client sends only once it has every reply.
    // (The unit test in io/src/tls.rs pins down the case of a reply tail left in rustls.)
    let mut tls = raw_tls(server.tcp_port, &pki.ca_file());
    shrink_receive_buffer(&tls.sock);
    let consume = frame(0x03, br#"{"topic":"big"}"#);
    tls.write_all(&consume.repeat(REPLIES)).unwrap();
    tls.flush().unwrap();
    let mut chunk = [0u8; 16 * 1024];
    let mut pending = Vec::new();
    for reply in 0..REPLIES {
        while pending.len() < 5 || pending.len() < 5 + frame_len(&pending) {
            let n = tls
                .read(&mut chunk)
                .unwrap_or_else(|e| panic!("reply {reply}, after {} bytes: {e}", pending.len()));
            assert!(n > 0, "closed in reply {reply}");
            pending.extend_from_slice(&chunk[..n]);
            std::thread::sleep(Duration::from_millis(1));
        }
        let len = 5 + frame_len(&pending);
        assert_eq!(pending[0], 0x00, "reply {reply}");
        assert!(len > payload.len(), "reply {reply}");
        pending.drain(..len);
    }
}

/// Caps the socket's receive buffer (and so what the server can push ahead of the reader).
fn shrink_receive_buffer(sock: &TcpStream) {
    use std::os::fd::AsRawFd;
    let bytes: libc::c_int = 32 * 1024;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local; the descriptor
    // is owned by `sock`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
}

fn frame(code: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    boltq::queue::protocol::frame::encode(code, payload, &mut out);
    out
}

fn frame_len(frame: &[u8]) -> usize {
    u32::from_le_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize
}

/// A TLS connection trusting `ca_file`, with a 5 s read timeout.
fn raw_tls(port: u16, ca_file: &Path) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let roots = boltq_io::tls::root_store(ca_file).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    rustls::StreamOwned::new(conn, sock)
}

#[test]
fn unusable_tls_files_stop_the_start_with_a_line_naming_the_file() {
    let pki = Pki::new("tls-badfiles");
    let (cert, key) = pki.server_cert();
    let (other_cert, _) = pki.leaf("other", &["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let missing = pki.dir.path().join("missing.pem");
    let cases: [(&Path, &Path, &str); 4] = [
        (&missing, &key, "missing.pem"),
        (&key, &key, "holds no certificate"),
        (&cert, &cert, "holds no private key"),
        (&other_cert, &key, "does not match"),
    ];
    for (cert_file, key_file, expect) in cases {
        let config = pki.dir.path().join("bad.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nhost = \"127.0.0.1\"\ntcp_port = 0\nhttp_port = 0\n\
                 [storage]\nmode = \"memory\"\n\
                 [server.tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}\n",
                cert_file.to_str().unwrap(),
                key_file.to_str().unwrap()
            ),
        )
        .unwrap();
        let (code, out) = support::run_to_exit(&["--config", config.to_str().unwrap()]);
        assert!(matches!(code, Some(1) | Some(2)), "{code:?}: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("server.tls"))
            .unwrap_or_else(|| panic!("no server.tls line: {out}"));
        assert!(line.contains(expect), "{expect:?} not in {line:?}");
        let named = if expect == "does not match" {
            key_file
        } else {
            cert_file
        };
        assert!(line.contains(named.to_str().unwrap()), "{line}");
    }
}
