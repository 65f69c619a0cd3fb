"""`plan` and `path`: what a fabric is made of and where a transfer goes.

The JSON shapes here are a contract other tools and tests rely on:
plan -> {"fabric", "gpus", "params", "oversubscription", "nodes", "links", "cost", ...};
path -> {"paths": [{"src_port", "dst_port", "hops", "ecmp", "cables"}, ...]}.
"""

from __future__ import annotations

from fabrics import Fabric, addressing
from fabrics.cost import cost_of, ratios
from fabrics.routing import DEFAULT_POLICY, forwarding_tables, paths


def plan_json(f: Fabric) -> dict:
    nodes = []
    for name, sw in f.switches.items():
        nodes.append({"name": name, "kind": "switch", "role": sw.role, "dpid": sw.dpid,
                      "radix": sw.radix, "used_ports": len(sw.ports)})
    for i in f.gpus():
        nodes.append({"name": addressing.host_name(i), "kind": "gpu",
                      "ports": {f"p{p}": {"ip": addressing.ip_of(i, p), "mac": addressing.mac_of(i, p),
                                          "switch": f.switch_of(i, p)} for p in (1, 2)}})
    links = [{"a": c.endpoint("a"), "b": c.endpoint("b"), "a_port": c.a_port, "b_port": c.b_port,
              "kind": c.kind, "cable": c.index} for c in f.cables]
    tables = forwarding_tables(f)
    return {
        "fabric": f.kind,
        "gpus": f.n_gpus,
        "params": f.params,
        "switches": len(f.switches),
        "ports_per_switch": max(sw.radix for sw in f.switches.values()),
        "oversubscription": f.oversubscription if f.oversubscription != float("inf") else None,
        "nodes": nodes,
        "links": links,
        "rules": sum(len(t) for t in tables.values()),
        "cost": cost_of(f).as_dict(),
    }


def plan_text(f: Fabric) -> str:
    c = cost_of(f)
    roles: dict[str, int] = {}
    for sw in f.switches.values():
        roles[sw.role] = roles.get(sw.role, 0) + 1
    over = f.oversubscription
    over_text = ("none (rail-only: no cross-rail path)" if over == float("inf")
                 else f"{over:.2f} : 1 (downlink : uplink{', non-blocking' if over == 1 else ''})")
    lines = [
        f"{f.describe()}",
        f"  switches        {len(f.switches)} ({', '.join(f'{n} {r}' for r, n in roles.items())}), "
        f"{max(sw.radix for sw in f.switches.values())} ports each",
        f"  GPUs            {f.n_gpus}, dual-port NICs ({2 * f.n_gpus} NIC ports)",
        f"  cables          {c.cables} ({c.host_cables} NIC-switch, {c.fabric_cables} switch-switch)",
        f"  oversubscription {over_text}",
        f"  transceivers    {c.transceivers} ({c.fabric_transceivers} on switch-switch cables)",
        f"  capex           {c.capex_units:g} units (switch port 1, transceiver 1.5, fibre 0.1)",
    ]
    return "\n".join(lines)


def comparison_text(a: Fabric, b: Fabric) -> str:
    r = ratios(cost_of(a), cost_of(b))
    return (f"{a.kind}/{b.kind}: switches {r['switches']:.2f}, transceivers {r['transceivers']:.2f} "
            f"(switch-switch {r['fabric_transceivers']:.2f}), cables {r['cables']:.2f}, "
            f"capex {r['capex_units']:.2f}")


def path_json(f: Fabric, src: int, dst: int, policy: str = DEFAULT_POLICY) -> dict:
    return {
        "fabric": f.kind,
        "src": src,
        "dst": dst,
        "policy": policy,
        "paths": [
            {"src_port": p.src_port, "dst_port": p.dst_port, "hops": list(p.hops), "ecmp": p.ecmp,
             "cables": p.cables,
             "src_ip": addressing.ip_of(src, p.src_port), "dst_ip": addressing.ip_of(dst, p.dst_port),
             **addressing.alt_ips(src, p.src_port, dst, p.dst_port)}
            for p in paths(f, src, dst, policy)
        ],
    }


def path_text(f: Fabric, src: int, dst: int, policy: str = DEFAULT_POLICY) -> str:
    lines = [f"{f.describe()}: gpu{src} -> gpu{dst}, policy {policy}"]
    for p in path_json(f, src, dst, policy)["paths"]:
        mark = "  (ECMP alternative)" if p["ecmp"] else ""
        lines.append(f"  gpu{src}:p{p['src_port']} -> {' -> '.join(p['hops'])} -> gpu{dst}:p{p['dst_port']}{mark}")
    return "\n".join(lines)
