//! Which topics exist and how many partitions each has.
//!
//! A topic's partition count is fixed when it is created and recorded in a small manifest
//! (`logs/streams/<encoded topic>/manifest`, JSON) before its first record is appended, so
//! the count survives restarts even when the configured defaults change. Shard 0 is the one
//! writer: creations are serialised there, quotas are enforced there, and every other shard
//! receives each new topic as a one-way message. Every shard keeps a read copy.

use crate::messaging::topic;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Topics that may exist at once; creation beyond it is refused (a bound on directories,
/// files and memory whatever users do).
pub const TOPICS_MAX: usize = 1_000_000;
/// Topic creations one user may make in a burst, then `TOPIC_CREATES_PER_USER_PER_MIN`.
pub const TOPIC_CREATES_PER_USER_BURST: u32 = 200;
pub const TOPIC_CREATES_PER_USER_PER_MIN: u32 = 60;
/// Users whose creation budget is tracked at once (idle buckets are dropped first).
pub const CREATE_BUCKETS_MAX: usize = 100_000;

/// Partitions one topic may have (as `messaging.stream.default_partitions` allows).
pub const PARTITIONS_MAX: u32 = 4096;

const MANIFEST_FILE: &str = "manifest";

/// The directory holding every stream topic (under the storage logs root).
pub fn streams_root(data_dir: &Path) -> PathBuf {
    boltq_io::store::logs_root(data_dir).join("streams")
}

/// Reads every topic manifest under `data_dir` (startup, before the shards run).
/// Directories that are not encoded topic names are skipped; a topic directory with an
/// unreadable or invalid manifest is an error naming the file.
pub fn load(data_dir: &Path) -> Result<HashMap<String, u32>, String> {
    let root = streams_root(data_dir);
    let mut topics = HashMap::new();
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(topics),
        Err(e) => return Err(format!("reading {}: {e}", root.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", root.display()))?;
        let Some(name) = entry.file_name().to_str().and_then(topic::decode_dir) else {
            continue;
        };
        let path = entry.path().join(MANIFEST_FILE);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            // Created but never registered (a crash between mkdir and the manifest's
            // rename): no record can exist without a manifest, so nothing is lost.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let partitions =
            parse_manifest(&text).map_err(|e| format!("topic manifest {}: {e}", path.display()))?;
        topics.insert(name, partitions);
    }
    Ok(topics)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    partitions: u32,
    created_at_ns: i64,
}

fn parse_manifest(bytes: &[u8]) -> Result<u32, String> {
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if m.partitions == 0 || m.partitions > PARTITIONS_MAX {
        return Err(format!(
            "partitions = {} (must be 1..={})",
            m.partitions, PARTITIONS_MAX
        ));
    }
    Ok(m.partitions)
}

/// Writes a topic's manifest durably: temp file, fsync, rename, fsync of the directory.
/// Blocking: run it on the blocking pool.
pub fn write_manifest(
    data_dir: &Path,
    name: &str,
    partitions: u32,
    now_ns: i64,
) -> Result<(), String> {
    let dir = streams_root(data_dir).join(topic::encode_dir(name));
    let run = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join("manifest.tmp");
        let body = serde_json::to_vec(&Manifest {
            partitions,
            created_at_ns: now_ns,
        })
        .map_err(std::io::Error::other)?;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.sync_data()?;
        std::fs::rename(&tmp, dir.join(MANIFEST_FILE))?;
        std::fs::File::open(&dir)?.sync_all()?;
        if let Some(parent) = dir.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
        Ok(())
    };
    run().map_err(|e| format!("writing the manifest of topic {name:?}: {e}"))
}

/// Per-user token buckets for topic creation (shard 0 only).
#[derive(Default)]
pub struct CreateQuota {
    buckets: HashMap<String, (f64, i64)>,
}

impl CreateQuota {
    /// Takes one creation from `user`'s budget, or says no.
    pub fn take(&mut self, user: &str, now_ns: i64) -> bool {
        if self.buckets.len() >= CREATE_BUCKETS_MAX && !self.buckets.contains_key(user) {
            self.forget_full(now_ns);
            if self.buckets.len() >= CREATE_BUCKETS_MAX {
                return false;
            }
        }
        let burst = f64::from(TOPIC_CREATES_PER_USER_BURST);
        let (tokens, at) = self
            .buckets
            .entry(user.to_string())
            .or_insert((burst, now_ns));
        let refill =
            (now_ns - *at).max(0) as f64 / 60e9 * f64::from(TOPIC_CREATES_PER_USER_PER_MIN);
        *tokens = (*tokens + refill).min(burst);
        *at = now_ns;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Drops buckets that have refilled completely: they carry no information.
    fn forget_full(&mut self, now_ns: i64) {
        let burst = f64::from(TOPIC_CREATES_PER_USER_BURST);
        self.buckets.retain(|_, (tokens, at)| {
            let refill =
                (now_ns - *at).max(0) as f64 / 60e9 * f64::from(TOPIC_CREATES_PER_USER_PER_MIN);
            *tokens + refill < burst
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_allows_a_burst_then_refills_per_minute() {
        let mut q = CreateQuota::default();
        for _ in 0..TOPIC_CREATES_PER_USER_BURST {
            assert!(q.take("alice", 0));
        }
        assert!(!q.take("alice", 0), "burst exhausted");
        assert!(q.take("bob", 0), "quotas are per user");
        let one_token_ns = 60_000_000_000 / i64::from(TOPIC_CREATES_PER_USER_PER_MIN);
        assert!(q.take("alice", one_token_ns + 1));
        assert!(!q.take("alice", one_token_ns + 2));
    }

    #[test]
    fn manifests_round_trip_and_bad_ones_are_errors_naming_the_file() {
        let dir = boltq_io::testutil::TempDir::new("catalog");
        write_manifest(dir.path(), "chat.direct.alice:bob", 16, 1).unwrap();
        write_manifest(dir.path(), "system.news", 3, 1).unwrap();
        // A stray directory that is not an encoded name is skipped.
        std::fs::create_dir_all(streams_root(dir.path()).join("%ZZ")).unwrap();
        let topics = load(dir.path()).unwrap();
        assert_eq!(topics.len(), 2);
        assert_eq!(topics["chat.direct.alice:bob"], 16);
        assert_eq!(topics["system.news"], 3);

        let bad = streams_root(dir.path())
            .join(topic::encode_dir("system.news"))
            .join(MANIFEST_FILE);
        std::fs::write(&bad, b"{\"partitions\":0,\"created_at_ns\":1}").unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(
            err.contains("manifest") && err.contains("partitions"),
            "{err}"
        );
    }
}
