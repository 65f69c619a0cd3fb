#!/bin/bash
# One idempotent set-up for a Debian 12 machine, used by the README, the
# Vagrantfile and CI alike: apt packages, a venv that sees Debian's mininet,
# the project with pinned dependencies, and a running Open vSwitch.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: run as root (sudo $0): it installs packages and starts Open vSwitch" >&2
    exit 1
fi

# openssh-server: hosts of a fabric spread over machines are driven over SSH (docs/multihost.md), and
# pseudo-hosts run their own sshd for testing that on one machine
APT_PACKAGES="openssh-server openvswitch-switch mininet iperf3 libiperf0 tcpdump ethtool iproute2 iputils-ping python3-venv python3-pip graphviz chromium clang libbpf-dev linux-libc-dev"
missing=""
for pkg in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends $missing
fi

# Debian's python3 (3.11) so that its mininet package is importable from the venv.
if ! .venv/bin/python -c "import mininet.net" 2>/dev/null; then
    rm -rf .venv
    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install -q --upgrade pip
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -e "$stamp" ]; then
    .venv/bin/pip install -q -e ".[test]"  # [test]: pytest and the linter .ci/run runs
    rm -f .venv/.installed-*
    touch "$stamp"
fi

# Open vSwitch: userspace datapath only (no kernel module here); ovs-ctl skips modprobe.
if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
    /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || true
    ovs-vsctl --timeout=10 show >/dev/null || { echo "setup: Open vSwitch did not start" >&2; exit 1; }
fi
echo "setup: ready ($(.venv/bin/python --version), $(ovs-vsctl --version | head -1))"
