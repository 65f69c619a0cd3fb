"""Figures drawn in forked processes: the same files, the same returns, in the order given; errors come back."""

import os

import numpy as np
import pytest

from testbed.report import drawing
from testbed.report.plots import plt, save


def _picture(path, seed):
    """A figure with some of everything a report draws: lines, bars, text, an image (drawn with the report's style,
    as drawing.draw sets it)."""
    rng = np.random.default_rng(seed)
    fig, (a, b) = plt.subplots(1, 2, figsize=(6, 2.5))
    a.plot(np.sort(rng.random(200)), lw=1.2, label="line")
    a.bar(range(20), rng.random(20))
    a.annotate("a note", (3, 0.5))
    a.legend()
    b.imshow(rng.random((12, 16)), cmap="YlOrRd", aspect="auto")
    return save(fig, path), os.getpid()


def _fails():
    raise ValueError("bad figure input")


def test_forked_drawing_writes_the_same_bytes_and_returns_in_order(tmp_path):
    jobs = lambda d: [(f"fig{i}", _picture, (d / f"fig{i}.png", i)) for i in range(4)]  # noqa: E731
    (tmp_path / "here").mkdir()
    (tmp_path / "forked").mkdir()
    here = drawing.draw(jobs(tmp_path / "here"), workers=1)
    forked = drawing.draw(jobs(tmp_path / "forked"), workers=2)
    assert list(forked) == list(here) == [f"fig{i}" for i in range(4)]
    assert {pid for _, pid in here.values()} == {os.getpid()}
    assert os.getpid() not in {pid for _, pid in forked.values()}  # drawn by the children
    for key in here:
        assert forked[key][0] == tmp_path / "forked" / f"{key}.png"
        assert forked[key][0].read_bytes() == here[key][0].read_bytes()
    assert drawing._jobs == []  # nothing left for a later fork


def test_a_childs_error_reaches_the_caller():
    with pytest.raises(ValueError, match="bad figure input"):
        drawing.draw([("a", _fails, ()), ("b", _fails, ())], workers=2)
    assert drawing._jobs == []


def test_processes_are_at_most_the_default_and_the_cpus_ours():
    n = drawing.processes()
    assert 1 <= n <= min(drawing.PROCESSES, len(os.sched_getaffinity(0)))
