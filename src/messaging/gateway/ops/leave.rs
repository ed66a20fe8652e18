//! Disconnect: the connection leaves the ephemeral path (presence, watches, typing).

use crate::messaging::gateway::connection::Connection;
use crate::messaging::presence::{PresenceMsg, Watcher};
use crate::messaging::signals::SignalMsg;

/// Leaves the ephemeral path at disconnect: unbinds presence at once (§19 decision 1; the
/// owner ignores it if a newer connection holds the device), drops the watches and the
/// typing listens.
pub fn leave_ephemeral(c: &Connection) {
    if let Some((user, device)) = c.presence.borrow_mut().take() {
        let msg = PresenceMsg::Unbind {
            user: user.clone(),
            device,
            conn: c.id,
        };
        c.gw.presence_to_owner(&user, msg);
    }
    let watched = c.gw.ephemeral.watching.borrow_mut().remove(&c.id);
    let watcher = Watcher {
        shard: c.gw.engine.shard().id(),
        conn: c.id,
    };
    for user in watched.unwrap_or_default() {
        let msg = PresenceMsg::Unwatch {
            user: user.clone(),
            watcher,
        };
        c.gw.presence_to_owner(&user, msg);
    }
    let topics = std::mem::take(&mut *c.typing.borrow_mut());
    for t in topics {
        let msg = SignalMsg::Unlisten {
            topic: t.clone(),
            shard: c.gw.engine.shard().id(),
            conn: c.id,
        };
        c.gw.signal_to_owner(&t, msg);
    }
}
