//! One shard's life: open its storage, accept on the shared listeners, wait for shutdown,
//! drain, sync.

use super::mesh::{MeshRouter, ShardMsg};
use super::{Plan, SHUTDOWN_DRAIN_MS};
use crate::admin;
use crate::messaging::engine::Engine;
use crate::queue::protocol::frame::Frame;
use crate::queue::server::extra::ExtraCommands;
use crate::queue::server::plane::{Plane, PlaneSettings};
use boltq_io::listener::{Conn, Listener};
use boltq_shards::Shard;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Runs the shard until shutdown. A shard that fails stops the whole process: the others
/// would otherwise serve on without its slots (and a failed start would leave a process
/// up that never becomes ready, its error told only at exit).
pub async fn run(shard: Shard<ShardMsg>, plan: Arc<Plan>) -> Result<(), String> {
    let shutdown = shard.shutdown_handle().clone();
    let result = serve(shard, plan).await;
    if let Err(e) = &result {
        log::error!("{e}; stopping the server");
        shutdown.trigger();
    }
    result
}

async fn serve(shard: Shard<ShardMsg>, plan: Arc<Plan>) -> Result<(), String> {
    let starting = Starting::watch(shard.id());
    let store = match &plan.store {
        Some(cfg) => {
            starting.step("probing the data dir's device");
            boltq_io::probe::warm_iopoll(&cfg.data_dir)
                .await
                .map_err(|e| format!("iopoll probe: {e}"))?;
            starting.step("opening storage");
            Some(
                boltq_io::Store::open(cfg.clone(), shard.id())
                    .await
                    .map_err(|e| format!("open storage: {e}"))?,
            )
        }
        None => None,
    };
    starting.step("starting the queue plane");
    let plane = Plane::start(
        shard.port(),
        store.clone(),
        PlaneSettings {
            broker: plan.broker.clone(),
            api_key: plan.api_key.clone(),
            random: plan.random,
            boot_id: plan.boot_id,
            compaction_threshold_bytes: plan.slot_compaction_bytes,
            snapshot_write_bytes_per_sec: plan.config.storage.snapshot_write_bytes_per_sec,
            report_unroutable: plan.config.queue.report_unroutable,
            replicated: plan.cluster.is_some(),
            carries_single_node_data: plan.cluster.as_ref().is_some_and(|c| c.founds_alone()),
        },
    )
    .await?;
    // Before the cluster: its node writes the stream records it applies into the engine's
    // logs from its first round on.
    let (engine, gateway) = match (&plan.messaging, &store) {
        (Some(m), Some(store)) => {
            starting.step("starting the messaging plane");
            let (e, g) = m
                .start(shard.port(), shard.port(), Rc::clone(store))
                .await?;
            if let Some(g) = &g {
                g.configure_ephemeral(
                    &plan.config.messaging.presence,
                    &plan.config.messaging.signals,
                );
            }
            (Some(e), g)
        }
        _ => (None, None),
    };
    let hooks = engine.as_ref().map(stream_hooks);
    if plan.cluster.is_some() {
        if let Some(table) = plane.take_single_node_exchanges() {
            *plan.single_node_exchanges.lock().expect("not poisoned") = Some(table);
        }
        starting.step("waiting for the other shards' planes");
        if !all_planes_started(&shard, &plan).await {
            // Another shard failed and stopped the server; it reports why.
            return Ok(());
        }
    }
    if let (Some(start), Some(store)) = (cluster_node(&shard, &plan, &plane, hooks)?, &store) {
        starting.step("starting replication");
        let replication = crate::cluster::serve::Replication::start(
            start,
            Rc::clone(store),
            Rc::downgrade(&plane),
        )
        .await?;
        if let Some(engine) = &engine {
            engine.set_replication(Rc::clone(&replication) as _);
        }
        if let Some(g) = &gateway {
            relay_presence(g, &replication);
        }
        plane.set_replication(replication);
        crate::faults::crash_point("after-founding");
        starting.step("forgetting data carried into the cluster");
        plane.forget_carried_data().await?;
    }
    let seeds_name = plan
        .cluster
        .as_ref()
        .map(|c| c.name.clone())
        .filter(|name| super::cluster_join::uses_seeds(&plan.config, name));
    let _join_task = match (&seeds_name, shard.id()) {
        (Some(name), 0) => {
            let (plan, name, shards) = (Arc::clone(&plan), name.clone(), shard.count());
            let admitted = plan
                .cluster
                .as_ref()
                .map(|c| Arc::clone(&c.admitted))
                .expect("seeds are used only when clustered");
            Some(boltq_shards::spawn(async move {
                super::cluster_join::join(&plan.config, &name, shards, admitted).await
            }))
        }
        _ => None,
    };
    let cache = plan.config.cache.enabled.then(|| {
        let limits =
            crate::cache::CacheLimits::for_shard(&plan.config.cache, shard.id(), shard.count());
        let sweep_interval_ms = plan.config.cache.cleanup_sec.max(1) * 1000;
        crate::cache::service::CacheService::start(shard.port(), limits, sweep_interval_ms)
    });
    let router = MeshRouter {
        queue: Rc::clone(&plane),
        cache: cache.clone(),
        engine: engine.clone(),
        gateway: gateway.clone(),
    };
    shard.set_handler(move |from, incoming| router.route(from, incoming));
    let tcp = Listener::for_shard(&plan.tcp, plan.tls.as_ref()).map_err(|e| e.to_string())?;
    let http = Listener::for_shard(&plan.http, plan.tls.as_ref()).map_err(|e| e.to_string())?;
    let live = Rc::new(Cell::new(0usize));
    let extra = stream_commands(engine.clone());
    let limits = crate::queue::server::connection::ConnectionLimits {
        frame: plan.config.server.read_timeout,
        auth: plan.config.server.auth_timeout,
        subscriptions_max: plan.config.queue.subscriptions_per_connection_max as usize,
        affinity: plan.config.queue.connection_affinity,
    };
    let tcp_cap = ConnectionCap::new(
        "tcp",
        (
            plan.config.server.tcp_connections_max,
            "server.tcp_connections_max",
        ),
        None,
        shard.count(),
        shard.metrics(),
    );
    plane.set_adopter({
        let (plane_ref, extra, shard, live) = (
            Rc::downgrade(&plane),
            Rc::clone(&extra),
            shard.clone(),
            Rc::clone(&live),
        );
        move |moved| {
            // Weak: the plane holds this closure.
            let Some(plane) = plane_ref.upgrade() else {
                return;
            };
            let serve = crate::queue::server::connection::serve_handed_over(
                moved,
                plane,
                Some(Rc::clone(&extra)),
                limits,
                shard.shutdown_requested(),
            );
            // Counted with this shard's connections, so shutdown waits for it here too (the
            // shard that accepted it keeps its place under the cap).
            let live = Rc::clone(&live);
            live.set(live.get() + 1);
            let serve = Box::pin(serve);
            boltq_shards::spawn(async move {
                serve.await;
                live.set(live.get() - 1);
            })
            .detach();
        }
    });
    let tcp_task = boltq_shards::spawn(accept_loop(tcp, Rc::clone(&live), Some(tcp_cap), {
        let plane = Rc::clone(&plane);
        let shard = shard.clone();
        move |conn| {
            crate::queue::server::connection::serve(
                conn,
                Rc::clone(&plane),
                Some(Rc::clone(&extra)),
                limits,
                shard.shutdown_requested(),
            )
        }
    }));
    let admin_ctx = Rc::new(admin::router::AdminCtx {
        plane: Rc::clone(&plane),
        state: Arc::clone(&plan.state),
        api_key: plan.api_key.clone(),
        allow_query_api_key: plan.config.security.allow_query_api_key,
        cors: admin::cors::Cors::new(&plan.config.admin.cors_origins),
        metrics_public: plan.config.admin.metrics_public,
        started: plan.started,
        cache,
        storage_mode: plan.config.storage.mode.as_str(),
        compaction_threshold_bytes: plan.config.storage.compaction_threshold,
        // Mounted on the admin listener only when it has no listener of its own.
        takeover: gateway
            .clone()
            .filter(|_| plan.gateway_listener.is_none())
            .map(gateway_takeover),
        messaging: engine
            .clone()
            .map(|engine| admin::messaging_routes::MessagingAdmin {
                engine,
                gateway: gateway.clone(),
                // The configured node id, else `standalone` (not the process id: that
                // would start new metric series at every restart).
                node: Some(plan.config.cluster.node_id.clone())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "standalone".to_string()),
                region: plan.config.messaging.presence.region.clone(),
                members: admin::member_call::MemberCall::from_config(&plan.config),
            }),
        demo: admin::demo::Demo::from_config(&plan.config, &|k| std::env::var(k).ok()),
        warnings: plan.warnings.clone(),
    });
    // Devices sharing the listener get their own allowance on top of the operators' one, so
    // a cap meant for operators' HTTP clients never turns devices away.
    let gateway_cfg = &plan.config.messaging.gateway;
    let per_ip = (
        gateway_cfg.connections_per_ip_max,
        "messaging.gateway.connections_per_ip_max",
    );
    let (devices, http_per_ip) = match admin_ctx.takeover {
        Some(_) => (gateway_cfg.connections_max, Some(per_ip)),
        None => (0, None),
    };
    let http_cap = ConnectionCap::new(
        "http",
        (
            plan.config.server.http_connections_max + devices,
            "server.http_connections_max",
        ),
        http_per_ip,
        shard.count(),
        shard.metrics(),
    );
    let http_task = boltq_shards::spawn(accept_loop(http, Rc::clone(&live), Some(http_cap), {
        let shard = shard.clone();
        move |conn| admin::http::serve(conn, Rc::clone(&admin_ctx), shard.shutdown_requested())
    }));
    let gateway_task = match (&plan.gateway_listener, &gateway) {
        (Some((shared, tls)), Some(gw)) => {
            let l = Listener::for_shard(shared, tls.as_ref()).map_err(|e| e.to_string())?;
            let gw = Rc::clone(gw);
            let shard = shard.clone();
            let cap = ConnectionCap::new(
                "gateway",
                (
                    plan.config.messaging.gateway.connections_max,
                    "messaging.gateway.connections_max",
                ),
                Some(per_ip),
                shard.count(),
                shard.metrics(),
            );
            Some(boltq_shards::spawn(accept_loop(
                l,
                Rc::clone(&live),
                Some(cap),
                move |conn| {
                    crate::messaging::gateway::listener::serve(
                        conn,
                        Rc::clone(&gw),
                        shard.shutdown_requested(),
                    )
                },
            )))
        }
        _ => None,
    };
    drop(starting);
    if plan.state.shard_started() {
        log::info!("{}", super::ready::ready_line(&plan));
    }
    shard.shutdown_requested().await;
    plan.state.set_not_ready();
    plane.expire_waiters(i64::MAX); // long-polls answer EMPTY now rather than at their deadline
    if let Some(g) = &gateway {
        g.shutdown(); // 1001 to every device, then a short drain
    }
    if let Some(e) = &engine {
        e.close();
    }
    drop(tcp_task); // cancels the accept loops: no new connections
    drop(http_task);
    drop(gateway_task);
    drain(&live).await;
    if let Some(g) = &gateway {
        // WebSockets run in their own tasks; they were told 1001 and drain for ≤ 2 s.
        let deadline = std::time::Instant::now() + Duration::from_millis(3_000);
        while g.live_connections() > 0 && std::time::Instant::now() < deadline {
            boltq_shards::sleep(Duration::from_millis(20)).await;
        }
    }
    if let Some(name) = &seeds_name {
        leave_before_closing(&shard, &plan, name).await;
    }
    if let Some(store) = store {
        store
            .close()
            .await
            .map_err(|e| format!("closing storage: {e}"))?;
    }
    Ok(())
}

/// A node that joined through seeds leaves through them before its storage closes: shard 0
/// asks, every shard's groups keep running until it is done (removing this node may need
/// its vote or its hand-over of the slots it leads).
async fn leave_before_closing(shard: &Shard<ShardMsg>, plan: &Plan, name: &str) {
    use std::sync::atomic::Ordering;
    if shard.id() == 0 {
        super::cluster_join::leave(&plan.config, name).await;
        plan.members_left.store(true, Ordering::Release);
        return;
    }
    let deadline = std::time::Instant::now()
        + Duration::from_millis(super::cluster_join::LEAVE_TIMEOUT_MS + 5_000);
    while !plan.members_left.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
        boltq_shards::sleep(Duration::from_millis(50)).await;
    }
}

/// The messaging plane's stream commands (0x1D–0x20) for the queue plane's TCP
/// connections. Registered with the plane off too (`engine` is `None`), so a backend hears
/// that the plane is off rather than that the command is unknown.
fn stream_commands(engine: Option<Rc<Engine>>) -> ExtraCommands {
    Rc::new(move |frame: Frame<'_>| {
        crate::messaging::tcp::dispatch(engine.clone(), frame.code, frame.payload)
    })
}

/// Accepts connections until cancelled, serving each in its own task. `live` counts the
/// connections still being served, for the shutdown drain.
/// A listener's connection limit on this shard: its share of the configured total, and
/// optionally of a per-address limit.
struct ConnectionCap {
    listener: &'static str,
    /// The config key of the total, for the refusal's log line.
    key: &'static str,
    per_shard: usize,
    /// This shard's share of the per-address limit, with its key.
    per_ip: Option<(usize, &'static str)>,
    state: Rc<RefCell<CapState>>,
    refused: boltq_shards::Counter,
    refused_per_ip: boltq_shards::Counter,
    /// When a refusal was last logged (one line per second at most, whatever the flood).
    last_logged: Cell<Option<std::time::Instant>>,
}

#[derive(Default)]
struct CapState {
    open: usize,
    /// Open connections per peer address, when the cap has a per-address limit; an
    /// address leaves the map with its last connection, so it holds open addresses only.
    by_ip: HashMap<IpAddr, usize>,
}

/// A connection's place under its cap; dropping it (the connection ended) frees it.
struct Place {
    state: Rc<RefCell<CapState>>,
    ip: Option<IpAddr>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut s = self.state.borrow_mut();
        s.open -= 1;
        if let Some(ip) = self.ip {
            if let std::collections::hash_map::Entry::Occupied(mut e) = s.by_ip.entry(ip) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }
}

impl ConnectionCap {
    fn new(
        listener: &'static str,
        (total, key): (u64, &'static str),
        per_ip: Option<(u64, &'static str)>,
        shards: usize,
        metrics: &boltq_shards::Registry,
    ) -> ConnectionCap {
        let share = |n: u64| (n as usize).div_ceil(shards.max(1));
        ConnectionCap {
            listener,
            key,
            per_shard: share(total),
            per_ip: per_ip.map(|(n, key)| (share(n), key)),
            state: Rc::new(RefCell::new(CapState::default())),
            refused: metrics.counter("boltq_connections_refused_total", &[("listener", listener)]),
            refused_per_ip: metrics.counter(
                "boltq_connections_refused_per_ip_total",
                &[("listener", listener)],
            ),
            last_logged: Cell::new(None),
        }
    }

    /// Takes a place for a new connection from `peer`, or refuses it (counted, logged now
    /// and then).
    fn admit(&self, peer: Option<IpAddr>) -> Option<Place> {
        let mut s = self.state.borrow_mut();
        if s.open >= self.per_shard {
            drop(s);
            self.refused.inc();
            self.log_refusal(format_args!("{} open", self.per_shard), self.key);
            return None;
        }
        let ip = match (self.per_ip, peer) {
            (Some((per_ip, key)), Some(ip)) => {
                let n = s.by_ip.entry(ip).or_insert(0);
                if *n >= per_ip {
                    drop(s);
                    self.refused_per_ip.inc();
                    self.log_refusal(format_args!("{per_ip} open from {ip}"), key);
                    return None;
                }
                *n += 1;
                Some(ip)
            }
            _ => None,
        };
        s.open += 1;
        Some(Place {
            state: Rc::clone(&self.state),
            ip,
        })
    }

    fn log_refusal(&self, what: std::fmt::Arguments<'_>, key: &str) {
        let now = std::time::Instant::now();
        if self
            .last_logged
            .get()
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            self.last_logged.set(Some(now));
            log::warn!(
                "{} connection refused: this shard holds its share of the limit ({what}; {key})",
                self.listener,
            );
        }
    }
}

async fn accept_loop<F, Fut>(
    listener: Listener,
    live: Rc<Cell<usize>>,
    cap: Option<ConnectionCap>,
    serve: F,
) where
    F: Fn(Conn) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    loop {
        match listener.accept().await {
            Ok(conn) => {
                let place = match &cap {
                    None => None,
                    Some(cap) => match cap.admit(conn.peer_addr().ok().map(|a| a.ip())) {
                        Some(place) => Some(place),
                        // Closed at once: dropping it closes the socket.
                        None => continue,
                    },
                };
                let live = Rc::clone(&live);
                live.set(live.get() + 1);
                // Boxed: awaited from inside another future, a connection's future would
                // otherwise be stored twice in the task for its whole life.
                let fut = Box::pin(serve(conn));
                boltq_shards::spawn(async move {
                    fut.await;
                    live.set(live.get() - 1);
                    drop(place);
                })
                .detach();
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on the error.
                log::warn!("{e}");
                boltq_shards::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Waits up to `SHUTDOWN_DRAIN_MS` for in-flight connections to finish.
async fn drain(live: &Cell<usize>) {
    let deadline = std::time::Instant::now() + Duration::from_millis(SHUTDOWN_DRAIN_MS);
    while live.get() > 0 && std::time::Instant::now() < deadline {
        boltq_shards::sleep(Duration::from_millis(20)).await;
    }
    if live.get() > 0 {
        log::warn!(
            "shutdown: {} connections still open after the drain period",
            live.get()
        );
    }
}

/// The gateway's WebSocket as the admin listener's take-over path: admin serves the path
/// without knowing what is behind it.
fn gateway_takeover(gw: Rc<crate::messaging::gateway::GatewayCtx>) -> crate::http::Takeover {
    let path = gw.settings.path.clone();
    crate::http::Takeover::new(path, move |conn, req, leftover| {
        Box::pin(crate::messaging::gateway::upgrade::serve(
            conn,
            req,
            leftover,
            Rc::clone(&gw),
        ))
    })
}

/// Warns every [`STARTING_SLOW_WARN_MS`] while a shard is still starting, naming the step
/// it is at: a start that hangs says where (nothing else would: the process just never
/// becomes ready). Dropping it ends the warnings.
struct Starting {
    step: Rc<Cell<&'static str>>,
    _warn: boltq_shards::Task<()>,
}

/// How long a shard's start may take before it is reported, and how often after that.
const STARTING_SLOW_WARN_MS: u64 = 5_000;

impl Starting {
    fn watch(shard: usize) -> Self {
        let step = Rc::new(Cell::new("starting"));
        let warn = boltq_shards::spawn({
            let step = Rc::clone(&step);
            async move {
                let started = std::time::Instant::now();
                loop {
                    boltq_shards::sleep(Duration::from_millis(STARTING_SLOW_WARN_MS)).await;
                    log::warn!(
                        "shard {shard} still starting after {} ms: {}",
                        started.elapsed().as_millis(),
                        step.get()
                    );
                }
            }
        });
        Self { step, _warn: warn }
    }

    fn step(&self, step: &'static str) {
        self.step.set(step);
    }
}

/// Waits until every shard's queue plane started; false when the server stopped first. A
/// plane refuses to start clustered on single-node queue data; if one shard refused, no
/// other may have written its raft groups' logs, or the data dir would also be refused as
/// a single node's (`cluster::refuse_cluster_data`) and could be neither drained nor
/// clustered. Shard 0 posts the exchanges it carries before it arrives here, so the
/// exchange slot's owner finds them when it founds that slot's group.
async fn all_planes_started(shard: &Shard<ShardMsg>, plan: &Plan) -> bool {
    use std::sync::atomic::Ordering;
    plan.planes_started.fetch_add(1, Ordering::AcqRel);
    while plan.planes_started.load(Ordering::Acquire) < shard.count() {
        if shard.is_shutdown_requested() {
            return false;
        }
        boltq_shards::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// With `cluster.enabled`: this shard's raft node settings (the slots it owns) and
/// listener.
/// This shard's raft node writes the stream records it applies into the engine's logs,
/// and serves peers' reads from them.
fn stream_hooks(
    engine: &Rc<crate::messaging::engine::Engine>,
) -> crate::cluster::node::StreamHooks {
    let for_sink = Rc::downgrade(engine);
    let for_reader = Rc::downgrade(engine);
    let for_installed = Rc::downgrade(engine);
    crate::cluster::node::StreamHooks {
        sink: Box::new(move |records| {
            let engine = for_sink.upgrade();
            Box::pin(async move {
                match engine {
                    Some(engine) => engine.apply_replicated(records).await,
                    None => Err("the messaging engine stopped".into()),
                }
            })
        }),
        reader: Box::new(move |read| {
            let engine = for_reader.upgrade();
            Box::pin(async move {
                match engine {
                    Some(engine) => engine.read_for_peer(read).await,
                    None => Err("the messaging engine stopped".into()),
                }
            })
        }),
        installed: Box::new(move |slots| {
            if let Some(engine) = for_installed.upgrade() {
                engine.verify_copies(slots);
            }
        }),
    }
}

/// Presence and typing of this shard's gateway go to the same shard of every other node,
/// and theirs come here.
fn relay_presence(
    gateway: &Rc<crate::messaging::gateway::GatewayCtx>,
    replication: &Rc<crate::cluster::serve::Replication>,
) {
    let to_gateway = Rc::downgrade(gateway);
    replication.set_relay_sink(Rc::new(move |from, frame| {
        if let Some(g) = to_gateway.upgrade() {
            g.on_relay(from, frame);
        }
    }));
    gateway.set_peer_links(Rc::clone(replication) as _);
}

fn cluster_node(
    shard: &Shard<ShardMsg>,
    plan: &Plan,
    plane: &Plane,
    hooks: Option<crate::cluster::node::StreamHooks>,
) -> Result<Option<crate::cluster::serve::ClusterStart>, String> {
    let Some(cluster) = &plan.cluster else {
        return Ok(None);
    };
    let listener = Listener::for_shard(&cluster.listeners[shard.id()], plan.tls.as_ref())
        .map_err(|e| format!("raft listener: {e}"))?;
    let streams = super::cluster::stream_slot_config(&plan.config.messaging);
    let mut founding = plane.take_single_node_data();
    let exchange_slot = crate::queue::server::exchanges::exchange_slot();
    if plane.owner_of(exchange_slot) == shard.id() {
        let carried = plan
            .single_node_exchanges
            .lock()
            .expect("not poisoned")
            .take();
        if let Some(table) = carried {
            founding
                .entry(exchange_slot)
                .or_insert_with(|| crate::queue::broker::Broker::new(plan.broker.clone()))
                .found_exchanges(table);
        }
    }
    let mut founding_states = BTreeMap::new();
    for (slot, broker) in founding {
        let empty_streams = crate::messaging::slot::StreamSlot::new(streams.clone());
        let state = crate::cluster::slot_snapshot::encode(&broker, &empty_streams)
            .map_err(|e| format!("queue slot {slot}'s single-node state: {e}"))?;
        founding_states.insert(slot, state);
    }
    Ok(Some(crate::cluster::serve::ClusterStart {
        node: cluster.node_config(
            shard.id(),
            plane.owned_slots(),
            plan.broker.clone(),
            streams,
            hooks,
            founding_states,
        ),
        listener,
        view: cluster.view(),
        earlier_boots: cluster.earlier_boots.clone(),
        shards: shard.count() as u64,
    }))
}
