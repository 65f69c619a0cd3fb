"""Where a repetition's expert-parallel tail comes from: the EP messages' completion times, who sends the slowest
1 % (a server's GPU rank: at n = 512 ZCube's k = 32 wires every server's rank 0 to switch 1 or 17, where the
default's KV sender ``mla_sender: rank0`` also sends), and, on an engine with PFC, the queues whose pauses held
rank-0 NICs (pfc.txt). docs/twin.md "ZCube vs ROFT at n = 512" reads it; the report's scale section shows it.

``python -m testbed.report.ep_tail REP_DIR [GPUS_PER_SERVER]`` prints it for one repetition.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pandas as pd

from testbed.report.plots import NAMES

EP_KINDS = ("dispatch", "combine")
SLOWEST = 0.01  # the tail looked at: the slowest 1 % of EP messages (rounded, at least one)


def rank_of(gpu: str, per_server: int) -> int:
    """'gpu9' -> its rank within its server (GPUs numbered from 1, servers of ``per_server``)."""
    return (int(gpu[3:]) - 1) % per_server


def figures(rep_dir: Path, per_server: int) -> dict | None:
    """One repetition's EP tail (module docstring); None when it kept no EP messages."""
    path = Path(rep_dir) / "messages.csv"
    if not path.is_file():
        return None
    m = pd.read_csv(path, usecols=["src", "kind", "start", "end"])
    m = m[m["kind"].isin(EP_KINDS) & m["start"].notna() & m["end"].notna()]
    if m.empty:
        return None
    fct = (m["end"] - m["start"]) * 1e3
    rank = m["src"].map(lambda g: rank_of(g, per_server))
    slow = rank[fct.nlargest(max(1, round(len(fct) * SLOWEST))).index]
    out = {"messages": int(len(m)), "fct_ms": {"p50": round(float(fct.median()), 3),
                                               "p99": round(float(fct.quantile(0.99)), 3)},
           "slowest_from_rank0": round(float((slow == 0).mean()), 3),
           "all_from_rank0": round(float((rank == 0).mean()), 3), "rank0_held_by": []}
    pauses = Path(rep_dir) / "pfc.txt"
    if pauses.is_file():
        causes = Counter()
        for line in pauses.read_text().splitlines():
            p = line.split()
            if len(p) >= 6 and p[4] == "1" and p[1].startswith("gpu") and rank_of(p[1].split(":")[0], per_server) == 0:
                causes[p[5]] += 1
        out["rank0_held_by"] = causes.most_common(4)
    return out


def sentence(tails: dict) -> str:
    """One line per fabric: 'ZCube: EP FCT P50 / P99 ..., slowest 1 % from rank 0 ... (of all ...)'."""
    parts = []
    for kind, t in tails.items():
        if not t:
            continue
        held = (f"; rank-0 NICs paused by {', '.join(f'{q} x{n}' for q, n in t['rank0_held_by'])}"
                if t.get("rank0_held_by") else "")
        fct = t["fct_ms"]
        parts.append(f"{NAMES.get(kind, kind)}: EP message FCT P50 {fct['p50']:.2f} ms, P99 {fct['p99']:.2f} ms over "
                     f"{t['messages']:,}; the slowest 1 % sent by a server's rank 0: {t['slowest_from_rank0']:.0%} "
                     f"(of all: {t['all_from_rank0']:.0%}){held}")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.report.ep_tail", description=__doc__.splitlines()[0])
    p.add_argument("rep_dir")
    p.add_argument("gpus_per_server", nargs="?", type=int, default=8)
    args = p.parse_args(argv)
    print(json.dumps(figures(Path(args.rep_dir), args.gpus_per_server), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
