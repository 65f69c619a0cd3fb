"""The ``hosts`` verb: pseudo-hosts for testing on one machine, and checking a hosts file's machines.

    testbed hosts pseudo up --count N [--mtu 9000] [--subnet 10.250.0.0/24] [--pmd-cores 0] [--pmd-maxsleep 500]
    testbed hosts pseudo down | status | kill NAME
    testbed hosts check --hosts FILE [--json]

and ``plan ... --hosts FILE`` (the placement, printed before anything is built).
"""

from __future__ import annotations

import json
import sys


def cmd_pseudo(args) -> int:
    from testbed.emulation.hosts import pseudo

    if args.action == "up":
        cores = None if args.pmd_cores in ("", "any") else args.pmd_cores
        maxsleep = None if args.pmd_maxsleep < 0 else args.pmd_maxsleep
        path = pseudo.up(args.count, mtu=args.mtu, subnet=args.subnet, pmd_cores=cores, pmd_maxsleep_us=maxsleep,
                         log=lambda m: print(m, file=sys.stderr))
        print(path)
        return 0
    if args.action == "down":
        removed = pseudo.down()
        print(f"removed {len(removed)} things" + (f": {', '.join(removed[:6])}{', ...' if len(removed) > 6 else ''}"
                                                  if removed else ""))
        left = pseudo.leftovers()
        if left:
            print(f"testbed: error: still there after down: {', '.join(left)}", file=sys.stderr)
            return 1
        return 0
    if args.action == "kill":
        if not args.name:
            from common.errors import TestbedError

            raise TestbedError("hosts pseudo kill needs a pseudo-host's name, e.g. ph2")
        pseudo.kill(args.name)
        print(f"killed {args.name}")
        return 0
    st = pseudo.load_state()
    left = pseudo.leftovers()
    if args.json:
        print(json.dumps({"state": st, "leftovers": left}, indent=1))
    elif st:
        for h in st["hosts"]:
            print(f"{h['name']} {h['address']} netns {h['netns']} pid {h['pid']}")
        print(pseudo.hosts_path())
    else:
        print("no pseudo-hosts" + (f" (left behind: {', '.join(left)})" if left else ""))
    return 0


def cmd_check(args) -> int:
    from testbed.emulation.hosts import hostsfile, remote

    hosts = hostsfile.load(args.hosts)
    local = remote.fingerprint()
    peers = {h.name: h.address for h in hosts.hosts}
    found = remote.on_all(hosts, lambda h: remote.preflight(h, local, peers, args.mtu, args.tunnel))
    if args.json:
        print(json.dumps({"fingerprint": local, "hosts": found}, indent=1))
        return 0
    for h in hosts.hosts:
        f = found[h.name]
        under = ", ".join(f"to {p} via {u['dev']} MTU {u['mtu']}" for p, u in f.get("underlay", {}).items())
        print(f"{h.name} {h.address}: ok (hostname {f['hostname']}, Open vSwitch {f['ovs']}, kernel {f['kernel']}, "
              f"{f['cores']} cores, sources {local}{', ' + args.tunnel + ' ' + under if under else ''})")
    return 0


def cmd_up_hosts(args) -> int:
    """``up FABRIC --hosts FILE``: the fabric over several hosts, left running."""
    from testbed.cli.options import fabric_spec
    from testbed.emulation.hosts import cluster

    if args.miswire or args.failover != "fast":
        from common.errors import TestbedError

        raise TestbedError("--miswire and --failover controller are not supported with --hosts")
    spec = fabric_spec(args)
    cl = cluster.up(args.hosts, spec.args, spec.datapath, pfc=spec.pfc, tunnel=args.tunnel,
                    log=lambda m: print(m, file=sys.stderr))
    for s in cl.sessions.values():
        s.close()
    print(f"{args.fabric} with {args.gpus} GPUs is up on {len(cl.hosts)} hosts in {cl.timings['up_s']:.1f} s "
          f"({len(cl.where.cross)} cross-host cables); 'testbed down --hosts {args.hosts}' takes it down")
    return 0


def cmd_clean_hosts(args) -> int:
    """``down|clean --hosts FILE``: every host's part down and swept; exit 1 if a host did not answer."""
    from testbed.emulation.hosts import cluster

    results = cluster.clean(args.hosts, log=lambda m: print(m))
    return 0 if all(r == "clean" for r in results.values()) else 1


def print_placement(args, fabrics) -> dict | None:
    """``plan --hosts FILE``: each fabric's placement (lines, or a JSON document when --json)."""
    from testbed.emulation.hosts import assign, hostsfile

    hosts = hostsfile.load(args.hosts)
    addresses = {h.name: h.address for h in hosts.hosts}
    if args.json:
        return {f.kind: assign.assign(f, hosts.names).summary() for f in fabrics}
    for f in fabrics:
        for line in assign.text(assign.assign(f, hosts.names), addresses):
            print(line)
        print()
    return None


def register(sub) -> None:
    p = sub.add_parser("hosts", help="pseudo-hosts on this machine; check a hosts file's machines")
    hs = p.add_subparsers(dest="hosts_verb", required=True)
    q = hs.add_parser("pseudo", help="N pseudo-hosts (namespaces with their own sshd and Open vSwitch)")
    q.add_argument("action", choices=["up", "down", "status", "kill"])
    q.add_argument("name", nargs="?", help="kill: the pseudo-host to crash (e.g. ph2)")
    q.add_argument("--count", type=int, default=2, help="up: how many (default 2)")
    q.add_argument("--mtu", type=int, default=9000, help="up: underlay MTU (default 9000)")
    q.add_argument("--subnet", default="10.250.0.0/24", help="up: underlay network (default 10.250.0.0/24)")
    q.add_argument("--pmd-cores", default="0",
                   help="up: CPUs every pseudo-host's OVS PMD thread may poll (default 0; 'any': OVS picks)")
    q.add_argument("--pmd-maxsleep", type=int, default=500,
                   help="up: other_config:pmd-maxsleep in microseconds (default 500; -1: OVS's default, 0)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_pseudo)
    c = hs.add_parser("check", help="reach every host of a hosts file: root, Open vSwitch, same project version")
    c.add_argument("--hosts", required=True, metavar="FILE")
    c.add_argument("--mtu", type=int, default=3000, help="emulated MTU the underlay must carry in a tunnel")
    c.add_argument("--tunnel", default="vxlan", choices=["vxlan", "gretap"], help="tunnel kind (default vxlan)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_check)
