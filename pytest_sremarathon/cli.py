"""The ``sremarathon`` command (minimal: the bundle subcommands; the lead wires in the rest)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import __version__, cli_bundle


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sremarathon",
                                     description="Benchmark SRE agents on multi-fault marathons.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_bundle.add_parsers(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
