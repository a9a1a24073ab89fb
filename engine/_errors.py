"""The engine's exception tree: every exception the package raises on purpose derives from
:class:`EngineError`.

::

    EngineError
    ├── QueueShutDown              the work queue no longer accepts or hands out keys
    ├── LifecycleError             an object used outside its lifecycle
    │   ├── ManagerStateError      a manager or controller (run twice, bound twice, ...)
    │   └── ClientStateError       (engine.kube) a client before opening or after closing
    ├── TerminalError              raised by a reconciler: do not retry this run
    ├── DependencyNotReady         raised by a reconciler: wake me when these refs are Ready
    ├── CheckFailed                (engine.observability) raised by a health/readiness check
    ├── WebhookDeliveryError       a webhook event sink gave up on one event
    ├── KubeError                  (engine.kube) anything the Kubernetes adapter raises
    │   ├── ConfigError            a kubeconfig or in-cluster configuration is unusable
    │   ├── ApiError               the API server answered with an error Status
    │   │   ├── BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError,
    │   │   ├── ConflictError, AlreadyExistsError, GoneError, InvalidError,
    │   │   └── TooManyRequestsError, ServerError
    │   ├── TransportError         the API server could not be reached / the connection broke
    │   │   └── TLSVerificationError  its certificate failed verification (never retried)
    │   ├── ResponseError          the server's answer broke the protocol
    │   ├── ResourceNotFoundError  discovery does not know a group/version and kind
    │   ├── WatchStalledError      a watch stream went silent past its idle timeout
    │   └── ClientStateError       (also a LifecycleError)
    ├── PluginError                (engine.kube) a plugin could not be loaded or set up
    └── ApiServerError             (engine.apiserver) the embedded API server was misused
        └── RequestRejected        the server refused a request; carries the Status body

Invalid arguments to constructors raise ``ValueError``/``TypeError`` as in the standard library.
Messages state the rule that was broken; they never contain secrets.
"""

from __future__ import annotations

__all__ = ["EngineError", "LifecycleError", "ManagerStateError", "QueueShutDown"]


class EngineError(Exception):
    """Root of every exception the engine raises on purpose."""


class QueueShutDown(EngineError):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down and drained."""


class LifecycleError(EngineError):
    """An object was used outside its lifecycle: run twice at once, used after closing, ..."""


class ManagerStateError(LifecycleError):
    """A manager or controller was used outside its lifecycle."""
