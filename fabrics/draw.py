"""Topology pictures: PNG/SVG/PDF through matplotlib, or Graphviz dot / Mermaid text.

Layout: one row per switch tier and GPUs as a row of their own, so the
ZCube picture shows odd switches above the GPUs and even switches below
(every odd-even cable crossing the GPU row), and ROFT shows spines above
leaves above GPUs.
"""

from __future__ import annotations

from pathlib import Path

from common.errors import TestbedError
from fabrics.topology import Fabric

ROW = {"odd": 2.0, "gpu": 1.0, "even": 0.0, "spine": 2.0, "leaf": 1.0}
ROW_ROFT_GPU = 0.0
COLOURS = {"odd": "#d95f02", "even": "#1b9e77", "leaf": "#7570b3", "spine": "#e7298a", "gpu": "#666666"}
# the largest fabric drawn as a picture (every GPU and cable a mark): the seed's scale, 512 GPUs, ~12 s to draw;
# 16,384 GPUs and 49,152 cables would take minutes and show nothing one can read (text formats have no limit)
MAX_DRAWN_GPUS = 512
# the largest fabric every run's plan draws (plan/<fabric>.png): a picture's cost grows with n (~10 CPU s a fabric at
# 512, as much as a fluid repetition's loop); beyond this ``testbed fabric draw`` still draws it on request
PLAN_DRAWN_GPUS = 128


def _positions(f: Fabric) -> dict[str, tuple[float, float]]:
    pos: dict[str, tuple[float, float]] = {}
    gpus = [f"gpu{i}" for i in f.gpus()]
    width = max(len(gpus), 1)
    gpu_row = ROW_ROFT_GPU if f.kind != "zcube" else ROW["gpu"]
    for x, g in enumerate(gpus):
        pos[g] = (x / max(width - 1, 1), gpu_row)
    by_role: dict[str, list[str]] = {}
    for name, sw in f.switches.items():
        by_role.setdefault(sw.role, []).append(name)
    for role, names in by_role.items():
        for x, name in enumerate(names):
            pos[name] = ((x + 0.5) / len(names), ROW[role])
    return pos


def _edges(f: Fabric) -> list[tuple[str, str, int]]:
    """(a, b, cable count), GPU ends named by GPU (both ports drawn as one node)."""
    count: dict[tuple[str, str], int] = {}
    for c in f.cables:
        key = (c.a, c.b)
        count[key] = count.get(key, 0) + 1
    return [(a, b, n) for (a, b), n in count.items()]


def to_dot(f: Fabric) -> str:
    lines = [f'graph "{f.describe()}" {{', "  node [shape=box, fontsize=10];"]
    for name, sw in f.switches.items():
        lines.append(f'  "{name}" [style=filled, fillcolor="{COLOURS[sw.role]}"];')
    for i in f.gpus():
        lines.append(f'  "gpu{i}" [shape=ellipse];')
    for c in f.cables:
        label = f"p{c.a_port}" if c.kind == "host" else f"{c.a_port}-{c.b_port}"
        lines.append(f'  "{c.a}" -- "{c.b}" [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(f: Fabric) -> str:
    lines = ["graph TD"]
    for a, b, n in _edges(f):
        lines.append(f"  {a} ---|{n}| {b}" if n > 1 else f"  {a} --- {b}")
    return "\n".join(lines) + "\n"


def draw(f: Fabric, out: str | Path) -> Path:
    """Write a picture of ``f``; the format follows the file extension."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix == ".dot":
        out.write_text(to_dot(f))
        return out
    if suffix in (".mmd", ".mermaid"):
        out.write_text(to_mermaid(f))
        return out
    if suffix not in (".png", ".svg", ".pdf"):
        raise TestbedError(f"graph file {str(out)!r} has an unknown type: expected .png, .svg, .pdf, .dot or .mmd")
    if f.n_gpus > MAX_DRAWN_GPUS:
        raise TestbedError(f"{f.describe()} is not drawn as a picture: {f.n_gpus} GPUs, more than "
                           f"{MAX_DRAWN_GPUS} (docs/fabrics.md describes the wiring; .dot and .mmd have no limit)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = _positions(f)
    fig, ax = plt.subplots(figsize=(max(8, f.n_gpus * 0.35), 5), dpi=110)
    for a, b, n in _edges(f):
        (x1, y1), (x2, y2) = pos[a], pos[b]
        fabric = not a.startswith("gpu")
        ax.plot([x1, x2], [y1, y2], color="#999999" if fabric else "#cccccc",
                linewidth=0.6 + 0.6 * (n - 1) if fabric else 0.5, zorder=1)
    for name, (x, y) in pos.items():
        role = f.switches[name].role if name in f.switches else "gpu"
        big = role != "gpu"
        ax.scatter([x], [y], s=260 if big else 40, color=COLOURS[role], zorder=2,
                   marker="s" if big else "o")
        ax.annotate(name if big else name[3:], (x, y), textcoords="offset points",
                    xytext=(0, 10 if big else -11), ha="center", fontsize=8 if big else 6)
    cables = {c.kind: 0 for c in f.cables}
    for c in f.cables:
        cables[c.kind] += 1
    ax.set_title(f"{f.describe()}: {len(f.switches)} switches, {cables.get('host', 0)} NIC cables, "
                 f"{cables.get('fabric', 0)} switch cables (line width = parallel cables)", fontsize=10)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
