//! Presence, typing and session hand-overs between nodes (`relay.rs` has the frames and
//! why): this shard's own presence transitions and typing signals go to the same shard of
//! every other node; what the others send is applied here for this shard's watchers and
//! listeners; a resume of a session held elsewhere asks the other nodes for it.

use super::relay::{self, Heard, PeerLinks, Peers, RelayBody, RelayFrame, TakeAsked};
use super::session::SessionState;
use super::GatewayCtx;
use crate::messaging::presence::{self, Delivery, RemoteChange};
use crate::messaging::signals::{self, Signal};
use boltq_io::event::Event;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Resumes one shard waits on the other nodes for at once; past it a resume of a session
/// held elsewhere gets a fresh session at once.
pub const TAKES_WAITING_MAX: usize = 4096;

/// This shard's end of the relay, once the cluster's links are up.
pub struct Relay {
    links: Rc<dyn PeerLinks>,
    /// Drawn at start: tells the other nodes that this is a new process.
    boot: u64,
    peers: Peers,
    /// Resumes waiting for the other nodes' answers, by request id.
    takes: HashMap<u64, Rc<TakeWait>>,
    next_take: u64,
}

/// One resume's wait for the other nodes' answers.
#[derive(Default)]
struct TakeWait {
    answers: Cell<usize>,
    found: RefCell<Option<SessionState>>,
    ready: Event,
}

impl GatewayCtx {
    /// Relays this shard's presence and typing to the same shard of every other node from
    /// now on (`cluster.enabled`), and tells them every `relay::ALIVE_EVERY_MS` that it is
    /// alive.
    pub fn set_peer_links(self: &Rc<Self>, links: Rc<dyn PeerLinks>) {
        let relay = Relay {
            links,
            boot: u64::from_le_bytes(self.random_bytes()),
            peers: Peers::default(),
            takes: HashMap::new(),
            next_take: 0,
        };
        let mut slot = self.ephemeral.relay.borrow_mut();
        assert!(slot.is_none(), "the peer links are set once");
        *slot = Some(relay);
        drop(slot);
        boltq_shards::spawn(Rc::clone(self).relay_loop()).detach();
    }

    fn relay_send(&self, to: Option<u64>, body: RelayBody) {
        let relay = self.ephemeral.relay.borrow();
        let Some(relay) = relay.as_ref() else {
            return;
        };
        let frame = RelayFrame {
            boot: relay.boot,
            body,
        };
        match relay::encode(&frame) {
            Ok(bytes) => {
                relay.links.send(to, bytes);
                self.stats.borrow_mut().relay_frames_out += 1;
            }
            Err(e) => log::warn!("[relay] not sent to the other nodes: {e}"),
        }
    }

    fn relaying(&self) -> bool {
        self.ephemeral.relay.borrow().is_some()
    }

    /// Tells the other nodes of this node's own presence transitions.
    pub(super) fn relay_changes(&self, own: &[Delivery]) {
        if !self.relaying() {
            return;
        }
        self.relay_pages(None, own.iter().filter_map(RemoteChange::of));
    }

    /// Sends `changes` in frames of at most `relay::CHANGES_PER_FRAME_MAX`.
    fn relay_pages(&self, to: Option<u64>, changes: impl Iterator<Item = RemoteChange>) {
        let mut changes = changes.peekable();
        while changes.peek().is_some() {
            let page = changes
                .by_ref()
                .take(relay::CHANGES_PER_FRAME_MAX)
                .collect();
            self.relay_send(to, RelayBody::Changes(page));
        }
    }

    /// Sends every device bound on this node, to `to` or to every other node: they
    /// refresh their copies, and learn what a dropped frame kept from them.
    fn relay_refresh(&self, to: Option<u64>) {
        if !self.relay_devices(to) {
            self.relay_send(to, RelayBody::Alive);
        }
    }

    /// Answers node `to`'s refresh ask: every device bound here, then the end of the
    /// answer (the asker stops asking once it has it).
    fn answer_refresh(&self, to: u64) {
        self.relay_devices(Some(to));
        self.relay_send(Some(to), RelayBody::Refreshed);
    }

    /// Sends a set per device bound on this node; false when there is none.
    fn relay_devices(&self, to: Option<u64>) -> bool {
        let devices = self.ephemeral.presence.borrow().local_devices();
        if devices.is_empty() {
            return false;
        }
        let sets = devices
            .into_iter()
            .map(|(user, device, state)| RemoteChange::Set {
                user,
                device,
                state,
            });
        self.relay_pages(to, sets);
        true
    }

    /// Hands a typing signal this shard routed to the other nodes' owners of its topic.
    pub(super) fn relay_signal(&self, s: &Signal) {
        if self.relaying() {
            self.relay_send(None, RelayBody::Signal(s.clone()));
        }
    }

    /// Asks the other nodes for session `sid` (a resume this node could not serve); its
    /// state if one of them held it, checked and handed over, within
    /// `relay::TAKE_TIMEOUT_MS`.
    pub(super) async fn take_from_peers(
        &self,
        sid: &str,
        secret: &str,
        user: &str,
    ) -> Option<SessionState> {
        let (id, wait, expected) = {
            let mut relay = self.ephemeral.relay.borrow_mut();
            let relay = relay.as_mut()?;
            let expected = relay.peers.live();
            if expected == 0 || relay.takes.len() >= TAKES_WAITING_MAX {
                return None;
            }
            relay.next_take += 1;
            let wait = Rc::new(TakeWait::default());
            relay.takes.insert(relay.next_take, Rc::clone(&wait));
            (relay.next_take, wait, expected)
        };
        let asked = TakeAsked {
            id,
            session: sid.to_string(),
            secret: secret.to_string(),
            user: user.to_string(),
        };
        self.relay_send(None, RelayBody::TakeAsked(asked));
        let deadline = Instant::now() + Duration::from_millis(relay::TAKE_TIMEOUT_MS);
        loop {
            let ticket = wait.ready.ticket();
            if wait.found.borrow().is_some() || wait.answers.get() >= expected {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = boltq_shards::timeout(left, wait.ready.wait(ticket)).await;
        }
        if let Some(relay) = self.ephemeral.relay.borrow_mut().as_mut() {
            relay.takes.remove(&id);
        }
        wait.found.take()
    }

    /// Answers another node's resume: hands the session over if this node holds it.
    async fn answer_take(self: Rc<Self>, from: u64, asked: TakeAsked) {
        let TakeAsked {
            id,
            session,
            secret,
            user,
        } = asked;
        let state = match self.take_here(&session, &secret, &user) {
            Some(state) => Some(state),
            None => self.engine_take_remote(&session, &secret, &user).await,
        };
        self.relay_send(Some(from), RelayBody::Taken { id, state });
    }

    fn take_answered(&self, id: u64, state: Option<SessionState>) {
        let wait = match self.ephemeral.relay.borrow().as_ref() {
            Some(relay) => relay.takes.get(&id).cloned(),
            None => None,
        };
        // An answer after the wait ended (or to nothing asked) is dropped.
        let Some(wait) = wait else {
            return;
        };
        wait.answers.set(wait.answers.get() + 1);
        if state.is_some() {
            *wait.found.borrow_mut() = state;
        }
        wait.ready.notify();
    }

    /// A frame the same shard of node `from` sent.
    pub fn on_relay(self: &Rc<Self>, from: u64, bytes: bytes::Bytes) {
        let frame = match relay::decode(&bytes) {
            Ok(frame) => frame,
            Err(e) => {
                let mut stats = self.stats.borrow_mut();
                stats.relay_refused += 1;
                // One line per power of two: a peer sending garbage cannot flood the log.
                if stats.relay_refused.is_power_of_two() {
                    log::warn!("[relay] frame from node {from} refused: {e}");
                }
                return;
            }
        };
        self.stats.borrow_mut().relay_frames_in += 1;
        let now = boltq_io::store::now_ns();
        let heard = match self.ephemeral.relay.borrow_mut().as_mut() {
            Some(relay) => relay.peers.heard(from, frame.boot, now),
            None => return,
        };
        match heard {
            Heard::Known => {}
            Heard::Returned => self.relay_send(Some(from), RelayBody::RefreshAsked),
            Heard::Restarted => {
                log::info!("[relay] node {from} restarted: its devices' presence is dropped");
                self.forget_node(from, now);
                self.relay_send(Some(from), RelayBody::RefreshAsked);
            }
        }
        match frame.body {
            RelayBody::Changes(changes) => self.apply_remote_changes(from, changes, now),
            RelayBody::Alive => {}
            RelayBody::RefreshAsked => self.answer_refresh(from),
            RelayBody::Refreshed => {
                if let Some(relay) = self.ephemeral.relay.borrow_mut().as_mut() {
                    relay.peers.refreshed(from, heard);
                }
            }
            RelayBody::Signal(s) => self.signal_from_peer(s),
            RelayBody::TakeAsked(asked) => {
                boltq_shards::spawn(Rc::clone(self).answer_take(from, asked)).detach();
            }
            RelayBody::Taken { id, state } => self.take_answered(id, state),
        }
    }

    fn apply_remote_changes(&self, from: u64, changes: Vec<RemoteChange>, now: i64) {
        let shards = self.engine.shard().count();
        let me = self.shard_id();
        let mut out: Vec<Delivery> = Vec::new();
        let mut dir = self.ephemeral.presence.borrow_mut();
        for change in changes {
            if presence::owner_of_user(change.user(), shards) != me {
                // Another node's shard count differs (refused at start; kept out here).
                log::warn!(
                    "[relay] node {from} reported {}, whom shard {me} does not own",
                    change.user()
                );
                continue;
            }
            match dir.apply_remote(from, change, now) {
                Ok(d) => out.extend(d),
                Err(e) => log::warn!("[relay] presence from node {from}: {e}"),
            }
        }
        drop(dir);
        self.send_deliveries(out);
    }

    fn forget_node(&self, node: u64, now: i64) {
        let out = self.ephemeral.presence.borrow_mut().forget_node(node, now);
        self.send_deliveries(out);
    }

    fn signal_from_peer(&self, s: Signal) {
        let me = self.shard_id();
        if signals::owner_of_topic(&s.topic, self.engine.shard().count()) != me {
            log::warn!(
                "[relay] a signal on {} reached shard {me}, not its owner",
                s.topic
            );
            return;
        }
        self.route_signal(&s);
    }

    /// Every `relay::ALIVE_EVERY_MS`: forgets the devices of nodes gone silent, and says
    /// this shard is alive: with all its devices every `presence.sweep_interval`, with an
    /// empty frame otherwise.
    async fn relay_loop(self: Rc<Self>) {
        let mut refreshed = Instant::now();
        loop {
            boltq_shards::sleep(Duration::from_millis(relay::ALIVE_EVERY_MS)).await;
            if self.closing.get() {
                return;
            }
            let now = boltq_io::store::now_ns();
            let (silent, returning) = match self.ephemeral.relay.borrow_mut().as_mut() {
                Some(relay) => (relay.peers.silent(now), relay.peers.returning(now)),
                None => return,
            };
            for node in returning {
                self.relay_send(Some(node), RelayBody::RefreshAsked);
            }
            for node in silent {
                log::info!(
                    "[relay] node {node} silent for {} ms: its devices' presence is dropped",
                    relay::PEER_SILENT_MS_MAX
                );
                self.forget_node(node, now);
            }
            if refreshed.elapsed() >= self.ephemeral.settings.borrow().sweep_interval {
                refreshed = Instant::now();
                self.relay_refresh(None);
            } else {
                self.relay_send(None, RelayBody::Alive);
            }
        }
    }
}
