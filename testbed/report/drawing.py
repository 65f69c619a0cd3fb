"""The report's figures drawn side by side in forked processes.

Each figure is its own matplotlib figure and PNG file, drawn from the loaded experiment alone, so the pictures do
not depend on which process draws them (the same bytes); at n=512 they are two thirds of a report's time, most of
it two figures of ~5 s (the per-NIC load, the utilization heatmaps), so two processes draw them in about half.
Forked, a child has the experiment already loaded and pays nothing to start; where there is no fork (or this
process is itself a daemon, which may not have children) the figures are drawn here, one after another.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

from testbed.report import plots

PROCESSES = 2  # at most this many draw at once (the machine has 2 cores); fewer if fewer are ours

Job = tuple[str, Callable, tuple]  # (key, figure function, its arguments)
_jobs: list[Job] = []  # what a forked child draws: set before the fork, read by index (nothing pickled in)


def _draw(i: int):
    _, fn, args = _jobs[i]
    with plots.style():
        return fn(*args)


def processes() -> int:
    """How many processes draw: ``PROCESSES``, at most the CPUs this process may use; 1 without fork or in a
    daemon."""
    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
        return 1
    return max(1, min(PROCESSES, len(os.sched_getaffinity(0))))


def draw(jobs: list[Job], workers: int | None = None) -> dict:
    """{key: what the job's function returned} for every job, the jobs drawn by ``workers`` processes (default
    ``processes()``), in the order given (the slowest first keeps the processes evenly busy)."""
    global _jobs
    workers = processes() if workers is None else workers
    _jobs = list(jobs)
    try:
        if workers <= 1 or len(_jobs) <= 1:
            return {key: _draw(i) for i, (key, _, _) in enumerate(_jobs)}
        with ProcessPoolExecutor(min(workers, len(_jobs)), mp_context=multiprocessing.get_context("fork")) as pool:
            return dict(zip((key for key, _, _ in _jobs), pool.map(_draw, range(len(_jobs)))))
    finally:
        _jobs = []


__all__ = ["draw", "processes", "PROCESSES"]
