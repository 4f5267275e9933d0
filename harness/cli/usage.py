"""``kern help [VERB]``: the help ``kern --help`` and ``kern VERB --help`` print, as a verb of its
own (the first thing a person types)."""
from __future__ import annotations

from .shared import InputError, examples


def register(sub) -> None:
    p = sub.add_parser(
        "help", **examples(
            "kern help                             every verb, with examples",
            "kern help loop                        one verb's flags and examples"),
        help="this list, or one verb's flags and examples",
        description="Print kern's help (kern --help), or VERB's (kern VERB --help).")
    p.add_argument("topic", nargs="?", metavar="VERB", help="the verb to explain (default: all)")
    p.set_defaults(func=cmd_help)


def cmd_help(args) -> int:
    top = args.top_parser  # harness/cli/__init__.py's parser sets it: this module cannot import it
    if args.topic is None:
        top.print_help()
        return 0
    import argparse

    verbs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices
    if args.topic not in verbs:
        raise InputError(f"no verb {args.topic!r}: expected one of {', '.join(sorted(verbs))}")
    verbs[args.topic].print_help()
    return 0
