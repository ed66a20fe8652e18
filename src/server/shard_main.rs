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
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub async fn run(shard: Shard<ShardMsg>, plan: Arc<Plan>) -> Result<(), String> {
    let store = match &plan.store {
        Some(cfg) => {
            boltq_io::probe::warm_iopoll(&cfg.data_dir)
                .await
                .map_err(|e| format!("iopoll probe: {e}"))?;
            Some(
                boltq_io::Store::open(cfg.clone(), shard.id())
                    .await
                    .map_err(|e| format!("open storage: {e}"))?,
            )
        }
        None => None,
    };
    let plane = Plane::start(
        shard.port(),
        store.clone(),
        PlaneSettings {
            broker: plan.broker.clone(),
            api_key: plan.api_key.clone(),
            random: plan.random,
            compaction_threshold_bytes: plan.slot_compaction_bytes,
            report_unroutable: plan.config.queue.report_unroutable,
            replicated: plan.cluster.is_some(),
        },
    )
    .await?;
    if let (Some(start), Some(store)) = (cluster_node(&shard, &plan, &plane)?, &store) {
        let replication = crate::cluster::serve::Replication::start(
            start,
            Rc::clone(store),
            Rc::downgrade(&plane),
        )
        .await?;
        plane.set_replication(replication);
    }
    let cache = plan.config.cache.enabled.then(|| {
        let limits =
            crate::cache::CacheLimits::for_shard(&plan.config.cache, shard.id(), shard.count());
        let sweep_interval_ms = plan.config.cache.cleanup_sec.max(1) * 1000;
        crate::cache::service::CacheService::start(shard.port(), limits, sweep_interval_ms)
    });
    let (engine, gateway) = match (&plan.messaging, &store) {
        (Some(m), Some(store)) => {
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
    };
    let tcp_cap = ConnectionCap::new(
        "tcp",
        plan.config.server.tcp_connections_max,
        shard.count(),
        shard.metrics(),
    );
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
            }),
        demo: admin::demo::Demo::from_config(&plan.config, &|k| std::env::var(k).ok()),
        warnings: plan.warnings.clone(),
    });
    // Devices sharing the listener get their own allowance on top of the operators' one, so
    // a cap meant for operators' HTTP clients never turns devices away.
    let devices = match admin_ctx.takeover {
        Some(_) => plan.config.messaging.gateway.connections_max,
        None => 0,
    };
    let http_cap = ConnectionCap::new(
        "http",
        plan.config.server.http_connections_max + devices,
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
                plan.config.messaging.gateway.connections_max,
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
    if let Some(store) = store {
        store
            .close()
            .await
            .map_err(|e| format!("closing storage: {e}"))?;
    }
    Ok(())
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
/// A listener's connection limit on this shard: its share of the configured total.
struct ConnectionCap {
    listener: &'static str,
    per_shard: usize,
    open: Rc<Cell<usize>>,
    refused: boltq_shards::Counter,
    /// When a refusal was last logged (one line per second at most, whatever the flood).
    last_logged: Cell<Option<std::time::Instant>>,
}

impl ConnectionCap {
    fn new(
        listener: &'static str,
        total: u64,
        shards: usize,
        metrics: &boltq_shards::Registry,
    ) -> ConnectionCap {
        let per_shard = (total as usize).div_ceil(shards.max(1));
        ConnectionCap {
            listener,
            per_shard,
            open: Rc::new(Cell::new(0)),
            refused: metrics.counter("boltq_connections_refused_total", &[("listener", listener)]),
            last_logged: Cell::new(None),
        }
    }

    /// Takes a place for a new connection, or refuses it (counted, logged now and then).
    fn admit(&self) -> Option<Rc<Cell<usize>>> {
        if self.open.get() < self.per_shard {
            self.open.set(self.open.get() + 1);
            return Some(Rc::clone(&self.open));
        }
        self.refused.inc();
        let now = std::time::Instant::now();
        if self
            .last_logged
            .get()
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            self.last_logged.set(Some(now));
            log::warn!(
                "{} connection refused: this shard holds its share of the limit ({} open; \
                 server.{}_connections_max)",
                self.listener,
                self.per_shard,
                self.listener
            );
        }
        None
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
                    Some(cap) => match cap.admit() {
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
                    if let Some(place) = place {
                        place.set(place.get() - 1);
                    }
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

/// With `cluster.enabled`: this shard's raft node settings (the slots it owns) and
/// listener.
fn cluster_node(
    shard: &Shard<ShardMsg>,
    plan: &Plan,
    plane: &Plane,
) -> Result<Option<crate::cluster::serve::ClusterStart>, String> {
    let Some(cluster) = &plan.cluster else {
        return Ok(None);
    };
    let listener = Listener::for_shard(&cluster.listeners[shard.id()], None)
        .map_err(|e| format!("raft listener: {e}"))?;
    Ok(Some(crate::cluster::serve::ClusterStart {
        node: cluster.node_config(shard.id(), plane.owned_slots(), plan.broker.clone()),
        listener,
        view: cluster.view(&plan.config.cluster.raft_addr),
        earlier_boots: cluster.earlier_boots.clone(),
    }))
}
