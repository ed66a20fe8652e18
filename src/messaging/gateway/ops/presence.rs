//! This device's presence (spec §2.5.9, §9.1): bound at `hello`, refreshed by pings, set
//! by the `presence` op. Every change goes to the user's owner shard.

use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame;
use crate::messaging::gateway::text;
use crate::messaging::presence::{PresenceMsg, PresenceState};

/// Binds this device's presence at the user's owner shard; the anonymous principal has no
/// presence (§9.1 "Bind").
pub(super) fn bind_presence(c: &Connection) {
    let user = c.user();
    if user.is_empty() || c.principal.borrow().anonymous {
        return;
    }
    let device = c.device.borrow().clone();
    c.gw.presence_to_owner(
        &user,
        PresenceMsg::Bind {
            user: user.clone(),
            device: device.clone(),
            conn: c.id,
        },
    );
    *c.presence.borrow_mut() = Some((user, device));
}

/// Refreshes this device's presence session (server ping tick, `ping` op).
pub fn heartbeat(c: &Connection) {
    if let Some((user, device)) = c.presence.borrow().clone() {
        let msg = PresenceMsg::Heartbeat {
            user: user.clone(),
            device,
            conn: c.id,
        };
        c.gw.presence_to_owner(&user, msg);
    }
}

/// The `presence` op: sets the state, then acks.
pub(super) fn presence(c: &Connection, id: &str, state: PresenceState) {
    set_presence(c, state);
    c.send_frame(text(|o| frame::ack(o, id)))
}

/// The `presence` op: sets this device's state (no ACL; unbound connections are ignored).
fn set_presence(c: &Connection, state: PresenceState) {
    if let Some((user, device)) = c.presence.borrow().clone() {
        let msg = PresenceMsg::State {
            user: user.clone(),
            device,
            conn: c.id,
            state,
        };
        c.gw.presence_to_owner(&user, msg);
    }
}
