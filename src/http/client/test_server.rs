//! A tiny blocking HTTP server on std threads for tests of this client and its users.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Request line and headers, as sent.
    pub head: String,
    pub body: Vec<u8>,
    /// Index of the TCP connection it came on (0-based, in accept order).
    pub connection: usize,
}

impl Received {
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }

    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// What the server does with one request.
pub enum Reply {
    /// Writes these bytes and keeps the connection open.
    Raw(Vec<u8>),
    /// Writes these bytes and closes the connection.
    RawThenClose(Vec<u8>),
    /// Never answers; waits for the client to go away.
    Silent,
}

/// A 200 answer with a JSON body and `Content-Length`.
pub fn json(body: &str) -> Reply {
    status(200, body)
}

/// An answer with `code` and a text body.
pub fn status(code: u16, body: &str) -> Reply {
    Reply::Raw(
        format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

type Handler = dyn Fn(&Received) -> Reply + Send + Sync;

/// A server on 127.0.0.1; stops accepting when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Serves every connection on its own thread, answering each request with `handler`.
pub fn serve(handler: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> TestServer {
    serve_with(None, handler)
}

/// [`serve`] over TLS with `config` (the URL is still given as `http://` by [`TestServer::url`];
/// callers say `https://`).
pub fn serve_tls(
    config: Arc<rustls::ServerConfig>,
    handler: impl Fn(&Received) -> Reply + Send + Sync + 'static,
) -> TestServer {
    serve_with(Some(config), handler)
}

fn serve_with(
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: impl Fn(&Received) -> Reply + Send + Sync + 'static,
) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = TestServer {
        addr: listener.local_addr().unwrap(),
        accepted: Arc::default(),
        received: Arc::default(),
        stop: Arc::default(),
    };
    let handler: Arc<Handler> = Arc::new(handler);
    let (accepted, received, stop) = (
        server.accepted.clone(),
        server.received.clone(),
        server.stop.clone(),
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { continue };
            let connection = accepted.fetch_add(1, Ordering::SeqCst);
            let (handler, received, tls) = (handler.clone(), received.clone(), tls.clone());
            std::thread::spawn(move || {
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                match tls {
                    None => serve_connection(stream, connection, &*handler, &received),
                    Some(config) => {
                        let session = rustls::ServerConnection::new(config).unwrap();
                        let stream = rustls::StreamOwned::new(session, stream);
                        serve_connection(stream, connection, &*handler, &received);
                    }
                }
            });
        }
    });
    server
}

fn serve_connection(
    mut stream: impl Read + Write,
    connection: usize,
    handler: &Handler,
    received: &Mutex<Vec<Received>>,
) {
    let mut buf = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buf, connection) else {
            return;
        };
        received.lock().unwrap().push(request.clone());
        match handler(&request) {
            Reply::Raw(bytes) => {
                if stream.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::RawThenClose(bytes) => {
                let _ = stream.write_all(&bytes);
                return;
            }
            Reply::Silent => {
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
                return;
            }
        }
    }
}

fn read_request(stream: &mut impl Read, buf: &mut Vec<u8>, connection: usize) -> Option<Received> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end);
    let mut request = Received {
        head,
        body: Vec::new(),
        connection,
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < length {
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
    request.body = buf.drain(..length).collect();
    Some(request)
}
