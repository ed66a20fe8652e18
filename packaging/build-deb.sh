#!/usr/bin/env bash
# Builds boltq_<version>_<arch>.deb from binaries already built, with dpkg-deb alone (no
# cargo-deb to install): the server, boltq-cli and boltq-bench in /usr/bin, the systemd
# unit, the example config as /etc/boltq/boltq.toml (a conffile) with its data in
# /var/lib/boltq, and the docs. The package creates the `boltq` system user.
#
#   cargo build --release -p boltq -p boltq-tools
#   packaging/build-deb.sh                     # -> target/debian/boltq_<version>_<arch>.deb
#   packaging/build-deb.sh BIN_DIR OUT_DIR     # other binaries or output directory
#
# BOLTQ_DEB_COMPRESSION picks dpkg-deb's compressor (xz by default; the tests use none, as
# xz takes minutes over debug binaries).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=${1:-$root/target/release}
out_dir=${2:-$root/target/debian}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
arch=$(dpkg --print-architecture)
for bin in boltq boltq-cli boltq-bench; do
    [ -x "$bin_dir/$bin" ] || { echo "build-deb: $bin_dir/$bin is missing: build it first" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

for bin in boltq boltq-cli boltq-bench; do
    install -D -m 0755 "$bin_dir/$bin" "$stage/usr/bin/$bin"
    # Debug symbols stay out of the package (binutils' strip, when the host has it).
    if command -v strip >/dev/null; then strip --strip-debug "$stage/usr/bin/$bin"; fi
done
install -D -m 0644 "$root/packaging/boltq.service" "$stage/lib/systemd/system/boltq.service"
install -d -m 0755 "$stage/etc/boltq"
sed 's|^data_dir = "./data"$|data_dir = "/var/lib/boltq"|' "$root/config/boltq.example.toml" \
    > "$stage/etc/boltq/boltq.toml"
grep -q '^data_dir = "/var/lib/boltq"$' "$stage/etc/boltq/boltq.toml" \
    || { echo "build-deb: the example config has no data_dir line to point at /var/lib/boltq" >&2; exit 1; }
chmod 0640 "$stage/etc/boltq/boltq.toml"
for doc in README.md STATUS.md docs/configuration.md docs/security.md docs/clustering.md; do
    install -D -m 0644 "$root/$doc" "$stage/usr/share/doc/boltq/$(basename "$doc")"
done

install -d -m 0755 "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: boltq
Version: $version
Architecture: $arch
Maintainer: BoltQ developers <dev@boltq.invalid>
Section: net
Priority: optional
Depends: libc6, passwd
Description: thread-per-core message server (queue plane and messaging plane)
 BoltQ serves BoltQ v1 clients over its binary TCP protocol (work queues,
 pub/sub, exchanges, dead letters, an HTTP admin API and dashboard) and,
 optionally, a partitioned log behind a WebSocket gateway for devices.
CONTROL
echo /etc/boltq/boltq.toml > "$stage/DEBIAN/conffiles"
cat > "$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent passwd boltq >/dev/null; then
        useradd --system --user-group --home-dir /var/lib/boltq --shell /usr/sbin/nologin boltq
    fi
    install -d -o boltq -g boltq -m 0750 /var/lib/boltq
    chgrp boltq /etc/boltq/boltq.toml
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
    fi
    echo "boltq: start it with 'systemctl enable --now boltq'; set security.api_key in /etc/boltq/boltq.toml first if other hosts can reach it"
fi
POSTINST
chmod 0755 "$stage/DEBIAN/postinst"

mkdir -p "$out_dir"
deb="$out_dir/boltq_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"${BOLTQ_DEB_COMPRESSION:-xz}" --build "$stage" "$deb" >/dev/null
echo "$deb"
