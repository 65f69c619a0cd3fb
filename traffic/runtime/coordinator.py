"""Run ``traffic.model.serving``'s cluster with the emulated fabric in the loop.

One process in the root namespace. The agents (``traffic.runtime.agent --control``)
connect to its Unix socket (a file, so reachable from every network namespace),
say hello, and then take orders: ``send`` lines naming a message, the NIC
ports it goes between and the other port pair (``alt_src_ip``, ``alt_dst_ip``:
where the sender resends it if the first pair's connection dies); the
receiving agent reports each whole arrival (``got``) with its last byte's
time, a sender reports a message it could not send (``failed``, with
``retried`` when a resend failed too). The cluster's clock is the real cluster's:
wall = t0 + model time x ``dilation`` (the emulated world runs that many times
slower, bytes are scaled to match), so a step's exchange is timed by the
agents' own stamps, not by when this process got round to reading them.

An order's ``due`` is when the cluster sent the message in its own time (t0 + model
time x dilation): a timer's time, or the stamp of the arrival that set it off (a
combine phase starts when the dispatch's last message arrived). So start lateness
(the sender's start minus ``due``) counts everything between the cluster's decision
and the send: this process's timers, the report's trip from the receiver, the order's
trip to the sender. ``traffic.runtime.host`` runs this class with the agents in the
same process, where both trips are calls.

Every order is also appended to ``<sender>.plan.jsonl`` in the agents' folder
(``start`` = seconds after t0), so ``traffic.runtime.records.merge_results`` joins
plans, sends and receipts exactly as for a planned replay.

Usage: ``python -m traffic.runtime.coordinator CONFIG.json`` (written by the testbed's
replay); events go to stdout as JSON lines: ``listening``, ``ready``,
``started`` (t0), ``done`` (with the results), or ``error``.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fabrics.routing import port_pairs
from traffic.model import models, serving
from traffic.model.errors import TrafficError
from traffic.model.placement import Instance
from traffic.model.traces import Request
from traffic.runtime import serving_results
from traffic.runtime.launcher import START_MARGIN_S


@dataclass
class _Peer:
    name: str
    writer: asyncio.StreamWriter


def requests_from_config(cfg: dict) -> list[Request]:
    """The requests of a config's ``requests``: a list of rows ``Request.to_row`` wrote ([id, arrival_s,
    input_tokens, output_tokens], then optionally [hash_ids, session, turn], or an object with those keys), or a
    generated workload's recipe {"workload", "seed", "n"} (``traffic.model.workloads``), drawn again here."""
    rows = cfg["requests"]
    if isinstance(rows, dict):
        from traffic.model import workloads

        return workloads.workload_requests(rows["workload"], seed=rows["seed"], n_requests=rows["n"],
                                           shape=rows.get("shape"))
    return [Request.from_row(r) for r in rows]


def spec_from_config(cfg: dict) -> serving.ServingSpec:
    """The ServingSpec a config's ``spec`` object describes (engines as lists of unit GPU lists; every other
    key is a ServingSpec field of the same name, e.g. ``prefix_cache``, ``decode_memory``, ``gpu``)."""
    s = dict(cfg["spec"])
    model = models.get_model(s.pop("model"))

    def engines(kind: str) -> tuple:
        return tuple(tuple(Instance(kind, i * 1000 + j, tuple(u)) for j, u in enumerate(units))
                     for i, units in enumerate(s.pop(kind)))

    prefill, decode = engines("prefill"), engines("decode")
    return serving.ServingSpec(model=model, prefill=prefill, decode=decode, **s)


class Coordinator:
    """The asyncio shell around ``serving.Cluster``: agents in, orders out, timers on the wall clock."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        if "pulse" in cfg:  # a synthetic load with a step's shape (traffic.runtime.pulse: bench control-path)
            from traffic.runtime import pulse

            self.spec = pulse.PulseSpec.of(cfg["pulse"])
            self.requests = []
            self.cluster = pulse.PulseCluster(self.spec)
        else:
            self.spec = spec_from_config(cfg)
            self.requests = requests_from_config(cfg)
            self.cluster = serving.Cluster(self.spec, self.requests)
        self.dilation = float(cfg.get("dilation", 1.0))
        self.agents: list[str] = cfg["agents"]
        self.ips: dict[int, list[str]] = {int(g): ips for g, ips in cfg["ips"].items()}
        self.policy = cfg["policy"]
        self.choices: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}  # a pair's, on its first message
        self.adaptive = self.policy == "adaptive"
        self.port = int(cfg["port"])
        self.out = Path(cfg["agents_dir"])
        self.peers: dict[str, _Peer] = {}
        self.all_ready = asyncio.Event()
        self.finished = asyncio.Event()
        self.t0 = 0.0
        self.plans: dict[str, object] = {}
        self.pair_count: dict[tuple[int, int], int] = {}
        self.outstanding: dict[tuple[int, int], int] = {}  # (gpu, port) -> emulated bytes not yet delivered
        self.port_of: dict[int, tuple[int, int, int]] = {}  # message id -> (src gpu, src port, bytes)
        self.lag_s: list[float] = []
        self.failed: dict[int, str] = {}
        self.ended = False

    # -- agents -----------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        name = None
        try:
            hello = json.loads(await reader.readline())
            name = hello["hello"]
            self.peers[name] = _Peer(name, writer)
            if len(self.peers) == len(self.agents):
                self.all_ready.set()
            while line := await reader.readline():
                self.on_report(json.loads(line))
        except (ConnectionError, json.JSONDecodeError, KeyError):
            pass
        finally:
            if name is not None and not self.ended:
                emit("error", message=f"agent {name} left before the run ended")

    def on_report(self, rep: dict) -> None:
        """An agent's ``got`` (verified arrival) or ``failed`` (could not send) line."""
        mid = rep["id"]
        if mid not in self.cluster.messages:
            return
        self._settle(mid)
        if "failed" in rep:
            self.failed[mid] = rep["failed"]
            at = time.monotonic()
        else:
            at = rep["t"]
            if not rep.get("ok", True):
                self.failed[mid] = rep.get("error") or "not verified"
        self.lag_s.append(time.monotonic() - at)
        now = max(0.0, (at - self.t0) / self.dilation)
        self.apply(self.cluster.delivered(mid, now), now)
        if self.cluster.quiet:
            self.finished.set()

    # -- actions ----------------------------------------------------------------------------
    def apply(self, actions: list, now: float) -> None:
        """Set the timers; send the orders (due at model time ``now``), one write per agent (a step orders
        hundreds at once)."""
        loop = asyncio.get_running_loop()
        batch: dict[str, list] = {}
        due = self.t0 + now * self.dilation
        for a in actions:
            if isinstance(a, serving.Timer):
                loop.call_at(self.t0 + a.at * self.dilation, self.fire, a.key, a.at)
            else:
                name, line = self.send(a.message, due)
                batch.setdefault(name, []).append(line)
        self.deliver(batch)

    def deliver(self, batch: dict[str, list]) -> None:
        """Each agent's orders of one turn, in one write."""
        for name, lines in batch.items():
            self.peers[name].writer.write(b"".join(lines))

    def fire(self, key: tuple, at: float) -> None:
        self.apply(self.cluster.timer(key, at), at)
        if key[0] == "end":
            self.ended = True
        if self.cluster.quiet:
            self.finished.set()

    def _ports(self, src: int, dst: int) -> tuple[int, int]:
        """The NIC ports of the next message src -> dst: the policy's choices in turn, or (adaptive) the
        choice whose source port has the fewest of this sender's bytes not yet delivered."""
        opts = self.choices.get((src, dst))
        if opts is None:
            opts = self.choices[(src, dst)] = port_pairs(src, dst, self.policy)
        k = self.pair_count.get((src, dst), 0)
        self.pair_count[(src, dst)] = k + 1
        if not self.adaptive or len(opts) == 1:
            return opts[k % len(opts)]
        order = opts[k % len(opts):] + opts[:k % len(opts)]
        return min(order, key=lambda c: self.outstanding.get((src, c[0]), 0))

    def order(self, m: serving.Message, due: float) -> tuple[str, dict]:
        """Log the order in the sender's plan file (``start``: ``due`` in seconds after t0); the sender's name
        and the order."""
        sp, dp = self._ports(m.src_gpu, m.dst_gpu)
        name = f"gpu{m.src_gpu}"
        order = {"id": m.id, "request_id": m.request_id, "src": name, "dst": f"gpu{m.dst_gpu}",
                 "src_ip": self.ips[m.src_gpu][sp - 1], "dst_ip": self.ips[m.dst_gpu][dp - 1],
                 "alt_src_ip": self.ips[m.src_gpu][2 - sp], "alt_dst_ip": self.ips[m.dst_gpu][2 - dp],  # other pair
                 "dst_port": self.port, "bytes": m.bytes, "start": round(due - self.t0, 6),
                 "kind": m.kind, "step": m.step, "engine": m.engine}
        self.plans[name].write(json.dumps(order, separators=(",", ":")) + "\n")
        self.count_order(m, sp)
        return name, order

    def count_order(self, m: serving.Message, sp: int) -> None:
        """A message ordered from source port ``sp``: its bytes outstanding there until it arrives."""
        self.outstanding[(m.src_gpu, sp)] = self.outstanding.get((m.src_gpu, sp), 0) + m.bytes
        self.port_of[m.id] = (m.src_gpu, sp, m.bytes)

    def log_order(self, m: serving.Message, t) -> None:
        """``order``'s plan line for a transfer ``t`` already sent (``traffic.runtime.host``)."""
        order = {"id": m.id, "request_id": m.request_id, "src": t.src, "dst": t.dst, "src_ip": t.src_ip,
                 "dst_ip": t.dst_ip, "alt_src_ip": t.alt_src_ip, "alt_dst_ip": t.alt_dst_ip, "dst_port": t.dst_port,
                 "bytes": m.bytes, "start": round(t.start - self.t0, 6), "kind": m.kind, "step": m.step,
                 "engine": m.engine}
        self.plan_line(t.src, order)

    def plan_line(self, name: str, order: dict) -> None:
        self.plans[name].write(json.dumps(order, separators=(",", ":")) + "\n")

    def send(self, m: serving.Message, due: float | None = None) -> tuple[str, bytes]:
        """``order``'s sender and its line for the control socket (``due`` defaults to now)."""
        due = time.monotonic() if due is None else due
        name, order = self.order(m, due)
        return name, (json.dumps({"op": "send", **order, "due": due}, separators=(",", ":")) + "\n").encode()

    def _settle(self, mid: int) -> None:
        gpu, port, nbytes = self.port_of.pop(mid, (None, None, 0))
        if gpu is not None:
            self.outstanding[(gpu, port)] -= nbytes

    # -- run --------------------------------------------------------------------------------
    async def run(self) -> dict:
        sock = self.cfg["socket"]
        server = await asyncio.start_unix_server(self.handle, path=sock)
        os.chmod(sock, 0o666)
        emit("listening", socket=sock)
        self.open_plans(buffering=1)
        try:
            async with asyncio.timeout(self.cfg.get("ready_timeout_s", 60)):
                await self.all_ready.wait()
        except TimeoutError:
            missing = sorted(set(self.agents) - set(self.peers))
            raise TrafficError(f"{len(missing)} agents never connected: {', '.join(missing[:8])}") from None
        emit("ready", agents=len(self.peers))
        await self.serve()
        for peer in self.peers.values():
            peer.writer.write(b'{"op":"stop"}\n')
        for fh in self.plans.values():
            fh.close()
        server.close()
        return self.results()

    def open_plans(self, buffering: int) -> None:
        for name in self.agents:
            self.plans[name] = open(self.out / f"{name}.plan.jsonl", "w", buffering=buffering, encoding="utf-8")

    async def serve(self) -> None:
        """Start the clock, run the cluster until it is quiet (or the drain time is up)."""
        self.t0 = time.monotonic() + START_MARGIN_S
        emit("started", t0=self.t0)
        loop = asyncio.get_running_loop()
        loop.call_at(self.t0, lambda: self.apply(self.cluster.start(0.0), 0.0))
        drain = self.cfg.get("drain_timeout_s", 60)
        try:
            async with asyncio.timeout(self.spec.duration_s * self.dilation + START_MARGIN_S + drain):
                await self.finished.wait()
        except TimeoutError:
            emit("warning", message=f"{self.cluster.in_flight} messages still in flight {drain:g} s after the end")

    def results(self) -> dict:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return serving_results.write_results(Path(self.cfg["run_dir"]), self.cluster, t0=self.t0,
                                             dilation=self.dilation,
                                             cpu_s=round(usage.ru_utime + usage.ru_stime, 3), failed=self.failed,
                                             lag_s=self.lag_s)


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def serve_main(module: str, make, argv: list[str] | None = None) -> int:
    """``python -m MODULE CONFIG.json``: run ``make(config)`` 's loop and print its ``done`` (or ``error``) line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} CONFIG.json", file=sys.stderr)
        return 2
    try:
        cfg = json.loads(Path(args[0]).read_text())
        res = asyncio.run(make(cfg).run())
    except (OSError, TrafficError, KeyError, ValueError) as exc:
        emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    emit("done", results=res)
    return 0


def main(argv: list[str] | None = None) -> int:
    return serve_main("traffic.runtime.coordinator", Coordinator, argv)


if __name__ == "__main__":
    sys.exit(main())
