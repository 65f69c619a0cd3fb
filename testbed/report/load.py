"""Read an experiment run directory (``reports/<run-id>/``) into memory.

The layout is a contract with the ``run`` command: ``experiment.json``,
``versions.json``, ``plan/``, and ``runs/<fabric>/rep<k>/`` replay run
directories (see ``testbed.repetition.writeup``). Everything the report shows comes from
these files, so loading is the one place that checks them: a missing or
unreadable essential file is a ``TestbedError`` naming the path and what was
expected; a missing optional file (PFC, queues, the serving operating point's
instances.csv and queue.csv, ...) is just ``None``, with a data note. A
repetition whose replay failed (``run`` leaves error.txt and no summary.json
there) is kept aside as a failure, so one lost replay does not cost the report.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common.errors import TestbedError
from pfc.files import LOG_FILE

FABRIC_ORDER = ("zcube", "roft")  # ratios are the first over the second
PFC_COLUMNS = ("time_ns", "node", "node_type", "port", "event", "cause")
INSTANCE_COLUMNS = ("instance", "kind", "utilization", "offered_load", "mean_queue", "max_queue")
SERVING_QUEUE_COLUMNS = ("t_s", "kind", "instance", "queue")
LINK_TRAFFIC_COLUMNS = ("queue", "towards", "kv_bytes", "ep_bytes", "share", "top")  # testbed.repetition.link_traffic


@dataclass
class Rep:
    """One replay run directory: a fabric's k-th repetition."""

    fabric: str
    index: int
    path: Path
    summary: dict
    config: dict
    transfers: pd.DataFrame | None = None
    links: pd.DataFrame | None = None
    queues: pd.DataFrame | None = None
    nics: pd.DataFrame | None = None
    goodput: pd.DataFrame | None = None
    slowdown_bins: list | None = None
    pfc_events: pd.DataFrame | None = None  # PFC_COLUMNS + time_s, port_id ("sw3:4", "gpu5:p1")
    pfc_ports: pd.DataFrame | None = None
    # the serving operating point (traffic.model.schedule.operating_point, written by the replay):
    instances: pd.DataFrame | None = None  # INSTANCE_COLUMNS, one row per prefill/decode instance
    serving_queue: pd.DataFrame | None = None  # SERVING_QUEUE_COLUMNS: queue.csv, not the switch queues.csv
    # what crosses each link (testbed.repetition.link_traffic; None for runs from before it): LINK_TRAFFIC_COLUMNS
    # + measured_bytes, model_vs_measured
    link_traffic: pd.DataFrame | None = None

    @property
    def label(self) -> str:
        return f"{self.fabric} rep{self.index}"


@dataclass
class ExperimentRun:
    """An experiment's run directory as saved (testbed.experiment.schema.Experiment is what was asked for)."""

    path: Path
    config: dict
    versions: dict
    reps: dict[str, list[Rep]]  # fabric -> repetitions in order
    notes: list[str] = field(default_factory=list)  # optional files that were missing or odd
    failed: list[str] = field(default_factory=list)  # "roft rep2: <first line of error.txt>"
    retried: list[str] = field(default_factory=list)  # "roft rep2: retried once: <first attempt's error>"

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def fabrics(self) -> list[str]:
        """Fabric names, ZCube and ROFT first."""
        return sorted(self.reps, key=lambda f: (FABRIC_ORDER.index(f) if f in FABRIC_ORDER else 9, f))


def read_json(path: Path, what: str, required: bool = True):
    """Parsed JSON, or None when optional and absent; bad JSON is always an error."""
    if not path.is_file():
        if required:
            raise TestbedError(f"{path} is missing: expected {what}")
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TestbedError(f"{path} is not valid JSON ({exc.__class__.__name__}: line "
                           f"{getattr(exc, 'lineno', '?')}): expected {what}") from None


def _csv(path: Path, needed: tuple[str, ...]) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TestbedError(f"{path} is not a readable CSV ({exc.__class__.__name__}): expected columns "
                           f"{','.join(needed)}") from None
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise TestbedError(f"{path} has no column {missing[0]!r}: expected columns {','.join(needed)}")
    return df


def _truthy(col: pd.Series) -> pd.Series:
    return col.astype(str).str.strip().str.lower().isin(("true", "1", "yes"))


def read_transfers(path: Path) -> pd.DataFrame | None:
    df = _csv(path, ("request_id", "src", "dst", "bytes", "scheduled_start", "start", "end", "verified"))
    if df is not None:
        df["verified"] = _truthy(df["verified"])
        for c in ("scheduled_start", "start", "end", "bytes"):
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def read_link_traffic(path: Path) -> pd.DataFrame | None:
    """link_traffic.csv (optional: runs from before it have none): bytes numeric, ``top`` text ("" when
    nothing crossed the link), ``model_vs_measured`` numeric or NaN."""
    df = _csv(path, LINK_TRAFFIC_COLUMNS)
    if df is not None:
        for c in ("kv_bytes", "ep_bytes", "measured_bytes", "model_vs_measured"):
            if c in df.columns:
                df[c] = pd.to_numeric(df[c], errors="coerce")
        df["top"] = df["top"].fillna("").astype(str)
        df["share"] = df["share"].fillna("").astype(str)
    return df


def read_operating_point(path: Path) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """instances.csv and queue.csv of a replay run directory (None each when absent or empty: the
    replay writes an empty file when it has no row). ``kind`` is lower-case text, ``instance`` int."""
    out = []
    for fname, needed, numeric in (("instances.csv", INSTANCE_COLUMNS, ("utilization", "offered_load", "mean_queue",
                                                                      "max_queue", "busy_s", "window_s", "requests")),
                                   ("queue.csv", SERVING_QUEUE_COLUMNS, ("t_s", "queue"))):
        f = path / fname
        df = _csv(f, needed) if f.is_file() and f.stat().st_size > 0 else None
        if df is not None:
            df["kind"] = df["kind"].astype(str).str.strip().str.lower()
            index = pd.to_numeric(df["instance"], errors="coerce")
            if index.isna().any():
                row = int(index.isna().to_numpy().argmax())
                raise TestbedError(f"{f}:{row + 2}: instance {str(df['instance'].iloc[row])!r} is not an "
                                   "instance index: expected 0, 1, ...")
            df["instance"] = index.astype(int)
            for c in numeric:
                if c in df.columns:
                    df[c] = pd.to_numeric(df[c], errors="coerce")
        out.append(df)
    return out[0], out[1]


def read_pfc_events(path: Path) -> pd.DataFrame | None:
    """pfc.txt: ``time_ns node node_type port event cause`` a line (event 1 pause, 0 resume)."""
    if not path.is_file():
        return None
    rows = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        try:
            if len(parts) not in (5, 6):
                raise ValueError
            rows.append((int(parts[0]), parts[1], int(parts[2]), int(parts[3]), int(parts[4]),
                         parts[5] if len(parts) == 6 else ""))
        except ValueError:
            raise TestbedError(f"{path}:{number}: {line[:50]!r} is not a PFC event: expected "
                               f"'{' '.join(PFC_COLUMNS)}' (integers but node and cause)") from None
    df = pd.DataFrame(rows, columns=list(PFC_COLUMNS))
    df["time_s"] = df["time_ns"] / 1e9
    df["port_id"] = [f"{n}:p{p}" if t == 0 else f"{n}:{p}"
                     for n, t, p in zip(df["node"], df["node_type"], df["port"])]
    return df


def load_rep(fabric: str, index: int, path: Path) -> Rep:
    summary = read_json(path / "summary.json", f"the replay summary of {fabric} repetition {index} "
                                                "(written by 'testbed replay')")
    if not isinstance(summary, dict):
        raise TestbedError(f"{path / 'summary.json'} is not a JSON object: expected the replay summary")
    config = read_json(path / "config.json", "the replay config", required=False) or {}
    bins = read_json(path / "slowdown_bins.json", "slowdown by size bin", required=False)
    instances, serving_queue = read_operating_point(path)
    return Rep(
        fabric=fabric, index=index, path=path, summary=summary, config=config,
        transfers=read_transfers(path / "transfers.csv"),
        links=_csv(path / "links.csv", ("queue", "towards", "bytes", "utilization")),
        queues=_csv(path / "queues.csv", ("time", "queue", "towards", "backlog_bytes", "drops")),
        nics=_csv(path / "nics.csv", ("gpu", "port", "sent_bytes", "received_bytes")),
        goodput=_csv(path / "goodput.csv", ("second", "goodput_bps")),
        slowdown_bins=bins if isinstance(bins, list) else None,
        pfc_events=read_pfc_events(path / LOG_FILE),
        pfc_ports=_csv(path / "pfc_ports.csv", ("node", "port", "pauses", "paused_fraction")),
        instances=instances, serving_queue=serving_queue, link_traffic=read_link_traffic(path / "link_traffic.csv"),
    )


def load_experiment(run_dir: Path | str) -> ExperimentRun:
    """Every repetition of every fabric under ``run_dir/runs``; raises on bad layout."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TestbedError(f"{run_dir} is not a directory: expected an experiment run directory "
                           "(reports/<run-id>/ holding runs/<fabric>/rep<k>/)")
    runs = run_dir / "runs"
    if not runs.is_dir():
        raise TestbedError(f"{run_dir} has no runs/ folder: expected runs/<fabric>/rep<k>/ replay run directories")
    reps: dict[str, list[Rep]] = {}
    failed: list[str] = []
    retried: list[str] = []
    for fdir in sorted(p for p in runs.iterdir() if p.is_dir()):
        found = []
        for rdir in fdir.iterdir():
            m = re.fullmatch(r"rep(\d+)", rdir.name)
            if m and rdir.is_dir():
                found.append((int(m.group(1)), rdir))
        for k, p in sorted(found):
            if not (p / "summary.json").exists() and (p / "error.txt").is_file():
                first = (p / "error.txt").read_text(errors="replace").strip().splitlines()[:1]
                failed.append(f"{fdir.name} rep{k}: the replay failed ({first[0] if first else 'error.txt'})")
                continue
            if (p / "retried.txt").is_file():
                why = (p / "retried.txt").read_text(errors="replace").strip().splitlines()[:1]
                retried.append(f"{fdir.name} rep{k}: retried once, {why[0] if why else 'first attempt failed'}")
            reps.setdefault(fdir.name, []).append(load_rep(fdir.name, k, p))
    if not reps:
        if failed:
            raise TestbedError(f"{runs}: no replay finished ({failed[0]}): expected at least one "
                               "runs/<fabric>/rep<k>/summary.json")
        raise TestbedError(f"{runs} holds no <fabric>/rep<k>/ folder: expected e.g. runs/zcube/rep1/summary.json")
    notes = []
    for fabric, rs in reps.items():
        for r in rs:
            absent = [n for n, v in (("transfers.csv", r.transfers), ("links.csv", r.links),
                                     ("queues.csv", r.queues), ("nics.csv", r.nics),
                                     ("goodput.csv", r.goodput)) if v is None]
            if absent:
                notes.append(f"{r.label}: {', '.join(absent)} missing "
                             "(those parts come from summary.json or are left out)")
            op_absent = [n for n, v in (("instances.csv", r.instances), ("queue.csv", r.serving_queue)) if v is None]
            if op_absent and r.summary.get("driver") != "live":  # the planned replay's files; a live run has none
                notes.append(f"{r.label}: {' and '.join(op_absent)} missing (a replay from before the serving "
                             "operating point was recorded): the Operating point section shows only what "
                             "summary.json holds")
    config = read_json(run_dir / "experiment.json", "the resolved experiment config", required=False)
    versions = read_json(run_dir / "versions.json", "the tool versions", required=False)
    if config is None:
        notes.append("experiment.json is missing")
    if versions is None:
        notes.append("versions.json is missing")
    return ExperimentRun(run_dir, config or {}, versions or {}, reps, notes, failed, retried)
