"""testbed.experiment.scale_live: a run that names a shipped scale result computes it again on the fluid backend
when the budget lets it, and says which it shows. Real runs (ideal and fluid backends), small sizes."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.cli import main
from testbed.experiment import scale_live
from testbed.report import headline_lines

SHIPPED = Path(__file__).resolve().parents[3] / "experiments" / "scale_result.json"


def small_shipped(tmp_path: Path) -> Path:
    """The shipped n=512 document, said to be of a size a unit test computes in seconds (32 GPUs, 8 s)."""
    doc = json.loads(SHIPPED.read_text()) | {"gpus": 32, "concurrency": 28, "duration_s": 6, "warmup_s": 2}
    path = tmp_path / "scale_result.json"
    path.write_text(json.dumps(doc))
    return path


def run(tmp_path: Path, *sets: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    args = ["run", "--backend", "ideal", "--set", "trace.duration_s=6", "--set", "serving.warmup_s=2", "--reps", "1",
            "--set", f"scale_result={small_shipped(tmp_path)}", "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    (run_dir,) = out.iterdir()
    return run_dir


def test_always_computes_the_scale_result_live_and_says_so(tmp_path):
    run_dir = run(tmp_path, "scale_live=always")
    doc = json.loads((run_dir / "scale_result.json").read_text())
    assert doc["shown"] == "live" and doc["backend"] == "fluid" and doc["gpus"] == 32
    assert doc["repetitions"] == scale_live.LIVE_REPETITIONS and doc["shipped"]["gpus"] == 32
    live = json.loads((run_dir / "scale" / "experiment.json").read_text())["experiment"]
    assert (live["backend"], live["repetitions"], live["trace"]["duration_s"]) == ("fluid", 5, 6)
    assert len(list((run_dir / "scale" / "runs").glob("*/rep*/summary.json"))) == 10
    text = "\n".join(headline_lines(run_dir))
    assert "at the seed's scale (32 GPUs, fluid, 28 in flight, 5 repetition(s); LIVE: computed by this run" in text


def test_auto_falls_back_to_the_shipped_file_when_the_budget_is_short(tmp_path, monkeypatch):
    monkeypatch.setattr(scale_live, "BUDGET_S", 1)
    assert scale_live.why_shipped("auto", True, 10.0, 20.0, str) is None  # fits: computed live
    why = scale_live.why_shipped("auto", True, 30.0, 20.0, lambda s: f"{s:g} s")
    assert why == ("not computed live: it needs ~30 s, 20 s of the main job's 0 min left (scale_live: always "
                   "computes it)")
    run_dir = run(tmp_path)  # not the main job: a simulator, workload keys overridden
    doc = json.loads((run_dir / "scale_result.json").read_text())
    assert doc["shown"] == "shipped" and not (run_dir / "scale").exists()
    assert doc["why"] == "scale_live auto computes it after the experiment as written on the emulated backend only"
    assert f"shipped {doc['dir']} at commit {doc['commit']}; scale_live auto" in "\n".join(headline_lines(run_dir))


def test_never_shows_the_shipped_file(tmp_path):
    run_dir = run(tmp_path, "scale_live=never")
    doc = json.loads((run_dir / "scale_result.json").read_text())
    assert (doc["shown"], doc["why"]) == ("shipped", "scale_live: never") and not (run_dir / "scale").exists()


def test_a_live_experiment_the_engine_refuses_falls_back_in_one_line(tmp_path, monkeypatch):
    """The run's own overrides travel to the live run; what the fluid engine cannot take (here a size its wiring
    cannot make) leaves the shipped file, with the refusal as the reason, and the run itself succeeds."""
    real = scale_live.live_overrides
    monkeypatch.setattr(scale_live, "live_overrides",
                        lambda resolved, doc: real(resolved, doc) + [scale_live.Override("gpus", 30, "test")])
    run_dir = run(tmp_path, "scale_live=always")
    doc = json.loads((run_dir / "scale_result.json").read_text())
    assert doc["shown"] == "shipped" and not (run_dir / "scale").exists()
    assert doc["why"].startswith("not computed live: ") and "gpus" in doc["why"] and "\n" not in doc["why"]


def test_the_live_run_is_on_one_machine_on_the_engines_own_paths():
    """A main job spread over hosts, or following recorded paths, still computes its scale on this machine."""
    from types import SimpleNamespace

    from testbed.experiment.schema import Override

    given = SimpleNamespace(overrides=[Override("hosts", "/x/hosts.yaml", "--hosts"),
                                       Override("paths_from", "/x/run", "--set")])
    keys = {o.key: o.value for o in scale_live.live_overrides(given, json.loads(SHIPPED.read_text()))}
    assert keys["hosts"] is None and keys["paths_from"] is None and keys["backend"] == "fluid"
    assert (keys["gpus"], keys["repetitions"], keys["scale_live"]) == (512, 5, "never")
