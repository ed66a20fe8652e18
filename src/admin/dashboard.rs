//! The built-in dashboard: static files compiled into the binary, so it needs no build
//! step and no files beside the server. It reads the same JSON routes as any client.

use crate::http::Response;

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const STYLE_CSS: &str = include_str!("dashboard/style.css");

pub fn index() -> Response {
    cached(Response::text(200, "text/html; charset=utf-8", INDEX_HTML))
}

pub fn asset(path: &str) -> Response {
    match path {
        "/dashboard/app.js" => cached(Response::text(
            200,
            "text/javascript; charset=utf-8",
            APP_JS,
        )),
        "/dashboard/style.css" => cached(Response::text(200, "text/css; charset=utf-8", STYLE_CSS)),
        _ => Response::text(404, "text/plain; charset=utf-8", "404 page not found\n"),
    }
}

/// The assets change only with the binary; a short cache keeps reloads cheap without
/// serving a stale page for long after an upgrade.
fn cached(mut r: Response) -> Response {
    r.headers.push(("Cache-Control", "max-age=60".to_string()));
    r
}
