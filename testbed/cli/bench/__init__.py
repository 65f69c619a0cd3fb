"""The benchmarks' verb: ``bench fidelity|pfc|lateness|exchange|failover|control-path|datapath``, one module each
(as root; each builds its own fabrics). A benchmark's module has ``register(sub)`` (its subcommand and flags) and its
command; what they share is in ``common``."""

from __future__ import annotations

from testbed.cli.bench import control_path, datapath, exchange, failover, fidelity, lateness, pfc

BENCHMARKS = (fidelity, pfc, lateness, exchange, failover, control_path, datapath)  # in the order --help lists them


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: bench fidelity zcube|roft [--sweep 2,3,4]; bench pfc [zcube|roft]; "
                                     "bench lateness [zcube|roft] [--levels 1,64,128]; bench exchange [zcube|roft]; "
                                     "bench failover [zcube|roft] [--mode fast|controller|both]; "
                                     "bench control-path [zcube|roft] [--rate 1200]; bench datapath [--size 64]")
    benches = p.add_subparsers(dest="bench", required=True, parser_class=type(p))  # one-line errors too
    for bench in BENCHMARKS:
        bench.register(benches)
