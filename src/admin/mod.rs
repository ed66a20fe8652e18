//! The HTTP admin server. This foundation serves the health routes only; the admin issue
//! adds the full route table, metrics and the dashboard.

pub mod http;
pub mod routes;
