//! `/cache/*` (v1 spec §4.6), one handler per route, over the sharded cache service.
//! Values are stored as their JSON text, so a string stays a string (v1 turned `"123"`
//! into the number 123 on read).

use super::router::AdminCtx;
use crate::cache::service::{CacheAnswer, CacheOp};
use crate::cache::{CacheError, Entry};
use crate::http::{Request, Response};
use serde_json::{json, Value};

fn not_enabled() -> Response {
    Response::error(503, "cache not enabled")
}

fn body(req: &Request) -> Result<Value, Response> {
    if req.body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&req.body).map_err(|_| Response::error(400, "invalid json"))
}

fn key_of(v: &Value) -> Result<String, Response> {
    match v.get("key").and_then(Value::as_str) {
        Some(k) if !k.is_empty() => Ok(k.to_string()),
        _ => Err(Response::error(400, "key is required")),
    }
}

fn query_key(req: &Request) -> Result<String, Response> {
    match req.query("key") {
        Some(k) if !k.is_empty() => Ok(k.to_string()),
        _ => Err(Response::error(400, "key is required")),
    }
}

fn client_error(e: CacheError) -> Response {
    Response::error(400, &e.to_string())
}

fn unavailable(answer: CacheAnswer) -> Response {
    match answer {
        CacheAnswer::Unavailable(e) => Response::error(500, &e),
        other => Response::error(500, &format!("internal error: unexpected answer {other:?}")),
    }
}

fn entry_json(e: &Entry) -> Value {
    let value: Value = serde_json::from_str(&e.value_json).unwrap_or(Value::Null);
    json!({
        "created_at": e.created_at_ns,
        "key": e.key,
        "ttl": e.ttl_remaining_ms,
        "value": value,
    })
}

fn count(ctx: &AdminCtx, name: &str) {
    ctx.plane.shard.metrics().counter(name, &[]).inc();
}

/// Answers one `/cache/...` request.
pub async fn route(req: &Request, ctx: &AdminCtx) -> Response {
    let get = req.method == "GET" || req.method == "HEAD";
    let post = req.method == "POST";
    let Some(cache) = &ctx.cache else {
        if req.path == "/cache/stats" {
            return Response::json(200, &json!({"enabled": false}));
        }
        return not_enabled();
    };
    let result = match req.path.as_str() {
        "/cache/get" if get => get_key(req, ctx, cache).await,
        "/cache/set" if post => set(req, cache).await,
        "/cache/del" if post => del(req, cache).await,
        "/cache/keys" if get => keys(req, cache).await,
        "/cache/exists" if get => exists(req, cache).await,
        "/cache/expire" if post => expire(req, cache).await,
        "/cache/incr" if post => incr(req, cache).await,
        "/cache/flush" if post => flush(cache).await,
        "/cache/stats" if get => stats(cache).await,
        "/cache/entries" if get => entries(req, cache).await,
        p if ROUTES.contains(&p) => Err(Response::error(405, "method not allowed")),
        _ => Err(Response::text(
            404,
            "text/plain; charset=utf-8",
            "404 page not found\n",
        )),
    };
    let response = result.unwrap_or_else(|r| r);
    if response.status == 200 && matches!(req.path.as_str(), "/cache/set" | "/cache/incr") {
        count(ctx, "boltq_cache_sets");
    }
    if response.status == 200
        && req.path == "/cache/del"
        && response.body.starts_with(b"{\"deleted\":true")
    {
        count(ctx, "boltq_cache_deletes");
    }
    response
}

pub const ROUTES: &[&str] = &[
    "/cache/get",
    "/cache/set",
    "/cache/del",
    "/cache/keys",
    "/cache/exists",
    "/cache/expire",
    "/cache/incr",
    "/cache/flush",
    "/cache/stats",
    "/cache/entries",
];

type Cache = std::rc::Rc<crate::cache::service::CacheService>;

async fn get_key(req: &Request, ctx: &AdminCtx, cache: &Cache) -> Result<Response, Response> {
    let key = query_key(req)?;
    match cache.run(CacheOp::Get { key }).await {
        CacheAnswer::Entry(Some(e)) => {
            count(ctx, "boltq_cache_hits");
            Ok(Response::json(200, &entry_json(&e)))
        }
        CacheAnswer::Entry(None) => {
            count(ctx, "boltq_cache_misses");
            Ok(Response::error(404, "key not found"))
        }
        other => Err(unavailable(other)),
    }
}

async fn set(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let v = body(req)?;
    let key = key_of(&v)?;
    let value_json = v.get("value").cloned().unwrap_or(Value::Null).to_string();
    let ttl_ms = v.get("ttl").and_then(Value::as_i64).unwrap_or(0);
    let op = CacheOp::Set {
        key: key.clone(),
        value_json,
        ttl_ms,
    };
    match cache.run(op).await {
        CacheAnswer::Done(Ok(())) => Ok(Response::json(200, &json!({"key": key, "status": "ok"}))),
        CacheAnswer::Done(Err(e)) => Err(client_error(e)),
        other => Err(unavailable(other)),
    }
}

async fn del(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let key = key_of(&body(req)?)?;
    match cache.run(CacheOp::Del { key }).await {
        CacheAnswer::Found(deleted) => Ok(Response::json(
            200,
            &json!({"deleted": deleted, "status": "ok"}),
        )),
        other => Err(unavailable(other)),
    }
}

async fn keys(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let pattern = req.query("pattern").unwrap_or("*").to_string();
    match cache.run(CacheOp::Keys { pattern }).await {
        CacheAnswer::Keys(k) => Ok(Response::json(200, &json!({"count": k.len(), "keys": k}))),
        other => Err(unavailable(other)),
    }
}

async fn exists(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let key = query_key(req)?;
    match cache.run(CacheOp::Exists { key: key.clone() }).await {
        CacheAnswer::Found(b) => Ok(Response::json(200, &json!({"exists": b, "key": key}))),
        other => Err(unavailable(other)),
    }
}

async fn expire(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let v = body(req)?;
    let key = key_of(&v)?;
    let ttl_ms = v.get("ttl").and_then(Value::as_i64).unwrap_or(0);
    let op = CacheOp::Expire {
        key: key.clone(),
        ttl_ms,
    };
    match cache.run(op).await {
        CacheAnswer::Found(found) => Ok(Response::json(
            200,
            &json!({"found": found, "key": key, "status": "ok"}),
        )),
        other => Err(unavailable(other)),
    }
}

async fn incr(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let v = body(req)?;
    let key = key_of(&v)?;
    let delta = v.get("delta").and_then(Value::as_i64).unwrap_or(0);
    let op = CacheOp::Incr {
        key: key.clone(),
        delta,
    };
    match cache.run(op).await {
        CacheAnswer::Int(Ok(n)) => Ok(Response::json(200, &json!({"key": key, "value": n}))),
        CacheAnswer::Int(Err(e)) => Err(client_error(e)),
        other => Err(unavailable(other)),
    }
}

async fn flush(cache: &Cache) -> Result<Response, Response> {
    match cache.run(CacheOp::Flush).await {
        CacheAnswer::Count(n) => Ok(Response::json(
            200,
            &json!({"removed": n, "status": "flushed"}),
        )),
        other => Err(unavailable(other)),
    }
}

async fn stats(cache: &Cache) -> Result<Response, Response> {
    match cache.run(CacheOp::Stats).await {
        CacheAnswer::Stats(s) => Ok(Response::json(200, &json!({"enabled": true, "stats": s}))),
        other => Err(unavailable(other)),
    }
}

async fn entries(req: &Request, cache: &Cache) -> Result<Response, Response> {
    let op = CacheOp::Entries {
        pattern: req.query("pattern").unwrap_or("*").to_string(),
        search: req.query("search").unwrap_or("").to_string(),
    };
    match cache.run(op).await {
        CacheAnswer::Entries(page) => {
            let list: Vec<Value> = page
                .entries
                .iter()
                .map(|e| {
                    let mut v = entry_json(e);
                    v["size"] = json!(e.size_bytes());
                    v
                })
                .collect();
            Ok(Response::json(
                200,
                &json!({"entries": list, "total": page.total}),
            ))
        }
        other => Err(unavailable(other)),
    }
}
