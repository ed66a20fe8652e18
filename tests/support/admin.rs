//! Admin API helpers for the end-to-end tests of the messaging routes: the API key the test
//! servers are configured with, authenticated GETs, and polling a route until it shows what
//! a scripted session should have caused.

use super::{http, HttpResponse, Server};
use serde_json::Value;
use std::time::{Duration, Instant};

/// `security.api_key` of the admin test servers.
pub const API_KEY: &str = "adm1n-key";

/// Longest [`wait_for`] polls before handing back what it last saw.
pub const ADMIN_WAIT: Duration = Duration::from_secs(15);

/// GET with the admin key.
pub fn admin(s: &Server, path: &str) -> HttpResponse {
    http(s.http_port, "GET", path, &[("X-API-Key", API_KEY)], b"")
}

/// GET with the admin key; the answer must be 200 with a JSON body.
pub fn admin_json(s: &Server, path: &str) -> Value {
    let r = admin(s, path);
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    r.json()
}

/// Polls `path` until `done` holds (bounded by [`ADMIN_WAIT`]); returns the last body.
pub fn wait_for(s: &Server, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + ADMIN_WAIT;
    loop {
        let v = admin_json(s, path);
        if done(&v) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
