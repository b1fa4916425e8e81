"""How a `falsify` subcommand's parser is made, whichever module owns the command: its line in `falsify --help`,
a description, and an epilog (exit codes, the rules) printed as written."""

from __future__ import annotations

import argparse


def add_subcommand(
    sub: argparse._SubParsersAction, name: str, help: str, doc: str, epilog: str | None = None
) -> argparse.ArgumentParser:
    """NAME's parser. HELP is its line in `falsify --help`; its description is DOC's first line (a module docstring
    or a one-line help), its epilog EPILOG, else the rest of DOC after the blank line below the first."""
    return sub.add_parser(
        name,
        help=help,
        description=doc.splitlines()[0],
        epilog=doc.split("\n", 2)[2] if epilog is None else epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
