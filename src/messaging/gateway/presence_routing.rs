//! Presence between shards (docs/presence-and-typing.md): changes go to the user's owner
//! shard, whose directory turns them into events; events go to the shards of the watchers,
//! which queue `presence_event` frames to the connections still watching. In a cluster the
//! owner also relays its transitions to the other nodes (`relay_routing.rs`).

use super::{frame, text, GatewayCtx, GatewayMsg};
use crate::messaging::presence::{self, Delivery, PresenceMsg};

impl GatewayCtx {
    /// Sends a presence message to the shard owning `user`.
    pub fn presence_to_owner(&self, user: &str, msg: PresenceMsg) {
        let dest = presence::owner_of_user(user, self.engine.shard().count());
        self.to_shard(dest, GatewayMsg::Presence(msg));
    }

    pub(super) fn on_presence(&self, m: PresenceMsg) {
        let now = boltq_io::store::now_ns();
        let mut dir = self.ephemeral.presence.borrow_mut();
        let out: Vec<Delivery> = match m {
            PresenceMsg::Bind { user, device, conn } => match dir.bind(&user, &device, conn, now) {
                Ok(d) => vec![d],
                Err(e) => {
                    log::warn!("[presence] bind {user}/{device}: {e}");
                    Vec::new()
                }
            },
            PresenceMsg::Unbind { user, device, conn } => {
                dir.unbind(&user, &device, conn, now).into_iter().collect()
            }
            PresenceMsg::Heartbeat { user, device, conn } => {
                dir.heartbeat(&user, &device, conn, now);
                Vec::new()
            }
            PresenceMsg::State {
                user,
                device,
                conn,
                state,
            } => dir
                .set_state(&user, &device, conn, state, now)
                .into_iter()
                .collect(),
            PresenceMsg::Watch { user, watcher } => match dir.watch(&user, watcher, now) {
                Ok(d) => vec![d],
                Err(e) => {
                    log::warn!("[presence] watch {user}: {e}");
                    Vec::new()
                }
            },
            PresenceMsg::Unwatch { user, watcher } => {
                dir.unwatch(&user, watcher);
                Vec::new()
            }
            PresenceMsg::Events(events) => {
                drop(dir);
                return self.presence_events_here(events);
            }
        };
        drop(dir);
        self.ephemeral.census.borrow_mut().apply_all(&out);
        self.relay_changes(&out);
        self.send_deliveries(out);
    }

    /// Sends events to the shards of their watchers (this shard's directly).
    pub(super) fn send_deliveries(&self, deliveries: Vec<Delivery>) {
        let me = self.shard_id();
        for (shard, events) in presence::by_shard(deliveries) {
            if shard == me {
                self.presence_events_here(events);
            } else {
                self.to_shard(shard, GatewayMsg::Presence(PresenceMsg::Events(events)));
            }
        }
    }

    /// Queues `presence_event` frames to this shard's watchers that still watch the user.
    pub(super) fn presence_events_here(&self, events: Vec<(presence::PresenceEvent, Vec<u64>)>) {
        for (ev, conns) in events {
            let frame = text(|o| {
                frame::presence_event(
                    o,
                    &frame::PresenceOut {
                        user_id: &ev.user,
                        device_id: &ev.device,
                        state: ev.state,
                        online: ev.online,
                        at_ns: ev.at_ns,
                    },
                )
            });
            for conn in conns {
                let watching = self
                    .ephemeral
                    .watching
                    .borrow()
                    .get(&conn)
                    .is_some_and(|set| set.contains(&ev.user));
                if !watching {
                    continue;
                }
                if self.push_lossy(conn, &frame) {
                    self.stats.borrow_mut().presence_events += 1;
                } else {
                    self.stats.borrow_mut().presence_drops += 1;
                }
            }
        }
    }
}
