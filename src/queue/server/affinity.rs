//! Connection affinity: a connection moves, once, to the shard that owns the queues it uses.
//!
//! The kernel hands each new connection to whichever shard accepts first, so with N shards
//! a connection's queue lives elsewhere N−1 times in N, and every request then costs two
//! hops over the mesh (there and back) and work on two cores. Most clients use one queue
//! per connection (a producer of `jobs`, a consumer of `jobs`), so the connection moves to
//! the owner of its first requests' slots and is served there from then on.
//!
//! When: before the first batch that holds slot commands is dispatched. Until then the
//! connection has left nothing at any slot (no deliveries, subscriptions or parked
//! consumes), so moving it carries only its socket, the bytes read and not yet handled,
//! and a few settings of its own ([`super::dispatch::Carried`]). Where: the shard owning
//! the slots of more than half of that batch's slot commands; if none has more than half,
//! or it is this shard, the connection stays. Either way the decision is final: a
//! connection moves at most once, so it cannot be bounced between shards.
//!
//! Not moved: TLS connections (their session lives in this shard's thread), connections
//! whose first batch holds another plane's commands (they may leave state with this
//! shard's engine), and everything with `queue.connection_affinity = false`.

use super::dispatch::{slot_of_name, Carried};
use super::plane::Plane;
use crate::queue::protocol::frame::{self, Frame};
use crate::queue::protocol::request::{self, Request};
use boltq_shards::ShardId;
use std::time::Instant;

/// Most frames looked at for the decision: a batch's worth.
const FRAMES_LOOKED_AT_MAX: usize = 1024;

/// What one connection still has to decide.
pub struct Affinity {
    undecided: bool,
}

/// A connection on its way to another shard, sent over the mesh in one message.
#[derive(Debug)]
pub struct HandedOver {
    pub socket: std::os::fd::OwnedFd,
    /// Bytes read from the socket and not yet handled, in order.
    pub unread: Vec<u8>,
    pub carried: Carried,
    /// When the client connected (its AUTH deadline counts from there).
    pub connected: Instant,
    /// The shard that accepted the connection and keeps its place under the connection
    /// cap until told the connection ended, and the id it had there.
    pub origin: (ShardId, u64),
}

/// Where one request goes, for the decision.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// Served where the connection is, or everywhere alike (AUTH, PING, STATS, exchanges…).
    Anywhere,
    Slot(u16),
    /// Another plane's command: the connection stays.
    Here,
}

impl Affinity {
    pub fn new(enabled: bool) -> Affinity {
        Affinity { undecided: enabled }
    }

    /// Looks at the complete frames at the front of `inbuf`, which are about to be
    /// dispatched, and answers the shard the connection should move to before that, if
    /// any. Decides at most once (see the module's doc).
    pub fn destination(&mut self, plane: &Plane, inbuf: &[u8]) -> Option<ShardId> {
        if !self.undecided {
            return None;
        }
        let owners = match targets_of(inbuf) {
            Decision::Wait => return None,
            Decision::Stay => Vec::new(),
            Decision::Slots(slots) => slots.into_iter().map(|s| plane.owner_of(s)).collect(),
        };
        self.undecided = false;
        let here = plane.shard.id();
        majority(&owners).filter(|&shard| shard != here)
    }
}

enum Decision {
    /// No slot command yet: decide with a later batch.
    Wait,
    Stay,
    Slots(Vec<u16>),
}

/// The slots of the slot commands among the complete frames at the front of `inbuf`.
fn targets_of(inbuf: &[u8]) -> Decision {
    let mut slots = Vec::new();
    let mut at = 0;
    for _ in 0..FRAMES_LOOKED_AT_MAX {
        let Ok(Some((f, used))) = frame::decode(&inbuf[at..]) else {
            break;
        };
        at += used;
        match target(f) {
            Target::Anywhere => {}
            Target::Slot(slot) => slots.push(slot),
            Target::Here => return Decision::Stay,
        }
    }
    if slots.is_empty() {
        Decision::Wait
    } else {
        Decision::Slots(slots)
    }
}

fn target(f: Frame<'_>) -> Target {
    if f.code >= request::EXTRA_CODES_FROM {
        return Target::Here;
    }
    match request::parse(f) {
        Ok(Request::Publish(p) | Request::PublishTopic(p)) => Target::Slot(slot_of_name(&p.topic)),
        Ok(Request::Consume(c)) => Target::Slot(slot_of_name(&c.topic)),
        Ok(Request::Subscribe(s)) => Target::Slot(slot_of_name(&s.topic)),
        Ok(Request::DlqRequeue { queue, .. } | Request::DlqPurge { queue }) => {
            Target::Slot(slot_of_name(&queue))
        }
        _ => Target::Anywhere,
    }
}

/// The shard that more than half of `owners` name, if one does.
fn majority(owners: &[ShardId]) -> Option<ShardId> {
    let mut counts: Vec<(ShardId, usize)> = Vec::new();
    for &o in owners {
        match counts.iter_mut().find(|(s, _)| *s == o) {
            Some((_, n)) => *n += 1,
            None => counts.push((o, 1)),
        }
    }
    counts
        .into_iter()
        .find(|&(_, n)| n * 2 > owners.len())
        .map(|(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::protocol::frame::op;

    fn frame(code: u8, body: &str) -> Vec<u8> {
        let mut f = Vec::new();
        frame::encode(code, body.as_bytes(), &mut f);
        f
    }

    fn publish(queue: &str) -> Vec<u8> {
        frame(
            op::PUBLISH,
            &format!("{{\"topic\":\"{queue}\",\"payload\":1}}"),
        )
    }

    fn slots(d: Decision) -> Vec<u16> {
        match d {
            Decision::Slots(s) => s,
            Decision::Wait => panic!("waited"),
            Decision::Stay => panic!("stayed"),
        }
    }

    #[test]
    fn slot_commands_name_their_slots_and_the_rest_are_served_anywhere() {
        let mut buf = frame(op::AUTH, "{\"api_key\":\"k\"}");
        buf.extend(frame(op::PING, ""));
        buf.extend(publish("jobs"));
        buf.extend(frame(op::CONSUME, "{\"topic\":\"mail\"}"));
        buf.extend(frame(op::CONSUME, "{\"topic\":\"news\",\"id\":\"r\"}"));
        buf.extend(frame(request::ext_op::DLQ_PURGE, "{\"queue\":\"dead\"}"));
        assert_eq!(
            slots(targets_of(&buf)),
            vec![
                slot_of_name("jobs"),
                slot_of_name("mail"),
                slot_of_name("news"),
                slot_of_name("dead")
            ]
        );
    }

    #[test]
    fn without_a_slot_command_the_decision_waits() {
        let mut buf = frame(op::AUTH, "{\"api_key\":\"k\"}");
        buf.extend(frame(op::STATS, ""));
        assert!(matches!(targets_of(&buf), Decision::Wait));
        assert!(matches!(targets_of(&[]), Decision::Wait));
    }

    #[test]
    fn an_incomplete_frame_is_not_looked_at() {
        let whole = publish("jobs");
        assert!(matches!(
            targets_of(&whole[..whole.len() - 1]),
            Decision::Wait
        ));
    }

    #[test]
    fn another_planes_command_keeps_the_connection_here() {
        let mut buf = publish("jobs");
        buf.extend(frame(request::EXTRA_CODES_FROM, "{}"));
        assert!(matches!(targets_of(&buf), Decision::Stay));
    }

    #[test]
    fn the_destination_is_the_owner_of_more_than_half() {
        assert_eq!(majority(&[1]), Some(1));
        assert_eq!(majority(&[1, 1, 0]), Some(1));
        assert_eq!(majority(&[0, 1]), None);
        assert_eq!(majority(&[0, 1, 2, 2]), None);
        assert_eq!(majority(&[]), None);
    }
}
