"""Proactive OpenFlow 1.3 controller for the emulated fabrics (Ryu API on os-ken).

When a switch connects it is wiped and given its whole program from
``controller.rules`` (built from the fabric model's routing export) in one
batch closed by a barrier; after the barrier the flow and group tables are
read back and compared with the program. Once every switch is read back the
controller sends a cabling probe out of every switch-to-switch port and
records at which switch it arrives, to compare with the plan.

Status for ``testbed up`` / ``status`` goes to a JSON file (path in the config),
rewritten atomically about once a second: which switches are connected,
installed, verified; the cabling result; table-miss (unexpected) packet counts.
A reconnecting switch is simply programmed again.

Config: JSON file named by $TESTBED_CONTROLLER_CONFIG with keys "fabric"
(build_fabric keyword arguments incl. "kind") and "status_file".
"""

from __future__ import annotations

import json
import os
import struct
import time

from controller import compat
from controller.compat import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, ofp_event, set_ev_cls
from controller.rules import PROBE_DST_MAC, PROBE_ETHERTYPE, FlowSpec, GroupSpec, fabric_programs
from testbed.fabric import build_fabric

BaseApp = getattr(compat.app_manager, "OSKenApp", None) or getattr(compat.app_manager, "RyuApp")
PROBE_FMT = "!QI"  # sender dpid, sender OpenFlow port


def load_config() -> dict:
    with open(os.environ["TESTBED_CONTROLLER_CONFIG"]) as fh:
        return json.load(fh)


def spec_of_stat(stat) -> FlowSpec:
    """A flow-stats entry as a FlowSpec, to compare with what was installed."""
    actions: list[tuple[str, int]] = []
    for inst in stat.instructions:
        for act in getattr(inst, "actions", []):
            name = type(act).__name__
            if name == "OFPActionOutput":
                if act.port == compat.ofproto_v1_3.OFPP_CONTROLLER:
                    actions.append(("controller", 0))
                else:
                    actions.append(("output", act.port))
            elif name == "OFPActionGroup":
                actions.append(("group", act.group_id))
            else:
                actions.append((name, 0))
    return FlowSpec(stat.priority, tuple(sorted(stat.match.items())), tuple(actions))


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def probe_frame(dpid: int, port: int) -> bytes:
    """Ethernet frame naming its sender switch and port, padded to 60 bytes."""
    head = mac_bytes(PROBE_DST_MAC) + mac_bytes("02:ff:00:00:00:01") + struct.pack("!H", PROBE_ETHERTYPE)
    body = struct.pack(PROBE_FMT, dpid, port)
    return (head + body).ljust(60, b"\0")


def parse_probe(data: bytes) -> tuple[int, int] | None:
    """(sender dpid, sender port) of a probe frame, None for anything else."""
    if len(data) < 26 or struct.unpack("!H", data[12:14])[0] != PROBE_ETHERTYPE:
        return None
    return struct.unpack(PROBE_FMT, data[14:26])


class FabricController(BaseApp):
    OFP_VERSIONS = [compat.ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = load_config()
        self.fabric = build_fabric(**self.config["fabric"])
        self.programs = fabric_programs(self.fabric)
        self.by_dpid = {p.dpid: p for p in self.programs.values()}
        self.status_file = self.config["status_file"]
        self.datapaths = {}
        self.state: dict[str, dict] = {
            name: {"connected": False, "installed": False, "verified": False, "connects": 0,
                   "flows_read": 0, "mismatch": None, "miss_packets": 0}
            for name in self.programs
        }
        self._flow_parts: dict[int, list] = {}
        self._group_parts: dict[int, list] = {}
        self.probes_sent = False
        self.probe_seen: dict[str, str] = {}  # "sw1-eth9" -> receiving switch
        self.started = time.time()
        self.pfc_enabled = bool(self.config.get("pfc", {}).get("enabled"))
        self.pfcd = None  # the PFC helper process (controller.pfc.pfcd), started once every switch is verified
        self.pfc_error = None
        self.threads.append(compat.hub.spawn(self._housekeeping))

    # ---------------------------------------------------------- programming
    def _program_of(self, dp):
        """The program of a connected switch; None (logged) for a datapath not in the fabric."""
        program = self.by_dpid.get(dp.id)
        if program is None:
            self.logger.warning("unknown datapath %016x; ignored", dp.id)
        return program

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        program = self._program_of(dp)
        if program is None:
            return
        self.datapaths[dp.id] = dp
        st = self.state[program.switch]
        st.update(connected=True, installed=False, verified=False, mismatch=None)
        st["connects"] += 1
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        for group in program.groups:
            buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                        actions=[parser.OFPActionOutput(port)]) for port in group.ports]
            dp.send_msg(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, group.group_id, buckets))
        for flow in program.flows:
            dp.send_msg(parser.OFPFlowMod(dp, priority=flow.priority, match=parser.OFPMatch(**flow.match_dict),
                                          instructions=self._instructions(dp, flow)))
        dp.send_msg(parser.OFPBarrierRequest(dp))
        self.logger.info("%s: sent %d flows, %d groups", program.switch, len(program.flows), len(program.groups))

    @staticmethod
    def _instructions(dp, flow: FlowSpec):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        actions = []
        for kind, arg in flow.actions:
            if kind == "output":
                actions.append(parser.OFPActionOutput(arg))
            elif kind == "group":
                actions.append(parser.OFPActionGroup(arg))
            elif kind == "controller":
                actions.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
        return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        dp = ev.msg.datapath
        program = self._program_of(dp)
        if program is None:
            return
        self.state[program.switch]["installed"] = True
        self._request_readback(dp)

    def _request_readback(self, dp):
        parser = dp.ofproto_parser
        self._flow_parts[dp.id] = []
        self._group_parts[dp.id] = []
        dp.send_msg(parser.OFPGroupDescStatsRequest(dp, 0))
        dp.send_msg(parser.OFPFlowStatsRequest(dp))

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def group_desc_reply(self, ev):
        dp = ev.msg.datapath
        self._group_parts.setdefault(dp.id, []).extend(ev.msg.body)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats_reply(self, ev):
        dp = ev.msg.datapath
        program = self._program_of(dp)
        if program is None:
            return
        self._flow_parts.setdefault(dp.id, []).extend(ev.msg.body)
        if ev.msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
            return
        stats = self._flow_parts.pop(dp.id, [])
        st = self.state[program.switch]
        st["flows_read"] = len(stats)
        st["miss_packets"] = sum(s.packet_count for s in stats if s.priority == 0)
        if st["verified"]:
            return  # periodic poll for counters only
        got_flows = {spec_of_stat(s) for s in stats}
        got_groups = {GroupSpec(g.group_id, tuple(b.actions[0].port for b in g.buckets))
                      for g in self._group_parts.pop(dp.id, [])}
        want_flows, want_groups = set(program.flows), set(program.groups)
        if got_flows == want_flows and got_groups == want_groups:
            st.update(verified=True, mismatch=None)
            self.logger.info("%s: read back %d flows, %d groups: as intended", program.switch,
                             len(stats), len(got_groups))
        else:
            missing = len(want_flows - got_flows) + len(want_groups - got_groups)
            extra = len(got_flows - want_flows) + len(got_groups - want_groups)
            st["mismatch"] = f"{missing} rules missing, {extra} unexpected"
            self.logger.error("%s: read-back mismatch: %s", program.switch, st["mismatch"])

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def switch_gone(self, ev):
        dp = ev.datapath
        program = self.by_dpid.get(dp.id) if dp.id is not None else None
        if program is not None and self.datapaths.get(dp.id) is dp:
            self.datapaths.pop(dp.id, None)
            self.state[program.switch].update(connected=False, installed=False, verified=False)
            self.logger.warning("%s disconnected", program.switch)

    # -------------------------------------------------------------- cabling
    def _send_probes(self):
        """One probe out of every switch-to-switch port, naming its sender."""
        for program in self.programs.values():
            dp = self.datapaths.get(program.dpid)
            if dp is None:
                continue
            ofp, parser = dp.ofproto, dp.ofproto_parser
            for port, (peer, _) in self.fabric.switches[program.switch].ports.items():
                if peer.startswith("gpu"):
                    continue
                data = probe_frame(program.dpid, port)
                dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                                actions=[parser.OFPActionOutput(port)], data=data))
        self.probes_sent = True

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        data = bytes(msg.data)
        self.logger.debug("packet-in from %016x, %d bytes", msg.datapath.id, len(data))
        probe = parse_probe(data)
        if probe is None:
            return
        sender_dpid, sender_port = probe
        sender = self.by_dpid.get(sender_dpid)
        receiver = self.by_dpid.get(msg.datapath.id)
        if sender and receiver:
            self.probe_seen[f"{sender.switch}-eth{sender_port}"] = receiver.switch

    def cabling(self) -> dict:
        expected = {}
        for name, sw in self.fabric.switches.items():
            for port, (peer, _) in sw.ports.items():
                if not peer.startswith("gpu"):
                    expected[f"{name}-eth{port}"] = peer
        wrong = {p: {"expected": e, "found": self.probe_seen.get(p)} for p, e in sorted(expected.items())
                 if self.probe_seen.get(p) != e}
        return {"probes_sent": self.probes_sent, "expected": len(expected),
                "confirmed": len(expected) - len(wrong), "wrong": wrong}

    # --------------------------------------------------------- housekeeping
    def _housekeeping(self):
        probe_at = None
        tick = 0
        while True:
            compat.hub.sleep(0.25)
            tick += 1
            all_verified = all(st["verified"] for st in self.state.values())
            if all_verified and self.pfc_enabled and self.pfcd is None and self.pfc_error is None:
                self._start_pfc()
            if all_verified and not self.probes_sent:
                self._send_probes()
                probe_at = time.time()
            elif all_verified and probe_at and self.cabling()["wrong"] and time.time() - probe_at > 2:
                self._send_probes()  # a lost probe gets one more chance every 2 s
                probe_at = time.time()
            if tick % 4 == 0:
                for dp in list(self.datapaths.values()):
                    if self.state[self.by_dpid[dp.id].switch]["verified"]:
                        dp.send_msg(dp.ofproto_parser.OFPFlowStatsRequest(dp, table_id=0, match=dp.ofproto_parser.OFPMatch()))
            self._write_status()

    def _start_pfc(self):
        from controller.pfc import launch

        try:
            self.pfcd = launch.start(self.fabric, self.config)
            self.logger.info("PFC helper started, pid %d", self.pfcd.pid)
        except Exception as exc:  # reported through the status file; 'up' fails on it
            self.pfc_error = f"{type(exc).__name__}: {exc}"
            self.logger.error("PFC helper not started: %s", self.pfc_error)

    def _pfc_status(self) -> dict | None:
        if not self.pfc_enabled:
            return None
        doc: dict = {}
        try:
            with open(os.path.join(self.config["state_dir"], "pfc_status.json")) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            pass
        if self.pfcd is not None:
            doc["pid"] = self.pfcd.pid
            code = self.pfcd.poll()
            if code is not None:
                doc["ready"] = False
                self.pfc_error = self.pfc_error or f"pfcd exited with status {code} (see pfcd.log)"
        if self.pfc_error:
            doc["error"] = self.pfc_error
        return doc

    def _write_status(self):
        doc = {
            "framework": compat.FRAMEWORK,
            "pid": os.getpid(),
            "updated": time.time(),
            "switches": self.state,
            "cabling": self.cabling(),
            "miss_packets": sum(st["miss_packets"] for st in self.state.values()),
            "pfc": self._pfc_status(),
        }
        tmp = self.status_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, self.status_file)
