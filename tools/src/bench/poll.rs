//! The little of Linux the event loop needs: CLOCK_MONOTONIC, epoll, and a timerfd for the
//! open-loop send schedule (epoll's own timeout has millisecond resolution, too coarse to
//! pace sends at hundreds of thousands per second without bursts).

use std::io;
use std::os::fd::RawFd;

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
