//! The data-directory lock: two processes never share one data directory.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

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
}
