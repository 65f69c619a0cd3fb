"""`run` and `sweep` orchestration without a fabric: a fake replay function
writes a minimal summary.json, so the loop, the run-directory layout, error.txt
on a failed replay, Ctrl-C, the report hook, versions.json and the printed
last line are checked. Nothing here may start a real replay."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from common.errors import EnvironmentProblem, TestbedError
from testbed.cli import main
from testbed.experiment import run, rundir, sweep
from testbed.experiment.schema import EXAMPLES_DIR, Override, resolve, validate
from testbed.report import headline
from tests.support import fake_runs
from tests.support.fake_runs import FakeBackend, FakeReplay

SMOKE = EXAMPLES_DIR / "smoke.yaml"


@pytest.fixture(autouse=True)
def no_real_fabric(monkeypatch):
    """The real repetition would build a fabric (these tests may run as root): make it unreachable, stub the
    report (the run directories it was built for are returned)."""
    fake_runs.install(monkeypatch)
    return fake_runs.no_report(monkeypatch)


class FailsOnce(FakeReplay):
    """The first call for ``key`` half-writes its folder and raises ``exc``; later calls succeed."""

    def __init__(self, key, exc):
        super().__init__()
        self.key, self.exc, self.raised = key, exc, False

    def __call__(self, spec, backend, out_root=None, log=print, run_dir=None):
        if (spec.kind, spec.seed) == self.key and not self.raised:
            self.raised = True
            self.calls.append({"kind": spec.kind, "seed": spec.seed, "run_dir": run_dir})
            run_dir.mkdir(parents=True)
            (run_dir / "queues.csv").write_text("half\n")
            raise self.exc
        return super().__call__(spec, backend, out_root, log, run_dir)


def smoke(*overrides: Override):
    return resolve(SMOKE, list(overrides))


def go(resolved, tmp_path, replay):
    lines, log = [], []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "run_repetition", replay)
        status = run.run_experiment(resolved, tmp_path, log=log.append, out=lines.append, backend=FakeBackend())
    return status, lines, log


# ------------------------------------------------------------- planning
def test_targets_are_repetition_major_with_seeds_seed_plus_r_minus_one():
    exp = validate({"seed": 10, "repetitions": 2}, "x")
    got = [(t.fabric, t.rep, t.seed, str(t.rel)) for t in run.targets(exp)]
    assert got == [("zcube", 1, 10, "runs/zcube/rep1"), ("roft", 1, 10, "runs/roft/rep1"),
                   ("zcube", 2, 11, "runs/zcube/rep2"), ("roft", 2, 11, "runs/roft/rep2")]


def test_wall_time_estimate_of_the_default_fits_fifteen_minutes():
    """experiments/default.yaml: 28 s of cluster time at dilation 4 = 112 s replayed (live, closed loop), plus
    22 s of set-up a repetition on a fabric built once (14 s a fabric), for 2 fabrics x 3 repetitions:
    2 x (3 x 134 + 14) = 832 s = 13.9 min, under 15 min."""
    from testbed.backends.emulated.backend import EmulatedBackend

    exp = resolve(None).experiment
    assert run.estimate_s(exp, EmulatedBackend()) == 832.0
    assert run.estimate_text(exp, EmulatedBackend()) == ("2 fabric(s) x (3 repetition(s) x (112 s replayed + ~22 s "
                                                         "set-up) + ~14 s a fabric) = ~13.9 min")


def test_run_ids_are_unique_and_named(tmp_path):
    a = rundir.new_run_dir(tmp_path, "smoke", now=0)
    b = rundir.new_run_dir(tmp_path, "smoke", now=0)
    assert a.name.endswith("-smoke") and b.name == a.name + "-2" and a.is_dir() and b.is_dir()


# ----------------------------------------------------------- the run loop
def test_run_writes_the_layout_and_prints_the_run_directory_last(tmp_path, no_real_fabric):
    replay = FakeReplay()
    status, lines, log = go(smoke(Override("repetitions", 2, "--reps")), tmp_path, replay)
    run_dir = Path(lines[-1])
    assert status == 0 and run_dir.parent == tmp_path and run_dir.name.endswith("-smoke")
    assert [(c["kind"], c["seed"], c["run_dir"]) for c in replay.calls] == [
        ("zcube", 0, run_dir / "runs/zcube/rep1"), ("roft", 0, run_dir / "runs/roft/rep1"),
        ("zcube", 1, run_dir / "runs/zcube/rep2"), ("roft", 1, run_dir / "runs/roft/rep2")]
    assert all(c["out_root"] is None and c["gpus"] == 16 and c["pfc"].enabled is True for c in replay.calls)
    doc = json.loads((run_dir / "experiment.json").read_text())
    assert doc["experiment"]["gpus"] == 16 and doc["source"] == str(SMOKE)
    assert doc["overrides"] == [{"key": "repetitions", "value": 2, "origin": "--reps"}]
    assert [r["dir"] for r in doc["runs"]] == ["runs/zcube/rep1", "runs/roft/rep1", "runs/zcube/rep2",
                                               "runs/roft/rep2"]
    versions = json.loads((run_dir / "versions.json").read_text())
    assert set(versions) == {"project", "git", "ovs", "os_ken", "kernel", "python"}
    for name in ("plan/zcube.png", "plan/roft.png", "plan/zcube.json", "plan/cost.json", "headline.json",
                 "report.html"):
        assert (run_dir / name).is_file(), name
    assert no_real_fabric == [run_dir]  # build_report(run_dir) on the run directory
    heads = json.loads((run_dir / "headline.json").read_text())["fabrics"]
    assert heads["zcube"]["ok"] == 2 and heads["zcube"]["goodput_bps"]["min"] == 2e6
    assert heads["zcube"]["goodput_bps"]["max"] == 2e6 + 1000 and heads["zcube"]["pfc_pauses"]["mean"] == 4
    # the report's headline (testbed.report.headline), then the run directory last
    assert lines[0].startswith("headline: ") and lines[1].split()[:3] == ["figure", "ZCube", "ROFT"]
    assert any(line.startswith("TTFT P99 (ms)") for line in lines) and any("paired by seed" in x for x in lines)
    assert any("estimated wall time" in m for m in log)
    again = resolve(run_dir / "experiment.json").experiment  # a run's experiment.json reruns it exactly
    assert again == smoke(Override("repetitions", 2, "--reps")).experiment


def test_a_failed_fabric_keeps_the_other_and_exits_non_zero(tmp_path, no_real_fabric):
    replay = FakeReplay(fail={("roft", 0): RuntimeError("controller died")})
    status, lines, log = go(smoke(), tmp_path, replay)
    run_dir = Path(lines[-1])
    assert status == 1 and len(replay.calls) == 2
    kept = json.loads((run_dir / "runs/zcube/rep1/summary.json").read_text())
    assert (kept["fabric"], kept["goodput_bps"]) == ("zcube", 2e6)  # FakeReplay: 2 Mbit/s on ZCube, + 0 for seed 0
    error = (run_dir / "runs/roft/rep1/error.txt").read_text()
    assert error.startswith("RuntimeError: controller died")
    heads = json.loads((run_dir / "headline.json").read_text())
    assert heads["fabrics"]["roft"]["ok"] == 0 and heads["fabrics"]["zcube"]["ok"] == 1
    assert heads["fabrics"]["roft"]["repetitions"][0]["error"] == "RuntimeError: controller died"
    assert no_real_fabric == [run_dir]  # the report is still built from what there is


def test_an_environment_failure_is_retried_once_and_the_report_says_so(tmp_path, no_real_fabric):
    replay = FailsOnce(("roft", 0), EnvironmentProblem("3 of 16 agents were not listening after 60 s"))
    status, lines, log = go(smoke(), tmp_path, replay)
    run_dir = Path(lines[-1])
    assert status == 0 and [c["kind"] for c in replay.calls] == ["zcube", "roft", "roft"]
    assert (run_dir / "runs/roft/rep1/summary.json").is_file()
    assert "not listening" in (run_dir / "runs/roft/rep1.attempt1/error.txt").read_text()
    assert (run_dir / "runs/roft/rep1.attempt1/queues.csv").is_file()  # the first attempt is kept aside
    assert "not listening" in (run_dir / "runs/roft/rep1/retried.txt").read_text()
    assert any("retrying once" in line for line in log)
    heads = json.loads((run_dir / "headline.json").read_text())
    roft = [o for o in heads["outcomes"] if o["fabric"] == "roft"][0]
    assert roft["status"] == "ok" and "not listening" in roft["retried"]
    from testbed.report.load import load_experiment

    assert load_experiment(run_dir).retried == [
        "roft rep1: retried once, first attempt failed (rep1.attempt1/): EnvironmentProblem: "
        "3 of 16 agents were not listening after 60 s"]


def test_an_experiment_error_is_not_retried(tmp_path, no_real_fabric):
    replay = FakeReplay(fail={("roft", 0): TestbedError("trace window holds no request")})
    status, _, _ = go(smoke(), tmp_path, replay)
    assert status == 1 and [c["kind"] for c in replay.calls] == ["zcube", "roft"]


def test_ctrl_c_stops_leaves_what_was_written_and_propagates(tmp_path):
    replay = FakeReplay(fail={("roft", 0): KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        go(smoke(), tmp_path, replay)
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "runs/zcube/rep1/summary.json").is_file() and (run_dir / "experiment.json").is_file()
    assert "interrupted" in (run_dir / "runs/roft/rep1/error.txt").read_text()


def test_unverified_transfers_exit_non_zero(tmp_path):
    class Lossy(FakeReplay):
        def __call__(self, *a, **kw):
            out = super().__call__(*a, **kw)
            s = json.loads((out / "summary.json").read_text())
            (out / "summary.json").write_text(json.dumps(s | {"verified": 9}))

    status, lines, _ = go(smoke(), tmp_path, Lossy())
    assert status == 1 and Path(lines[-1]).is_dir()


def test_without_the_report_module_the_run_warns_and_succeeds(tmp_path, monkeypatch):
    def absent():
        raise ModuleNotFoundError("No module named 'testbed.report'", name="testbed.report")

    monkeypatch.setattr(run, "report_builder", absent)
    status, lines, log = go(smoke(), tmp_path, FakeReplay())
    assert status == 0 and any("no report.html" in m for m in log)


def test_a_failing_report_is_recorded_and_exits_non_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "report_builder", lambda: (lambda run_dir: 1 / 0))
    status, lines, _ = go(smoke(), tmp_path, FakeReplay())
    assert status == 1 and "ZeroDivisionError" in (Path(lines[-1]) / "report-error.txt").read_text()


def test_versions_record_project_git_ovs_os_ken_kernel_python():
    def fake(argv, cwd=None):
        return {("git", "rev-parse"): "1a2b3c4\n", ("git", "status"): " M README.md\n",
                ("ovs-vsctl", "--version"): "ovs-vsctl (Open vSwitch) 3.1.0\nDB Schema 8.3.1\n"}.get(tuple(argv[:2]))

    v = rundir.collect_versions(fake)
    assert set(v) == {"project", "git", "ovs", "os_ken", "kernel", "python"}
    assert v["git"] == "1a2b3c4-dirty" and v["ovs"] == "ovs-vsctl (Open vSwitch) 3.1.0"
    assert v["project"] and v["os_ken"] and v["kernel"] and v["python"]
    bare = rundir.collect_versions(lambda argv, cwd=None: None)
    assert bare["git"] is None and bare["ovs"] is None


def test_headline_reads_a_replay_summary(tmp_path):
    from tests.support.settings import repetition

    FakeReplay()(repetition({"fabrics": ["roft"], "gpus": 16}), FakeBackend(), run_dir=tmp_path / "r")
    h = headline.rep_headline(tmp_path / "r")
    assert h["goodput_bps"] == 1e6 and h["fct_p99_ms"] == 9.0 and h["ttft_p99_ms"] == 50.0
    assert h["queue_drops"] == 3 and h["pfc_pauses"] == 4
    assert headline.rep_headline(tmp_path / "nothing") == {}
    assert headline.spread([1, 3, None]) == {"median": 2.0, "mean": 2.0, "min": 1, "max": 3,
                                             "stdev": pytest.approx(1.414214), "n": 2}


# ------------------------------------------------------------------ sweep
def test_sweep_parameters_and_grid():
    assert sweep.parse_param("link.rate=3mbit, 4mbit") == ("link.rate", ["3mbit", "4mbit"])
    one = sweep.expand([("link.rate", ["3mbit", "4mbit"])])
    assert one == [[("link.rate", "3mbit")], [("link.rate", "4mbit")]]
    two = sweep.expand([("link.rate", ["3mbit", "4mbit"]), ("trace.speed", ["1", "2", "4"])])
    assert len(two) == 6 and two[1] == [("link.rate", "3mbit"), ("trace.speed", "2")]
    assert sweep.point_name(two[1]) == "link.rate=3mbit,trace.speed=2"


@pytest.mark.parametrize("text, expected", [
    ("link.rat=3mbit", r"link.rat \(from --param\): unknown key \(known: rate,"),
    ("link=3mbit", "is a section"),
    ("fabrics=zcube", "cannot be swept"),
    ("link.rate", "expected KEY=V1,V2"),
    ("link.rate=3mbit,,4mbit", "empty value"),
    ("link.rate=3mbit,3mbit", "listed twice"),
])
def test_bad_sweep_parameters_are_rejected(text, expected):
    with pytest.raises(TestbedError, match=expected):
        sweep.parse_param(text)


def test_a_paired_sweep_takes_the_ith_value_of_each_key():
    params = [("gpus", ["32", "64"]), ("serving.concurrency", ["128", "256"])]
    assert sweep.expand(params, paired=True) == [[("gpus", "32"), ("serving.concurrency", "128")],
                                                 [("gpus", "64"), ("serving.concurrency", "256")]]
    assert len(sweep.expand(params)) == 4
    with pytest.raises(TestbedError, match="as many values"):
        sweep.expand([("gpus", ["32", "64"]), ("serving.concurrency", ["128"])], paired=True)
    with pytest.raises(TestbedError, match="two or three keys"):
        sweep.expand([("gpus", ["32", "64"])], paired=True)


def test_sweep_takes_one_or_two_distinct_parameters():
    with pytest.raises(TestbedError, match="one or two"):
        sweep.expand([("seed", ["1"]), ("trace.speed", ["1"]), ("link.mtu", ["1500"])])
    with pytest.raises(TestbedError, match="given twice"):
        sweep.expand([("seed", ["1"]), ("seed", ["2"])])


def test_sweep_values_go_through_the_schema_before_anything_runs():
    with pytest.raises(TestbedError, match=r"link.rate \(from --param\): rate '3mbps' is not understood"):
        sweep.resolve_points(SMOKE, [], [("link.rate", ["3mbit", "3mbps"])])
    with pytest.raises(TestbedError, match=r"trace.speed \(from --param\): must be > 0"):
        sweep.resolve_points(SMOKE, [], [("trace.speed", ["1", "-2"])])
    points = sweep.resolve_points(SMOKE, [], [("link.rate", ["3mbit", "4mbit"]), ("trace.speed", ["2"])])
    assert [(r.experiment.link.rate, r.experiment.trace.speed) for _, r in points] == [(3e6, 2.0), (4e6, 2.0)]


def test_sweep_runs_every_point_and_writes_csv_and_json(tmp_path, no_real_fabric, monkeypatch):
    replay = FakeReplay()
    lines, log = [], []
    monkeypatch.setattr(run, "run_repetition", replay)
    status, returned_dir = sweep.run_sweep(SMOKE, [Override("fabrics", ["zcube", "roft"], "--fabrics")],
                                           [("link.rate", ["3mbit", "4mbit"])], tmp_path, log=log.append,
                                           out=lines.append)
    sweep_dir = Path(lines[-1])
    assert returned_dir == sweep_dir
    assert status == 0 and sweep_dir.name.endswith("-sweep-smoke")
    assert [c["rate"] for c in replay.calls] == [3e6, 3e6, 4e6, 4e6]
    assert {p.name for p in (sweep_dir / "points").iterdir()} == {"link.rate=3mbit", "link.rate=4mbit"}
    rows = list(csv.DictReader(open(sweep_dir / "sweep.csv")))
    assert [(r["link.rate"], r["fabric"]) for r in rows] == [("3mbit", "zcube"), ("3mbit", "roft"),
                                                            ("4mbit", "zcube"), ("4mbit", "roft")]
    assert float(rows[0]["goodput_bps"]) == 2e6 and float(rows[1]["ttft_p99_ms"]) == 50.0
    assert {"fct_p99_ms", "pfc_pauses", "queue_drops"} <= set(rows[0])
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    assert doc["params"] == {"link.rate": ["3mbit", "4mbit"]} and all(p["status"] == 0 for p in doc["points"])
    point = json.loads((sweep_dir / "points/link.rate=4mbit/experiment.json").read_text())
    assert point["experiment"]["link"]["rate"] == 4e6
    assert {"key": "link.rate", "value": "4mbit", "origin": "--param"} in point["overrides"]
    assert len(no_real_fabric) == 2  # one report per point


# -------------------------------------------------------------------- CLI
def test_cli_run_prints_the_run_directory_last(tmp_path, monkeypatch, capsys):
    replay = FakeReplay()
    monkeypatch.setattr(run, "run_repetition", replay)
    status = main(["run", str(SMOKE), "--out", str(tmp_path), "--fabrics", "zcube", "--name", "cli"])
    out, err = capsys.readouterr()
    last = out.strip().splitlines()[-1]
    assert status == 0 and Path(last).parent == tmp_path and last.endswith("-cli")
    assert [c["kind"] for c in replay.calls] == ["zcube"] and "estimated wall time" in err


def test_cli_dry_run_builds_nothing(tmp_path, capsys):
    assert main(["run", "--dry-run", "--reps", "2", "--out", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["experiment"]["repetitions"] == 2 and len(doc["runs"]) == 4 and list(tmp_path.iterdir()) == []


def test_cli_errors_are_one_line_exit_2(capsys):
    assert main(["run", "--speed", "-1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "testbed: error: default experiment: trace.speed (from --speed): must be > 0 (got -1)")
    assert main(["sweep", str(SMOKE), "--param", "link.rat=1"]) == 2
    assert "link.rat (from --param): unknown key" in capsys.readouterr().err


def test_run_state_is_running_then_finished_or_interrupted(tmp_path, no_real_fabric):
    status, lines, _ = go(smoke(), tmp_path, FakeReplay())
    assert json.loads((Path(lines[-1]) / "lifecycle.json").read_text())["state"] == "finished"
    replay = FakeReplay(fail={("roft", 0): KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        go(smoke(), tmp_path / "b", replay)
    (run_dir,) = (tmp_path / "b").iterdir()
    assert json.loads((run_dir / "lifecycle.json").read_text())["state"] == "interrupted"


def test_clean_marks_runs_whose_process_was_killed(tmp_path):
    killed, alive, done = (tmp_path / n for n in ("killed", "alive", "done"))
    for d in (killed, alive, done):
        d.mkdir()
    dead_pid = _dead_pid()
    (killed / "state.json").write_text(json.dumps({"state": "running", "pid": dead_pid}))  # an older run's name
    (alive / "lifecycle.json").write_text(json.dumps({"state": "running", "pid": os.getpid()}))
    (done / "lifecycle.json").write_text(json.dumps({"state": "finished", "pid": dead_pid}))
    assert rundir.mark_killed_runs(tmp_path) == [killed]
    doc = json.loads((killed / "state.json").read_text())
    assert doc["state"] == "interrupted" and str(dead_pid) in doc["why"]
    assert json.loads((alive / "lifecycle.json").read_text())["state"] == "running"
    assert rundir.mark_killed_runs(tmp_path) == []


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_slo_goodput_is_the_highest_load_within_the_ttft_slo():
    rows = [{"fabric": f, "serving.concurrency": str(c), "ttft_p99_ms": t, "throughput_tokens_per_s": c * 20}
            for f, c, t in (("zcube", 64, 800), ("zcube", 128, 1500), ("zcube", 256, 4000),
                            ("roft", 64, 900), ("roft", 128, 2500), ("roft", 256, None))]
    got = sweep.slo_goodput(rows, "serving.concurrency", 2000)
    assert got["zcube"] == {"serving.concurrency": "128", "ttft_p99_ms": 1500, "throughput_tokens_per_s": 2560}
    assert got["roft"]["serving.concurrency"] == "64"
    assert sweep.slo_goodput(rows, "serving.concurrency", 100) == {"zcube": None, "roft": None}


class HoldingBackend(FakeBackend):
    """A backend that keeps fabrics (as the emulated one): every bring-up and teardown is logged."""

    def __init__(self):
        self.events: list[str] = []

    def hold(self, spec, log):
        from testbed.backends.base import Held

        events = self.events

        class H(Held):
            holds = True

            def __enter__(self):
                events.append(f"up {spec.kind}")
                return self

            def __exit__(self, *exc):
                events.append(f"down {spec.kind}")

            def renew(self):
                events.append(f"renew {spec.kind}")

        return H()


def test_a_backend_that_holds_fabrics_runs_each_fabrics_repetitions_on_one_fabric(tmp_path):
    replay = FailsOnce(("roft", 1), EnvironmentProblem("agents never came up"))
    backend = HoldingBackend()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "run_repetition", replay)
        run.run_experiment(smoke(Override("repetitions", 2, "--reps")), tmp_path, log=lambda m: None,
                           out=lambda m: None, backend=backend)
    order = [(c["kind"], c["seed"]) for c in replay.calls]
    assert order == [("zcube", 0), ("zcube", 1), ("roft", 0), ("roft", 1), ("roft", 1)]  # fabric-major
    assert backend.events == ["up zcube", "down zcube", "up roft", "renew roft", "down roft"]  # retry: anew


def test_faults_or_a_backend_without_fabrics_keep_repetition_major_order():
    exp = smoke(Override("repetitions", 2, "--reps")).experiment
    assert run.holds_fabrics(exp, HoldingBackend()) and not run.holds_fabrics(exp, FakeBackend())
    assert [[(t.fabric, t.rep) for t in g] for g in run.execution_order(exp, FakeBackend())] == \
        [[("zcube", 1), ("roft", 1), ("zcube", 2), ("roft", 2)]]
    with_faults = smoke(Override("repetitions", 2, "--reps"), Override("faults", [{"at": 1, "target": "controller",
                                                                         "action": "restart"}], "--set")).experiment
    assert not run.holds_fabrics(with_faults, HoldingBackend())
