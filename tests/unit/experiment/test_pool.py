"""Repetitions at once (testbed.experiment.pool, run.jobs_for): real forked workers, no root."""

from __future__ import annotations

import os
import sys
import time

import pytest

from testbed import backends
from testbed.experiment import pool, run
from testbed.experiment.schema import Override, resolve


def collect(works, jobs):
    logs, ends, fails = [], {}, []

    def failed(i, why):
        fails.append((i, why))
        return {"status": "error", "error": why}

    pool.run_all(works, jobs, logs.append, lambda i, o: ends.__setitem__(i, o), failed, lambda i: None)
    return logs, ends, fails


def stamp(path, name, hold_s=0.3):
    """A work that writes when it started and ended, so overlaps can be read afterwards."""

    def work(log):
        t0 = time.monotonic()
        log(f"{name} says hello")
        print(f"{name} on stderr, a terminal? {sys.stderr.isatty()}", file=sys.stderr)
        time.sleep(hold_s)
        (path / name).write_text(f"{t0} {time.monotonic()} {os.getpid()}")
        return {"status": "ok", "name": name}

    return work


def spans(path, names):
    return [tuple(float(x) for x in (path / n).read_text().split()[:2]) for n in names]


def test_at_most_jobs_run_at_once_each_in_its_own_process(tmp_path):
    names = [f"w{i}" for i in range(5)]
    logs, ends, fails = collect([(n, stamp(tmp_path, n)) for n in names], jobs=2)
    assert fails == [] and sorted(ends) == list(range(5)) and [ends[i]["name"] for i in range(5)] == names
    pids = {(tmp_path / n).read_text().split()[2] for n in names}
    assert len(pids) == 5 and str(os.getpid()) not in pids
    times = spans(tmp_path, names)
    for t in sorted({s for s, _ in times} | {e - 1e-3 for _, e in times}):
        assert sum(s <= t < e for s, e in times) <= 2
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(times) for b in times[i + 1:]), "none overlapped"


def test_a_workers_lines_reach_the_log_prefixed_and_its_stderr_is_no_terminal(tmp_path):
    logs, _, _ = collect([("zcube rep1", stamp(tmp_path, "a", 0.0))], jobs=2)
    assert "zcube rep1: a says hello" in logs
    assert "zcube rep1: a on stderr, a terminal? False" in logs


def test_a_worker_that_dies_without_an_outcome_fails_alone(tmp_path):
    def dies(log):
        os._exit(9)

    logs, ends, fails = collect([("dies", dies), ("lives", stamp(tmp_path, "b", 0.0))], jobs=2)
    assert ends[1]["status"] == "ok"
    assert fails == [(0, "its process ended with exit code 9 before it finished")] and ends[0]["status"] == "error"


def test_jobs_follow_the_backend_and_the_experiment():
    fluid, emulated = backends.get("fluid"), backends.get("emulated")
    exp = resolve(None, [Override("backend", "fluid", "--set")]).experiment
    assert run.jobs_for(exp, fluid, 100) == pool.cpus()
    assert run.jobs_for(exp, fluid, 1) == 1
    assert run.jobs_for(exp.model_copy(update={"jobs": 3}), fluid, 2) == 2
    assert run.jobs_for(exp.model_copy(update={"jobs": 3}), emulated, 6) == 1
    assert backends.FORKING == tuple(n for n in backends.NAMES if backends.get(n).forks)


@pytest.mark.parametrize("backend, jobs, expected", [
    ("emulated", 2, "jobs (from --set): 2: the emulated backend carries one repetition at a time"),
    ("ns3", 2, "jobs (from --set): 2: the ns3 backend carries one repetition at a time (its repetitions cannot run "
               "in forked processes): expected auto or 1; ideal, fluid run several at once"),
    ("fluid", 0, "jobs (from --set): 0 is not a number of processes: expected auto or a whole number >= 1"),
])
def test_bad_jobs_are_one_line(backend, jobs, expected):
    from common.errors import TestbedError

    with pytest.raises(TestbedError) as info:
        resolve(None, [Override("backend", backend, "--set"), Override("jobs", jobs, "--set")])
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_the_estimate_counts_waves_of_repetitions():
    exp = resolve(None, [Override("backend", "fluid", "--set"), Override("repetitions", 3, "--set"),
                         Override("jobs", 2, "--set")]).experiment
    fluid = backends.get("fluid")
    one = exp.model_copy(update={"jobs": 1})
    per = (run.estimate_s(one, fluid) - fluid.once_s) / 6
    assert run.estimate_s(exp, fluid) == pytest.approx(fluid.once_s + 3 * per)
    assert "2 at once" in run.estimate_text(exp, fluid) and "at once" not in run.estimate_text(one, fluid)


def test_auto_runs_no_more_at_once_than_the_memory_holds(monkeypatch):
    fluid = backends.get("fluid")
    big = resolve(None, [Override("backend", "fluid", "--set"), Override("gpus", 16384, "--set"),
                         Override("gpus_per_switch", "auto", "--set")]).experiment
    peak = fluid.peak_bytes(big)
    assert peak > 6e9  # n = 16,384 peaked at 6.9 GB
    monkeypatch.setattr(pool, "cpus", lambda: 8)
    monkeypatch.setattr(pool, "available_bytes", lambda: 2.6 * peak / pool.MEMORY_SHARE)
    assert run.jobs_for(big, fluid, 6) == 2
    assert run.jobs_for(big.model_copy(update={"jobs": 4}), fluid, 6) == 4  # asked for: as asked
    monkeypatch.setattr(pool, "available_bytes", lambda: 0.5 * peak)
    assert run.jobs_for(big, fluid, 6) == 1
    assert pool.available_bytes() > 0 and backends.get("ideal").peak_bytes(big) is None
