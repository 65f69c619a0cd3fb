"""Start the controller: ``python -m controller --port 6653 --config cfg.json``.

os-ken has no ``osken-manager`` command, so this does what it would: patch
eventlet, parse os-ken's options (listen on 127.0.0.1 only) and run the app.
"""

import argparse
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(prog="controller")
    ap.add_argument("--port", type=int, default=6653)
    ap.add_argument("--config", required=True, help="JSON with 'fabric' and 'status_file'")
    args = ap.parse_args()
    os.environ["TESTBED_CONTROLLER_CONFIG"] = os.path.abspath(args.config)

    import eventlet

    eventlet.monkey_patch()  # before os-ken is imported, so its sockets and threads are green
    from os_ken import cfg
    from os_ken.base import app_manager

    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(args.port)], project="os_ken")
    app_manager.AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
