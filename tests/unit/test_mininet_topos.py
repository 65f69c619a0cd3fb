"""testbed/mininet_topos.py (for `mn --custom`) builds the fabric model's wiring, without root."""

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("mininet.topo")

from fabrics import addressing, build_fabric  # noqa: E402
from testbed.mininet_topos import RoftTopo, ZCubeTopo, topos  # noqa: E402

TOPO_FILE = Path(__file__).resolve().parents[2] / "testbed" / "mininet_topos.py"
SYSTEM_PYTHON = "/usr/bin/python3"
CASES = {
    "zcube-16-8": (ZCubeTopo, (16, 8), ("zcube", {"gpus": 16, "gpus_per_switch": 8})),
    "zcube-32-8": (ZCubeTopo, (32, 8), ("zcube", {"gpus": 32, "gpus_per_switch": 8})),
    "roft-32": (RoftTopo, (32,), ("roft", {"gpus": 32})),
}


@pytest.fixture(autouse=True)
def no_fabric_up(tmp_path, monkeypatch):
    """The topologies refuse to build while a testbed fabric is up; point them at an empty state dir."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))


def model_links(fabric):
    """Every cable as {(node, port, intf), (node, port, intf)}, counted (parallel cables repeat)."""
    out = Counter()
    for c in fabric.cables:
        a_intf = (addressing.host_intf(int(c.a[3:]), c.a_port) if c.kind == "host"
                  else addressing.switch_intf(c.a, c.a_port))
        out[frozenset({(c.a, c.a_port, a_intf), (c.b, c.b_port, addressing.switch_intf(c.b, c.b_port))})] += 1
    return out


def topo_links(topo):
    out = Counter()
    for _, _, info in topo.links(withInfo=True):
        out[frozenset({(info["node1"], info["port1"], info["intfName1"]),
                       (info["node2"], info["port2"], info["intfName2"])})] += 1
    return out


@pytest.mark.parametrize("case", CASES)
def test_topo_has_the_models_switches_hosts_and_cables(case):
    cls, args, (kind, kwargs) = CASES[case]
    topo, fabric = cls(*args), build_fabric(kind, **kwargs)
    assert sorted(topo.switches()) == sorted(fabric.switches)
    for name, sw in fabric.switches.items():
        dpid = topo.nodeInfo(name)["dpid"]
        assert len(dpid) == 16 and int(dpid, 16) == sw.dpid
    assert sorted(topo.hosts()) == sorted(f"gpu{i}" for i in fabric.gpus())
    for i in fabric.gpus():
        assert topo.nodeInfo(f"gpu{i}")["ip"] == f"{addressing.ip_of(i, 1)}/16"
    assert topo_links(topo) == model_links(fabric)
    assert sum(topo_links(topo).values()) == len(fabric.cables)
    for _, _, info in topo.links(withInfo=True):  # host side carries the plan's MAC
        if info["node1"].startswith("gpu"):
            assert info["addr1"] == addressing.mac_of(int(info["node1"][3:]), info["port1"])
        else:
            assert "addr1" not in info and "addr2" not in info


def test_topos_export_and_defaults():
    assert topos == {"zcube": ZCubeTopo, "roft": RoftTopo}
    assert len(ZCubeTopo().switches()) == 8 and len(RoftTopo().switches()) == 12


def test_bad_size_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        ZCubeTopo(30, 8)
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_refuses_while_a_testbed_fabric_is_up(tmp_path, capsys):
    (tmp_path / "state.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        RoftTopo(32)
    assert exc.value.code == 1 and "testbed down" in capsys.readouterr().err


LOADER = r"""
import json, runpy, sys
path = sys.argv[1]
if sys.argv[2] == "runpy":
    ns = runpy.run_path(path)
else:  # what mn --custom does: exec in a fresh dict, no __file__
    ns = {}
    exec(compile(open(path).read(), path, "exec"), ns, ns)
z, r = ns["topos"]["zcube"](32, 8), ns["topos"]["roft"](32)
print(json.dumps({"links": [len(z.links()), len(r.links())], "python": sys.executable,
                  "venv_modules": sorted(m for m in ("networkx", "pyroute2", "pydantic", "numpy", "yaml")
                                         if m in sys.modules)}))
"""


def _system_python_has_mininet() -> bool:
    return os.path.exists(SYSTEM_PYTHON) and subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", "import mininet.topo"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _system_python_has_mininet(), reason=f"{SYSTEM_PYTHON} lacks Mininet")
@pytest.mark.parametrize("how", ["runpy", "mn-exec"])
def test_loads_under_system_python_from_another_directory(tmp_path, how):
    rel = os.path.relpath(TOPO_FILE, tmp_path)  # a relative path, as typed on mn's command line
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TESTBED_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([SYSTEM_PYTHON, "-I", "-c", LOADER, rel, how], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    f32 = [len(build_fabric("zcube", gpus=32).cables), len(build_fabric("roft", gpus=32).cables)]
    assert doc["links"] == f32
    assert doc["venv_modules"] == []
    assert doc["python"] == SYSTEM_PYTHON
