"""`gyre-contract channel status URI` and `channel check URI --map M`: a channel seen from outside.

`status` adds up both ends' counts (docs/channel.md): exit 0 when they agree, 1 when they
disagree (a segment missing or unreadable, acked + dropped + pending != put), 2 when URI is not
a channel. `check` runs the handshake a trainer's `open_trainer` would run, without opening:
exit 0 when the map runs on the sampler's records (warnings listed), 2 when it is refused
(every field named), as `open_trainer` refuses it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from gyre_contract.core._report import FORMATS


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "channel", help="a sampler-trainer channel from outside: counts, or a trainer's handshake",
        description="The channel between a sampler's and a trainer's processes "
        "(gyre_contract.channel, docs/channel.md). URI is a folder (file://DIR or a plain "
        "path) or ray://NAMESPACE/NAME (a running Ray cluster).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True,
                               help="status: both ends' counts and fingerprints; check: would "
                               "this map and trainer schema be accepted")
    status = actions.add_parser(
        "status", help="both fingerprints; steps, episodes, segments put, delivered, acked, "
        "pending, dropped as stale; the staleness histogram; first and last timestamps",
        description="Exit 0 the two ends' counts agree, 1 they disagree, 2 not a channel.")
    status.add_argument("uri", metavar="URI", help="the channel: a folder or ray://NS/NAME")
    status.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default); json: the status as one object")
    status.set_defaults(run=run_status)
    check = actions.add_parser(
        "check", help="run a trainer's handshake against the channel's sampler, without "
        "opening it",
        description="Exit 0 the map runs on the sampler's records, 2 it is refused (every "
        "field named) or URI is not a channel.")
    check.add_argument("uri", metavar="URI", help="the channel: a folder or ray://NS/NAME")
    check.add_argument("--map", required=True, metavar="M.json", dest="map_path",
                       help="the trainer's field map")
    check.add_argument("--trainer", metavar="T.json",
                       help="the trainer's batch schema (default: the map's TrainBatch or "
                       "TokenBatch)")
    check.add_argument("--batch-dims", metavar="DIMS",
                       help="the trainer schema's leading batch dims when it names none (B,T)")
    check.add_argument("--format", choices=FORMATS, default="text",
                       help="text for people (default); json: {channel, ok, warnings}")
    check.set_defaults(run=run_check)
    p.set_defaults(run=run_status)


def run_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.channel._status import channel_status

    report = channel_status(args.uri)
    out.write(report.render(args.format) + "\n")
    return report.exit_code()


def run_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.channel._ends import check_trainer

    found = check_trainer(args.uri, args.map_path, args.trainer, batch_dims=args.batch_dims)
    if args.format == "json":
        out.write(json.dumps({"channel": args.uri, "ok": True, "warnings": found},
                             indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(f"channel {args.uri}: the map runs on the sampler's records\n")
        for text in found:
            out.write(f"  warning: {text}\n")
    return 0
