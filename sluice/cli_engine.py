"""The engine options of the command line: every command that runs queries takes the same ones,
with the same meaning (``sluice run``, ``script``, ``serve``, ``demo``; ``bench`` those that keep
answers exact), and builds its engine from them.
"""

from __future__ import annotations

import argparse
from typing import Any

from sluice.cql.ast import TimeUnit
from sluice.errors import SluiceError
from sluice.plan.dataflow import JOIN_INTERMEDIATES

UNITS = [u.name.lower() for u in TimeUnit]


def add_engine_options(p: argparse.ArgumentParser, exact: bool = False) -> None:
    """The engine options every command that runs queries takes, with the same meaning.
    ``exact`` (``sluice bench``, which checks every engine's answer equal before timing it and
    picks its engines and Spark master itself): no backend, master, time unit (NEXMark's is the
    millisecond) or memory limit (an approximating engine's answer is not the reference's).
    """
    g = p.add_argument_group("engine")
    if not exact:
        g.add_argument("--backend", choices=["embedded", "spark"], default="embedded")
        g.add_argument("--master", default="local[2]", help="Spark master URL (with --backend spark)")
    g.add_argument(
        "--scheduler",
        default=None,
        help="strategy[+modifier][:key=value,…], e.g. chain, threshold:memory=5MB, round-robin:quantum=2 "
        "(default: round-robin, switched for latency targets and memory pressure)",
    )
    g.add_argument("--slack", type=int, default=0, help="accept elements up to this many ticks out of order")
    g.add_argument(
        "--shared-join",
        default=None,
        metavar="POLICY",
        help="how queries joining the same streams on the same predicate share one join: greedy (default), "
        "swf, lwo or off; options after ':', e.g. swf:variant=nested-loop,unit=1",
    )
    g.add_argument(
        "--sharing",
        default="on",
        choices=["on", "off"],
        help="share operators between queries (STREAM §3.2: equal subplans, windows over one stream, window "
        "joins); off: each query's plan is its own (the same answers)",
    )
    g.add_argument(
        "--join-intermediates",
        default="auto",
        choices=JOIN_INTERMEDIATES,
        help="a join of three or more inputs: keep its intermediate results (a tree of binary joins), drop "
        "them (one dataflow join), or auto: decided by the streams' rates (Getta & Vossough eq. 1-2)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of Sample()")
    if exact:
        return
    g.add_argument(
        "--memory-limit",
        default=None,
        metavar="SIZE",
        help="hold queues and synopses within SIZE (e.g. 64MB) by sampling and shedding stream input, "
        "each query's approximation reported (embedded engine); default: exact whatever the memory",
    )
    g.add_argument(
        "--key-memory-limit",
        default=None,
        metavar="SIZE",
        help="with --backend spark: hold each processor key's queues and synopses within SIZE by sampling and "
        "shedding that key's input, what was dropped reported per query; default: exact",
    )
    g.add_argument("--time-unit", default="second", choices=UNITS, help="what one tick is (NEXMark: millisecond)")


def engine_key(args: argparse.Namespace) -> tuple[Any, ...]:
    return (
        args.backend,
        args.scheduler,
        args.seed,
        args.time_unit,
        args.slack,
        args.shared_join,
        args.memory_limit,
        args.join_intermediates,
        args.sharing,
    ) + ((args.key_memory_limit,) if args.key_memory_limit is not None else ())  # (older checkpoints' fingerprint)


def build_engine(args: argparse.Namespace) -> Any:
    from sluice.backends import Sluice

    return Sluice(args.backend, **engine_opts(args))


def engine_opts(args: argparse.Namespace) -> dict[str, Any]:
    """The engine's keyword options from the parsed command line (those the command takes)."""
    opts: dict[str, Any] = {
        "seed": args.seed,
        "slack": args.slack,
        "shared_join": args.shared_join,
        "join_intermediates": args.join_intermediates,
        "sharing": args.sharing == "on",
    }
    if getattr(args, "time_unit", None) is not None:  # (not ``bench``'s: NEXMark's is the millisecond)
        opts["time_unit"] = args.time_unit
    if getattr(args, "memory_limit", None) is not None:
        opts["memory_limit"] = args.memory_limit
    if getattr(args, "key_memory_limit", None) is not None:
        if getattr(args, "backend", None) != "spark":
            raise SluiceError(
                "--key-memory-limit is the Spark backend's limit per key (with --backend spark); the embedded "
                "engine holds one limit for all its state: --memory-limit"
            )
        opts["key_memory_limit"] = args.key_memory_limit
    if args.scheduler is not None:  # chosen: kept (latency targets do not switch it)
        opts["scheduler"] = args.scheduler
    if getattr(args, "backend", None) == "spark":
        opts["master"] = args.master
    return opts
