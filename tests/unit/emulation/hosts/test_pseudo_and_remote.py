"""Pseudo-host arguments and configuration, and the SSH preflight's checks, without root (fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import TestbedError
from testbed.cli import main
from testbed.emulation.hosts import pseudo, remote
from testbed.emulation.hosts.hostsfile import Host


@pytest.mark.parametrize("kw,msg", [
    ({"count": 0}, "--count 0: expected 1 .. 8"),
    ({"count": 9}, "--count 9: expected 1 .. 8"),
    ({"mtu": 1000}, "--mtu 1000: expected 1280 .. 65535"),
    ({"subnet": "10.1.128.0/24"}, "overlaps the fabric's addresses (10.1.0.0/16)"),
    ({"subnet": "10.250.0.0/30"}, "room for 2 hosts"),
    ({"subnet": "nope"}, "--subnet 'nope' is not an IPv4 network"),
    ({"pmd_cores": "7"}, "--pmd-cores '7': expected CPU numbers below"),
    ({"maxsleep": 20000}, "--pmd-maxsleep 20000: expected 0 .. 10000"),
])
def test_bad_arguments_are_one_line(kw, msg, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    args = {"count": 2, "mtu": 9000, "subnet": "10.250.0.0/24", "pmd_cores": "0", "maxsleep": 500} | kw
    with pytest.raises(TestbedError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        pseudo._check_args(args["count"], args["mtu"], args["subnet"], args["pmd_cores"], args["maxsleep"])


def test_sshd_listens_on_the_underlay_only_with_the_runs_key():
    cfg = pseudo.SSHD_CONFIG.format(name="ph2", address="10.250.0.2", dir="/run/tb-pseudo/ph2")
    listen = [ln for ln in cfg.splitlines() if ln.startswith("ListenAddress")]
    assert listen == ["ListenAddress 10.250.0.2:22"]
    assert "PasswordAuthentication no" in cfg and "PermitRootLogin prohibit-password" in cfg
    assert "AuthorizedKeysFile /run/tb-pseudo/ph2/authorized_keys" in cfg


def test_private_mounts_cover_what_the_fabric_names_by_fixed_path():
    """What 'clean', the PFC pins and OVS find by fixed path must be private to a pseudo-host."""
    from pfc.bpfmaps import PIN_DIR
    from traffic.runtime.netns import NETNS_DIR

    private = set(pseudo.PRIVATE_TMPFS) | set(pseudo.PRIVATE_DIRS)
    assert NETNS_DIR in private and "/run/zcube-testbed" in private and "/run/openvswitch" in private
    assert "/etc/openvswitch" in private and "/tmp" in private
    assert PIN_DIR.startswith("/sys/fs/bpf") and "mount -t bpf bpf /sys/fs/bpf" in pseudo.INIT
    assert "--no-mlockall" in pseudo.INIT and pseudo.ALIAS != "zcube-testbed"


class FakeSession:
    def __init__(self, answers: dict[str, remote.Result]):
        self.answers = answers

    def run(self, command, timeout=60, check=False):
        for prefix, res in self.answers.items():
            if command.startswith(prefix):
                return res
        raise AssertionError(command)


HOST = Host(name="ph1", address="10.250.0.1", user="root", key="/k")


def test_underlay_check_names_the_host_device_and_need():
    links = json.dumps([{"ifname": "eth0", "mtu": 1500}])
    s = FakeSession({"ip -j link": remote.Result(0, links, ""),
                     "ip -j route get": remote.Result(0, json.dumps([{"dev": "eth0"}]), "")})
    with pytest.raises(TestbedError) as exc:
        remote._check_underlay(s, HOST, {"ph1": "10.250.0.1", "ph2": "10.250.0.2"}, 3000, "vxlan")
    assert str(exc.value) == ("host ph1: underlay MTU 1500 (eth0) is too small for cross-host cables: needs 3050 "
                              "(emulated MTU 3000 + 50 B of vxlan)")
    s.answers["ip -j link"] = remote.Result(0, json.dumps([{"ifname": "eth0", "mtu": 9000}]), "")
    s.answers["ping -M do -s 3022 "] = remote.Result(0, "", "")
    assert remote._check_underlay(s, HOST, {"ph1": "a", "ph2": "b"}, 3000, "vxlan") == \
        {"ph2": {"dev": "eth0", "mtu": 9000}}
    s.answers["ping -M do -s 3022 "] = remote.Result(1, "", "")  # the network between drops big frames
    with pytest.raises(remote.HostProblem, match=r"^host ph1: packets of 3050 B \(emulated MTU 3000 \+ vxlan\) do "
                                                 r"not reach host ph2 \(b\) though eth0 has MTU 9000"):
        remote._check_underlay(s, HOST, {"ph1": "a", "ph2": "b"}, 3000, "vxlan")


def test_missing_tunnel_driver_is_one_line():
    s = FakeSession({"ip link add": remote.Result(2, "", "Error: Unknown device type.\n")})
    with pytest.raises(remote.HostProblem, match=r"^host ph1: cannot make gretap tunnels there \(Error: Unknown "
                                                 r"device type.\): its kernel lacks the driver; try --tunnel vxlan$"):
        remote._check_tunnel_kind(s, HOST, "gretap")


def test_unreachable_host_is_one_line(tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    h = Host(name="gone", address="127.0.0.1", port=9, user="root", key=str(tmp_path / "k"), known_hosts=str(kh))
    with pytest.raises(remote.HostProblem) as exc:
        remote.Session(h)
    assert str(exc.value).startswith("host gone: cannot reach 127.0.0.1:9 over SSH")


def test_fingerprint_changes_with_a_source_file(tmp_path):
    for pkg in remote.SOURCE_PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "a.py").write_text("x = 1\n")
    before = remote.fingerprint(tmp_path)
    assert before == remote.fingerprint(tmp_path)
    (tmp_path / "pfc" / "a.py").write_text("x = 2\n")
    assert remote.fingerprint(tmp_path) != before


def test_plan_with_hosts_prints_the_placement(tmp_path, capsys):
    f = tmp_path / "h.yaml"
    f.write_text("hosts:\n  - {name: a, address: 10.0.0.1, user: r, key: k}\n"
                 "  - {name: b, address: 10.0.0.2, user: r, key: k}\n")
    assert main(["plan", "zcube", "--hosts", str(f)]) == 0
    out = capsys.readouterr().out
    assert "cross-host cables: 32 of 96 (16 switch-switch, 16 GPU-switch)" in out
    assert main(["plan", "roft", "--hosts", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["placements"]["roft"]["cross_cables"] == 32
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: [{name: a}]\n")
    assert main(["plan", "zcube", "--hosts", str(bad)]) == 2
    assert capsys.readouterr().err.strip().endswith("host 1 (a): address: missing")


def test_a_checkout_under_tmp_is_bound_aside_and_back_into_the_pseudo_host():
    # /tmp is private (a tmpfs) in a pseudo-host, so a clone in /tmp/ci would vanish there: bind it
    # aside under the host's folder before the tmpfs, and back to the same path after.
    before, after = pseudo.keep_checkout_lines(Path("/tmp/ci/repo"), Path("/run/tb-pseudo/ph1"))
    assert before == "mkdir -p /run/tb-pseudo/ph1/checkout && mount --bind /tmp/ci/repo /run/tb-pseudo/ph1/checkout\n"
    assert after == "mkdir -p /tmp/ci/repo && mount --bind /run/tb-pseudo/ph1/checkout /tmp/ci/repo\n"
    # a checkout elsewhere (or one whose name only starts like a private folder) needs nothing
    assert pseudo.keep_checkout_lines(Path("/work/main"), Path("/run/tb-pseudo/ph1")) == ("", "")
    assert pseudo.keep_checkout_lines(Path("/tmpfoo/repo"), Path("/run/tb-pseudo/ph1")) == ("", "")
