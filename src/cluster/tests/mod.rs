mod quiesce;
mod sim;

/// What the cluster tests that need a real store share.
pub(in crate::cluster) mod support {
    use boltq_io::{Durability, StoreConfig};
    use std::path::Path;

    /// Runs `f` on a fresh executor of its own (a test's "process").
    pub fn run<F: std::future::Future<Output = ()> + 'static>(
        name: &str,
        f: impl FnOnce() -> F + Send + 'static,
    ) {
        boltq_shards::block_on(name, move || Box::pin(f())).unwrap();
    }

    /// A store that syncs every commit round, with small files (so segments seal and the
    /// front of a log can be dropped within a test).
    pub fn store_config(dir: &Path, segment_bytes: u64) -> StoreConfig {
        let mut c = StoreConfig::new(dir);
        c.durability = Durability::Always;
        c.journal_file_bytes = 8 * 1024 * 1024;
        c.log.segment_bytes = segment_bytes;
        c
    }

    /// A raft entry at `index` of `term`, with ten bytes of data that tell entries apart.
    pub fn entry(index: u64, term: u64) -> raft::prelude::Entry {
        raft::prelude::Entry {
            index,
            term,
            data: vec![index as u8; 10].into(),
            ..raft::prelude::Entry::default()
        }
    }

    pub use boltq_io::testutil::open_store;
}
