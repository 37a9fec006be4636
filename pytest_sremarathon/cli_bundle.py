"""``sremarathon verify`` and ``sremarathon score``: work on a bundle alone (README: What a run records)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .bundle import BundleError, open_bundle, verify
from .scoring import format_table, score_bundle


def add_parsers(subparsers: Any) -> None:
    """Register ``verify`` and ``score`` on an ``argparse`` sub-parser collection."""
    p = subparsers.add_parser(
        "verify", help="check a run bundle (sealed archive or run directory) for tampering",
        description="Exit 0 if the bundle is intact; otherwise print one line per problem and exit 1. "
                    "An unsealed run directory (crashed run) is intact if its recorded prefix is.")
    p.add_argument("bundle", metavar="BUNDLE", type=Path, help="<run>.tar.gz or a run directory")
    p.add_argument("--public-key", metavar="HEX",
                   help="require the manifest to be signed with this ed25519 public key (hex)")
    p.set_defaults(func=cmd_verify)

    p = subparsers.add_parser(
        "score", help="compute the Marathon-Score of a run bundle",
        description="Score a run from its bundle alone. The bundle is verified first.")
    p.add_argument("bundle", metavar="BUNDLE", type=Path, help="<run>.tar.gz or a run directory")
    p.add_argument("--json", action="store_true", help="print the score as JSON")
    p.add_argument("--partial", action="store_true",
                   help="score an unsealed (crashed or unfinished) run from its recorded prefix")
    p.add_argument("--no-verify", action="store_true", help="skip verification (not recommended)")
    p.set_defaults(func=cmd_score)


def cmd_verify(args: argparse.Namespace) -> int:
    result = verify(args.bundle, public_key=args.public_key)
    if result.ok:
        print(f"{args.bundle}: {result}")
        return 0
    for problem in result.problems:
        print(f"{args.bundle}: {problem}")
    return 1


def cmd_score(args: argparse.Namespace) -> int:
    try:
        bundle = open_bundle(args.bundle)
    except BundleError as exc:
        print(f"sremarathon score: {exc}", file=sys.stderr)
        return 2
    if not bundle.sealed and not args.partial:
        print(f"sremarathon score: {args.bundle} is not sealed (crashed or unfinished run); "
              "use --partial to score its recorded prefix", file=sys.stderr)
        return 2
    if not args.no_verify:
        result = verify(args.bundle)
        if not result.ok:
            for problem in result.problems:
                print(f"{args.bundle}: {problem}", file=sys.stderr)
            print(f"sremarathon score: {args.bundle} does not verify; refusing to score it", file=sys.stderr)
            return 1
    try:
        score = score_bundle(bundle, partial=args.partial)
    except (BundleError, ValueError) as exc:
        print(f"sremarathon score: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(score.to_dict(), indent=2, sort_keys=True))
    else:
        print(format_table(score))
    return 0
