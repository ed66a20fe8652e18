//! A stand-in for a service the server calls out to (membership service, push webhook): a
//! std thread accepting on 127.0.0.1:0, one short-lived thread per connection running the
//! test's handler on a blocking socket. Stopping (or dropping) it closes the listener, so
//! later connects are refused — how the tests play an outage.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One TLS connection of a stand-in service.
pub type TlsConn = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

pub struct StubServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StubServer {
    /// Starts accepting; `handle` gets each connection, already in blocking mode. `what`
    /// names the service in a failure.
    pub fn start(
        what: &'static str,
        handle: impl Fn(TcpStream) + Send + Sync + 'static,
    ) -> StubServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        let handle = Arc::new(handle);
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        let handle = Arc::clone(&handle);
                        std::thread::spawn(move || handle(conn));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => panic!("{what} accept: {e}"),
                }
            }
        });
        StubServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// Like [`StubServer::start`], but the service speaks TLS with `config`: `handle` gets
    /// the server side of the session, whose handshake runs as it first reads.
    pub fn start_tls(
        what: &'static str,
        config: Arc<rustls::ServerConfig>,
        handle: impl Fn(TlsConn) + Send + Sync + 'static,
    ) -> StubServer {
        StubServer::start(what, move |conn| {
            let session = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            handle(rustls::StreamOwned::new(session, conn))
        })
    }

    /// Closes the listener: from now on connecting is refused.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        self.stop();
    }
}
