//! `/cluster/status`, `/cluster/join|leave` and the clustered `/readyz`.

use super::router::AdminCtx;
use crate::http::{Request, Response};
use crate::queue::server::replicated::MembersChange;
use serde_json::{json, Value};

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
                "members": members(&view, &report.raft),
                "groups": groups(&view, &report.raft),
                "refused_links": refused_links(&view, &report.refused_links)
                    .into_iter()
                    .map(|(node, reason)| json!({"node_id": node, "reason": reason}))
                    .collect::<Vec<_>>(),
            },
            "enabled": true,
        }),
    )
}

/// `POST /cluster/join {"node_id","addr","non_voter"?,"shards"?,"fresh"?}` and `POST
/// /cluster/leave {"node_id"}` (v1's bodies; `shards` and `fresh` are ours, so that a node
/// with another shard count, or a member that lost its state, is refused). Any member may be asked: the change goes into the member directory, every
/// slot's leader carries it out, and the answer comes once this node's groups show it —
/// a joining voter added and caught up, a leaving node removed — or 500 after
/// `MEMBERS_SETTLE_MS` (the change stands and continues; asking again waits again).
pub async fn join_or_leave(req: &Request, ctx: &AdminCtx, join: bool) -> Response {
    if !ctx.plane.clustered() {
        return Response::error(400, "clustering is not enabled");
    }
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(_) => return Response::error(400, "invalid json"),
    };
    let text = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let change = match (join, text("node_id"), text("addr")) {
        (true, Some(name), Some(addr)) => MembersChange::Join {
            name,
            addr,
            non_voter: body
                .get("non_voter")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            shards: body.get("shards").and_then(Value::as_u64),
            fresh: body.get("fresh").and_then(Value::as_bool).unwrap_or(false),
            tcp_addr: text("tcp_addr").unwrap_or_default(),
            http_addr: text("http_addr").unwrap_or_default(),
        },
        (true, _, _) => return Response::error(400, "node_id and addr are required"),
        (false, Some(name), _) => MembersChange::Leave { name },
        (false, None, _) => return Response::error(400, "node_id is required"),
    };
    let name = change.name().to_string();
    match ctx.plane.change_members(change).await {
        Ok(()) => Response::json(
            200,
            &json!({"node_id": name, "status": if join { "joined" } else { "removed" }}),
        ),
        Err(e) => Response::error(500, &e),
    }
}

/// The peers this node's shards refused lately, by name (a raft id when not a member),
/// each once, with why.
fn refused_links(
    view: &crate::queue::server::replicated::ClusterView,
    refused: &[(u64, String)],
) -> std::collections::BTreeMap<String, String> {
    refused
        .iter()
        .map(|(id, why)| (view.member_name(*id), why.clone()))
        .collect()
}

/// Each member with the slot groups (of those this node hosts) it votes in and learns in.
fn members(
    view: &crate::queue::server::replicated::ClusterView,
    raft: &[crate::queue::server::replicated::SlotStatus],
) -> Vec<Value> {
    view.members
        .iter()
        .map(|(id, name, addr)| {
            let voting = raft.iter().filter(|s| s.voters.contains(id)).count();
            let learning = raft.iter().filter(|s| s.learners.contains(id)).count();
            let (tcp, http) = view.clients.get(id).cloned().unwrap_or_default();
            json!({"node_id": name, "raft_addr": addr, "tcp_addr": tcp, "http_addr": http,
                "slots_voting": voting, "slots_learning": learning})
        })
        .collect()
}

/// Every slot group this node hosts, by slot: its leader (by name), term, commit and
/// applied index here, and the leader's furthest follower lag when this node leads it.
fn groups(
    view: &crate::queue::server::replicated::ClusterView,
    raft: &[crate::queue::server::replicated::SlotStatus],
) -> Vec<Value> {
    let mut sorted: Vec<_> = raft.iter().collect();
    sorted.sort_by_key(|s| s.slot);
    sorted
        .into_iter()
        .map(|s| {
            let leader = s.leader.map(|id| view.member_name(id));
            json!({"slot": s.slot, "leader": leader.unwrap_or_default(), "term": s.term,
                "commit": s.commit, "applied": s.applied, "lag": s.lag,
                "quiescent": s.quiescent})
        })
        .collect()
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
        let refused = refused_links(&view, &report.refused_links);
        let reason = if refused.is_empty() {
            reason
        } else {
            // The likely cause, where an operator looks first.
            let peers: Vec<String> = refused
                .iter()
                .map(|(node, why)| format!("{node} ({why})"))
                .collect();
            format!(
                "{reason}; refusing the links of members whose settings differ from this node's: {}",
                peers.join(", ")
            )
        };
        body["reason"] = json!(reason);
    }
    Response::json(if ready { 200 } else { 503 }, &body)
}
