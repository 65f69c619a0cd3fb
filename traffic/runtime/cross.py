"""Background bulk TCP (cross traffic) with the iperf3 Python binding.

Runs inside one GPU namespace (``ip netns exec tb-gpuN python -m traffic.runtime.cross ...``):
``server --bind IP --port P`` serves one test; ``client --bind SRC --to DST --port P
--duration S`` runs one and prints {"bytes": received, "bps": goodput} as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    import iperf3

    p = argparse.ArgumentParser(prog="traffic.runtime.cross")
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--to")
    p.add_argument("--duration", type=int, default=10)
    args = p.parse_args(argv)
    if args.role == "server":
        server = iperf3.Server()
        server.bind_address, server.port, server.json_output = args.bind, args.port, True
        server.run()
        return 0
    if not args.to:
        p.error("client needs --to DST_IP")
    client = iperf3.Client()
    client.bind_address, client.server_hostname, client.port = args.bind, args.to, args.port
    client.duration, client.json_output = max(1, args.duration), True
    result = client.run()
    if result.error:
        print(json.dumps({"bytes": 0, "bps": 0.0, "error": result.error}))
        return 1
    print(json.dumps({"bytes": int(result.received_bytes), "bps": float(result.received_bps)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
