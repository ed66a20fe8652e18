//! The admin route table (v1 spec §4.2 plus the routes v1 documented but lacked): auth,
//! method checks, and dispatch to one handler per route.

use super::queue_routes as q;
use super::readiness::ServerState;
use crate::http::{Request, Response};
use crate::queue::server::plane::Plane;
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

/// What the admin handlers of one shard reach.
pub struct AdminCtx {
    pub plane: Rc<Plane>,
    pub state: Arc<ServerState>,
    /// `None`: auth off.
    pub api_key: Option<String>,
    /// Accept the key as `?api_key=` too (v1 always did; off by default: query strings end
    /// up in access logs).
    pub allow_query_api_key: bool,
    /// `admin.cors_origins`: which browser origins see CORS headers.
    pub cors: super::cors::Cors,
    /// `admin.metrics_public`: `/metrics` needs no key even when one is set.
    pub metrics_public: bool,
    pub started: std::time::Instant,
    /// `None` when `cache.enabled` is false.
    pub cache: Option<Rc<crate::cache::service::CacheService>>,
    pub storage_mode: &'static str,
    pub compaction_threshold_bytes: u64,
    /// A path whose connections leave the admin routes for another protocol: the server
    /// mounts the gateway's WebSocket here when it has no listener of its own.
    pub takeover: Option<crate::http::Takeover>,
    /// The messaging plane's engine and gateway for the admin routes and `/metrics`,
    /// whichever listener the gateway serves on; `None` when the plane is off.
    pub messaging: Option<super::messaging_routes::MessagingAdmin>,
    /// The browser chat demo and its token route; `None` unless `messaging.gateway.demo`.
    pub demo: Option<super::demo::Demo>,
    /// Startup warnings an operator must see (`/overview` `warnings`, the dashboard's
    /// banner): an exposure logged once scrolls away, a banner stays.
    pub warnings: Vec<String>,
}

impl AdminCtx {
    fn authorised(&self, req: &Request) -> bool {
        let Some(_) = &self.api_key else { return true };
        let presented = req.header("x-api-key").or_else(|| {
            self.allow_query_api_key
                .then(|| req.query("api_key"))
                .flatten()
        });
        presented.is_some_and(|k| self.plane.key_matches(k))
    }
}

/// True when `req` lacks a valid key on a route that needs one.
pub fn route_auth_failed(req: &Request, ctx: &AdminCtx) -> bool {
    !is_public(&req.path, ctx) && !ctx.authorised(req)
}

/// Routes open to everyone: health, probed by infrastructure that holds no key; `/metrics`
/// only with `admin.metrics_public` (it names queues and durable subscriber ids, and each
/// scrape gathers from every shard).
fn is_public(path: &str, ctx: &AdminCtx) -> bool {
    matches!(path, "/health" | "/livez" | "/readyz")
        || (path == "/metrics" && ctx.metrics_public)
        || path == "/"
        || path.starts_with("/dashboard/")
        // A browser page cannot send the admin key; the demo is a dev-only feature and
        // every `/demo/` path is 404 when it is off.
        || super::demo::handles(path)
}

/// Answers one request.
pub async fn route(req: &Request, ctx: &AdminCtx) -> Response {
    let response = route_inner(req, ctx).await;
    count_request(req, ctx, response.status);
    response
}

/// `boltq_http_requests_total{route, code}`; unknown paths share one label so a scanner
/// cannot create unbounded series.
fn count_request(req: &Request, ctx: &AdminCtx, status: u16) {
    let known = KNOWN_PATHS.contains(&req.path.as_str())
        || super::messaging_routes::handles(&req.path)
        || matches!(
            req.path.as_str(),
            "/health" | "/livez" | "/readyz" | "/metrics"
        );
    let route = if known { req.path.as_str() } else { "other" };
    let code = status.to_string();
    ctx.plane
        .shard
        .metrics()
        .counter(
            "boltq_http_requests_total",
            &[("route", route), ("code", &code)],
        )
        .inc();
}

async fn route_inner(req: &Request, ctx: &AdminCtx) -> Response {
    if req.method == "OPTIONS" {
        return Response::text(204, "text/plain", Vec::new());
    }
    if route_auth_failed(req, ctx) {
        return Response::error(401, "unauthorized");
    }
    let get = req.method == "GET" || req.method == "HEAD";
    let post = req.method == "POST";
    match req.path.as_str() {
        "/health" => Response::json(200, &json!({"status": "ok"})),
        "/livez" => Response::json(200, &json!({"status": "ok"})),
        "/readyz" => super::cluster_routes::readyz(ctx).await,
        "/metrics" => {
            let report = ctx.plane.gather_stats().merged().await;
            let messaging = match &ctx.messaging {
                Some(m) => Some(super::messaging_routes::gather_numbers(m).await),
                None => None,
            };
            let json = req
                .header("accept")
                .is_some_and(|a| a.contains("application/json"));
            super::metrics::render(&report, messaging.as_ref(), json)
        }
        "/" if get => super::dashboard::index(),
        p if p.starts_with("/dashboard/") && get => super::dashboard::asset(p),
        "/stats" if get => q::stats(ctx).await,
        "/overview" if get => q::overview(ctx).await,
        "/publish" if post => q::publish(req, ctx, false).await,
        "/publish/topic" if post => q::publish(req, ctx, true).await,
        "/consume" if get => q::consume(req, ctx).await,
        "/ack" if post => q::ack(req, ctx, false).await,
        "/nack" if post => q::ack(req, ctx, true).await,
        "/queues/purge" if post => q::purge(req, ctx, false).await,
        "/dead-letters" if get => q::dead_letters(req, ctx).await,
        "/dead-letters/requeue" if post => q::dead_letters_requeue(req, ctx).await,
        "/dead-letters/purge" if post => q::purge(req, ctx, true).await,
        "/exchanges" if get => q::exchanges(ctx),
        "/connections" if get => q::connections(ctx).await,
        "/exchange/declare" if post => q::exchange_op(req, ctx, q::ExchangeRoute::Declare).await,
        "/exchange/delete" if post => q::exchange_op(req, ctx, q::ExchangeRoute::Delete).await,
        "/exchange/bind" if post => q::exchange_op(req, ctx, q::ExchangeRoute::Bind).await,
        "/exchange/unbind" if post => q::exchange_op(req, ctx, q::ExchangeRoute::Unbind).await,
        "/exchange/publish" if post => q::exchange_publish(req, ctx).await,
        p if super::demo::handles(p) => {
            super::demo::route(req, ctx.demo.as_ref(), crate::messaging::gateway::now_s())
        }
        p if p.starts_with("/cache/") => super::cache_routes::route(req, ctx).await,
        p if super::messaging_routes::handles(p) => super::messaging_routes::route(req, ctx).await,
        "/cluster/status" if get => super::cluster_routes::status(ctx).await,
        "/cluster/join" if post => super::cluster_routes::join_or_leave(req, ctx, true).await,
        "/cluster/leave" if post => super::cluster_routes::join_or_leave(req, ctx, false).await,
        p if KNOWN_PATHS.contains(&p) => Response::error(405, "method not allowed"),
        _ => Response::text(404, "text/plain; charset=utf-8", "404 page not found\n"),
    }
}

/// Every path above, for telling 405 from 404.
const KNOWN_PATHS: &[&str] = &[
    "/",
    "/stats",
    "/overview",
    "/publish",
    "/publish/topic",
    "/consume",
    "/ack",
    "/nack",
    "/queues/purge",
    "/dead-letters",
    "/dead-letters/requeue",
    "/dead-letters/purge",
    "/exchanges",
    "/connections",
    "/exchange/declare",
    "/exchange/delete",
    "/exchange/bind",
    "/exchange/unbind",
    "/exchange/publish",
    "/cluster/status",
    "/cluster/join",
    "/cluster/leave",
    "/subscribe",
];

/// `GET /subscribe?topic=T&id=S`: server-sent events of a pub/sub subscription (v1
/// documented it; BoltQ implements it). Auth as any route.
pub async fn serve_events(
    conn: boltq_io::listener::Conn,
    req: &Request,
    ctx: Rc<AdminCtx>,
    stop: Pin<&mut impl Future<Output = ()>>,
) {
    q::serve_events(conn, req, ctx, stop).await
}

#[cfg(test)]
mod route_index_tests {
    /// docs/admin-api.md's route index names every route the router serves, so a route
    /// cannot be built and left undocumented (`/connections` was, for a while, and the docs
    /// said it did not exist).
    #[test]
    fn the_route_index_names_every_route() {
        let docs = include_str!("../../docs/admin-api.md");
        let index = docs
            .split("## Route index")
            .nth(1)
            .and_then(|rest| rest.split("\n---").next())
            .expect("docs/admin-api.md has a route index");
        let routes = super::KNOWN_PATHS
            .iter()
            .chain(super::super::cache_routes::ROUTES)
            .chain(super::super::messaging_routes::PATHS);
        let missing: Vec<&&str> = routes
            .filter(|p| !index.contains(&format!("`{p}`")))
            .collect();
        assert!(missing.is_empty(), "not in the route index: {missing:?}");
    }
}
