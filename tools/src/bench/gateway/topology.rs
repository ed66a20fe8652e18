//! Who the generated users are and which conversations they share: a pure function of the
//! scenario's arguments, used by the devices (what to subscribe to and send to), by the
//! built-in membership service (who is in which group), and by the checks (how many
//! deliveries each send must produce).
//!
//! Names: every id starts with the run's base (`--prefix` plus a run id), so runs against
//! one server never share a topic, a cursor or a cached membership answer. Device `i` is
//! user `<base>-u<i>` on device `<base>-d<i>`; groups are `<base>-g<j>`.

use std::collections::HashSet;

/// Longest base name: ids are at most 128 bytes, and the base gets a suffix.
pub const BASE_BYTES_MAX: usize = 100;
/// Most devices one run may simulate (each is a socket on both sides).
pub const DEVICES_MAX: usize = 1_000_000;
/// Most conversations a device may be in: the gateway's default subscription cap is 200
/// per connection, and an inbox subscription may come on top.
pub const CONVERSATIONS_PER_DEVICE_MAX: usize = 199;
/// Largest group the membership service answers for (the server's own cap, 100,000
/// members).
pub const GROUP_MEMBERS_MAX: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Direct,
    Group,
}

impl Kind {
    /// The `kind` field of a `send`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Group => "group",
        }
    }
}

/// One conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conv {
    pub kind: Kind,
    /// What `send` names: `a:b` (direct) or the group id.
    pub id: String,
    /// `chat.direct.a:b` or `chat.group.<id>`.
    pub topic: String,
    /// Member user ids.
    pub members: Vec<String>,
}

impl Conv {
    pub fn direct(a: &str, b: &str) -> Conv {
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let id = format!("{lo}:{hi}");
        Conv {
            kind: Kind::Direct,
            topic: format!("chat.direct.{id}"),
            id,
            members: vec![lo.to_string(), hi.to_string()],
        }
    }

    pub fn group(id: String, members: Vec<String>) -> Conv {
        Conv {
            kind: Kind::Group,
            topic: format!("chat.group.{id}"),
            id,
            members,
        }
    }
}

/// Ids of the gateway: 1–128 bytes of `[A-Za-z0-9_@+-]`.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'@' | b'+' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a gateway id (1-128 of A-Z a-z 0-9 _ @ + -)"
        ))
    }
}

/// The names of one run.
#[derive(Debug, Clone)]
pub struct Names {
    base: String,
}

impl Names {
    /// `prefix` and `run_id` joined; both must be made of id characters.
    pub fn new(prefix: &str, run_id: &str) -> Result<Names, String> {
        let base = format!("{prefix}{run_id}");
        if base.len() > BASE_BYTES_MAX {
            return Err(format!(
                "--prefix plus run id longer than {BASE_BYTES_MAX} bytes"
            ));
        }
        check_id(&base).map_err(|e| format!("--prefix/--run-id: {e}"))?;
        Ok(Names { base })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn user(&self, i: usize) -> String {
        format!("{}-u{i}", self.base)
    }

    pub fn device(&self, i: usize) -> String {
        format!("{}-d{i}", self.base)
    }

    pub fn group(&self, j: usize) -> String {
        format!("{}-g{j}", self.base)
    }

    /// The user that writes to every device while it is away (`reconnect`).
    pub fn writer_user(&self) -> String {
        format!("{}-w", self.base)
    }

    pub fn writer_device(&self, k: usize) -> String {
        format!("{}-w{k}", self.base)
    }
}

/// `count` distinct direct conversations among `devices` users. Round 0 pairs users
/// (0,1), (2,3), …, so `devices / 2` conversations give every user exactly one; later
/// rounds pair each even user with an ever farther odd one.
pub fn direct_conversations(
    names: &Names,
    devices: usize,
    count: usize,
) -> Result<Vec<Conv>, String> {
    if devices < 2 {
        return Err("direct conversations need at least 2 devices".into());
    }
    let pairs_per_round = devices / 2;
    let mut seen = HashSet::new();
    let mut convs = Vec::with_capacity(count);
    'rounds: for round in 0..devices {
        for k in 0..pairs_per_round {
            if convs.len() == count {
                break 'rounds;
            }
            let a = 2 * k;
            let b = (2 * k + 1 + 2 * round) % devices;
            if a != b && seen.insert((a.min(b), a.max(b))) {
                convs.push(Conv::direct(&names.user(a), &names.user(b)));
            }
        }
    }
    if convs.len() < count {
        return Err(format!(
            "cannot make {count} distinct direct conversations among {devices} devices"
        ));
    }
    Ok(convs)
}

/// `count` groups of `size` members: group `j` holds users `(j*size + k) mod devices`, so
/// `devices / size` groups give every user one group, and more groups wrap around.
pub fn groups(
    names: &Names,
    devices: usize,
    count: usize,
    size: usize,
) -> Result<Vec<Conv>, String> {
    if size < 2 || size > devices {
        return Err(format!(
            "--group-size must be between 2 and --devices ({devices}), got {size}"
        ));
    }
    if size > GROUP_MEMBERS_MAX {
        return Err(format!("groups are limited to {GROUP_MEMBERS_MAX} members"));
    }
    Ok((0..count)
        .map(|j| {
            let members = (0..size)
                .map(|k| names.user((j * size + k) % devices))
                .collect();
            Conv::group(names.group(j), members)
        })
        .collect())
}

/// For each of `devices` users, the indices of the conversations it is a member of.
/// Members are found by name (`<base>-u<i>`), so this works for any list built by
/// [`direct_conversations`] or [`groups`].
pub fn memberships(
    names: &Names,
    devices: usize,
    convs: &[Conv],
) -> Result<Vec<Vec<usize>>, String> {
    let prefix = format!("{}-u", names.base());
    let mut of = vec![Vec::new(); devices];
    for (c, conv) in convs.iter().enumerate() {
        for m in &conv.members {
            let i: usize = m
                .strip_prefix(&prefix)
                .and_then(|n| n.parse().ok())
                .filter(|&i| i < devices)
                .ok_or_else(|| format!("member {m} is not one of the run's devices"))?;
            of[i].push(c);
        }
    }
    if let Some((i, list)) = of
        .iter()
        .enumerate()
        .find(|(_, l)| l.len() > CONVERSATIONS_PER_DEVICE_MAX)
    {
        return Err(format!(
            "device {i} would be in {} conversations (at most {CONVERSATIONS_PER_DEVICE_MAX}: \
             one subscription each, and the gateway allows 200 per connection)",
            list.len()
        ));
    }
    Ok(of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    fn names() -> Names {
        Names::new("t", "r1").unwrap()
    }

    #[test]
    fn ids_and_names() {
        let n = names();
        assert_eq!(
            (n.user(3), n.device(3), n.group(0)),
            ("tr1-u3".into(), "tr1-d3".into(), "tr1-g0".into())
        );
        assert_eq!(n.writer_user(), "tr1-w");
        for ok in ["a", "A-z_0@+", &"x".repeat(128)] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a.b", "a:b", "a b", "a#", &"x".repeat(129)] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
        assert!(Names::new("bad.prefix", "1").is_err());
        assert!(Names::new(&"p".repeat(BASE_BYTES_MAX), "1").is_err());
    }

    #[test]
    fn direct_ids_are_canonical() {
        let c = Conv::direct("bob", "alice");
        assert_eq!(
            (c.id.as_str(), c.topic.as_str()),
            ("alice:bob", "chat.direct.alice:bob")
        );
        assert_eq!(c.members, vec!["alice", "bob"]);
        assert_eq!(c.kind.as_str(), "direct");
    }

    /// devices/2 conversations give every device exactly one; more never repeat a pair and
    /// never pair a user with itself.
    #[test]
    fn direct_pairs_cover_then_stay_distinct() {
        let n = names();
        let convs = direct_conversations(&n, 10, 5).unwrap();
        let of = memberships(&n, 10, &convs).unwrap();
        assert!(of.iter().all(|l| l.len() == 1), "{of:?}");
        let mut rng = Rng::new(5);
        for _ in 0..50 {
            let devices = 2 + rng.below(30) as usize;
            let max = devices * (devices - 1) / 2;
            let count = 1 + rng.below(max as u64) as usize;
            let Ok(convs) = direct_conversations(&n, devices, count) else {
                continue; // the round scheme does not reach every pair; refusing is fine
            };
            assert_eq!(convs.len(), count);
            let ids: HashSet<_> = convs.iter().map(|c| c.id.clone()).collect();
            assert_eq!(ids.len(), count, "distinct");
            assert!(convs.iter().all(|c| c.members[0] != c.members[1]));
            assert!(convs.iter().all(|c| c.members[0] < c.members[1]));
        }
        assert!(direct_conversations(&n, 1, 1).is_err());
        assert!(
            direct_conversations(&n, 4, 7).is_err(),
            "only 6 pairs exist"
        );
    }

    #[test]
    fn groups_have_distinct_members_and_wrap() {
        let n = names();
        let g = groups(&n, 10, 3, 4).unwrap();
        assert_eq!(g[2].members, vec!["tr1-u8", "tr1-u9", "tr1-u0", "tr1-u1"]);
        assert_eq!(g[2].topic, "chat.group.tr1-g2");
        let of = memberships(&n, 10, &g).unwrap();
        assert_eq!(of[0], vec![0, 2]);
        assert_eq!(of[5], vec![1]);
        for gr in &g {
            let set: HashSet<_> = gr.members.iter().collect();
            assert_eq!(set.len(), gr.members.len());
        }
        assert!(groups(&n, 10, 1, 1).is_err());
        assert!(groups(&n, 10, 1, 11).is_err());
    }

    #[test]
    fn too_many_conversations_per_device_is_refused() {
        let n = names();
        let g = groups(&n, 2, CONVERSATIONS_PER_DEVICE_MAX + 1, 2).unwrap();
        assert!(memberships(&n, 2, &g).is_err());
        let g = groups(&n, 2, CONVERSATIONS_PER_DEVICE_MAX, 2).unwrap();
        assert!(memberships(&n, 2, &g).is_ok());
        let stranger = vec![Conv::direct("tr1-u0", "someone")];
        assert!(memberships(&n, 2, &stranger).is_err());
    }
}
