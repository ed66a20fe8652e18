//! The Linux packaging (`packaging/`): `build-deb.sh` turns this build's binaries into a
//! .deb whose file list, control fields and conffile are what a host expects; the config it
//! installs loads and serves as shipped (only ports, address and data dir overridden on the
//! command line); its maintainer script parses; and the systemd unit passes
//! `systemd-analyze verify` with no warning (when the tool is on the machine).
//!
//! Needs `dpkg-deb` (every Debian host has it).

#[allow(dead_code)] // the TLS helpers serve the bench tests
mod support;

use boltq_io::testutil::TempDir;
use std::path::Path;
use std::process::Command;
use support::{server_binary, start_server};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// Builds the .deb from the binaries of this test's profile; returns its path.
fn build_deb(out: &Path) -> String {
    let bin_dir = server_binary().parent().expect("the binaries' directory");
    for bin in ["boltq-cli", "boltq-bench"] {
        assert!(
            bin_dir.join(bin).exists(),
            "{bin} is not next to the server binary in {}",
            bin_dir.display()
        );
    }
    let script = format!("{ROOT}/packaging/build-deb.sh");
    run(Command::new("bash")
        .arg(script)
        .arg(bin_dir)
        .arg(out)
        .env("BOLTQ_DEB_COMPRESSION", "none"))
    .trim()
    .to_string()
}

#[test]
fn the_deb_holds_the_binaries_unit_config_and_docs_and_its_config_serves() {
    let dir = TempDir::new("packaging");
    let deb = build_deb(&dir.path().join("out"));
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{deb}");

    let listing = run(Command::new("dpkg-deb").args(["-c", &deb]));
    for path in [
        "./usr/bin/boltq",
        "./usr/bin/boltq-cli",
        "./usr/bin/boltq-bench",
        "./lib/systemd/system/boltq.service",
        "./etc/boltq/boltq.toml",
        "./usr/share/doc/boltq/README.md",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(path)),
            "{path} missing from the package:\n{listing}"
        );
    }
    assert!(
        listing.lines().all(|l| l.contains(" root/root ")),
        "every file owned by root:\n{listing}"
    );
    let fields = run(Command::new("dpkg-deb").args(["-f", &deb, "Package", "Version", "Depends"]));
    assert!(fields.contains("Package: boltq"), "{fields}");
    assert!(fields.contains("Version: 0.1.0"), "{fields}");
    let control = dir.path().join("control");
    run(Command::new("dpkg-deb").args(["-e", &deb]).arg(&control));
    assert_eq!(
        std::fs::read_to_string(control.join("conffiles")).unwrap(),
        "/etc/boltq/boltq.toml\n"
    );
    run(Command::new("sh").arg("-n").arg(control.join("postinst")));

    // The installed tree: its config points at /var/lib/boltq and serves as shipped.
    let tree = dir.path().join("tree");
    run(Command::new("dpkg-deb").args(["-x", &deb]).arg(&tree));
    let config = tree.join("etc/boltq/boltq.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("\ndata_dir = \"/var/lib/boltq\"\n"), "{text}");
    // Serving: it answered PING.
    drop(start_server(
        &tree.join("usr/bin/boltq"),
        dir.path(),
        &["--config".as_ref(), config.as_os_str()],
    ));

    // The unit, pointed at the extracted binary (systemd checks that ExecStart exists).
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let unit = std::fs::read_to_string(tree.join("lib/systemd/system/boltq.service")).unwrap();
        let local = dir.path().join("boltq.service");
        let bin = tree.join("usr/bin/boltq");
        std::fs::write(
            &local,
            unit.replace("/usr/bin/boltq", bin.to_str().unwrap()),
        )
        .unwrap();
        let verdict = run(Command::new("systemd-analyze").arg("verify").arg(&local));
        assert!(
            verdict.trim().is_empty(),
            "systemd-analyze verify: {verdict}"
        );
    }
}
