"""The README's main job from a fresh clone with nothing beside it (issue 14, section 6).

The repository is cloned with ``git clone --no-local`` into a temporary folder
that has no ``shared`` folder next to it, so the clone can only use what it
carries itself. A clone holds the committed HEAD: uncommitted changes of this
working tree are not in it, so these tests check what is committed.

The clone's code is what runs: cwd and PYTHONPATH are the clone (PYTHONPATH
comes before this venv's editable install of the working tree), with this
venv's Python and its dependencies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.integration import REPO, leftovers


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("fresh-clone")
    dest = base / "clone"
    proc = subprocess.run(["git", "-c", f"safe.directory={REPO}", "clone", "--quiet", "--no-local", str(REPO),
                           str(dest)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"git clone {REPO}: {proc.stderr.strip()}"
    assert not (base / "shared").exists() and not (dest.parent / "shared").exists()
    return dest


def run_in_clone(clone: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m testbed ARGS`` run from the clone, with the clone's code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTBED_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(clone)
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_fresh_clone_dry_run_uses_its_own_trace(clone):
    """The default's requests come from the clone: a trace file inside it, or a named workload that is
    generated or read from a file the clone ships (every preset's file checked, with the clone's code)."""
    proc = run_in_clone(clone, "run", "--dry-run", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = json.loads(proc.stdout)["experiment"]["trace"]
    assert trace["path"] or trace["workload"], trace
    paths = [trace["path"]] if trace["path"] else []
    listed = subprocess.run([sys.executable, "-c", "import json; from traffic.model.workloads import WORKLOADS; "
                             "print(json.dumps({k: w.path for k, w in WORKLOADS.items()}))"],
                            cwd=clone, env={**os.environ, "PYTHONPATH": str(clone)}, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    presets = json.loads(listed.stdout)
    assert trace["path"] or trace["workload"] in presets, trace
    paths += [clone / p for p in presets.values() if p]
    for path in map(Path, paths):
        assert path.is_file(), path
        assert path.resolve().is_relative_to(clone.resolve()), f"the trace {path} is not in the clone {clone}"
        assert "shared" not in path.parts


@pytest.mark.integration
def test_fresh_clone_runs_the_smoke_experiment(clone):
    proc = run_in_clone(clone, "run", "experiments/smoke.yaml", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert run_dir.resolve().is_relative_to((clone / "reports").resolve()), run_dir
    assert (run_dir / "report.html").is_file()
    experiment = json.loads((run_dir / "experiment.json").read_text())
    assert Path(experiment["experiment"]["trace"]["path"]).resolve().is_relative_to(clone.resolve())
    assert leftovers() == []
