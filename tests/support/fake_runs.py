"""Fakes for the run loop (``testbed run``, ``sweep``, ``calibrate``, ``sensitivity``) without a fabric: a backend
that builds nothing and a stand-in for ``run_repetition`` that writes a summary.json, both installed where the
loop looks them up (``install``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from testbed.backends.base import CROSS_TRAFFIC, FAULTS, Backend


class FakeBackend(Backend):
    """A backend that builds and carries nothing: the loop resolves it, estimates with it and checks it."""

    name = "fake"
    supports = frozenset({CROSS_TRAFFIC, FAULTS})
    realtime = False
    setup_s = 0.0

    def network(self, spec):
        raise AssertionError("a unit test reached a backend's network()")

    def carry(self, *args, **kwargs):
        raise AssertionError("a unit test reached a backend's carry()")

    def serve(self, *args, **kwargs):
        raise AssertionError("a unit test reached a backend's serve()")


class FakeReplay:
    """Stands for ``testbed.repetition.orchestrate.run_repetition(spec, backend, out_root=None, log=...,
    run_dir=...)``: records each call and writes a summary.json (``summary_of``, by default a fixed one whose
    goodput tells the fabric and the seed apart); ``fail``: (fabric, seed) -> the exception to raise."""

    def __init__(self, fail: dict | None = None, summary_of: Callable | None = None):
        self.calls: list[dict] = []
        self.fail = fail or {}
        self.summary_of = summary_of or default_summary

    def __call__(self, spec, backend, out_root=None, log=print, run_dir=None):
        self.calls.append({"kind": spec.kind, "gpus": spec.fabric.args["gpus"], "seed": spec.seed,
                           "run_dir": run_dir, "pfc": spec.fabric.pfc, "rate": spec.fabric.datapath.rate_bps,
                           "out_root": out_root, "backend": backend, "spec": spec})
        exc = self.fail.get((spec.kind, spec.seed))
        if exc is not None:
            raise exc
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps(self.summary_of(spec)))
        return run_dir


def default_summary(spec) -> dict:
    goodput = 1e6 * (2 if spec.kind == "zcube" else 1) + 1000 * spec.seed
    return {"fabric": spec.kind, "transfers": 10, "verified": 10, "goodput_bps": goodput,
            "goodput_real_equivalent_bps": goodput * 133333, "fct_ms": {"p50": 1.0, "p99": 9.0, "p999": 10.0},
            "ttft_ms": {"p50": 5.0, "p99": 50.0}, "queue_drops": 3, "pfc": {"enabled": True, "pauses": 4},
            "warnings": []}


def install(monkeypatch, replay: Callable | None = None) -> None:
    """Every backend the loop resolves is a FakeBackend, and ``replay`` (default: one that fails the test)
    stands for run_repetition; the versions are fixed and no report is built."""
    from testbed import backends
    from testbed.experiment import run, rundir

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test reached the real repetition")

    monkeypatch.setattr(backends, "get", lambda name, hosts=None: FakeBackend())
    monkeypatch.setattr(run, "run_repetition", replay or refuse)
    monkeypatch.setattr(rundir, "_command_output", lambda argv, cwd=None: {
        "git": "abc1234\n", "ovs-vsctl": "ovs-vsctl (Open vSwitch) 3.1.0\nDB Schema 8.3.1\n"}.get(argv[0]))


def no_report(monkeypatch) -> list[Path]:
    """A stub report (report.html written, nothing built); the run directories it was asked for."""
    from testbed.experiment import run

    reports: list[Path] = []

    def fake_report(run_dir):
        reports.append(Path(run_dir))
        (Path(run_dir) / "report.html").write_text("<html></html>")
        return Path(run_dir) / "report.html"

    monkeypatch.setattr(run, "report_builder", lambda: fake_report)
    return reports
