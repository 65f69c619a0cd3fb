"""The plan verbs (``plan``, ``path``, ``cost``; testbed.cli.plan) through the command line: the JSON contracts,
the pictures, and bad arguments as one line."""

import json
import subprocess
import sys

import pytest

from testbed.cli import main


def run_cli(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("n,k", [(16, 4), (32, 8), (64, 8), (24, 6)])
def test_plan_json_contract(capsys, n, k):
    status, out, _ = run_cli(capsys, "plan", "zcube", "--gpus", str(n), "--gpus-per-switch", str(k), "--json")
    doc = json.loads(out)
    assert status == 0
    assert {"fabric", "gpus", "nodes", "links", "cost"} <= set(doc)
    assert {"switches", "cables", "transceivers"} <= set(doc["cost"])
    assert doc["fabric"] == "zcube" and doc["gpus"] == n
    nics = [link for link in doc["links"] if link["kind"] == "host"]
    assert len(nics) == 2 * n
    assert {"gpu1:p1", "gpu1:p2"} <= {link["a"] for link in nics}
    assert all(link["b"].startswith("sw") for link in doc["links"])


def test_plan_json_roft(capsys):
    status, out, _ = run_cli(capsys, "plan", "roft", "--gpus", "32", "--json")
    doc = json.loads(out)
    assert doc["cost"]["switches"] == 12
    ends = {link["b"] for link in doc["links"]} | {link["a"] for link in doc["links"]}
    assert {"leaf1", "spine4"} <= ends


def test_path_json_contract(capsys):
    status, out, _ = run_cli(capsys, "path", "zcube", "--gpus", "32", "--gpus-per-switch", "8",
                             "--src", "3", "--dst", "17", "--json")
    # ZCube n=32, k=8: gpu3's port 1 is on odd switch ((3-1) mod 4) x 2 + 1 = sw5, gpu17's port 2 on even switch
    # ceil(17/8) x 2 = sw6; gpu3's port 2 on sw2, gpu17's port 1 on ((17-1) mod 4) x 2 + 1 = sw1. Addresses
    # 10.<port>.0.<gpu>; one direct cable each (by destination among the pair's 2).
    assert status == 0 and json.loads(out) == {
        "fabric": "zcube", "src": 3, "dst": 17, "policy": "striped", "paths": [
            {"src_port": 1, "dst_port": 2, "hops": ["sw5", "sw6"], "ecmp": False, "cables": 1, "src_ip": "10.1.0.3",
             "dst_ip": "10.2.0.17", "alt_src_ip": "10.2.0.3", "alt_dst_ip": "10.1.0.17"},
            {"src_port": 2, "dst_port": 1, "hops": ["sw2", "sw1"], "ecmp": False, "cables": 1, "src_ip": "10.2.0.3",
             "dst_ip": "10.1.0.17", "alt_src_ip": "10.1.0.3", "alt_dst_ip": "10.2.0.17"}]}


def test_graph_outputs(tmp_path, capsys):
    for name in ("t.png", "t.dot", "t.mmd"):
        status, _, _ = run_cli(capsys, "plan", "zcube", "--graph", str(tmp_path / name))
        assert status == 0
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # ZCube n=32: 32 GPUs x 2 NIC cables + 4 x 4 odd-even pairs x 2 cables = 96 cables, one dot edge each; the
    # Mermaid picture draws each NIC cable (64) and one edge per switch pair (16): 80
    dot = (tmp_path / "t.dot").read_text()
    assert dot.splitlines()[0] == 'graph "ZCube(gpus=32, gpus_per_switch=8, cables=2)" {' and dot.count(" -- ") == 96
    mmd = (tmp_path / "t.mmd").read_text()
    assert mmd.splitlines()[0] == "graph TD" and mmd.count("---") == 80


def test_a_fabric_beyond_the_seeds_scale_is_not_drawn_as_a_picture(tmp_path, capsys):
    """2,048 GPUs: a picture is refused in one line (exit 2), nothing written; the text formats still work."""
    argv = ["plan", "zcube", "--gpus", "2048", "--gpus-per-switch", "64", "--graph"]
    status, _, err = run_cli(capsys, *argv, str(tmp_path / "big.png"))
    assert status == 2 and "more than 512" in err and err.count("\n") == 1 and not (tmp_path / "big.png").exists()
    status, _, _ = run_cli(capsys, *argv, str(tmp_path / "big.dot"))
    assert status == 0 and (tmp_path / "big.dot").read_text().count(" -- ") == 2 * 2048 + 32 * 32 * 2


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "zcube", "--gpus", "30"],
        ["plan", "zcube", "--gpus", "abc"],
        ["plan", "hypercube"],
        ["path", "zcube", "--src", "0", "--dst", "3"],
        ["plan", "zcube", "--graph", "/tmp/x.jpg"],
        ["plan", "zcube", "--cables", "9"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv):
    proc = subprocess.run([sys.executable, "-m", "testbed", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
