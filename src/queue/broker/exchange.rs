//! Exchanges and routing (v1 spec §2.5.6, §3.10): a pure table, kept apart from the per-slot
//! brokers because exchange metadata has one writer (shard 0) and is read everywhere.
//!
//! `route` returns the queues a publish goes to; the caller then publishes one copy per queue
//! through the normal work-queue path. Differences from v1: the exchange type is validated
//! at declare (v1 accepted any string and routed nothing), and everything has a limit.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Exchanges in the table, the default one included.
pub const EXCHANGES_MAX: usize = 4_096;
/// Bindings per exchange (duplicates count; v1 keeps them).
pub const BINDINGS_PER_EXCHANGE_MAX: usize = 4_096;
/// Longest binding key. Topic matching costs O(pattern words × key words); bounding both
/// sides bounds the work one publish can cause.
pub const BINDING_KEY_BYTES_MAX: usize = 1_024;
/// Longest routing key `route` accepts.
pub const ROUTING_KEY_BYTES_MAX: usize = 65_536;

/// The default exchange: direct, durable, undeletable; routes to the queue named by the key.
pub const DEFAULT_EXCHANGE: &str = "";

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeType {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeType {
    /// The type as clients send it. An empty string is `direct` (v1's default).
    pub fn parse(s: &str) -> Result<ExchangeType, String> {
        match s {
            "" | "direct" => Ok(ExchangeType::Direct),
            "fanout" => Ok(ExchangeType::Fanout),
            "topic" => Ok(ExchangeType::Topic),
            "headers" => Ok(ExchangeType::Headers),
            other => Err(format!(
                "unknown exchange type \"{other}\" (want direct, fanout, topic or headers)"
            )),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Topic => "topic",
            ExchangeType::Headers => "headers",
        }
    }
}

impl fmt::Display for ExchangeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub queue: String,
    pub binding_key: String,
    /// Headers exchanges only; empty matches every message.
    pub headers: BTreeMap<String, String>,
    /// Headers exchanges only: all binding headers must match (else any one).
    pub match_all: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub name: String,
    /// Serialised as `type`, the name clients use to declare it.
    #[serde(rename = "type", alias = "kind")]
    pub kind: ExchangeType,
    pub durable: bool,
    /// In insertion order: routing evaluates them in this order.
    pub bindings: Vec<Binding>,
}

impl Exchange {
    fn new(name: &str, kind: ExchangeType, durable: bool) -> Exchange {
        Exchange {
            name: name.to_string(),
            kind,
            durable,
            bindings: Vec::new(),
        }
    }

    fn matches(&self, b: &Binding, routing_key: &str, headers: &BTreeMap<String, String>) -> bool {
        match self.kind {
            ExchangeType::Direct => b.binding_key == routing_key,
            ExchangeType::Fanout => true,
            ExchangeType::Topic => topic_matches(&b.binding_key, routing_key),
            ExchangeType::Headers => headers_match(&b.headers, b.match_all, headers),
        }
    }
}

/// A change to the exchange table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ExchangeOp {
    Declare {
        name: String,
        kind: String,
        durable: bool,
    },
    Delete {
        name: String,
    },
    Bind(crate::queue::protocol::request::Binding),
    Unbind(crate::queue::protocol::request::Binding),
}

impl ExchangeOp {
    pub fn apply(&self, table: &mut Exchanges) -> Result<(), String> {
        match self {
            ExchangeOp::Declare {
                name,
                kind,
                durable,
            } => table.declare(name, kind, *durable),
            ExchangeOp::Delete { name } => table.delete(name),
            ExchangeOp::Bind(b) => table.bind(
                &b.exchange,
                &b.queue,
                &b.binding_key,
                &b.headers,
                b.match_all,
            ),
            ExchangeOp::Unbind(b) => table.unbind(&b.exchange, &b.queue, &b.binding_key),
        }
    }
}

/// The exchange table. Serialises (via `ExchangesSnapshot`) for WAL compaction and Raft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchanges {
    by_name: BTreeMap<String, Exchange>,
}

impl Default for Exchanges {
    fn default() -> Self {
        Exchanges::new()
    }
}

pub fn not_found_error(name: &str) -> String {
    format!("exchange \"{name}\" not found")
}

impl Exchanges {
    pub fn new() -> Exchanges {
        let default = Exchange::new(DEFAULT_EXCHANGE, ExchangeType::Direct, true);
        Exchanges {
            by_name: BTreeMap::from([(DEFAULT_EXCHANGE.to_string(), default)]),
        }
    }

    /// Declares `name` of type `kind` (`""` = direct). Redeclaring with the same type is a
    /// no-op (the durable flag is not updated, as v1); another type is refused.
    pub fn declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<(), String> {
        let kind = ExchangeType::parse(kind)?;
        if let Some(existing) = self.by_name.get(name) {
            if existing.kind != kind {
                return Err(format!(
                    "exchange \"{name}\" already exists with type {}",
                    existing.kind
                ));
            }
            return Ok(());
        }
        if self.by_name.len() >= EXCHANGES_MAX {
            return Err(format!("too many exchanges (limit {EXCHANGES_MAX})"));
        }
        self.by_name
            .insert(name.to_string(), Exchange::new(name, kind, durable));
        Ok(())
    }

    /// Deletes `name` and its bindings.
    pub fn delete(&mut self, name: &str) -> Result<(), String> {
        if name == DEFAULT_EXCHANGE {
            return Err("cannot delete the default exchange".into());
        }
        match self.by_name.remove(name) {
            Some(_) => Ok(()),
            None => Err(not_found_error(name)),
        }
    }

    /// Appends a binding (duplicates are kept, as v1; routing selects each queue once).
    /// Bindings on the default exchange are kept but never used by routing (v1).
    pub fn bind(
        &mut self,
        exchange: &str,
        queue: &str,
        binding_key: &str,
        headers: &BTreeMap<String, String>,
        match_all: bool,
    ) -> Result<(), String> {
        if binding_key.len() > BINDING_KEY_BYTES_MAX {
            return Err(format!(
                "binding key too long (limit {BINDING_KEY_BYTES_MAX} bytes)"
            ));
        }
        let ex = self
            .by_name
            .get_mut(exchange)
            .ok_or_else(|| not_found_error(exchange))?;
        if ex.bindings.len() >= BINDINGS_PER_EXCHANGE_MAX {
            return Err(format!(
                "exchange \"{exchange}\" has too many bindings (limit {BINDINGS_PER_EXCHANGE_MAX})"
            ));
        }
        ex.bindings.push(Binding {
            queue: queue.to_string(),
            binding_key: binding_key.to_string(),
            headers: headers.clone(),
            match_all,
        });
        Ok(())
    }

    /// Removes the first binding with this queue and binding key; OK if there is none.
    pub fn unbind(&mut self, exchange: &str, queue: &str, binding_key: &str) -> Result<(), String> {
        let ex = self
            .by_name
            .get_mut(exchange)
            .ok_or_else(|| not_found_error(exchange))?;
        if let Some(i) = ex
            .bindings
            .iter()
            .position(|b| b.queue == queue && b.binding_key == binding_key)
        {
            ex.bindings.remove(i);
        }
        Ok(())
    }

    /// The queues a publish to `exchange` goes to, in binding order, each at most once. The
    /// default exchange routes to the queue named `routing_key`. No match is `Ok(vec![])`.
    pub fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<Vec<String>, String> {
        if routing_key.len() > ROUTING_KEY_BYTES_MAX {
            return Err(format!(
                "routing key too long (limit {ROUTING_KEY_BYTES_MAX} bytes)"
            ));
        }
        let ex = self
            .by_name
            .get(exchange)
            .ok_or_else(|| not_found_error(exchange))?;
        if exchange == DEFAULT_EXCHANGE {
            return Ok(vec![routing_key.to_string()]);
        }
        let mut seen = BTreeSet::new();
        let mut queues = Vec::new();
        for b in &ex.bindings {
            if ex.matches(b, routing_key, headers) && seen.insert(b.queue.as_str()) {
                queues.push(b.queue.clone());
            }
        }
        Ok(queues)
    }

    pub fn get(&self, name: &str) -> Option<&Exchange> {
        self.by_name.get(name)
    }

    /// Every exchange, by name (the default one first: its name sorts first).
    pub fn iter(&self) -> impl Iterator<Item = &Exchange> {
        self.by_name.values()
    }

    pub fn snapshot(&self) -> ExchangesSnapshot {
        ExchangesSnapshot {
            exchanges: self.by_name.values().cloned().collect(),
        }
    }

    /// Rebuilds the table; the default exchange is always present afterwards (a snapshot may
    /// omit it) and cannot change type.
    pub fn restore(snapshot: ExchangesSnapshot) -> Result<Exchanges, String> {
        let mut table = Exchanges::new();
        for ex in snapshot.exchanges {
            if ex.name == DEFAULT_EXCHANGE {
                if ex.kind != ExchangeType::Direct {
                    return Err("the default exchange must be direct".into());
                }
            } else if table.by_name.contains_key(&ex.name) {
                return Err(format!("exchange \"{}\" appears twice", ex.name));
            }
            if table.by_name.len() >= EXCHANGES_MAX || ex.bindings.len() > BINDINGS_PER_EXCHANGE_MAX
            {
                return Err(format!("exchange \"{}\" exceeds a limit", ex.name));
            }
            table.by_name.insert(ex.name.clone(), ex);
        }
        Ok(table)
    }
}

/// Serialisable form of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangesSnapshot {
    pub exchanges: Vec<Exchange>,
}

impl ExchangesSnapshot {
    /// Only durable exchanges (and their bindings): what survives a restart in standalone
    /// mode, as v1 persisted only durable ones.
    pub fn durable_only(mut self) -> ExchangesSnapshot {
        self.exchanges.retain(|e| e.durable);
        self
    }
}

/// Topic-exchange match (v1 §3.10): both sides split on `.`; `*` matches exactly one word,
/// `#` zero or more words, any other word must be equal.
///
/// Greedy two-pointer match with backtracking to the last `#` (the classic glob algorithm,
/// `#` as glob `*`, `*` as glob `?`): no recursion, no allocation beyond the word lists, and
/// O(pattern words × key words) in the worst case.
pub fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = routing_key.split('.').collect();
    let (mut pi, mut ki) = (0, 0);
    // After a `#`: the pattern position following it, and the key position it last resumed at.
    let mut backtrack: Option<(usize, usize)> = None;
    while ki < k.len() {
        if pi < p.len() && p[pi] == "#" {
            backtrack = Some((pi + 1, ki));
            pi += 1;
        } else if pi < p.len() && (p[pi] == "*" || p[pi] == k[ki]) {
            pi += 1;
            ki += 1;
        } else if let Some((after_hash, resumed)) = backtrack {
            // Let the last `#` swallow one more word and retry from there.
            backtrack = Some((after_hash, resumed + 1));
            pi = after_hash;
            ki = resumed + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|w| *w == "#")
}

/// Headers-exchange match: empty binding headers match; `match_all` needs every pair present
/// and equal, otherwise one equal pair suffices.
pub fn headers_match(
    binding: &BTreeMap<String, String>,
    match_all: bool,
    headers: &BTreeMap<String, String>,
) -> bool {
    if binding.is_empty() {
        return true;
    }
    let equal = |(k, v): (&String, &String)| headers.get(k) == Some(v);
    if match_all {
        binding.iter().all(equal)
    } else {
        binding.iter().any(equal)
    }
}
