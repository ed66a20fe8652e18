//! Sizing glommio's io_uring buffer arena to the memlock limit.
//!
//! Every executor registers its `io_memory` arena on three rings, which is
//! charged to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK
//! (platform.md §4). Too large an arena only logs a warning and loses fixed
//! buffers; too small a memlock limit makes every executor fail to start, so
//! that case fails fast, before any thread is spawned, with a clear message.

use std::io;

use crate::error::RuntimeError;

/// glommio refuses to create an executor below this memlock limit, root or
/// not (it reads the soft limit itself).
pub const MEMLOCK_MIN_BYTES: u64 = 512 * 1024;

/// Smallest arena glommio accepts.
pub const IO_MEMORY_MIN_BYTES: usize = 64 * 1024;

/// Largest derived arena: glommio's own default, enough for our DMA writes.
pub const IO_MEMORY_MAX_BYTES: usize = 10 * 1024 * 1024;

/// Largest arena a config may ask for explicitly.
pub const IO_MEMORY_CONFIG_MAX_BYTES: usize = 1024 * 1024 * 1024;

/// What the process may lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemlockLimit {
    /// Soft RLIMIT_MEMLOCK in bytes; `None` is unlimited.
    pub soft_bytes: Option<u64>,
    /// CAP_IPC_LOCK: registrations are not charged to the limit.
    pub ipc_lock_capable: bool,
}

/// The arena size to configure, `None` for glommio's default.
///
/// Explicit config wins. Without CAP_IPC_LOCK and with a finite limit, each
/// shard gets `soft / (4 × shards)` clamped to
/// `[IO_MEMORY_MIN_BYTES, IO_MEMORY_MAX_BYTES]`: three rings per shard plus
/// headroom for other locked memory.
pub fn io_memory_bytes(
    limit: MemlockLimit,
    shard_count: usize,
    configured_bytes: Option<usize>,
) -> Result<Option<usize>, RuntimeError> {
    assert!(shard_count > 0);
    if let Some(soft_bytes) = limit.soft_bytes {
        if soft_bytes < MEMLOCK_MIN_BYTES {
            return Err(RuntimeError::MemlockTooLow {
                limit_bytes: soft_bytes,
                required_bytes: MEMLOCK_MIN_BYTES,
            });
        }
    }
    if configured_bytes.is_some() {
        return Ok(configured_bytes);
    }
    let soft_bytes = match limit.soft_bytes {
        Some(soft_bytes) if !limit.ipc_lock_capable => soft_bytes,
        _ => return Ok(None),
    };
    let share = soft_bytes / (4 * shard_count as u64);
    let share = usize::try_from(share).unwrap_or(usize::MAX);
    Ok(Some(share.clamp(IO_MEMORY_MIN_BYTES, IO_MEMORY_MAX_BYTES)))
}

/// Reads this process's memlock limit and capability.
pub fn current_limit() -> io::Result<MemlockLimit> {
    let mut rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rlimit` is a valid, writable `struct rlimit` that outlives the
    // call; getrlimit writes only into it.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rlimit) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let soft_bytes = (rlimit.rlim_cur != libc::RLIM_INFINITY).then_some(rlimit.rlim_cur);
    Ok(MemlockLimit {
        soft_bytes,
        ipc_lock_capable: has_cap_ipc_lock(),
    })
}

/// CAP_IPC_LOCK in the effective set, from /proc (no libcap dependency).
/// Unreadable /proc falls back to "is root", the common case.
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK_BIT: u32 = 14;
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
        });
    match effective {
        Some(caps) => caps & (1 << CAP_IPC_LOCK_BIT) != 0,
        None => {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let euid = unsafe { libc::geteuid() };
            euid == 0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    fn limited(soft_kib: u64) -> MemlockLimit {
        MemlockLimit {
            soft_bytes: Some(soft_kib * KIB),
            ipc_lock_capable: false,
        }
    }

    #[test]
    fn too_low_fails_even_when_configured_or_capable() {
        let low = MemlockLimit {
            soft_bytes: Some(256 * KIB),
            ipc_lock_capable: true,
        };
        for limit in [low, limited(256)] {
            for configured in [None, Some(1 << 20)] {
                let err = io_memory_bytes(limit, 2, configured).unwrap_err();
                assert_eq!(
                    err,
                    RuntimeError::MemlockTooLow {
                        limit_bytes: 256 * KIB,
                        required_bytes: MEMLOCK_MIN_BYTES
                    }
                );
            }
        }
    }

    #[test]
    fn derived_from_limit_and_clamped() {
        // 8 MiB over 2 shards: 8 MiB / 8 = 1 MiB each.
        assert_eq!(io_memory_bytes(limited(8192), 2, None), Ok(Some(1 << 20)));
        // 512 KiB over 4 shards would be 32 KiB: clamped up to 64 KiB.
        assert_eq!(io_memory_bytes(limited(512), 4, None), Ok(Some(64 * 1024)));
        // Huge limit: clamped down to glommio's default.
        assert_eq!(
            io_memory_bytes(limited(64 * 1024 * 1024), 1, None),
            Ok(Some(IO_MEMORY_MAX_BYTES))
        );
    }

    #[test]
    fn capable_or_unlimited_keeps_glommio_default() {
        let capable = MemlockLimit {
            soft_bytes: Some(8192 * KIB),
            ipc_lock_capable: true,
        };
        assert_eq!(io_memory_bytes(capable, 2, None), Ok(None));
        let unlimited = MemlockLimit {
            soft_bytes: None,
            ipc_lock_capable: false,
        };
        assert_eq!(io_memory_bytes(unlimited, 2, None), Ok(None));
    }

    #[test]
    fn configured_wins() {
        assert_eq!(
            io_memory_bytes(limited(8192), 2, Some(256 * 1024)),
            Ok(Some(256 * 1024))
        );
    }

    #[test]
    fn reads_the_current_limit() {
        let limit = current_limit().unwrap();
        if let Some(soft) = limit.soft_bytes {
            assert!(soft > 0);
        }
    }
}
