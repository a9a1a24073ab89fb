"""The ``python -m engine`` command line: subcommands dispatch to their modules lazily."""

from __future__ import annotations

import importlib

from .. import __version__
from ._args import ArgumentParser

__all__ = ["main"]

_COMMANDS = {
    "demo": ("engine.cli._demo", "Replay the three production failures the engine prevents, in-process, with verdicts."),
    "apiserver": ("engine.cli._apiserver", "Run the embedded Kubernetes-compatible API server on loopback."),
    "run": ("engine.cli._run", "Run plugins against a cluster (--kubeconfig) or the embedded API server (--embedded)."),
    "live": ("engine.cli._live", "Follow a manager's live stream: a live table of objects, or raw lifecycle lines."),
    "manifests": ("engine.cli._manifests", "Print the Deployment, RBAC and CRDs that install plugins in a cluster."),
    "simulate": ("engine.cli._simulate", "Seeded fault simulation of a plugin under virtual time; exit 1 on a violation."),
}

_ALIASES = {"watch": "live"}
"""Former names that keep working; they are not listed in the help."""


def main(argv: list[str]) -> int:
    """Run a subcommand; returns the process exit code."""
    parser = ArgumentParser(
        prog="python -m engine", description="trio reconciler engine",
        epilog="Run 'python -m engine COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the engine's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in _COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help", "--version"):
        if argv[:1] == ["--version"]:
            print(f"python -m engine {__version__}")
            return 0
        parser.print_help()
        return 0 if argv else 2
    command, rest = _ALIASES.get(argv[0], argv[0]), argv[1:]
    if command not in _COMMANDS:
        parser.error(f"unknown command {command!r} (choose from {', '.join(_COMMANDS)})")
    module = importlib.import_module(_COMMANDS[command][0])
    return int(module.main(rest))
