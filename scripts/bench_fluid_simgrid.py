"""SimGrid (Debian's python3-simgrid 3.32) as the fluid engine's candidate: replay a run's messages on its paths.

    python scripts/bench_fluid_simgrid.py RUN_DIR/runs/zcube/rep1 LO:HI [--cfg=contexts/factory:raw]

RUN_DIR: a live run at n=512 (``testbed run --backend ideal --set gpus=512 --set gpus_per_switch=auto --set
serving.concurrency=448 --reps 1``: its messages.csv and transfers.csv hold every message with its start). Every
message that starts in [LO, HI) seconds of the run's clock becomes a SimGrid communication (``Comm.sendto_async``
between the NIC ports' hosts) at its start, on the route of its NIC port pair (the twin's rule: source port drawn
from seed 0, ECMP by ``fabrics.routing.ecmp_bucket``), links at 3 Mbit/s with 2 us of latency, SimGrid's CM02
max-min model without its TCP window and cross-traffic terms; one actor starts them and collects each completion
with ``Comm.wait_any_for``, as a driver feeding arrivals back to the serving cluster would. Prints messages per
wall and CPU second (docs/fluid.md, "Why not SimGrid").
"""

from __future__ import annotations

import sys
import time

import pandas as pd
import simgrid as sg

from fabrics import addressing, build_fabric
from fabrics.routing import forwarding_tables
from testbed.backends.paths import LISTEN_PORT, route
from traffic.runtime.ports import source_port


def main(run: str, window: str, extra: list[str]) -> None:
    lo, hi = (float(x) for x in window.split(":"))
    cols = ["src_ip", "dst_ip", "bytes", "start"]
    df = pd.concat([pd.read_csv(f"{run}/{name}.csv", usecols=cols) for name in ("messages", "transfers")])
    df = df[(df.start >= lo) & (df.start < hi)].sort_values("start")
    fabric = build_fabric("zcube", gpus=512, gpus_per_switch=32)
    tables = forwarding_tables(fabric)
    engine = sg.Engine(["bench", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                        "--cfg=network/crosstraffic:0", "--log=root.thres:critical", *extra])
    zone = sg.NetZone.create_full_zone("fabric")
    hosts = {addressing.ip_of(g, p): zone.create_host(addressing.ip_of(g, p), 1e9).seal()
             for g in fabric.gpus() for p in (1, 2)}
    links: dict[str, object] = {}

    def link(name: str):
        if name not in links:
            links[name] = zone.create_link(name, 3e6 / 8).set_latency(2e-6).seal()
        return links[name]

    used: set = set()
    for s, d in set(zip(df.src_ip, df.dst_ip)):
        src, dst = addressing.parse_ip(s), addressing.parse_ip(d)
        hops = route(fabric, tables, src, dst, source_port(0, s, d, used), LISTEN_PORT)
        names = [f"gpu{src[0]}:p{src[1]}"] + [f"{sw}:{p}" for sw, p in hops]
        zone.add_route(hosts[s].netpoint, hosts[d].netpoint, None, None, [sg.LinkInRoute(link(n)) for n in names],
                       False)
    zone.seal()
    starts = (df.start - lo).tolist()
    srcs, dsts, sizes = [hosts[x] for x in df.src_ip], [hosts[x] for x in df.dst_ip], df.bytes.astype(int).tolist()
    done = []

    def driver() -> None:
        pending, i = [], 0
        while i < len(starts) or pending:
            if i < len(starts) and not pending:
                sg.this_actor.sleep_until(starts[i])
            while i < len(starts) and starts[i] <= sg.Engine.clock + 1e-12:
                pending.append(sg.Comm.sendto_async(srcs[i], dsts[i], sizes[i]))
                i += 1
            if not pending:
                continue
            j = sg.Comm.wait_any_for(pending, starts[i] - sg.Engine.clock) if i < len(starts) else \
                sg.Comm.wait_any(pending)
            if j < 0:
                continue
            done.append(sg.Engine.clock)
            pending[j] = pending[-1]
            pending.pop()

    sg.Actor.create("driver", srcs[0], driver)
    wall, cpu = time.time(), time.process_time()
    engine.run()
    wall, cpu = time.time() - wall, time.process_time() - cpu
    print(f"{len(done)} messages in {wall:.1f} wall s / {cpu:.1f} CPU s: {len(done) / wall:.0f} per wall s, "
          f"{len(done) / cpu:.0f} per CPU s; {sg.Engine.clock:.2f} simulated s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
