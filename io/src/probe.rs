//! The iopoll warm-up (platform.md §1).
//!
//! glommio decides per executor thread and per device whether direct reads may go to the
//! poll ring, by probing with the first file it opens. An empty first file makes it decide
//! "pollable", and every later read on this disk then fails with EOPNOTSUPP. Opening and
//! reading a non-empty probe file first, on every shard, before any other direct-I/O file,
//! makes the probe come out right.

use std::io;
use std::path::Path;

const PROBE_FILE: &str = ".iopoll-probe";
const PROBE_BYTES: usize = 4096;

/// Must be awaited on every executor before it opens any other direct-I/O file on the
/// data directory's device.
pub async fn warm_iopoll(data_dir: &Path) -> io::Result<()> {
    let path = data_dir.join(PROBE_FILE);
    let ok = std::fs::metadata(&path)
        .map(|m| m.len() >= PROBE_BYTES as u64)
        .unwrap_or(false);
    if !ok {
        // Startup only: a blocking write of 4 KiB before the shard serves anything.
        std::fs::write(&path, [0xA5u8; PROBE_BYTES])?;
        std::fs::File::open(&path)?.sync_all()?;
    }
    let file = glommio::io::DmaFile::open(&path)
        .await
        .map_err(|e| io::Error::other(format!("iopoll probe open {}: {e}", path.display())))?;
    let read = file
        .read_at_aligned(0, PROBE_BYTES)
        .await
        .map_err(|e| io::Error::other(format!("iopoll probe read {}: {e}", path.display())))?;
    if read.len() != PROBE_BYTES {
        return Err(io::Error::other("iopoll probe read came back short"));
    }
    file.close()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(())
}
