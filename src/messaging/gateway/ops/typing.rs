//! `typing` (§2.5.7, §9.3): an implicit listen on the typing topic, one token of the
//! sender's budget (asked of the shard owning it), then the signal to the topic's owner.

use super::access::{allowed, forbid};
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode};
use crate::messaging::gateway::{text, GatewayMsg};
use crate::messaging::identity::acl::Action;
use crate::messaging::presence;
use crate::messaging::signals::{self, Signal, SignalMsg};
use crate::messaging::topic;
use std::rc::Rc;

/// The `typing` op (§2.5.7): write access to `typing.<conversation>`, an implicit listen on
/// first use, one token of the sender's budget, then the signal goes to the topic's owner.
pub(super) async fn typing(c: &Rc<Connection>, id: &str, conversation: &str, on: bool) {
    let topic_name = topic::typing_topic(conversation);
    if let Err(e) = topic::validate_topic(&topic_name) {
        return c.send_error(id, ErrorCode::BadRequest, &e.to_string());
    }
    if !allowed(c, &topic_name, Action::Write).await {
        return forbid(c, id);
    }
    listen_typing(c, &topic_name);
    let user = c.user();
    let Ok(granted) = take_signal_token(c, &signals::limiter_key(&user, c.id)).await else {
        return c.send_error(id, ErrorCode::Internal, "rate limiter unreachable; retry");
    };
    if !granted {
        c.gw.stats.borrow_mut().signals_limited += 1;
        return c.send_frame(text(|o| {
            frame::error(
                o,
                id,
                ErrorCode::RateLimited,
                "typing signals are rate limited",
                true,
            )
        }));
    }
    let kind = if on {
        signals::KIND_TYPING
    } else {
        signals::KIND_STOP_TYPING
    };
    let signal = Signal {
        topic: topic_name.clone(),
        sender: user,
        kind: kind.to_string(),
        headers: Vec::new(),
        payload: Vec::new(),
        at_ns: boltq_io::store::now_ns(),
    };
    let payload_max = c.gw.ephemeral.settings.borrow().signals.max_payload as usize;
    if let Err(e) = signals::validate(&signal, payload_max) {
        return c.send_error(id, ErrorCode::BadRequest, &e.to_string());
    }
    c.gw.signal_to_owner(&topic_name, SignalMsg::Publish(signal));
    c.send_frame(text(|o| frame::ack(o, id)));
}

/// Listens to a typing topic on this connection's first signal there; past
/// `TOPICS_PER_CONNECTION_MAX` the connection simply does not listen (§2.5.7 step 4:
/// subscription errors are ignored).
fn listen_typing(c: &Connection, topic_name: &str) {
    {
        let mut topics = c.typing.borrow_mut();
        if topics.contains(topic_name) || topics.len() >= signals::TOPICS_PER_CONNECTION_MAX {
            return;
        }
        topics.insert(topic_name.to_string());
    }
    let listener = signals::Listener {
        shard: c.gw.engine.shard().id(),
        conn: c.id,
        user: c.user(),
    };
    let msg = SignalMsg::Listen {
        topic: topic_name.to_string(),
        listener,
    };
    c.gw.signal_to_owner(topic_name, msg);
}

/// Asks the shard owning `key`'s bucket for one token (here when this shard owns it).
async fn take_signal_token(c: &Connection, key: &str) -> Result<bool, ()> {
    let shard = &c.gw.port;
    let owner = presence::owner_of_user(key, shard.count());
    if owner == shard.id() {
        return Ok(c.gw.take_signal_token(key));
    }
    let msg = GatewayMsg::Signal(SignalMsg::Take {
        key: key.to_string(),
    });
    match shard.request(owner, msg, SIGNAL_TOKEN_TIMEOUT_MS).await {
        Ok(GatewayMsg::Signal(SignalMsg::Taken(ok))) => Ok(ok),
        _ => Err(()),
    }
}

/// How long a `typing` op waits for the rate limiter on another shard.
pub const SIGNAL_TOKEN_TIMEOUT_MS: u64 = 1_000;
