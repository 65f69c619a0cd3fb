"""Start the controller: ``python -m controller --port P --listen-fd N --config cfg.json [--lifeline-fd M]``.

os-ken has no ``osken-manager`` command, so this does what it would: patch
eventlet, parse os-ken's options (listen on 127.0.0.1 only) and run the app.

The controller never binds its OpenFlow port: ``testbed up`` bound it and hands the listening
socket over as fd N (``--listen-fd``), so no other process can take the port between a check and a
bind. os-ken makes its one listener through ``os_ken.lib.hub.listen`` (``OpenFlowController.server_loop``
-> ``hub.StreamServer``); that function is replaced here by one that returns the inherited socket for
127.0.0.1:P and refuses any other address, so os-ken cannot bind a second port either.

``--lifeline-fd M``: the read end of the lifeline of the process that brought the fabric up
(``common.owned``); when it is cut (that process died before it let go) the controller stops.
"""

import _thread
import argparse
import os
import signal
import socket
import sys

from common import owned  # before eventlet's patching: it binds the real select.poll

HOST = "127.0.0.1"


def inherited_listener(fd: int, port: int, host: str = HOST) -> socket.socket:
    """The listening TCP socket ``fd`` on ``host``:``port`` (127.0.0.1; a fabric over several hosts: the
    first host's underlay address), or SystemExit with one line."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise SystemExit(f"controller: --listen-fd {fd} is not an open socket ({exc.strerror or exc})") from None
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        where = sock.getsockname()
    except OSError as exc:
        raise SystemExit(f"controller: --listen-fd {fd} is not a usable socket ({exc.strerror or exc})") from None
    if sock.type != socket.SOCK_STREAM or not listening or where != (host, port):
        raise SystemExit(f"controller: --listen-fd {fd} is not a TCP socket listening on {host}:{port} "
                         f"(it is {where}, {'listening' if listening else 'not listening'})")
    return sock


def handoff(sock: socket.socket, port: int, host: str = HOST):
    """A replacement for ``os_ken.lib.hub.listen``: the inherited socket for its own address, once; any other
    request is refused, so the controller never binds a port of its own."""
    given = []

    def listen(addr, family=socket.AF_INET, backlog=50, reuse_addr=True, reuse_port=None):
        if tuple(addr[:2]) != (host, port) or family != socket.AF_INET or given:
            raise RuntimeError(f"os-ken asked to listen on {addr}: the controller only serves the socket it was "
                               f"handed ({host}:{port})")
        given.append(sock)
        return sock

    return listen


def listen_host(config_path: str) -> str:
    """The address the config says the controller listens on (``listen_host``; default 127.0.0.1)."""
    import json

    try:
        with open(config_path) as fh:
            return str(json.load(fh).get("listen_host") or HOST)
    except (OSError, ValueError, AttributeError):
        return HOST


def watch_lifeline(fd: int, on_cut=lambda: os.kill(os.getpid(), signal.SIGTERM)) -> None:
    """A real OS thread (started before eventlet patches threading, and without ``threading``'s bookkeeping,
    which the patching breaks) that waits on the lifeline: released, it ends; cut, it stops this process."""
    def wait():
        if owned.lifeline_state(fd, None) == owned.LIFELINE_CUT:
            on_cut()

    _thread.start_new_thread(wait, ())


def main() -> int:
    ap = argparse.ArgumentParser(prog="controller")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--listen-fd", type=int, required=True, help="the listening socket 'testbed up' bound")
    ap.add_argument("--config", required=True, help="JSON with 'fabric' and 'status_file'")
    ap.add_argument("--lifeline-fd", type=int, help="the read end of the lifeline of the process that started us")
    args = ap.parse_args()
    os.environ["TESTBED_CONTROLLER_CONFIG"] = os.path.abspath(args.config)
    host = listen_host(args.config)
    sock = inherited_listener(args.listen_fd, args.port, host)
    if args.lifeline_fd is not None:
        watch_lifeline(args.lifeline_fd)

    import eventlet

    eventlet.monkey_patch()  # before os-ken is imported, so its sockets and threads are green
    from os_ken import cfg
    from os_ken.base import app_manager
    from os_ken.lib import hub

    from controller import pfc_launch

    pfc_launch.LIFELINE_FD = args.lifeline_fd  # the pause daemon hangs on the same line

    hub.listen = handoff(socket.socket(fileno=os.dup(sock.fileno())), args.port, host)  # green now, same socket
    sock.close()
    cfg.CONF(args=["--ofp-listen-host", host, "--ofp-tcp-listen-port", str(args.port)], project="os_ken")
    app_manager.AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
