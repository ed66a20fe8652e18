//! `subscribe` (§2.5.2): check, then stream a partition from the asked position, the
//! device's cursor or the head; `gap` first when the position is below retention.

use super::access::{allowed, forbid};
use super::reply::internal;
use super::resolve::{cursor_key, resolve};
use crate::messaging::engine::mesh::StreamError;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode};
use crate::messaging::gateway::session::SubKey;
use crate::messaging::gateway::{subscription, text};
use crate::messaging::identity::acl::Action;
use std::rc::Rc;

pub(super) async fn subscribe(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    partition: Option<u32>,
    from_seq: u64,
) {
    let Some((_, p)) = resolve(c, id, topic_name, partition) else {
        return;
    };
    if !allowed(c, topic_name, Action::Read).await {
        return forbid(c, id);
    }
    let key: SubKey = (topic_name.to_string(), p);
    let replacing = c.subs.borrow().contains_key(&key);
    if !replacing && c.subs.borrow().len() >= c.gw.settings.max_subscriptions {
        c.send_frame(text(|o| {
            frame::error(
                o,
                id,
                ErrorCode::RateLimited,
                "subscription limit reached",
                false,
            )
        }));
        return;
    }
    let from = if from_seq > 0 { Some(from_seq) } else { None };
    if let Err(e) = start_subscription(c, id, key, from, true).await {
        internal(c, id, &e);
    }
}

/// Starts streaming `key` at `from` (else the device's cursor, else the head); answers with
/// `gap` and `ack` when `reply`.
pub(super) async fn start_subscription(
    c: &Rc<Connection>,
    id: &str,
    key: SubKey,
    from: Option<u64>,
    reply: bool,
) -> Result<(), StreamError> {
    let first = subscription::acquire(&c.gw, &key);
    let bounds = c.gw.engine.read(&key.0, key.1, u64::MAX, 1, first).await;
    let bounds = match bounds {
        Ok(b) => b,
        Err(e) => {
            subscription::release(&c.gw, &key);
            return Err(e);
        }
    };
    let from = match from {
        Some(f) => Some(f),
        None => match cursor_key(c, &key) {
            Some(k) => c.gw.engine.cursor(k).await.ok().flatten(),
            None => None,
        },
    };
    // A position past the head waits for nothing that can come: clamp it (spec §18 G14).
    let mut start = from.unwrap_or(bounds.next_seq).min(bounds.next_seq);
    if start < bounds.first_seq {
        c.send_frame(text(|o| {
            frame::gap(
                o,
                id,
                &key.0,
                key.1,
                bounds.first_seq,
                bounds.next_seq,
                "requested position was removed by retention",
            )
        }));
        start = bounds.first_seq;
    }
    if let Some(sid) = c.session.borrow().as_ref() {
        c.gw.sessions
            .borrow_mut()
            .set_position(sid, c.id, key.clone(), start);
    }
    if reply {
        c.send_frame(text(|o| {
            frame::subscribe_ack(
                o,
                id,
                &key.0,
                key.1,
                start,
                bounds.first_seq,
                bounds.next_seq,
            )
        }));
    }
    let task = boltq_shards::spawn(subscription::stream(Rc::clone(c), key.clone(), start));
    if let Some(old) = c.subs.borrow_mut().insert(key.clone(), task) {
        drop(old);
        subscription::release(&c.gw, &key);
    }
    Ok(())
}
