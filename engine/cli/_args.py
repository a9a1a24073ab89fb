"""The command line's argument parser: a bad flag or value is one ``error:`` line, not the usage."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line naming the flag and the value.

    argparse prints the whole usage before its error, which for ``run`` is some 25 lines that
    bury the one that matters; here the error comes alone, with where to find the usage, and
    the exit status stays argparse's 2.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")
