//! The HTTP admin server: health, the queue plane's and the messaging plane's admin routes,
//! the dashboard, the browser chat demo.

pub mod cache_routes;
pub mod cluster_routes;
pub mod cors;
pub mod dashboard;
pub mod demo;
pub mod http;
pub mod member_call;
pub mod members_gateway;
pub mod messaging_routes;
pub mod metrics;
pub mod prometheus;
pub mod queue_routes;
pub mod readiness;
pub mod router;
