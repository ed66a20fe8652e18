//! A small network of hosts a test builds for itself out of Linux network namespaces, so
//! that it can cut real links between servers (a partition) while it still reaches each of
//! them. Needs root: `unshare(CLONE_NEWNET)` and links in namespaces (CAP_SYS_ADMIN and
//! CAP_NET_ADMIN), and `ip`, `unshare` and `nsenter` (iproute2, util-linux).
//!
//! ```text
//!   test thread: namespace "hub", bridge 10.77.0.254/24
//!        │ veth          │ veth          │ veth
//!   host 10.77.0.1   host 10.77.0.2   host 10.77.0.3     (a namespace each)
//! ```
//!
//! A cut between two hosts is a blackhole route to the other in each one's namespace:
//! whatever one sends the other is dropped, as a failed switch port or firewall would,
//! while both still reach the hub (the test's clients). Everything lives in namespaces that
//! disappear with the test's thread and the processes holding them; nothing on the
//! machine's own network changes.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use super::Place;

const SUBNET: &str = "10.77.0";
const BRIDGE: &str = "br0";

/// The hub namespace and the hosts attached to it. Dropping it ends the hosts' holders.
pub struct Lan {
    hosts: Vec<Host>,
}

/// One host: a namespace kept alive by a sleeping holder process, with one address.
pub struct Host {
    pub addr: String,
    holder: Child,
}

impl Host {
    /// Where a server on this host runs.
    pub fn place(&self) -> Place {
        Place {
            host: self.addr.clone(),
            netns_pid: Some(self.holder.id()),
            env: Vec::new(),
        }
    }

    /// Runs `ip args` in this host's namespace.
    fn ip(&self, args: &[&str]) {
        let pid = self.holder.id().to_string();
        let mut all = vec!["-t", &pid, "-n", "ip"];
        all.extend_from_slice(args);
        run("nsenter", &all);
    }
}

impl Lan {
    /// Moves the calling thread into a namespace of its own (the hub) and attaches `n`
    /// hosts, 10.77.0.1 ..= 10.77.0.n. Threads the caller spawns afterwards, and processes
    /// it starts, are in the hub too. Call it on a thread of its own: the thread stays in
    /// the hub for good.
    pub fn build(n: usize) -> Lan {
        assert!((1..=250).contains(&n));
        // SAFETY: unshare(2) with CLONE_NEWNET changes only the calling thread's network
        // namespace; it takes no pointers.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET): {} — this test builds its own network namespaces and \
             needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)",
            std::io::Error::last_os_error()
        );
        run("ip", &["link", "set", "lo", "up"]);
        run("ip", &["link", "add", BRIDGE, "type", "bridge"]);
        run(
            "ip",
            &["addr", "add", &format!("{SUBNET}.254/24"), "dev", BRIDGE],
        );
        run("ip", &["link", "set", BRIDGE, "up"]);
        let hosts = (1..=n).map(attach_host).collect();
        Lan { hosts }
    }

    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// Drops everything hosts `a` and `b` send each other, both ways.
    pub fn cut(&self, a: usize, b: usize) {
        self.route(a, b, "add");
    }

    /// Undoes [`Lan::cut`].
    pub fn heal(&self, a: usize, b: usize) {
        self.route(a, b, "del");
    }

    fn route(&self, a: usize, b: usize, verb: &str) {
        assert_ne!(a, b);
        let (ha, hb) = (&self.hosts[a], &self.hosts[b]);
        ha.ip(&["route", verb, "blackhole", &format!("{}/32", hb.addr)]);
        hb.ip(&["route", verb, "blackhole", &format!("{}/32", ha.addr)]);
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            let _ = h.holder.kill();
            let _ = h.holder.wait();
        }
    }
}

/// Host `i` (from 1): a holder in a new namespace, a veth pair from the bridge into it, the
/// address 10.77.0.i.
fn attach_host(i: usize) -> Host {
    let mut command = Command::new("unshare");
    command
        .args(["--net", "sleep", "86400"])
        .stdin(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl(2),
    // which is async-signal-safe and takes no pointers. It ends the holder when the thread
    // that started it (the test's) is gone, even if the test process was killed.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let holder = command.spawn().expect("spawn unshare (util-linux)");
    let pid = holder.id();
    wait_for_own_namespace(pid);
    let host = Host {
        addr: format!("{SUBNET}.{i}"),
        holder,
    };
    let outer = format!("h{i}");
    run(
        "ip",
        &[
            "link",
            "add",
            &outer,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid.to_string(),
        ],
    );
    run("ip", &["link", "set", &outer, "master", BRIDGE, "up"]);
    host.ip(&["link", "set", "lo", "up"]);
    host.ip(&["addr", "add", &format!("{}/24", host.addr), "dev", "eth0"]);
    host.ip(&["link", "set", "eth0", "up"]);
    host
}

/// Waits until process `pid` is in a network namespace other than this thread's (unshare
/// has run).
fn wait_for_own_namespace(pid: u32) {
    let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Ok(theirs) = std::fs::read_link(format!("/proc/{pid}/ns/net")) {
            if theirs != ours {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} did not enter a namespace of its own"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
