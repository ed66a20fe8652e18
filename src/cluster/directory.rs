//! Who the members of the cluster are and where they listen: the member directory.
//!
//! Every slot's group has the same members. Which members the groups *should* have is this
//! directory: a join or leave accepted by any node changes it there, and each node's
//! leaders then change the membership of the groups they lead to match it (`membership::
//! plan`), one change per group at a time. The directory itself travels between nodes on
//! the raft links (sent on every change and every `GOSSIP_EVERY_TICKS`), so a node that was
//! down during a join learns the new member's address from the first peer that reaches it.
//!
//! Entries merge by version (the accepting node's clock in ns, above every version it
//! knew): the higher version of a name wins, so every node ends with the same directory
//! whatever order the gossip arrives in. A member that left stays as a `Gone` entry (a
//! tombstone: without it, older gossip would bring it back); past `MEMBERS_MAX` entries the
//! oldest tombstone is dropped.
//!
//! ```text
//! directory = version:u8 (1) | count:u16 | member*count
//! member    = name_len:u8 | name | addr_len:u8 | addr | tcp_len:u8 | tcp_addr
//!             | http_len:u8 | http_addr | role:u8 | version:u64
//! role      = 0 voter | 1 non-voter (raft learner) | 2 gone
//! ```

use super::wire::Reader;
use crate::queue::server::replicated::MembersChange;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::path::Path;

pub const VERSION: u8 = 1;
/// Most entries a directory holds, tombstones included.
pub const MEMBERS_MAX: usize = 64;
/// Longest name and address, in bytes.
pub const NAME_BYTES_MAX: usize = 255;
pub const ADDR_BYTES_MAX: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Voter,
    /// Receives every group's log and never votes (a raft learner).
    NonVoter,
    /// Left (or was removed): no group should have it.
    Gone,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    pub name: String,
    /// Its advertised raft address (shard 0's; shard k listens on the port + k).
    pub addr: String,
    pub role: Role,
    /// Where clients reach it (TCP and admin HTTP `host:port`), for NOT_LEADER's
    /// `leader_tcp`/`leader_http`; empty when not known (a founder named in another
    /// node's `cluster.peers` is known by its raft address only).
    pub tcp_addr: String,
    pub http_addr: String,
    /// 0 for the founding members; otherwise the accepting node's clock (ns).
    pub version: u64,
}

impl Member {
    /// Its raft id: the name hashed, as `server::cluster::raft_id`.
    pub fn id(&self) -> u64 {
        raft_id(&self.name)
    }
}

/// A node's raft id: its name hashed (FNV-1a 64), never 0 (raft's "none"). Stable across
/// restarts and the same on every node that names it.
pub fn raft_id(name: &str) -> u64 {
    boltq_shards::fnv1a_64(name.as_bytes()).max(1)
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directory {
    members: BTreeMap<String, Member>,
}

impl Directory {
    pub fn new(members: impl IntoIterator<Item = Member>) -> Directory {
        let mut d = Directory::default();
        d.merge(members);
        d
    }

    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    pub fn get(&self, name: &str) -> Option<&Member> {
        self.members.get(name)
    }

    pub fn by_id(&self, id: u64) -> Option<&Member> {
        self.members.values().find(|m| m.id() == id)
    }

    /// The highest version any entry has.
    pub fn version_max(&self) -> u64 {
        self.members.values().map(|m| m.version).max().unwrap_or(0)
    }

    /// Takes every entry newer than the one held for its name (on equal versions the
    /// greater entry, so that every node picks the same); returns the entries that changed.
    pub fn merge(&mut self, incoming: impl IntoIterator<Item = Member>) -> Vec<Member> {
        let mut changed = Vec::new();
        for m in incoming {
            let newer = match self.members.get(&m.name) {
                Some(held) => (m.version, &m) > (held.version, held),
                None => true,
            };
            if newer {
                self.members.insert(m.name.clone(), m.clone());
                changed.push(m);
            }
        }
        self.drop_oldest_tombstones();
        changed
    }

    fn drop_oldest_tombstones(&mut self) {
        while self.members.len() > MEMBERS_MAX {
            let oldest = self
                .members
                .values()
                .filter(|m| m.role == Role::Gone)
                .min_by_key(|m| m.version)
                .map(|m| m.name.clone());
            match oldest {
                Some(name) => self.members.remove(&name),
                // Only live members: `accept` refuses a join past the limit, so this is a
                // merge of someone else's full directory; keep what is held.
                None => break,
            };
        }
    }

    /// The members of the founding configuration: those with version 0.
    pub fn founders(&self) -> Vec<u64> {
        self.members
            .values()
            .filter(|m| m.version == 0 && m.role == Role::Voter)
            .map(Member::id)
            .collect()
    }

    /// What each group should look like: every member's raft id and role.
    pub fn wants(&self) -> BTreeMap<u64, Role> {
        self.members.values().map(|m| (m.id(), m.role)).collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        out.extend_from_slice(&(self.members.len() as u16).to_le_bytes());
        for m in self.members.values() {
            put_text(&m.name, &mut out);
            put_text(&m.addr, &mut out);
            put_text(&m.tcp_addr, &mut out);
            put_text(&m.http_addr, &mut out);
            out.push(match m.role {
                Role::Voter => 0,
                Role::NonVoter => 1,
                Role::Gone => 2,
            });
            out.extend_from_slice(&m.version.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: Bytes) -> Result<Directory, String> {
        let mut r = Reader::new(bytes);
        let version = r.u8("directory version").map_err(|e| e.to_string())?;
        if version != VERSION {
            return Err(format!("directory version {version} (want {VERSION})"));
        }
        let count = usize::from(r.u16("member count").map_err(|e| e.to_string())?);
        if count > MEMBERS_MAX {
            return Err(format!(
                "directory of {count} members (at most {MEMBERS_MAX})"
            ));
        }
        let mut members = BTreeMap::new();
        for _ in 0..count {
            let name = text(&mut r, "member name")?;
            let addr = text(&mut r, "member address")?;
            let tcp_addr = text(&mut r, "member TCP address")?;
            let http_addr = text(&mut r, "member HTTP address")?;
            let role = match r.u8("member role").map_err(|e| e.to_string())? {
                0 => Role::Voter,
                1 => Role::NonVoter,
                2 => Role::Gone,
                k => return Err(format!("member role {k}")),
            };
            let version = r.u64("member version").map_err(|e| e.to_string())?;
            check_name(&name)?;
            if addr.is_empty() && role != Role::Gone {
                return Err(format!("member {name:?} has no address"));
            }
            let member = Member {
                name: name.clone(),
                addr,
                role,
                version,
                tcp_addr,
                http_addr,
            };
            let m_name = name.clone();
            if members.insert(name, member).is_some() {
                return Err(format!("member {:?} is listed twice", m_name));
            }
        }
        if r.remaining() != 0 {
            return Err(format!("{} bytes after the directory", r.remaining()));
        }
        Ok(Directory { members })
    }

    /// Writes the directory to `path` through a temporary file, synced, then renamed, the
    /// directory synced: a crash leaves the old file or the new one.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        // `<name>.tmp`, not `with_extension`: `directory.0` and `directory.1` (two shards,
        // saving at once) must not share a temporary file.
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".tmp");
        let tmp = path.with_file_name(tmp_name);
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, &self.encode())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()
    }

    /// The directory saved at `path`; None when there is none.
    pub fn load(path: &Path) -> Result<Option<Directory>, String> {
        match std::fs::read(path) {
            Ok(bytes) => Directory::decode(Bytes::from(bytes))
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("read {}: {e}", path.display())),
        }
    }
}

impl Directory {
    /// The entry a join or leave makes, checked against this directory: None when the
    /// directory already says so (a join or leave asked again). `now_ns` versions it
    /// (above every version held); `shards` is this node's shard count, which a joining
    /// node must share.
    pub fn accept(
        &self,
        change: &MembersChange,
        now_ns: u64,
        shards: u64,
    ) -> Result<Option<Member>, String> {
        let version = now_ns.max(self.version_max() + 1);
        let entry = match change {
            MembersChange::Join {
                name,
                addr,
                non_voter,
                shards: theirs,
                fresh,
                tcp_addr,
                http_addr,
            } => {
                check_name(name)?;
                if *fresh && self.get(name).is_some_and(|m| m.role != Role::Gone) {
                    // Its groups would vote again in terms they voted in before: two
                    // leaders of one term become possible.
                    return Err(format!(
                        "{name} is a member already, but the node asking starts with no cluster state (its data directory was lost or replaced): remove it first (POST /cluster/leave {{\"node_id\":\"{name}\"}}), then let it join"
                    ));
                }
                check_advertised(addr)?;
                if let Some(theirs) = *theirs {
                    if theirs != shards {
                        return Err(format!(
                            "{name} runs server.shards = {theirs}, but this cluster's nodes run {shards}: every member must run the same number"
                        ));
                    }
                }
                let clash = self
                    .members()
                    .find(|m| m.name != *name && m.id() == raft_id(name));
                if let Some(other) = clash {
                    return Err(format!(
                        "node id {name:?} hashes to the raft id of member {:?}; rename it",
                        other.name
                    ));
                }
                let live = self.members().filter(|m| m.role != Role::Gone).count();
                if self.get(name).is_none_or(|m| m.role == Role::Gone) && live >= MEMBERS_MAX {
                    return Err(format!(
                        "the cluster has {live} members, the most it can have"
                    ));
                }
                let role = if *non_voter {
                    Role::NonVoter
                } else {
                    Role::Voter
                };
                // Client addresses not given (v1's TCP join has none) keep those held.
                let held = self.get(name);
                let keep = |given: &str, held: Option<&str>| match given {
                    "" => held.unwrap_or_default().to_string(),
                    _ => given.to_string(),
                };
                for (what, a) in [("TCP", tcp_addr), ("HTTP", http_addr)] {
                    if a.len() > ADDR_BYTES_MAX {
                        return Err(format!(
                            "{what} address of {name}: at most {ADDR_BYTES_MAX} bytes"
                        ));
                    }
                }
                Member {
                    name: name.clone(),
                    addr: addr.clone(),
                    role,
                    version,
                    tcp_addr: keep(tcp_addr, held.map(|m| m.tcp_addr.as_str())),
                    http_addr: keep(http_addr, held.map(|m| m.http_addr.as_str())),
                }
            }
            MembersChange::Leave { name } => {
                let Some(held) = self.get(name) else {
                    return Err(format!("{name:?} is not a member of this cluster"));
                };
                let voters_left = self
                    .members()
                    .filter(|m| m.role == Role::Voter && m.name != *name)
                    .count();
                if held.role == Role::Voter && voters_left == 0 {
                    return Err(format!(
                        "{name} is the last voter: removing it would leave no cluster"
                    ));
                }
                Member {
                    role: Role::Gone,
                    version,
                    ..held.clone()
                }
            }
        };
        let same = self.get(&entry.name).is_some_and(|held| {
            (&held.addr, held.role, &held.tcp_addr, &held.http_addr)
                == (&entry.addr, entry.role, &entry.tcp_addr, &entry.http_addr)
        });
        Ok((!same).then_some(entry))
    }
}

/// An advertised raft address: `host:port` that peers can dial — not the unspecified
/// address (0.0.0.0 or ::), not port 0.
pub fn check_advertised(addr: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("raft address {addr:?}: {why}"));
    if addr.is_empty() || addr.len() > ADDR_BYTES_MAX {
        return refuse("must be host:port, at most 255 bytes");
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return refuse("must be host:port");
    };
    match port.parse::<u16>() {
        Ok(0) | Err(_) => return refuse("the port must be 1 to 65535"),
        Ok(_) => {}
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let unspecified = bare
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if bare.is_empty() || unspecified {
        return refuse("is advertised to the other members, which cannot dial an unspecified address; set a routable one");
    }
    Ok(())
}

/// A member name: 1..=255 bytes of visible ASCII, no `@` (it separates the name from the
/// address in `name@host:port`).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b'@');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "node id {name:?}: 1 to {NAME_BYTES_MAX} visible ASCII characters without '@'"
        ))
    }
}

fn put_text(s: &str, out: &mut Vec<u8>) {
    assert!(
        s.len() <= NAME_BYTES_MAX.max(ADDR_BYTES_MAX),
        "checked on entry"
    );
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

fn text(r: &mut Reader, what: &'static str) -> Result<String, String> {
    let len = usize::from(r.u8(what).map_err(|e| e.to_string())?);
    let bytes = r.take(len, what).map_err(|e| e.to_string())?;
    String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, role: Role, version: u64) -> Member {
        Member {
            name: name.into(),
            addr: format!("{name}.host:9100"),
            role,
            version,
            tcp_addr: format!("{name}.host:9091"),
            http_addr: String::new(),
        }
    }

    #[test]
    fn the_newer_entry_of_a_name_wins_in_any_order() {
        let updates = [
            member("a", Role::Voter, 0),
            member("b", Role::Voter, 5),
            member("b", Role::Gone, 9),
            member("c", Role::NonVoter, 7),
            member("b", Role::Voter, 6),
        ];
        let mut forward = Directory::default();
        forward.merge(updates.iter().cloned());
        let mut backward = Directory::default();
        for u in updates.iter().rev() {
            backward.merge([u.clone()]);
        }
        assert_eq!(forward, backward);
        assert_eq!(forward.get("b").unwrap().role, Role::Gone);
        assert_eq!(forward.founders(), vec![raft_id("a")]);
        let changed = forward.merge([member("b", Role::Gone, 9)]);
        assert!(changed.is_empty(), "the same entry again changes nothing");
    }

    #[test]
    fn tombstones_go_oldest_first_past_the_limit() {
        let mut d = Directory::new((0..MEMBERS_MAX as u64).map(|i| {
            let role = if i < 3 { Role::Gone } else { Role::Voter };
            member(&format!("n{i}"), role, 10 + i)
        }));
        d.merge([member("new", Role::Voter, 100)]);
        assert_eq!(d.members().count(), MEMBERS_MAX);
        assert!(d.get("n0").is_none(), "the oldest tombstone went");
        assert!(d.get("n1").is_some() && d.get("new").is_some());
    }

    #[test]
    fn the_codec_round_trips_and_refuses_damage() {
        let d = Directory::new([member("a", Role::Voter, 0), member("b", Role::NonVoter, 3)]);
        let bytes = d.encode();
        assert_eq!(Directory::decode(Bytes::from(bytes.clone())).unwrap(), d);
        for cut in 0..bytes.len() {
            assert!(Directory::decode(Bytes::copy_from_slice(&bytes[..cut])).is_err());
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(Directory::decode(Bytes::from(extra)).is_err());
        let mut many = bytes.clone();
        many[1..3].copy_from_slice(&(MEMBERS_MAX as u16 + 1).to_le_bytes());
        let e = Directory::decode(Bytes::from(many)).unwrap_err();
        assert!(e.contains("at most"), "{e}");
        let mut bad_role = bytes;
        let role_at = 3 + 1 + 1 + 1 + "a.host:9100".len() + 1 + "a.host:9091".len() + 1;
        bad_role[role_at] = 7;
        assert!(Directory::decode(Bytes::from(bad_role))
            .unwrap_err()
            .contains("role 7"));
        let mut rng = 0x9e37_79b9_u64;
        for _ in 0..5_000 {
            let mut damaged = d.encode();
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
            let at = (rng >> 33) as usize % damaged.len();
            damaged[at] ^= (rng >> 13) as u8 | 1;
            // Refused or decoded into some directory; never a panic.
            let _ = Directory::decode(Bytes::from(damaged));
        }
    }

    fn join(name: &str, addr: &str) -> MembersChange {
        MembersChange::Join {
            name: name.into(),
            addr: addr.into(),
            non_voter: false,
            shards: Some(2),
            fresh: false,
            tcp_addr: String::new(),
            http_addr: String::new(),
        }
    }

    #[test]
    fn joins_and_leaves_are_checked_and_asking_again_changes_nothing() {
        let d = Directory::new([member("a", Role::Voter, 0)]);
        let b = d
            .accept(&join("b", "10.0.0.2:9100"), 50, 2)
            .unwrap()
            .unwrap();
        assert_eq!((b.role, b.version), (Role::Voter, 50));
        let d2 = Directory::new(d.members().cloned().chain([b.clone()]));
        assert_eq!(d2.accept(&join("b", "10.0.0.2:9100"), 60, 2), Ok(None));
        let moved = d2
            .accept(&join("b", "10.0.0.9:9100"), 10, 2)
            .unwrap()
            .unwrap();
        assert_eq!(
            moved.version, 51,
            "above every version held, whatever the clock says"
        );
        for (bad, why) in [
            (join("c", "0.0.0.0:9100"), "unspecified"),
            (join("c", "[::]:9100"), "unspecified"),
            (join("c", "h:0"), "port"),
            (join("c", "nohost"), "host:port"),
            (join("c@x", "h:1"), "without '@'"),
        ] {
            let e = d2.accept(&bad, 70, 2).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        // Client addresses: given ones are taken; a join that gives none (v1's TCP join)
        // keeps those held rather than erasing them.
        let mut with_clients = join("b", "10.0.0.2:9100");
        if let MembersChange::Join { tcp_addr, .. } = &mut with_clients {
            *tcp_addr = "10.0.0.2:9091".into();
        }
        let b2 = d2.accept(&with_clients, 61, 2).unwrap().unwrap();
        assert_eq!(b2.tcp_addr, "10.0.0.2:9091");
        let d2b = Directory::new(d2.members().cloned().chain([b2]));
        assert_eq!(d2b.accept(&join("b", "10.0.0.2:9100"), 62, 2), Ok(None));
        let mut again_fresh = join("b", "10.0.0.2:9100");
        if let MembersChange::Join { fresh, .. } = &mut again_fresh {
            *fresh = true;
        }
        let e = d2.accept(&again_fresh, 70, 2).unwrap_err();
        assert!(e.contains("remove it first"), "{e}");
        let e = d2.accept(&join("c", "h:1"), 70, 4).unwrap_err();
        assert!(e.contains("server.shards = 2"), "{e}");
        let leave = |name: &str| MembersChange::Leave { name: name.into() };
        let gone = d2.accept(&leave("b"), 80, 2).unwrap().unwrap();
        assert_eq!(
            (gone.role, gone.addr.as_str()),
            (Role::Gone, "10.0.0.2:9100")
        );
        let d3 = Directory::new(d2.members().cloned().chain([gone]));
        assert_eq!(d3.accept(&leave("b"), 90, 2), Ok(None), "left already");
        assert!(d3
            .accept(&leave("a"), 90, 2)
            .unwrap_err()
            .contains("last voter"));
        assert!(d3
            .accept(&leave("zz"), 90, 2)
            .unwrap_err()
            .contains("not a member"));
    }

    #[test]
    fn raft_ids_are_stable_distinct_and_never_zero() {
        assert_eq!(raft_id("node-a"), raft_id("node-a"));
        assert_ne!(raft_id("node-a"), raft_id("node-b"));
        assert_ne!(raft_id(""), 0);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("node-1").is_ok());
        for bad in ["", "a@b", "with space", &"x".repeat(256)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_saved_directory_loads_back() {
        let dir = boltq_io::testutil::TempDir::new("directory");
        let path = dir.path().join("directory.0");
        assert_eq!(Directory::load(&path).unwrap(), None);
        let d = Directory::new([member("a", Role::Voter, 0)]);
        d.save(&path).unwrap();
        assert_eq!(Directory::load(&path).unwrap(), Some(d.clone()));
        // Two shards' copies saved at once (each shard saves one at a time) use their own
        // temporary files.
        let other = dir.path().join("directory.1");
        let d1 = Directory::new([member("b", Role::Voter, 1)]);
        for _ in 0..50 {
            std::thread::scope(|s| {
                s.spawn(|| d.save(&path).unwrap());
                s.spawn(|| d1.save(&other).unwrap());
            });
        }
        assert_eq!(Directory::load(&path).unwrap(), Some(d.clone()));
        assert_eq!(Directory::load(&other).unwrap(), Some(d1));
        std::fs::write(&path, b"\x09").unwrap();
        assert!(Directory::load(&path).unwrap_err().contains("version 9"));
    }
}
