//! The cache on the shards: each key lives on the owner of its slot; single-key operations
//! go to that shard, whole-cache ones (keys, entries, flush, stats) ask every shard and
//! merge. Expired keys are swept by a task that sleeps until the next expiry (never while
//! no key has a TTL).

use super::{CacheError, CacheLimits, CacheStats, CacheStore, Entry, EntryPage};
use boltq_io::event::Event;
use boltq_shards::{Incoming, MeshError, Port};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// How long a shard waits for another shard's cache answer.
pub const REMOTE_TIMEOUT_MS: u64 = 10_000;
/// Most entries `/cache/entries` returns (v1: 100).
pub const ENTRIES_MAX: usize = 100;

/// One cache operation.
#[derive(Debug, Clone)]
pub enum CacheOp {
    Get {
        key: String,
    },
    Set {
        key: String,
        value_json: String,
        ttl_ms: i64,
    },
    Del {
        key: String,
    },
    Exists {
        key: String,
    },
    Expire {
        key: String,
        ttl_ms: i64,
    },
    Incr {
        key: String,
        delta: i64,
    },
    Flush,
    Keys {
        pattern: String,
    },
    Entries {
        pattern: String,
        search: String,
    },
    Stats,
}

impl CacheOp {
    /// The key a single-key operation is about; `None` for whole-cache ones.
    fn key(&self) -> Option<&str> {
        match self {
            CacheOp::Get { key }
            | CacheOp::Set { key, .. }
            | CacheOp::Del { key }
            | CacheOp::Exists { key }
            | CacheOp::Expire { key, .. }
            | CacheOp::Incr { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// What an operation gave.
#[derive(Debug, Clone)]
pub enum CacheAnswer {
    Entry(Option<Entry>),
    Done(Result<(), CacheError>),
    Found(bool),
    Int(Result<i64, CacheError>),
    Count(usize),
    Keys(Vec<String>),
    Entries(EntryPage),
    Stats(CacheStats),
    /// Another shard did not answer.
    Unavailable(String),
}

/// The cache's view of its shard: it asks with [`CacheOp`]s and answers with
/// [`CacheAnswer`]s.
pub type CachePort = Port<CacheOp, CacheAnswer>;

pub struct CacheService {
    shard: CachePort,
    store: RefCell<CacheStore>,
    expiry_changed: Event,
    /// Least time between two sweeps (`cache.cleanup_sec`): expired keys are invisible at
    /// once; sweeping only frees their memory, so it may wait.
    sweep_interval_ms: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl CacheService {
    pub fn start(
        shard: CachePort,
        limits: CacheLimits,
        sweep_interval_ms: u64,
    ) -> Rc<CacheService> {
        let service = Rc::new(CacheService {
            shard,
            store: RefCell::new(CacheStore::new(limits)),
            expiry_changed: Event::default(),
            sweep_interval_ms,
        });
        boltq_shards::spawn(Rc::clone(&service).sweep_loop()).detach();
        service
    }

    fn owner_of(&self, key: &str) -> usize {
        boltq_shards::owner_of_queue(key, self.shard.count())
    }

    /// Runs `op` where it belongs and returns its (merged) answer.
    pub async fn run(&self, op: CacheOp) -> CacheAnswer {
        if let Some(key) = op.key() {
            let owner = self.owner_of(key);
            if owner == self.shard.id() {
                return self.apply_local(&op);
            }
            return self.ask(owner, op).await;
        }
        let mut answers = vec![self.apply_local(&op)];
        for dest in (0..self.shard.count()).filter(|&d| d != self.shard.id()) {
            answers.push(self.ask(dest, op.clone()).await);
        }
        merge(answers)
    }

    async fn ask(&self, dest: usize, op: CacheOp) -> CacheAnswer {
        match self.shard.request(dest, op, REMOTE_TIMEOUT_MS).await {
            Ok(a) => a,
            Err(MeshError::UnexpectedReply) => {
                CacheAnswer::Unavailable("unexpected reply between shards".into())
            }
            Err(e) => CacheAnswer::Unavailable(format!("shard {dest} did not answer: {e}")),
        }
    }

    pub fn apply_local(&self, op: &CacheOp) -> CacheAnswer {
        let now = now_ms();
        let mut store = self.store.borrow_mut();
        let answer = match op {
            CacheOp::Get { key } => CacheAnswer::Entry(store.get(key, now)),
            CacheOp::Set {
                key,
                value_json,
                ttl_ms,
            } => CacheAnswer::Done(store.set(key, value_json, *ttl_ms, now)),
            CacheOp::Del { key } => CacheAnswer::Found(store.del(key, now)),
            CacheOp::Exists { key } => CacheAnswer::Found(store.exists(key, now)),
            CacheOp::Expire { key, ttl_ms } => CacheAnswer::Found(store.expire(key, *ttl_ms, now)),
            CacheOp::Incr { key, delta } => CacheAnswer::Int(store.incr(key, *delta, now)),
            CacheOp::Flush => CacheAnswer::Count(store.flush(now)),
            CacheOp::Keys { pattern } => CacheAnswer::Keys(store.keys(pattern, now)),
            CacheOp::Entries { pattern, search } => {
                CacheAnswer::Entries(store.entries(pattern, search, ENTRIES_MAX, now))
            }
            CacheOp::Stats => CacheAnswer::Stats(store.stats()),
        };
        drop(store);
        if matches!(
            op,
            CacheOp::Set { .. } | CacheOp::Expire { .. } | CacheOp::Incr { .. }
        ) {
            self.expiry_changed.notify();
        }
        answer
    }

    /// The mesh handler's part for the cache.
    pub fn on_mesh(&self, incoming: Incoming<CacheOp>) {
        if let Incoming::Request { msg: op, token } = incoming {
            let answer = self.apply_local(&op);
            self.shard.reply(token, answer);
        }
    }

    async fn sweep_loop(self: Rc<Self>) {
        let mut last_sweep_ms = 0u64;
        loop {
            let ticket = self.expiry_changed.ticket();
            let next = self.store.borrow().next_expiry_ms();
            let next = next.map(|at| at.max(last_sweep_ms + self.sweep_interval_ms));
            let Some(at_ms) = next else {
                self.expiry_changed.wait(ticket).await;
                continue;
            };
            let now = now_ms();
            if at_ms > now {
                let sleep = boltq_shards::sleep(Duration::from_millis(at_ms - now));
                futures_lite::future::or(sleep, self.expiry_changed.wait(ticket)).await;
                continue;
            }
            self.store.borrow_mut().sweep_expired(now);
            last_sweep_ms = now;
        }
    }
}

/// Combines the per-shard answers of a whole-cache operation.
fn merge(answers: Vec<CacheAnswer>) -> CacheAnswer {
    let mut keys = Vec::new();
    let mut pages = Vec::new();
    let mut stats = CacheStats::default();
    let mut count = 0usize;
    let mut kind = None;
    for a in answers {
        match a {
            CacheAnswer::Keys(k) => {
                keys.extend(k);
                kind = Some(0);
            }
            CacheAnswer::Entries(p) => {
                pages.push(p);
                kind = Some(1);
            }
            CacheAnswer::Stats(s) => {
                stats.merge(&s);
                kind = Some(2);
            }
            CacheAnswer::Count(n) => {
                count += n;
                kind = Some(3);
            }
            other @ CacheAnswer::Unavailable(_) => return other,
            other => return other,
        }
    }
    match kind {
        Some(0) => {
            keys.sort();
            CacheAnswer::Keys(keys)
        }
        Some(1) => CacheAnswer::Entries(EntryPage::merge(pages, ENTRIES_MAX)),
        Some(2) => CacheAnswer::Stats(stats),
        _ => CacheAnswer::Count(count),
    }
}
