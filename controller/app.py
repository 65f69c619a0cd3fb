"""The os-ken application: a shim from OpenFlow 1.3 events to the session core.

Every decision is in ``controller.session`` (plain Python, unit-tested with a
fake switch); each handler here only wraps the datapath as a ``Switch``,
converts the reply body and hands the event over (port-status and port
descriptions included: they drive the failure repair). The housekeeping green
thread ticks the core four times a second.

Config: JSON file named by $TESTBED_CONTROLLER_CONFIG with keys "fabric"
(build_fabric keyword arguments incl. "kind") and "status_file"; with PFC on
also "pfc", "datapath" and "state_dir".
"""

from __future__ import annotations

import json
import os
import time

from os_ken.base.app_manager import OSKenApp
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controller.oskenswitch import OsKenSwitch, flow_stats, group_specs, port_live, port_states
from controller.session import FabricSessions

HOUSEKEEPING_S = 0.25


def load_config() -> dict:
    """The config named by the environment: os-ken builds the app, so it cannot take arguments."""
    with open(os.environ["TESTBED_CONTROLLER_CONFIG"]) as fh:
        return json.load(fh)


class FabricController(OSKenApp):
    """One controller for the whole fabric; the handlers only hand over to ``FabricSessions``."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.core = FabricSessions(load_config(), self.logger)
        self.threads.append(hub.spawn(self._housekeeping))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        self.core.switch_connected(OsKenSwitch(ev.msg.datapath))

    # The read-back starts at the features reply, so its replies can arrive before os-ken's own port-desc exchange
    # has moved the datapath to MAIN_DISPATCHER: they are taken in either state.
    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def barrier_reply(self, ev):
        self.core.barrier_reply(OsKenSwitch(ev.msg.datapath))

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def group_desc_reply(self, ev):
        self.core.groups_reply(OsKenSwitch(ev.msg.datapath), group_specs(ev.msg.body))

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def flow_stats_reply(self, ev):
        msg = ev.msg
        more = bool(msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE)
        self.core.flows_reply(OsKenSwitch(msg.datapath), flow_stats(msg.body), more)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        msg = ev.msg
        live = msg.reason != msg.datapath.ofproto.OFPPR_DELETE and port_live(msg.desc)
        self.core.port_status(OsKenSwitch(msg.datapath), msg.desc.port_no, live)

    # os-ken asks for the port descriptions too at connect; every reply counts (port states are idempotent)
    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def port_desc_reply(self, ev):
        self.core.ports_reply(OsKenSwitch(ev.msg.datapath), port_states(ev.msg.body))

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def switch_gone(self, ev):
        self.core.switch_gone(OsKenSwitch(ev.datapath))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        self.logger.debug("packet-in from %016x, %d bytes", msg.datapath.id, len(msg.data))
        self.core.packet_in(OsKenSwitch(msg.datapath), bytes(msg.data))

    def _housekeeping(self):
        """Drive the core's timers from a green thread, as os-ken schedules everything else."""
        while True:
            hub.sleep(HOUSEKEEPING_S)
            self.core.tick(time.time())
