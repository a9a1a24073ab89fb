"""The engine's exception tree.

::

    EngineError
    ├── QueueShutDown          the work queue no longer accepts or hands out keys
    ├── ManagerStateError      a manager or controller used out of its lifecycle
    └── KubeError              (engine.kube) anything the Kubernetes adapter raises

Messages state the rule that was broken; they never contain secrets.
"""

from __future__ import annotations

__all__ = ["EngineError", "QueueShutDown", "ManagerStateError"]


class EngineError(Exception):
    """Root of every exception the engine raises on purpose."""


class QueueShutDown(EngineError):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down and drained."""


class ManagerStateError(EngineError):
    """A manager or controller was used outside its lifecycle."""
