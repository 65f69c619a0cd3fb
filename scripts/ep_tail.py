"""Where a repetition's slowest 1 % of expert-parallel messages come from and what pauses their NICs.

Usage: python scripts/ep_tail.py RUN_DIR/runs/zcube/rep1 [GPUS_PER_SERVER]
Reads the repetition's messages.csv, pfc_ports.csv and pfc.txt (any engine that writes them); prints the slowest
1 % by sender and receiver rank, the senders' NIC queues and their paused fractions, and the queues whose pauses
held rank-0 NICs. An analysis aid for docs/twin.md ("ZCube vs ROFT at n = 512"), not part of a run."""
import csv
import sys
from collections import Counter, defaultdict
from pathlib import Path

rep = Path(sys.argv[1])
per_server = int(sys.argv[2]) if len(sys.argv) > 2 else 8
msgs = [r for r in csv.DictReader(open(rep / "messages.csv")) if r["kind"] in ("dispatch", "combine") and r["end"]]
rows = [((float(r["end"]) - float(r["start"])) * 1e3, r) for r in msgs if r["start"]]
rows.sort(key=lambda x: x[0])
n = len(rows)
top = [r for _, r in rows[int(0.99 * n):]]
print(f"EP messages {n}; FCT P50 {rows[n // 2][0]:.2f} ms, P99 {rows[int(0.99 * n)][0]:.2f} ms, max {rows[-1][0]:.2f}")
rank = lambda g: (int(g[3:]) - 1) % per_server  # noqa: E731
port_of = lambda ip: int(ip.split(".")[1])  # noqa: E731
for side in ("src", "dst"):
    c = Counter(rank(r[side]) for r in top)
    base = Counter(rank(r[side]) for _, r in rows)
    print(f"slowest 1 % by {side} rank: " + ", ".join(f"r{k} {c[k]} ({c[k] / len(top):.0%}; all {base[k] / n:.0%})"
                                                     for k in sorted(c)))
print("slowest 1 % by kind:", Counter(r["kind"] for r in top))
paused = {r["queue"]: float(r["paused_fraction"]) for r in csv.DictReader(open(rep / "pfc_ports.csv"))}
src_q = Counter(f"{r['src']}:p{3 - port_of(r['dst_ip'])}" for r in top)
print("slowest 1 %: senders' NIC queues (paused fraction):",
      ", ".join(f"{q} x{k} ({paused.get(q, 0):.0%})" for q, k in src_q.most_common(8)))
dst_nic = Counter(f"{r['dst']}:p{port_of(r['dst_ip'])}" for r in top)
print("slowest 1 %: receivers' NIC ports (their own send queue's paused fraction):",
      ", ".join(f"{q} x{k} ({paused.get(q, 0):.0%})" for q, k in dst_nic.most_common(8)))
by_rank = defaultdict(list)
for q, f in paused.items():
    if q.startswith("gpu"):
        by_rank[rank(q.split(":")[0])].append(f)
means = (f"r{k} {sum(v) / len(v):.1%}" for k, v in sorted(by_rank.items()))
print("NIC paused fraction, mean by rank:", ", ".join(means))
causes = Counter()
for ln in open(rep / "pfc.txt"):
    p = ln.split()
    if len(p) >= 6 and p[4] == "1" and p[1].startswith("gpu") and rank(p[1]) == 0:
        causes[p[5]] += 1
print("pauses of rank-0 NICs by causing queue:", causes.most_common(8))
