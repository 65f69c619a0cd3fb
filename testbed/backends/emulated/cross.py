"""Cross traffic: background iperf3 flows between random GPU pairs (p1 -> dst p2) during a repetition."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

from common.paths import REPO, module_env
from fabrics import Fabric, addressing
from fabrics.datapath import netns_of

CROSS_PORT = 5400


def start_cross_traffic(fabric: Fabric, n_flows: int, seed: int, seconds: float) -> list:
    """``n_flows`` iperf3 flows between random GPU pairs (p1 -> dst p2), through the binding."""
    rng = random.Random(seed)
    gpus = list(fabric.gpus())
    flows = []
    for i in range(n_flows):
        src, dst = rng.sample(gpus, 2)
        port = CROSS_PORT + i
        py = [sys.executable, "-m", "traffic.runtime.cross"]
        env = module_env()
        server = subprocess.Popen(["ip", "netns", "exec", netns_of(dst), *py, "server", "--bind",
                                   addressing.ip_of(dst, 2), "--port", str(port)], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        flows.append({"src": f"gpu{src}", "dst": f"gpu{dst}", "server": server, "client": None,
                      "argv": ["ip", "netns", "exec", netns_of(src), *py, "client", "--bind", addressing.ip_of(src, 1),
                               "--to", addressing.ip_of(dst, 2), "--port", str(port), "--duration",
                               str(int(seconds) + 1)], "env": env})
    time.sleep(0.5)
    for f in flows:
        f["client"] = subprocess.Popen(f["argv"], cwd=REPO, env=f["env"], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
    return flows


def stop_cross_traffic(flows: list) -> dict:
    """Collect the flows' goodput (a flow still running is stopped and counted as 0)."""
    rows = []
    for f in flows:
        try:
            out, _ = f["client"].communicate(timeout=15)
            doc = json.loads(out or "{}")
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            f["client"].kill()
            doc = {}
        for proc in (f["client"], f["server"]):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        rows.append({"src": f["src"], "dst": f["dst"], "bps": doc.get("bps", 0.0), "error": doc.get("error")})
    return {"flows": len(rows), "goodput_bps": round(sum(r["bps"] for r in rows)), "per_flow": rows}

