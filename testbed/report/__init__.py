"""The ZCube-vs-ROFT experiment report.

``build_report(run_dir)`` turns an experiment run directory (``reports/<run-id>/``
with ``runs/<fabric>/rep<k>/`` replay run directories) into report.html,
figures/*.png, summary.json and headline.csv, from the saved data alone; ``headline_lines(run_dir)`` is its
headline as ``testbed run`` prints it.
``compare_runs(run_dirs)`` sets several runs' headlines side by side and says whether they agree (the
``compare`` verb); ``compare(run_a, run_b)`` and ``compare_html`` put two experiments' figures side by side.

The functions import pandas and matplotlib only when called: the verbs
(``testbed.cli.report``) and the run's report step import this package, and
importing it should not pay for the plotting stack.
"""

from __future__ import annotations

import json
from pathlib import Path


def build_report(run_dir: Path | str) -> Path:
    """Write report.html, figures/*.png, summary.json and headline.csv into ``run_dir``; return the page."""
    from testbed.report.build import build_report as build

    return build(run_dir)


def headline_lines(run_dir: Path | str) -> list[str]:
    """The headline of a finished run directory as the terminal prints it (``testbed.report.headline.lines`` of the
    summary.json the report wrote, else of the figures computed again from the saved files); one line saying why
    when there is none (no repetition finished, unreadable files), so a run never fails on its headline."""
    try:
        from testbed.report import crosscheck, crosscheck_section, scale_result
        from testbed.report.build import summary_of
        from testbed.report.headline import lines

        out = lines(summary_of(run_dir)["headline"])
        shipped = Path(run_dir) / scale_result.FILE
        if shipped.is_file():
            out += [""] + scale_result.lines(json.loads(shipped.read_text()))
        check = crosscheck_section.load(run_dir)
        if check is not None:
            out += ["", crosscheck.line(check)]
        return out
    except Exception as exc:  # noqa: BLE001 - the repetitions' results are kept; say why there is no headline
        return [f"no headline: {type(exc).__name__}: {exc}"]


def compare(run_a: Path | str, run_b: Path | str) -> str:
    """A plain-text table of both runs' headline numbers and ZCube/ROFT ratios."""
    from testbed.report.side_by_side import compare as text

    return text(run_a, run_b)


def compare_html(run_a: Path | str, run_b: Path | str, out: Path | str) -> Path:
    """An HTML page with both runs' headline tables side by side; returns ``out``."""
    from testbed.report.side_by_side import compare_html as page

    return page(run_a, run_b, out)


def compare_runs(run_dirs: list[Path | str]) -> dict:
    """Several runs' headlines side by side and whether they agree (testbed.report.comparison)."""
    from testbed.report.comparison import compare_runs as doc

    return doc(run_dirs)


def compare_html_runs(run_dirs: list[Path | str], out: Path | str) -> Path:
    """An HTML page with every run's headline side by side; returns ``out``."""
    from testbed.report.side_by_side import compare_html_runs as page

    return page(run_dirs, out)


__all__ = ["build_report", "headline_lines", "compare", "compare_html", "compare_runs", "compare_html_runs"]
