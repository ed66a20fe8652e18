//! What a shard remembers of the nodes it hears relay frames from: whether each is new,
//! restarted or back from silence (ask it for all its devices until its answer ends), and
//! which went silent (drop what it reported).

use super::{PEER_SILENT_MS_MAX, REFRESH_ASK_WINDOW_MS};
use std::collections::BTreeMap;

/// What hearing from a node means for the devices it reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// As before.
    Known,
    /// Heard for the first time, or again after it was taken for gone: ask it for all its
    /// devices (what it reported meanwhile never arrived, or was dropped).
    Returned,
    /// Heard from a new process of the node: drop what the old one reported, then ask.
    Restarted,
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    boot: u64,
    heard_ns: i64,
    /// Taken for gone (not heard for `PEER_SILENT_MS_MAX`).
    silent: bool,
    /// When it last returned (see `Peers::returning`).
    returned_ns: i64,
    /// Its answer to this shard's refresh ask came in full since it last returned.
    refreshed: bool,
}

/// The nodes a shard hears from, by node id. Bounded by the cluster's members (a peer is
/// only ever a node whose link delivered a frame).
#[derive(Debug, Default)]
pub struct Peers {
    known: BTreeMap<u64, Peer>,
}

impl Peers {
    /// Notes a frame from `node` whose process drew `boot`.
    pub fn heard(&mut self, node: u64, boot: u64, now_ns: i64) -> Heard {
        let before = self.known.get(&node).copied();
        let heard = match before {
            None => Heard::Returned,
            Some(p) if p.boot != boot => Heard::Restarted,
            Some(p) if p.silent => Heard::Returned,
            Some(_) => Heard::Known,
        };
        let (returned_ns, refreshed) = match (heard, before) {
            (Heard::Known, Some(p)) => (p.returned_ns, p.refreshed),
            _ => (now_ns, false),
        };
        let fresh = Peer {
            boot,
            heard_ns: now_ns,
            silent: false,
            returned_ns,
            refreshed,
        };
        self.known.insert(node, fresh);
        heard
    }

    /// Notes that `node` ended its answer to a refresh ask (`relay::RelayBody::Refreshed`)
    /// in a frame `heard` says was not the one it returned with: an answer that arrives as
    /// the first frame after a silence came before it (what it held was then dropped), so
    /// it does not count.
    pub fn refreshed(&mut self, node: u64, heard: Heard) {
        if heard != Heard::Known {
            return;
        }
        if let Some(p) = self.known.get_mut(&node) {
            p.refreshed = true;
        }
    }

    /// The nodes that returned, have not answered a refresh ask in full yet, are not
    /// silent and returned within `REFRESH_ASK_WINDOW_MS`: asked for their devices again
    /// (`relay::REFRESH_ASK_WINDOW_MS` says why).
    pub fn returning(&self, now_ns: i64) -> Vec<u64> {
        let window_ns = REFRESH_ASK_WINDOW_MS as i64 * 1_000_000;
        self.known
            .iter()
            .filter(|(_, p)| {
                !p.silent && !p.refreshed && now_ns.saturating_sub(p.returned_ns) <= window_ns
            })
            .map(|(node, _)| *node)
            .collect()
    }

    /// The nodes heard from and not taken for gone: those a question waits for.
    pub fn live(&self) -> usize {
        self.known.values().filter(|p| !p.silent).count()
    }

    /// The nodes that just went silent (not heard for `PEER_SILENT_MS_MAX`): each is
    /// reported once, until it is heard again.
    pub fn silent(&mut self, now_ns: i64) -> Vec<u64> {
        let limit_ns = PEER_SILENT_MS_MAX as i64 * 1_000_000;
        let mut out = Vec::new();
        for (node, p) in &mut self.known {
            if !p.silent && now_ns.saturating_sub(p.heard_ns) > limit_ns {
                p.silent = true;
                out.push(*node);
            }
        }
        out
    }
}
