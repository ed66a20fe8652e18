//! The little of Linux the event loop needs: CLOCK_MONOTONIC, epoll, and a timerfd for the
//! open-loop send schedule (epoll's own timeout has millisecond resolution, too coarse to
//! pace sends at hundreds of thousands per second without bursts).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, RawFd};

/// Nanoseconds of CLOCK_MONOTONIC: the clock of send stamps, schedules and deadlines, and the
/// one timerfd deadlines are absolute in.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `ts`; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Starts a TCP connect without waiting for it: the socket becomes writable when the
/// handshake is done (then `take_error` says whether it worked). Thousands of devices connect
/// from one loop thread, so no connect may block it.
pub fn connect_nonblocking(addr: &SocketAddr) -> io::Result<TcpStream> {
    let (family, storage, len) = sockaddr(addr);
    // SAFETY: plain syscall; the fd is owned by the TcpStream right after.
    let fd = check(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` is a fresh socket nobody else owns.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: `storage` holds a sockaddr of `len` bytes for `family`.
    let ret = unsafe { libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(stream)
}

fn sockaddr(addr: &SocketAddr) -> (libc::c_int, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            (libc::AF_INET, storage, len)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            (libc::AF_INET6, storage, len)
        }
    }
}

/// Makes the next close of `fd` abortive (SO_LINGER 0: the peer gets a RST, no FIN and no
/// TIME_WAIT): what a device that loses its network looks like from the server.
pub fn reset_on_close(fd: RawFd) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` outlives the call; the kernel copies it.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub struct Epoll {
    fd: RawFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the fd is owned by the returned value.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll { fd })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` outlives the call; the kernel copies it.
        check(unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) }).map(drop)
    }

    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1 = forever); returns the ready events.
    pub fn wait<'a>(
        &self,
        events: &'a mut [libc::epoll_event],
        timeout_ms: i32,
    ) -> io::Result<&'a [libc::epoll_event]> {
        // SAFETY: the kernel writes at most `events.len()` entries into the slice.
        let n = unsafe {
            libc::epoll_wait(
                self.fd,
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                timeout_ms,
            )
        };
        match check(n) {
            Ok(n) => Ok(&events[..n as usize]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(&events[..0]),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

/// A one-shot CLOCK_MONOTONIC timer whose expiry makes its fd readable.
pub struct Timer {
    fd: RawFd,
    armed_at: Option<u64>,
}

impl Timer {
    pub fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall; the fd is owned by the returned value.
        let fd = check(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        Ok(Timer { fd, armed_at: None })
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Fires at `deadline_ns` (absolute, [`now_ns`]'s clock); a no-op if already armed for it.
    pub fn arm(&mut self, deadline_ns: u64) -> io::Result<()> {
        if self.armed_at == Some(deadline_ns) {
            return Ok(());
        }
        // A zero it_value would disarm the timer; 1 ns is in the past and fires at once.
        let at = deadline_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at / 1_000_000_000) as libc::time_t,
                tv_nsec: (at % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` outlives the call; a null old_value is allowed.
        check(unsafe {
            libc::timerfd_settime(
                self.fd,
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })?;
        self.armed_at = Some(deadline_ns);
        Ok(())
    }

    /// Clears the readable state after it fired.
    pub fn consume(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `buf`; EAGAIN (not expired) is fine to ignore.
        unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        self.armed_at = None;
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn nonblocking_connect_then_reset() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = connect_nonblocking(&l.local_addr().unwrap()).unwrap();
        let (mut server, _) = l.accept().unwrap();
        // Loopback handshakes complete at once; the socket is writable and error-free.
        assert!(c.take_error().unwrap().is_none());
        c.set_nonblocking(false).unwrap();
        c.write_all(b"hi").unwrap();
        let mut b = [0u8; 2];
        server.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hi");
        reset_on_close(std::os::fd::AsRawFd::as_raw_fd(&c)).unwrap();
        drop(c);
        let err = server.read(&mut b).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    }
}
