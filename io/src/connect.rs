//! Outbound TCP connections (the membership service, the push webhook), so the server can
//! dial out without naming glommio.
//!
//! The connection comes back as the same [`Conn`] the listeners hand out: the HTTP client
//! above reads and writes it like any accepted socket; for `https://` it runs rustls over
//! this same connection (`src/http/client/tls.rs`).
//!
//! TCP keep-alive probes are not enabled: glommio exposes no option for them and setting
//! one by hand needs `unsafe`. Idle pooled connections are dropped by their user instead.

use crate::listener::Conn;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Up to `max` addresses for `host`: literal IPs and `localhost` directly, other names
/// through the system resolver on the blocking-thread pool (a slow resolver costs a
/// blocking thread, never the shard). Errors name the host.
pub async fn resolve(host: &str, port: u16, max: usize) -> io::Result<Vec<SocketAddr>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if bare == "localhost" {
        return Ok(vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)]);
    }
    let name = bare.to_string();
    let found = glommio::executor()
        .spawn_blocking(move || {
            (name.as_str(), port)
                .to_socket_addrs()
                .map(|addrs| addrs.take(max).collect::<Vec<_>>())
        })
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("resolve {host}: {e}")))?;
    if found.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("resolve {host}: no addresses"),
        ));
    }
    Ok(found)
}

/// Connects to `addr`, giving up after `timeout`, with `TCP_NODELAY` set: requests are
/// written whole by their sender, so Nagle's delay would only add latency.
///
/// Errors keep the kind of the underlying failure (`ConnectionRefused`, `TimedOut`, …) and
/// name the address.
pub async fn connect_tcp(addr: SocketAddr, timeout: Duration) -> io::Result<Conn> {
    if timeout.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("connect {addr}: the timeout must be above zero"),
        ));
    }
    let stream = glommio::net::TcpStream::connect_timeout(addr, timeout)
        .await
        .map_err(|e| {
            let e = io::Error::from(e);
            io::Error::new(e.kind(), format!("connect {addr}: {e}"))
        })?;
    stream
        .set_nodelay(true)
        .map_err(|e| io::Error::other(format!("set TCP_NODELAY: {e}")))?;
    Ok(Conn::plain(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    use std::io::{Read, Write};

    /// Runs `f` on a glommio executor built on the test's own thread.
    fn on_executor<T>(f: impl std::future::Future<Output = T>, name: &str) -> T {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name(name)
            .make()
            .unwrap()
            .run(f)
    }

    #[test]
    fn a_dialled_connection_carries_bytes_both_ways() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).unwrap();
            s.write_all(b"pong").unwrap();
            got
        });
        let answer = on_executor(
            async move {
                let mut conn = connect_tcp(addr, Duration::from_secs(2)).await.unwrap();
                assert!(!conn.is_tls());
                assert_eq!(conn.peer_addr().unwrap(), addr);
                conn.write_all(b"ping").await.unwrap();
                conn.flush().await.unwrap();
                let mut got = [0u8; 4];
                conn.read_exact(&mut got).await.unwrap();
                got
            },
            "connect-ok",
        );
        assert_eq!(&answer, b"pong");
        assert_eq!(&server.join().unwrap(), b"ping");
    }

    #[test]
    fn an_unresponsive_peer_ends_the_connection_after_the_bound() {
        use crate::listener::get_option;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let options = on_executor(
            async move {
                let conn = connect_tcp(addr, Duration::from_secs(2)).await.unwrap();
                conn.close_when_unresponsive(Duration::from_millis(4_500))
                    .unwrap();
                let fd = conn.raw_fd().unwrap();
                [
                    get_option(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE),
                    get_option(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
                    get_option(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
                    get_option(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT),
                    get_option(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
                ]
            },
            "connect-liveness",
        );
        // Probes every 1.5 s rounded down to whole seconds, three of them, and the bound
        // on unacknowledged data in milliseconds.
        assert_eq!(options, [1, 1, 1, 3, 4_500]);
        drop(listener);
    }

    #[test]
    fn a_refused_connection_keeps_its_kind_and_names_the_address() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let err = on_executor(
            async move {
                connect_tcp(addr, Duration::from_secs(2))
                    .await
                    .err()
                    .unwrap()
            },
            "connect-refused",
        );
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
        assert!(err.to_string().contains(&addr.to_string()), "{err}");
    }

    #[test]
    fn a_zero_timeout_is_refused_up_front() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let err = on_executor(
            async move { connect_tcp(addr, Duration::ZERO).await.err().unwrap() },
            "connect-zero",
        );
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
