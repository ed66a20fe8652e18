//! BoltQ storage: the record codec, segment logs on io_uring direct I/O, the per-shard
//! group-commit journal, startup recovery, and the small pieces of process plumbing that need
//! glommio (iopoll warm-up, data-directory lock, shared listeners, TLS on them).
//!
//! Layout of a data directory:
//!
//! ```text
//! <data_dir>/LOCK                               flock held by the running process
//! <data_dir>/.iopoll-probe                      4 KiB probe file (platform.md §1)
//! <data_dir>/journal/<shard>/<pos>.journal      per-shard write-ahead journal
//! <data_dir>/logs/<log name>/<seq>.log|.index   per-log segments
//! ```

pub mod appender;
pub mod connect;
pub mod dirlock;
pub mod durability;
pub mod event;
pub mod file_budget;
pub mod journal;
pub mod journal_entry;
pub mod listener;
pub mod log;
pub mod peer_ack;
pub mod probe;
pub mod record;
pub mod recovery;
pub mod segment;
pub mod store;
#[doc(hidden)]
pub mod testutil;
pub mod tls;

pub use durability::Durability;
pub use log::{LogConfig, ReadError};
pub use record::Record;
pub use store::{AppendError, Appended, LogRef, Store, StoreConfig};
