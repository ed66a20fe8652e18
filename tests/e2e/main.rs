//! The end-to-end tests of the real `boltq` binary, one module per area, in one test binary
//! so that CI links one executable instead of sixteen. Every test starts its own server on
//! ports the kernel picks (port 0, read back from the `ready:` line) with its own data dir
//! and sets no process environment, so the modules share the harness's threads safely.
//!
//! Four stay separate binaries, for a reason each:
//! - `tests/browser/` drives headless Chromium (the dashboard and the chat demo); without
//!   Chromium it fails, and this binary must not.
//! - `tests/server_lifecycle.rs` measures an idle server's CPU and shutdown times, which the
//!   heavier tests here distort.
//! - `tests/queue_crash.rs` SIGKILLs and restarts a server under full load for many rounds;
//!   alone it neither starves the timing assertions here nor is slowed by them.
//! - `tests/command_log.rs` restarts a server right after kill -9 under load, many times,
//!   for the same reason.

#[path = "../support/mod.rs"]
mod support;

mod admin_api;
mod admin_limits;
mod connection_affinity;
mod durable_pubsub;
mod hostile_clients;
mod https_clients;
mod messaging_admin;
mod messaging_admin_presence;
mod messaging_gateway;
mod messaging_groups;
mod messaging_liveness;
mod messaging_presence;
mod messaging_push;
mod node_client;
mod planes_independent;
mod queue_compat;
mod queue_plane;
mod security_defaults;
mod stream_tcp;
mod tls;
