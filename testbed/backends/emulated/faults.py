"""An experiment's faults, injected at the same run times on every emulated fabric while a repetition runs.

Each fault (``at``, ``duration``, ``target``, ``action``; the experiment schema checks them) becomes one
or two timed actions: ``down`` then ``up`` after ``duration`` for a cable or a switch, ``stop`` then
``start`` for the controller (``restart`` is both at once). ``at`` is in the run's cluster time, so a
replay at time dilation D (or speed-up s) meets it at D x at (at / s) wall seconds after its t0. A
thread sleeps to each action and applies it (``testbed.emulation.faults``); whatever is still down when
the replay ends is put back, so the fabric leaves on its planned paths. The actions as applied go to
``faults.jsonl`` in the run directory.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fabrics.failover import UNDO
from testbed.emulation import faults


@dataclass(frozen=True)
class Action:
    """One timed fault action: at ``trace_s`` of the run, apply ``action`` to ``target``."""

    trace_s: float
    target: str
    action: str


def actions(specs: list[dict]) -> list[Action]:
    """The timed actions of an experiment's ``faults`` list, in time order (an undo after its fault at the
    same time)."""
    out = []
    for i, f in enumerate(specs):
        out.append((f["at"], i, 0, Action(f["at"], f["target"], f["action"])))
        if f.get("duration") is not None and f["action"] in UNDO:
            end = f["at"] + f["duration"]
            out.append((end, i, 1, Action(end, f["target"], UNDO[f["action"]])))
    return [a for *_, a in sorted(out, key=lambda x: x[:3])]


class FaultScheduler:
    """Applies the actions against a t0 once the replay knows it; ``finish`` puts back what is still down."""

    def __init__(self, specs: list[dict], wall_per_trace_s: float, out: Path, log=print) -> None:
        self.todo = actions(specs)
        self.scale = wall_per_trace_s
        self.out = out
        self.log = log
        self.events: list[dict] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0: float | None = None

    def start(self, t0: float) -> None:
        """Begin: the run's trace time 0 is CLOCK_MONOTONIC ``t0``."""
        if not self.todo or self._thread is not None:
            return
        self.t0 = t0
        self._thread = threading.Thread(target=self._run, daemon=True, name="faults")
        self._thread.start()

    def _run(self) -> None:
        for a in self.todo:
            if self._stop.wait(max(0.0, self.t0 + a.trace_s * self.scale - time.monotonic())):
                return
            self._apply(a)

    def _apply(self, a: Action, late_ok: bool = False) -> None:
        due = self.t0 + a.trace_s * self.scale if self.t0 is not None else time.monotonic()
        try:
            ev = faults.inject(a.target, a.action, log=self.log, wait=False)
        except Exception as exc:  # noqa: BLE001 - recorded and reported; the replay goes on
            self.errors.append(f"{a.action} {a.target} at {a.trace_s:g} s: {exc}")
            self.log(f"fault: {self.errors[-1]}")
            return
        ev.update(trace_s=a.trace_s, late_ms=None if late_ok else round((ev["t"] - due) * 1e3, 2),
                  wall_s=None if self.t0 is None else round(ev["t"] - self.t0, 4))
        self.events.append(ev)
        self.log(f"fault: {a.target} {a.action} at {a.trace_s:g} s of the run")

    def finish(self) -> list[dict]:
        """Stop the timer, put back every fault still in force, write ``faults.jsonl``; the events."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        down: dict[str, str] = {}
        for ev in self.events:
            if ev["action"] in UNDO:
                down[ev["target"]] = ev["action"]
            elif ev["action"] in UNDO.values():
                down.pop(ev["target"], None)
        for target, action in down.items():
            t = (time.monotonic() - self.t0) / self.scale if self.t0 is not None else 0.0
            self._apply(Action(round(t, 3), target, UNDO[action]), late_ok=True)
        if self.todo:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            with open(self.out, "w") as fh:
                for ev in self.events:
                    fh.write(json.dumps(ev) + "\n")
        return self.events
