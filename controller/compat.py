"""Thin import layer: the app runs on os-ken (maintained, Python 3.11) or on Ryu.

Ryu 4.34 does not run on Python 3.11 (eventlet incompatibilities); os-ken is
its fork with the same application API under the module name ``os_ken``.
"""

from __future__ import annotations

try:  # pragma: no cover - whichever is installed
    from os_ken import cfg
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import (
        CONFIG_DISPATCHER,
        DEAD_DISPATCHER,
        MAIN_DISPATCHER,
        set_ev_cls,
    )
    from os_ken.lib import hub
    from os_ken.ofproto import ofproto_v1_3

    FRAMEWORK = "os_ken"
except ImportError:  # pragma: no cover
    from ryu import cfg
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.lib import hub
    from ryu.ofproto import ofproto_v1_3

    FRAMEWORK = "ryu"

__all__ = [
    "cfg", "app_manager", "ofp_event", "CONFIG_DISPATCHER", "DEAD_DISPATCHER", "MAIN_DISPATCHER",
    "set_ev_cls", "hub", "ofproto_v1_3", "FRAMEWORK",
]
