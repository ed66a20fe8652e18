//! The data-directory lock: two processes never share one data directory.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often a start that found the lock held tries again.
const LOCK_RETRY_MS: u64 = 20;

/// Holds an exclusive `flock` on `<data_dir>/LOCK` until dropped (or the process dies: the
/// kernel releases flocks of dead processes, so a kill -9 never leaves a stale lock).
pub struct DirLock {
    _file: File,
    path: PathBuf,
}

impl DirLock {
    pub fn acquire(data_dir: &Path) -> io::Result<DirLock> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join("LOCK");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        // SAFETY: flock takes a valid open descriptor (owned by `file`, alive for the call)
        // and plain integer flags; it touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "data directory {} is locked by another running boltq process",
                        data_dir.display()
                    ),
                ));
            }
            return Err(err);
        }
        Ok(DirLock { _file: file, path })
    }

    /// As `acquire`, but while another process holds the lock, tries again for up to
    /// `wait`: a process killed with SIGKILL holds its files (and so the lock) until the
    /// kernel has torn it down, which in-flight io_uring requests delay past the moment it
    /// was reaped, so a restart right after a kill would otherwise fail. Says once, in the
    /// log, why the start waits.
    pub fn acquire_waiting(data_dir: &Path, wait: Duration) -> io::Result<DirLock> {
        let deadline = Instant::now() + wait;
        let mut told = false;
        loop {
            match DirLock::acquire(data_dir) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    if !told {
                        log::warn!(
                            "data directory {} is locked by another boltq process; waiting up \
                             to {} ms for it to exit (a process killed just now keeps the lock \
                             until the kernel has released its files)",
                            data_dir.display(),
                            wait.as_millis()
                        );
                        told = true;
                    }
                    std::thread::sleep(Duration::from_millis(LOCK_RETRY_MS));
                }
                other => return other,
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_until_first_drops() {
        let dir = crate::testutil::TempDir::new("dirlock");
        let first = DirLock::acquire(dir.path()).unwrap();
        let err = DirLock::acquire(dir.path())
            .err()
            .expect("second lock refused");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains("locked by another"));
        drop(first);
        DirLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_waiting_start_gets_the_lock_once_its_holder_lets_go() {
        let dir = crate::testutil::TempDir::new("dirlockwait");
        let first = DirLock::acquire(dir.path()).unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
        });
        let started = Instant::now();
        DirLock::acquire_waiting(dir.path(), Duration::from_secs(10)).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
        holder.join().unwrap();
    }

    #[test]
    fn a_waiting_start_gives_up_after_its_bound() {
        let dir = crate::testutil::TempDir::new("dirlockbound");
        let _first = DirLock::acquire(dir.path()).unwrap();
        let started = Instant::now();
        let err = DirLock::acquire_waiting(dir.path(), Duration::from_millis(200))
            .err()
            .expect("still held");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains("locked by another"));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }
}
