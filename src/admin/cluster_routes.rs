//! `/cluster/status`, `/cluster/join|leave` and the clustered `/readyz`.

use super::router::AdminCtx;
use crate::http::Response;
use serde_json::json;

/// How long after start a node without a leader for every slot says `joining cluster`
/// (v1), before it says `no leader elected yet`.
pub const JOINING_GRACE_S: u64 = 30;

/// `{"enabled":false}`, or v1's `{"cluster":{…},"enabled":true}` plus what a group per
/// slot adds: slots led per member and slots without a known leader.
pub async fn status(ctx: &AdminCtx) -> Response {
    let Some(view) = ctx.plane.cluster_view() else {
        return Response::json(200, &json!({"enabled": false}));
    };
    let report = ctx.plane.gather_stats().merged().await;
    let s = view.summary(&report.raft);
    let i = &s.info;
    Response::json(
        200,
        &json!({
            "cluster": {
                "node_id": i.node_id,
                "raft_addr": i.raft_addr,
                "state": i.state,
                "leader": i.leader,
                "leader_id": i.leader_id,
                "term": i.term,
                "last_index": i.last_index,
                "peers": i.peers,
                "slots": report.raft.len(),
                "slots_led": s.slots_led,
                "slots_without_leader": s.slots_without_leader,
            },
            "enabled": true,
        }),
    )
}

pub fn join_or_leave(ctx: &AdminCtx) -> Response {
    match ctx.plane.cluster_view() {
        None => Response::error(400, "clustering is not enabled"),
        Some(_) => Response::error(
            501,
            "joining and leaving are not available in this build yet: members are listed in cluster.peers",
        ),
    }
}

/// v1's body; clustered, ready once every slot this node hosts knows its leader.
pub async fn readyz(ctx: &AdminCtx) -> Response {
    let started = ctx.state.is_ready();
    let uptime_s = ctx.started.elapsed().as_secs();
    let Some(view) = ctx.plane.cluster_view() else {
        let mut body = json!({
            "ready": started,
            "clustered": false,
            "node_id": "",
            "state": if started { "Standalone" } else { "Starting" },
            "uptime_seconds": uptime_s,
        });
        if !started {
            body["reason"] = json!("starting or shutting down");
        }
        return Response::json(if started { 200 } else { 503 }, &body);
    };
    let report = ctx.plane.gather_stats().merged().await;
    let s = view.summary(&report.raft);
    let all_led = s.slots_without_leader == 0
        && report.shards_missing == 0
        && report.raft.len() == usize::from(boltq_shards::SLOTS);
    let ready = started && all_led;
    let mut body = json!({
        "ready": ready,
        "clustered": true,
        "node_id": view.name,
        "state": s.info.state,
        "uptime_seconds": uptime_s,
    });
    if !s.info.leader_id.is_empty() {
        body["leader_id"] = json!(s.info.leader_id);
    }
    if !ready {
        let reason = match (started, uptime_s < JOINING_GRACE_S) {
            (false, _) => "starting or shutting down".to_string(),
            (true, true) => "joining cluster".to_string(),
            (true, false) => format!(
                "no leader elected yet for {} of {} slots",
                s.slots_without_leader,
                boltq_shards::SLOTS
            ),
        };
        body["reason"] = json!(reason);
    }
    Response::json(if ready { 200 } else { 503 }, &body)
}
