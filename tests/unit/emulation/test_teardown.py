"""build.teardown and fabricctl.down remove what the state file lists only where it carries our marker, the
same check 'clean' makes: a forged or stale state file beside someone else's namespace, link, bridge or
process of the same name touches nothing of theirs (issue 28). On a machine in memory (tests/support/fakes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common import owned
from common.errors import EnvironmentProblem
from testbed.emulation import build, fabricctl
from testbed.emulation.state import Created
from tests.support.fakes.host import FakeHost


@pytest.fixture
def host(monkeypatch) -> FakeHost:
    h = FakeHost(netns={"tb-gpu1", "tb-gpu2", "foreign-ns"}, bridges={"sw1": True, "sw2": True, "foreign0": False},
                 qos={"q-ours": True, "q-foreign": False})
    h.add_link("sw1-eth1", True, twin="sw1-eth1r")  # a cable: both ends in the root namespace
    for name, ours in (("sw1-rx", True), ("foreign-a", False), ("eth0", False)):
        h.add_link(name, ours)
    return h.install(monkeypatch)


def test_only_what_is_listed_and_ours_is_removed(host):
    created = Created(netns=["tb-gpu1", "tb-gpu2", "foreign-ns", "tb-gpu9"], links=["sw1-eth1", "foreign-a"],
                      ovs_bridges=["sw1", "foreign0", "sw9"], qos_uuid="q-ours")
    left: list[str] = []
    timings = build.teardown(created, left)
    assert host.netns == {"foreign-ns"}  # tb-gpu9 was never there: not an error, nothing to leave alone
    assert host.killed_in == [["tb-gpu1", "tb-gpu2"]]  # only in our namespaces are processes killed
    assert host.bridges == {"sw2": True, "foreign0": False} and host.qos == {"q-foreign": False}
    assert set(host.links) == {"sw1-rx", "foreign-a", "eth0"}  # sw1-rx is ours but was not listed
    assert left == ["netns foreign-ns", "bridge foreign0", "link foreign-a"]
    assert ["ip", "link", "del", "group", "31331"] not in host.commands  # it would have taken sw1-rx too
    assert set(timings) == {"ovs_s", "links_s"}
    ovs = [c for c in host.commands if c[0] == "ovs-vsctl" and "del-br" in c]
    assert ovs == [["ovs-vsctl", "--timeout=60", "--", "--if-exists", "del-br", "sw1"]]  # sw2 was not listed


def test_a_foreign_qos_uuid_is_left(host):
    build.teardown(Created(qos_uuid="q-foreign"))
    assert host.qos == {"q-ours": True, "q-foreign": False}


def test_our_link_group_goes_in_one_batch_when_all_of_it_is_listed_and_a_foreign_name_stays(host):
    foreign = build.delete_links(["sw1-eth1", "sw1-rx", "foreign-a", "gone"])  # sw1-eth1r: sw1-eth1's twin
    assert foreign == ["foreign-a"]
    assert ["ip", "link", "del", "group", "31331"] in host.commands
    assert not [c for c in host.commands if c[0] == "netlink"]  # the group took both of ours at once
    assert set(host.links) == {"foreign-a", "eth0"}


@pytest.fixture
def bystander():
    proc = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True); import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    yield proc
    proc.communicate(b"")


def test_down_on_a_forged_state_file_touches_nothing_foreign(host, bystander, tmp_path, monkeypatch):
    """The done-when case: a state file naming a foreign pid (with its true start time and command line), a
    foreign pause daemon pid, and foreign devices; 'down' removes nothing of theirs and says so in one line."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(fabricctl, "require_root", lambda: None)
    info = owned.proc_info(bystander.pid)
    (tmp_path / "state.json").write_text(json.dumps({
        "fabric": {"kind": "zcube", "gpus": 16}, "controller_pid": bystander.pid, "controller_start": info.start,
        "controller_argv": list(info.argv), "state_dir": str(tmp_path), "pfc": {"enabled": False},
        "created": {"netns": ["foreign-ns"], "links": ["foreign-a", "eth0"], "ovs_bridges": ["foreign0"],
                    "qos_uuid": "q-foreign"}}))
    before = (set(host.netns), dict(host.links), dict(host.bridges), dict(host.qos))
    with pytest.raises(EnvironmentProblem) as err:
        fabricctl.down()
    assert str(err.value) == ("the fabric is down; left alone 4 things the state file named that are not ours "
                              "(no marker of ours): netns foreign-ns, bridge foreign0, link foreign-a, link eth0")
    assert bystander.poll() is None
    assert (set(host.netns), dict(host.links), dict(host.bridges), dict(host.qos)) == before
    assert host.killed_in == [[]]
    assert not (tmp_path / "state.json").exists()  # the forged record itself is gone
