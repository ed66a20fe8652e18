//! Helpers shared by this crate's tests and by tests of the crates above it.

/// A tiny deterministic PRNG (xorshift64*): tests print their seed and replay it exactly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }
}

/// A fresh directory on the real disk (not tmpfs, so the direct-I/O paths are exercised),
/// removed when dropped.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = std::env::var_os("BOLTQ_TEST_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("boltq-tests"));
        let dir = base.join(format!("{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create test dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Recovers and opens the store at `c` on this executor, as a server's startup does (the
/// iopoll probe first: direct-I/O reads fail without it on some disks, platform.md §1).
pub async fn open_store(c: &crate::StoreConfig) -> std::rc::Rc<crate::Store> {
    crate::probe::warm_iopoll(&c.data_dir)
        .await
        .expect("iopoll probe");
    crate::recovery::recover(&c.data_dir, &c.log)
        .await
        .expect("recover the data dir");
    crate::Store::open(c.clone(), 0)
        .await
        .expect("open the store")
}
