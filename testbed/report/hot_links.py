"""The hottest links per fabric and what crosses them: links.csv's measured bytes beside
link_traffic.csv's KV and EP bytes and contributors (``testbed.repetition.link_traffic``).

Runs from before link_traffic.csv still get the table, with "no link_traffic.csv" where the
breakdown would be.
"""

from __future__ import annotations

import pandas as pd

from testbed.report import html as H
from testbed.report import plots_net
from testbed.report.fmt import num
from testbed.report.load import ExperimentRun

HOT_LINKS = 6
MISSING = "no link_traffic.csv"


def hottest(exp: ExperimentRun, fabric: str, n: int = HOT_LINKS) -> list[dict] | None:
    """The ``n`` links with the most measured bytes (links.csv, median over repetitions), each with
    the median KV and EP bytes and model/measured ratio over the repetitions that have link_traffic.csv,
    ``expected`` if any says so, and the contributors of the first of them (``top_rep``). None without
    links.csv; the breakdown keys are None without link_traffic.csv."""
    links = plots_net.links_median(exp, fabric)
    if links is None:
        return None
    links = links.sort_values("bytes", ascending=False, kind="stable").head(n)
    have = [r for r in exp.reps[fabric] if r.link_traffic is not None and not r.link_traffic.empty]
    med = share = top = None
    if have:
        both = pd.concat([r.link_traffic.assign(rep=r.index) for r in have])
        both = both[both["queue"].isin(set(links["queue"]))]  # the n shown (98,304 groups cost a minute at 16,384)
        cols = [c for c in ("kv_bytes", "ep_bytes", "model_vs_measured") if c in both.columns]
        med = both.groupby("queue")[cols].median()  # a queue name is unique; towards comes from links.csv
        share = both.groupby("queue")["share"].agg(lambda s: "expected" if (s == "expected").any() else "exact")
        first = have[0].link_traffic
        top = dict(zip(first["queue"], first["top"]))
    out = []
    for q, towards, b, u in links[["queue", "towards", "bytes", "utilization"]].itertuples(index=False):
        row = {"queue": q, "towards": towards, "bytes": float(b), "utilization": float(u), "kv_bytes": None,
               "ep_bytes": None, "share": None, "model_vs_measured": None, "top": None,
               "top_rep": have[0].index if have else None}
        key = q
        if med is not None and key in med.index:
            m = med.loc[key]
            row |= {"kv_bytes": float(m["kv_bytes"]), "ep_bytes": float(m["ep_bytes"]), "share": share.loc[key],
                    "top": top.get(key, "")}
            ratio = m.get("model_vs_measured")
            row["model_vs_measured"] = None if ratio is None or pd.isna(ratio) else float(ratio)
        out.append(row)
    return out


def _cells(r: dict, breakdown: bool) -> list[str]:
    head = [H.escape(f"{r['queue']} -> {r['towards']}"), num(int(r["bytes"])), f"{r['utilization']:.2%}"]
    if r["kv_bytes"] is None:
        return head + ["-"] * 5 + [H.escape(MISSING if not breakdown else "not in link_traffic.csv")]
    model = r["kv_bytes"] + r["ep_bytes"]
    return head + [num(int(round(r["kv_bytes"]))), num(int(round(r["ep_bytes"]))),
                   f"{r['kv_bytes'] / model:.1%}" if model else "-", H.escape(r["share"]),
                   f"{r['model_vs_measured']:.2f}" if r["model_vs_measured"] is not None else "-",
                   H.escape(r["top"] or "nothing the model routes")]


def section(exp: ExperimentRun, n: int = HOT_LINKS) -> str:
    """Per fabric, a table of its ``n`` hottest links and what crosses them ('' without any links.csv)."""
    parts = []
    for f in exp.fabrics:
        rows = hottest(exp, f, n)
        if not rows:
            continue
        breakdown = rows[0]["top_rep"] is not None
        which = (f"what crosses it: rep{rows[0]['top_rep']}" if breakdown else MISSING)
        parts.append(f"<h3>{H.fab(f)}: the {len(rows)} hottest links and what crosses them "
                     f"<span class=\"unit\">({H.escape(which)})</span></h3>")
        parts.append(H.table(["queue -> feeds", "bytes (measured)", "utilization", "KV bytes", "EP bytes", "KV share",
                              "split", "model / measured", "what crosses it"],
                             [_cells(r, breakdown) for r in rows], left={0, 8}))
    if not parts:
        return ""
    return ("".join(parts) + '<p class="note">Hottest by the bytes each queue sent (links.csv: wire bytes, median '
            "over repetitions). KV and EP bytes: every row of transfers.csv and messages.csv routed over the fabric "
            "model from its source to its destination NIC port (link_traffic.csv, payload bytes, median over "
            "repetitions). Split exact: the path is known (ZCube once the ports are chosen; ROFT on a leaf); "
            "expected: ROFT's cross-rail bytes spread evenly over the ECMP candidates, since the spine a "
            "connection hashes to is not recorded. Model / measured below 1 is what the model leaves out (headers, "
            "the agents' framing and acks, TCP ACKs of the other direction, retransmissions), about 0.95 on a link "
            "carrying large messages one way; on an expected link it also shows the hash's imbalance. What crosses "
            "it: the two biggest KV gathers (prefill server -> decode server) and EP exchanges (engine, phase), "
            "as shares of the link's model bytes.</p>")
