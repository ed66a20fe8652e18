//! The gateway numbers of every member, for `/messaging/overview` in a cluster.
//!
//! Stream records, cursors and replication are the same on every member (every member
//! holds every slot: the overview's `streams` and `replication` read this node's copies),
//! but a device is connected to one node, and only that node counts it. So the overview of
//! a clustered node asks every other member for its `/gateway/stats` at request time and
//! adds the counters up. A member that does not answer within
//! [`MEMBER_ASK_TIMEOUT_MS`] is listed with the reason and counted in `members_missing`:
//! the totals then lack its share, and say so, rather than the whole answer failing while
//! a node is down (exactly when an operator looks).
//!
//! Presence is not added up: a user with devices on two nodes is online on both, and the
//! sum would count them twice; each member's own `/presence` stays the place for it.

use super::member_call::MemberCall;
use crate::queue::server::replicated::ClusterView;
use serde_json::{json, Map, Value};

/// How long the overview waits for a member's numbers (all members are asked at once).
pub const MEMBER_ASK_TIMEOUT_MS: u64 = 1_000;
/// Most bytes of a member's `/gateway/stats` answer (a few hundred in practice).
pub const MEMBER_ANSWER_BYTES_MAX: usize = 64 * 1024;

/// One member's gateway numbers, or why there are none.
#[derive(Debug, Clone)]
pub struct MemberNumbers {
    pub node: String,
    pub answer: Result<Value, String>,
}

/// Every member's `/gateway/stats`, this node's (`own`) without a call, in the order of the
/// view's members.
pub async fn gather(view: &ClusterView, own: Value, call: &MemberCall) -> Vec<MemberNumbers> {
    let asks = view.members.iter().map(|(id, name, _)| {
        let own = (*id == view.node_id).then(|| own.clone());
        let addr = view.clients.get(id).map(|c| c.1.clone());
        async move {
            let answer = match (own, addr) {
                (Some(own), _) => Ok(own),
                (None, None) => Err("its admin address is not known yet".to_string()),
                (None, Some(addr)) => ask(call, &addr).await,
            };
            MemberNumbers {
                node: name.clone(),
                answer,
            }
        }
    });
    futures_util::future::join_all(asks).await
}

async fn ask(call: &MemberCall, addr: &str) -> Result<Value, String> {
    let body = call
        .get(
            addr,
            "/gateway/stats",
            MEMBER_ASK_TIMEOUT_MS,
            MEMBER_ANSWER_BYTES_MAX,
        )
        .await?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err("its answer is not a JSON object".to_string()),
    }
}

/// The overview's `cluster` section: every member's numbers (or why they are missing), and
/// their counters added up over the members that answered. A counter only some members
/// report (a member of another version) is added over those that do.
pub fn cluster_gateway_json(members: &[MemberNumbers]) -> Value {
    let mut total = Map::new();
    let mut missing = 0;
    let rows: Vec<Value> = members
        .iter()
        .map(|m| match &m.answer {
            Ok(numbers) => {
                add_counters(&mut total, numbers);
                json!({"node": m.node, "gateway": numbers})
            }
            Err(e) => {
                missing += 1;
                json!({"node": m.node, "gateway": null, "error": e})
            }
        })
        .collect();
    json!({
        "gateway": total,
        "members": rows,
        "members_missing": missing,
    })
}

/// Adds the non-negative integer fields of `numbers` into `total` (saturating: a hostile
/// or broken member's huge numbers cannot wrap the sum).
fn add_counters(total: &mut Map<String, Value>, numbers: &Value) {
    let Some(fields) = numbers.as_object() else {
        return;
    };
    for (name, value) in fields {
        let Some(n) = value.as_u64() else { continue };
        let sum = total.get(name).and_then(Value::as_u64).unwrap_or(0);
        total.insert(name.clone(), json!(sum.saturating_add(n)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(node: &str, numbers: Value) -> MemberNumbers {
        MemberNumbers {
            node: node.into(),
            answer: Ok(numbers),
        }
    }

    #[test]
    fn counters_add_up_over_the_members_that_answered() {
        let members = [
            answered(
                "n1",
                json!({"connections": 2, "attached": 1, "sessions": 1}),
            ),
            answered(
                "n2",
                json!({"connections": 3, "attached": 0, "sessions": 2}),
            ),
            MemberNumbers {
                node: "n3".into(),
                answer: Err("connect: refused".into()),
            },
        ];
        let v = cluster_gateway_json(&members);
        assert_eq!(
            v["gateway"],
            json!({"connections": 5, "attached": 1, "sessions": 3})
        );
        assert_eq!(v["members_missing"], 1);
        let rows = v["members"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1]["node"], "n2");
        assert_eq!(rows[1]["gateway"]["connections"], 3);
        assert_eq!(rows[2]["node"], "n3");
        assert_eq!(rows[2]["gateway"], Value::Null);
        assert_eq!(rows[2]["error"], "connect: refused");
    }

    #[test]
    fn fields_that_are_not_counters_are_left_out_and_huge_ones_saturate() {
        let members = [
            answered(
                "n1",
                json!({"connections": u64::MAX, "node": "n1", "ratio": 0.5, "lag": -1}),
            ),
            answered("n2", json!({"connections": 7, "shards_missing": 1})),
        ];
        let v = cluster_gateway_json(&members);
        assert_eq!(
            v["gateway"],
            json!({"connections": u64::MAX, "shards_missing": 1})
        );
        assert_eq!(v["members_missing"], 0);
    }

    #[test]
    fn no_members_answering_leaves_empty_totals_and_every_member_missing() {
        let members = [
            MemberNumbers {
                node: "n1".into(),
                answer: Err("timed out".into()),
            },
            MemberNumbers {
                node: "n2".into(),
                answer: Err("its admin address is not known yet".into()),
            },
        ];
        let v = cluster_gateway_json(&members);
        assert_eq!(v["gateway"], json!({}));
        assert_eq!(v["members_missing"], 2);
    }
}
