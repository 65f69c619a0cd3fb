"""Run inside one emulated GPU: echo UDP probes, and probe every target address.

argv: READY_FILE GO_FILE SECONDS TARGET_IP...  Prints the targets that answered
(JSON list). Every instance echoes for SECONDS after GO_FILE appears, so all
of them answer each other's probes whatever order they start in.
"""

import json
import os
import socket
import sys
import time

PORT = 9999


def main() -> None:
    ready, go, seconds, targets = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", PORT))
    sock.settimeout(0.05)
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    answered: set[str] = set()
    end = time.monotonic() + seconds
    next_round = 0.0
    while time.monotonic() < end:
        if time.monotonic() >= next_round and len(answered) < len(targets):
            for ip in targets:
                if ip not in answered:
                    sock.sendto(b"probe", (ip, PORT))
            next_round = time.monotonic() + 0.5
        try:
            data, addr = sock.recvfrom(64)
        except socket.timeout:
            continue
        if data == b"probe":
            sock.sendto(b"echo", addr)
        elif data == b"echo":
            answered.add(addr[0])
    print(json.dumps(sorted(answered)))


if __name__ == "__main__":
    main()
