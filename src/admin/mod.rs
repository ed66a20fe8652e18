//! The HTTP admin server: health, the queue plane's admin routes, the dashboard.

pub mod cache_routes;
pub mod dashboard;
pub mod http;
pub mod metrics;
pub mod queue_routes;
pub mod router;
