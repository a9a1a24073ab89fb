"""The ``python -m engine`` command line: ``run``, ``apiserver``, ``demo`` and ``live``.

Each subcommand lives in its own private module and is imported only when it runs. This
package may import every layer (:mod:`engine.kube`, :mod:`engine.apiserver`, :mod:`engine.testing`); nothing imports it.
"""

from .._exports import publish as _publish
from ._main import main as main

__all__ = ["main"]

_publish(globals())
