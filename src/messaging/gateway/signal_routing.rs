//! Typing signals between shards (docs/presence-and-typing.md): listens and signals go to
//! the topic's owner shard, which fans each signal out once per shard with listeners (and,
//! in a cluster, relays it once to every other node's owner: `relay_routing.rs`); the
//! sender's rate-limit bucket lives on the shard owning its key.

use super::{frame, text, GatewayCtx, GatewayMsg};
use crate::messaging::signals::{self, SignalMsg};

impl GatewayCtx {
    /// Sends a signal message to the shard owning `topic`.
    pub fn signal_to_owner(&self, topic: &str, msg: SignalMsg) {
        let dest = signals::owner_of_topic(topic, self.engine.shard().count());
        self.to_shard(dest, GatewayMsg::Signal(msg));
    }

    pub(super) fn on_signal(&self, m: SignalMsg) {
        match m {
            SignalMsg::Listen { topic, listener } => {
                if let Err(e) = self.ephemeral.hub.borrow_mut().listen(&topic, listener) {
                    log::warn!("[signals] listen {topic}: {e}");
                }
            }
            SignalMsg::Unlisten { topic, shard, conn } => self
                .ephemeral
                .hub
                .borrow_mut()
                .unlisten(&topic, shard, conn),
            SignalMsg::Publish(signal) => {
                self.stats.borrow_mut().signals_published += 1;
                self.route_signal(&signal);
                self.relay_signal(&signal);
            }
            SignalMsg::Deliver { conns, signal } => self.signals_here(&conns, &signal),
            SignalMsg::Take { .. } | SignalMsg::Taken(_) => {
                log::warn!("[signals] rate-limit question sent one-way")
            }
        }
    }

    /// Hands `signal` to this node's listeners of its topic (this shard owns the topic),
    /// unless its sender already passed its rate on the topic here.
    pub(super) fn route_signal(&self, signal: &signals::Signal) {
        let key = format!("{}\u{0}{}", signal.topic, signal.sender);
        let admitted = self
            .ephemeral
            .delivery_limiter
            .borrow_mut()
            .take(&key, boltq_io::store::now_ns());
        if !admitted {
            self.stats.borrow_mut().signals_held_back += 1;
            return;
        }
        let routes = self.ephemeral.hub.borrow().route(signal);
        let me = self.shard_id();
        for (shard, conns) in routes {
            if shard == me {
                self.signals_here(&conns, signal);
            } else {
                let signal = signal.clone();
                self.to_shard(
                    shard,
                    GatewayMsg::Signal(SignalMsg::Deliver { conns, signal }),
                );
            }
        }
    }

    /// Queues `signal` frames to this shard's listeners (dropped where the queue is full).
    fn signals_here(&self, conns: &[u64], s: &signals::Signal) {
        let frame = text(|o| {
            frame::signal(
                o,
                &frame::SignalOut {
                    topic: &s.topic,
                    sender: &s.sender,
                    kind: &s.kind,
                    headers: frame::HeadersOut::Text(&s.headers),
                    payload: &s.payload,
                    at_ns: s.at_ns,
                },
            )
        });
        for conn in conns {
            if self.push_lossy(*conn, &frame) {
                self.stats.borrow_mut().signals_out += 1;
            } else {
                self.stats.borrow_mut().signal_drops += 1;
            }
        }
    }

    /// One token of `key`'s budget, from this shard's limiter.
    pub fn take_signal_token(&self, key: &str) -> bool {
        self.ephemeral
            .limiter
            .borrow_mut()
            .take(key, boltq_io::store::now_ns())
    }
}
