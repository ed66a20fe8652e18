//! How much of what this side wrote on a TCP socket the peer's TCP has acknowledged.
//!
//! A successful write only means the kernel took the bytes: if the peer reset the
//! connection, they are discarded unsent. Whoever must know that the peer *has* some bytes
//! (durable pub/sub confirms a push only then) records a mark right after writing them
//! ([`written_mark`]) and waits until [`acked_bytes`] reaches it.
//!
//! Both count in the kernel's `tcpi_bytes_acked` units (payload bytes since the connection
//! began, never decreasing). A mark is the bytes acknowledged so far plus the bytes still in
//! the send queue (`SIOCOUTQ`: written, not yet acknowledged), read in that order so a mark
//! is never below the true end of what was written (acknowledgements arriving between the two
//! reads only raise it). Once the connection has left ESTABLISHED/CLOSE_WAIT (reset, or
//! closed by us) neither is trusted: a reset empties the send queue, which would make
//! everything look acknowledged.

use std::io;
use std::os::unix::io::RawFd;

/// `tcpi_state` values (include/net/tcp_states.h) in which the peer still acknowledges.
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;

/// The mark everything written to `fd` so far ends at; `None` when the connection is no
/// longer established (what was written may never arrive).
pub fn written_mark(fd: RawFd) -> io::Result<Option<u64>> {
    let queued = send_queue_bytes(fd)?;
    let info = tcp_info(fd)?;
    Ok(established(&info).then(|| info.tcpi_bytes_acked + queued))
}

/// Bytes of what was written to `fd` that the peer's TCP has acknowledged; `None` when the
/// connection is no longer established.
pub fn acked_bytes(fd: RawFd) -> io::Result<Option<u64>> {
    let info = tcp_info(fd)?;
    Ok(established(&info).then_some(info.tcpi_bytes_acked))
}

fn established(info: &libc::tcp_info) -> bool {
    matches!(info.tcpi_state, TCP_ESTABLISHED | TCP_CLOSE_WAIT)
}

/// Bytes written and not yet acknowledged by the peer (sent or not).
fn send_queue_bytes(fd: RawFd) -> io::Result<u64> {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (= TIOCOUTQ on Linux) writes one c_int through the pointer, which
    // points at a live local of that type; `fd` is a descriptor the caller keeps open for
    // the call (a closed or non-socket descriptor makes ioctl fail, reading no memory).
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued as *mut libc::c_int) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(queued.max(0) as u64)
}

fn tcp_info(fd: RawFd) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain integers, for which all-zero bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes (the size of `info`, a live local) and
    // stores the length written in `len`, a live local; `fd` stays open for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let needed = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8;
    if (len as usize) < needed {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's TCP_INFO has no tcpi_bytes_acked (Linux 4.1 or later needed)",
        ));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::io::AsRawFd;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (server, client)
    }

    fn wait_acked(fd: RawFd, mark: u64) -> Option<u64> {
        for _ in 0..200 {
            let acked = acked_bytes(fd).unwrap();
            if acked.is_none_or(|a| a >= mark) {
                return acked;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        acked_bytes(fd).unwrap()
    }

    #[test]
    fn bytes_the_peer_received_reach_the_mark() {
        let (mut server, mut client) = pair();
        server.write_all(&[7u8; 10_000]).unwrap();
        let mark = written_mark(server.as_raw_fd())
            .unwrap()
            .expect("established");
        let acked = wait_acked(server.as_raw_fd(), mark).expect("established");
        assert!(acked >= mark, "acked {acked} < mark {mark}");
        let mut got = vec![0u8; 10_000];
        client.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&b| b == 7));
    }

    #[test]
    fn bytes_a_peer_that_stopped_reading_could_not_take_stay_below_the_mark() {
        let (server, client) = pair();
        server.set_nonblocking(true).unwrap();
        // Fill the client's receive window and our send buffer: the tail stays unacked.
        let chunk = vec![1u8; 64 * 1024];
        let mut written = 0usize;
        while written < 64 << 20 {
            match (&server).write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let mark = written_mark(server.as_raw_fd())
            .unwrap()
            .expect("established");
        assert!(
            mark >= written as u64,
            "mark {mark} below the {written} bytes written"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        let acked = acked_bytes(server.as_raw_fd())
            .unwrap()
            .expect("established");
        assert!(
            acked < mark,
            "a peer that read nothing acknowledged everything"
        );
        drop(client);
    }

    #[test]
    fn after_a_reset_nothing_counts_as_acknowledged() {
        let (server, client) = pair();
        server.set_nonblocking(true).unwrap();
        // The peer closes with data it never read: its kernel answers with RST.
        (&server).write_all(b"unread").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(20));
        // A write into the reset socket may still "succeed" once; what follows must not
        // be reported as acknowledged.
        let _ = (&server).write(&[2u8; 1000]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _ = (&server).write(&[2u8; 1000]);
        assert_eq!(written_mark(server.as_raw_fd()).unwrap(), None);
        assert_eq!(acked_bytes(server.as_raw_fd()).unwrap(), None);
    }
}
