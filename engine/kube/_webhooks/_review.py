"""Admission and conversion webhooks a plugin declares, and the typed reviews they answer.

A plugin lists its webhooks in :attr:`Plugin.webhooks`:

- :class:`AdmissionWebhook` (validating or mutating) for some kinds and operations
  (:class:`AdmissionRule`); its handler receives an :class:`AdmissionRequest` and a
  :class:`WebhookContext` and answers an :class:`AdmissionResponse` (``None`` allows). A
  mutating handler answers :meth:`AdmissionResponse.patched` with the changed object; the JSON
  patch is computed from it. Raising :class:`AdmissionDenied` denies with its message and code.
- :class:`ConversionWebhook` for one CRD: its handler converts one object to the desired
  ``apiVersion``.

:class:`WebhookDispatcher` answers the HTTP requests (``admission.k8s.io/v1`` AdmissionReview,
``apiextensions.k8s.io/v1`` ConversionReview): each handler runs in its own nursery under a
deadline below the configuration's ``timeoutSeconds`` (:func:`handler_deadline`); a handler that
raises or runs out of time answers a denial (or a failed conversion) with a one-line reason,
never an HTTP 500; under ``failure_policy="Ignore"`` it answers allowed, with that reason as a
warning, as the API server lets a request through when it cannot call such a webhook.
Malformed reviews get 400 with the reason.
"""

from __future__ import annotations

import base64
import enum
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import trio

from ..._errors import EngineError
from ..._http import Request, Response
from ..._text import summarize

if TYPE_CHECKING:
    from .._client._client import Client
    from .._runtime._cluster import Cluster

__all__ = [
    "AdmissionDenied",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionRule",
    "AdmissionWebhook",
    "ConversionWebhook",
    "ConversionRequest",
    "AdmissionOperation",
    "WebhookContext",
    "WebhookDispatcher",
    "WebhookStatistics",
    "MalformedReview",
    "handler_deadline",
    "json_patch_between",
]

logger = logging.getLogger("engine.kube.webhooks")
_T = TypeVar("_T")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"
_WEBHOOK_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){2,}$")


class AdmissionOperation(enum.StrEnum):
    """The operations an admission rule matches (``"*"``: all of them)."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"
    ALL = "*"


class MalformedReview(EngineError):
    """A request body is not a review this server answers (HTTP 400 with this message)."""


class AdmissionDenied(EngineError):
    """Raised by an admission handler to deny the request with ``message`` and ``code``."""

    def __init__(self, message: str, *, code: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _operations(value: Sequence[str | AdmissionOperation]) -> tuple[AdmissionOperation, ...]:
    return tuple(AdmissionOperation(v) for v in value)


@attrs.frozen
class AdmissionRule:
    """Which requests an admission webhook is called for (a ``RuleWithOperations``)."""

    api_version: str
    """``group/version`` (``v1`` for the core group) of the resource; the version may be ``*``."""
    resource: str
    """The resource's plural (``bundles``), ``plural/subresource``, or ``*``."""
    operations: tuple[AdmissionOperation, ...] = attrs.field(default=(AdmissionOperation.CREATE, AdmissionOperation.UPDATE),
                                                    converter=_operations)
    scope: Literal["*", "Cluster", "Namespaced"] = "*"

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """The API version."""
        return self.api_version.rpartition("/")[2]

    def to_dict(self) -> dict[str, Any]:
        """The rule as a webhook configuration lists it."""
        return {"apiGroups": [self.group], "apiVersions": [self.version], "operations": [str(o) for o in self.operations],
                "resources": [self.resource], "scope": self.scope}


@attrs.frozen
class AdmissionRequest:
    """The ``request`` of an ``admission.k8s.io/v1`` AdmissionReview."""

    uid: str
    kind: Mapping[str, str]
    """The kind of the object (``group``, ``version``, ``kind``)."""
    resource: Mapping[str, str]
    """The resource (``group``, ``version``, ``resource``)."""
    operation: AdmissionOperation
    name: str
    namespace: str | None
    object: Mapping[str, Any] | None
    """The new object (``None`` for DELETE)."""
    old_object: Mapping[str, Any] | None
    """The stored object (UPDATE, DELETE)."""
    sub_resource: str = ""
    dry_run: bool = False
    user_info: Mapping[str, Any] = attrs.field(factory=dict)
    options: Mapping[str, Any] | None = None
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False)
    """The request as it was received."""

    @classmethod
    def from_review(cls, review: Any) -> AdmissionRequest:
        """Read an AdmissionReview; raises :class:`MalformedReview` naming what is wrong."""
        if not isinstance(review, Mapping):
            raise MalformedReview("an AdmissionReview must be a JSON object")
        if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
            raise MalformedReview(f"expected apiVersion {ADMISSION_API_VERSION} kind AdmissionReview, got "
                                  f"{review.get('apiVersion')!r} {review.get('kind')!r}")
        request = review.get("request")
        if not isinstance(request, Mapping):
            raise MalformedReview("AdmissionReview has no request")
        uid = request.get("uid")
        if not isinstance(uid, str) or not uid:
            raise MalformedReview("request.uid must be a non-empty string")
        try:
            operation = AdmissionOperation(str(request.get("operation")))
        except ValueError:
            raise MalformedReview(f"request.operation must be CREATE, UPDATE, DELETE or CONNECT, got "
                                  f"{request.get('operation')!r}") from None
        for field in ("kind", "resource"):
            if not isinstance(request.get(field), Mapping):
                raise MalformedReview(f"request.{field} must be an object")
        for field in ("object", "oldObject"):
            if request.get(field) is not None and not isinstance(request.get(field), Mapping):
                raise MalformedReview(f"request.{field} must be an object or null")
        if operation in (AdmissionOperation.CREATE, AdmissionOperation.UPDATE) and request.get("object") is None:
            raise MalformedReview(f"request.object is required for {operation}")
        return cls(
            uid=uid, kind=dict(request["kind"]), resource=dict(request["resource"]), operation=operation,
            name=str(request.get("name") or ""), namespace=request.get("namespace") or None,
            object=request.get("object"), old_object=request.get("oldObject"),
            sub_resource=str(request.get("subResource") or ""), dry_run=bool(request.get("dryRun")),
            user_info=dict(request.get("userInfo") or {}), options=request.get("options"), raw=dict(request),
        )


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch_between(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """An RFC 6902 JSON patch that turns ``old`` into ``new``: object members are added,
    removed or replaced one by one; a list or scalar that differs is replaced whole."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(str(key))}"})
        for key, value in new.items():
            where = f"{path}/{_escape(str(key))}"
            if key not in old:
                ops.append({"op": "add", "path": where, "value": value})
            else:
                ops.extend(json_patch_between(old[key], value, where))
        return ops
    if old == new and type(old) is type(new):
        return []
    return [{"op": "replace", "path": path, "value": new}]


_REASONS = {400: "BadRequest", 403: "Forbidden", 409: "Conflict", 422: "Invalid", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
"""The Status ``reason`` of a denial's code, as controller-runtime's helpers set it (kubectl
prints it: ``Error from server (Forbidden): ...``)."""


@attrs.frozen
class AdmissionResponse:
    """The ``response`` of an AdmissionReview: allowed or denied (``code``, ``message``), a
    JSON ``patch`` (mutating webhooks), ``warnings``. Build it with :meth:`allow`,
    :meth:`deny` or :meth:`patched`; the ``uid`` is filled in when it is sent."""

    allowed: bool
    code: int | None = None
    message: str = ""
    patch: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    uid: str = ""

    @classmethod
    def allow(cls, *, warnings: Sequence[str] = ()) -> AdmissionResponse:
        """Allow the request unchanged."""
        return cls(True, warnings=tuple(warnings))

    @classmethod
    def deny(cls, message: str, *, code: int = 403, warnings: Sequence[str] = ()) -> AdmissionResponse:
        """Deny the request; the API server answers ``code`` with ``message``."""
        return cls(False, code=code, message=" ".join(message.split()), warnings=tuple(warnings))

    @classmethod
    def patched(cls, request: AdmissionRequest, changed: Mapping[str, Any], *,
                warnings: Sequence[str] = ()) -> AdmissionResponse:
        """Allow the request with ``changed`` in place of ``request.object``: the patch is the
        difference between them (none when equal)."""
        return cls(True, patch=tuple(json_patch_between(request.object or {}, changed)), warnings=tuple(warnings))

    def with_uid(self, uid: str) -> AdmissionResponse:
        """This response answering the request ``uid``."""
        return attrs.evolve(self, uid=uid)

    def to_review(self) -> dict[str, Any]:
        """The AdmissionReview that carries this response."""
        response: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed or self.code is not None:
            code = self.code or 403
            response["status"] = {"code": code, "reason": _REASONS.get(code, ""), "message": self.message}
            if not response["status"]["reason"]:
                del response["status"]["reason"]
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(list(self.patch)).encode()).decode()
        if self.warnings:
            response["warnings"] = list(self.warnings)
        return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


@attrs.define(eq=False)
class WebhookContext:
    """What a webhook handler receives besides the request."""

    cluster: Cluster | None
    """The cluster the plugin runs on: its informers' caches may be read (they may be stale);
    ``None`` when the webhooks are served without one."""
    client: Client | None
    """The plugin's client, for what the caches do not hold."""
    nursery: trio.Nursery
    """The request's own nursery: tasks started here are cancelled with the request."""
    deadline: float
    """The trio time at which the handler is cancelled."""


AdmissionHandler = Callable[[AdmissionRequest, WebhookContext], Awaitable[AdmissionResponse | None]]
ConversionHandler = Callable[[Mapping[str, Any], str, WebhookContext], Awaitable[Mapping[str, Any]]]


def _rules(items: Sequence[AdmissionRule]) -> tuple[AdmissionRule, ...]:
    return tuple(items)


def _check_timeout(instance: Any, attribute: Any, value: int) -> None:
    if not 1 <= value <= 30:
        raise ValueError(f"webhook timeout_seconds must be between 1 and 30, got {value}")


@attrs.frozen
class AdmissionWebhook:
    """A validating (``mutating=False``) or mutating admission webhook of a plugin."""

    name: str
    """The webhook's name in its configuration: a fully qualified name such as
    ``validate.bundles.engine.dev`` (at least three DNS labels)."""
    handler: AdmissionHandler = attrs.field(eq=False)
    rules: tuple[AdmissionRule, ...] = attrs.field(converter=_rules)
    mutating: bool = False
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    timeout_seconds: int = attrs.field(default=10, validator=_check_timeout)
    """The API server's timeout; the handler's own deadline is :func:`handler_deadline` of it."""
    namespace_selector: Mapping[str, Any] | None = None
    object_selector: Mapping[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        if not _WEBHOOK_NAME.match(self.name):
            raise ValueError(f"webhook name must be a fully qualified DNS name with at least three labels, "
                             f"got {self.name!r}")
        if not self.rules:
            raise ValueError(f"webhook {self.name!r} has no rules")

    @property
    def path(self) -> str:
        """The URL path the webhook server answers it on."""
        return f"/{'mutate' if self.mutating else 'validate'}/{self.name}"

    def configuration_entry(self, client_config: Mapping[str, Any]) -> dict[str, Any]:
        """This webhook's entry in a Validating/MutatingWebhookConfiguration."""
        entry: dict[str, Any] = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": dict(client_config),
            "rules": [rule.to_dict() for rule in self.rules],
            "failurePolicy": self.failure_policy,
            "sideEffects": "None",
            "timeoutSeconds": self.timeout_seconds,
            "matchPolicy": "Equivalent",
            "namespaceSelector": dict(self.namespace_selector or {}),
            "objectSelector": dict(self.object_selector or {}),
        }
        if self.mutating:
            entry["reinvocationPolicy"] = "Never"
        return entry


@attrs.frozen
class ConversionWebhook:
    """The conversion webhook of one of the plugin's CRDs: ``handler(obj, desired_api_version,
    ctx)`` returns ``obj`` as ``desired_api_version``."""

    crd: str
    """The CRD's name (``<plural>.<group>``)."""
    handler: ConversionHandler = attrs.field(eq=False)
    timeout_seconds: int = attrs.field(default=10, validator=_check_timeout)

    @property
    def path(self) -> str:
        """The URL path the webhook server answers it on."""
        return f"/convert/{self.crd}"


@attrs.frozen
class ConversionRequest:
    """The ``request`` of an ``apiextensions.k8s.io/v1`` ConversionReview."""

    uid: str
    desired_api_version: str
    objects: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_review(cls, review: Any) -> ConversionRequest:
        """Read a ConversionReview; raises :class:`MalformedReview` naming what is wrong."""
        if not isinstance(review, Mapping):
            raise MalformedReview("a ConversionReview must be a JSON object")
        if review.get("apiVersion") != CONVERSION_API_VERSION or review.get("kind") != "ConversionReview":
            raise MalformedReview(f"expected apiVersion {CONVERSION_API_VERSION} kind ConversionReview, got "
                                  f"{review.get('apiVersion')!r} {review.get('kind')!r}")
        request = review.get("request")
        if not isinstance(request, Mapping):
            raise MalformedReview("ConversionReview has no request")
        uid, desired, objects = request.get("uid"), request.get("desiredAPIVersion"), request.get("objects")
        if not isinstance(uid, str) or not uid:
            raise MalformedReview("request.uid must be a non-empty string")
        if not isinstance(desired, str) or "/" not in desired:
            raise MalformedReview("request.desiredAPIVersion must be 'group/version'")
        if not isinstance(objects, list) or not all(isinstance(o, Mapping) for o in objects):
            raise MalformedReview("request.objects must be a list of objects")
        return cls(uid, desired, tuple(objects))


def handler_deadline(timeout_seconds: float) -> float:
    """Seconds a handler may take when the API server waits ``timeout_seconds``: 80 % of it, so
    the denial saying so reaches the server before it gives up."""
    return timeout_seconds * 0.8


LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""controller-runtime's (Prometheus' default) buckets of ``controller_runtime_webhook_latency_seconds``."""


@attrs.define
class WebhookStatistics:
    """What one webhook path served: ``requests[code]`` by HTTP status, the latency histogram,
    in-flight requests, and of the answers how many were denials, errors and timeouts."""

    requests: dict[int, int] = attrs.Factory(dict)
    in_flight: int = 0
    buckets: list[int] = attrs.Factory(lambda: [0] * len(LATENCY_BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0
    denied: int = 0
    errors: int = 0
    timeouts: int = 0

    def observe(self, seconds: float) -> None:
        """Count one latency observation."""
        self.latency_sum += seconds
        self.latency_count += 1
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1


Webhook = AdmissionWebhook | ConversionWebhook


def _json_response(status: int, body: Any) -> Response:
    return Response(status, [("content-type", "application/json")], json.dumps(body).encode())


class WebhookDispatcher:
    """Answers webhook HTTP requests (``POST`` to a webhook's :attr:`~AdmissionWebhook.path`)
    with the plugins' handlers; keeps :class:`WebhookStatistics` per path.

    ``cluster`` and ``client`` are given to handlers (:class:`WebhookContext`). Bad input: an
    unknown path is 404, a method other than POST 405, a body that is not JSON or not a review
    400 with the reason. The handler's deadline is :func:`handler_deadline` of the webhook's
    ``timeout_seconds``, or of the API server's ``?timeout=`` when that is shorter (a
    configuration edited by hand).
    """

    def __init__(self, webhooks: Sequence[Webhook], *, cluster: Cluster | None = None,
                 client: Client | None = None) -> None:
        self.webhooks: dict[str, Webhook] = {}
        for webhook in webhooks:
            if webhook.path in self.webhooks:
                raise ValueError(f"two webhooks answer on {webhook.path}")
            self.webhooks[webhook.path] = webhook
        self.cluster = cluster
        self.client = client
        self.statistics: dict[str, WebhookStatistics] = {path: WebhookStatistics() for path in self.webhooks}

    def items(self) -> Iterator[tuple[str, WebhookStatistics]]:
        """``(path, statistics)`` of every webhook, sorted by path."""
        return iter(sorted(self.statistics.items()))

    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request.

        Cancellation: the handler's nursery is cancelled and ``Cancelled`` propagates.
        """
        webhook = self.webhooks.get(request.path)
        if webhook is None:
            return Response.text(404, f"no webhook at {request.path}\n".encode())
        stats = self.statistics[request.path]
        stats.in_flight += 1
        started = trio.current_time()
        status = 500
        try:
            try:
                response = await self._answer(webhook, request, stats)
            except Exception:
                logger.exception("webhook %s could not answer", request.path)
                response = Response.text(500, b"internal error\n")
            status = response.status
            return response
        finally:
            stats.in_flight -= 1
            stats.requests[status] = stats.requests.get(status, 0) + 1
            stats.observe(trio.current_time() - started)

    async def _answer(self, webhook: Webhook, request: Request, stats: WebhookStatistics) -> Response:
        if request.method != "POST":
            return Response.text(405, b"webhooks answer POST\n")
        try:
            review = json.loads(request.body)
        except (ValueError, RecursionError) as exc:
            return Response.text(400, f"request body is not JSON: {summarize(exc)}\n".encode())
        timeout = float(webhook.timeout_seconds)
        asked = _go_duration(request.query.get("timeout", ""))
        if asked is not None and 0 < asked < timeout:
            timeout = asked
        try:
            if isinstance(webhook, AdmissionWebhook):
                admission = AdmissionRequest.from_review(review)
                return _json_response(200, (await self._admit(webhook, admission, stats, timeout)).to_review())
            conversion = ConversionRequest.from_review(review)
            return _json_response(200, await self._convert(webhook, conversion, stats, timeout))
        except MalformedReview as exc:
            return Response.text(400, f"malformed review: {exc}\n".encode())

    async def _call(self, limit: float, call: Callable[[WebhookContext], Awaitable[_T]]) -> tuple[bool, _T | None,
                                                                                               Exception | None]:
        """Run ``call`` in a nursery of its own under ``limit`` seconds: whether it ran out of
        time, what it returned, what it raised. Tasks it started are cancelled when it returns."""
        result: list[_T] = []
        error: Exception | None = None
        with trio.move_on_after(limit) as scope:
            try:
                async with trio.open_nursery() as nursery:
                    result.append(await call(WebhookContext(self.cluster, self.client, nursery, scope.deadline)))
                    nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                if group.subgroup(trio.Cancelled) is not None:
                    raise
                raised, _ = group.split(Exception)
                if raised is None:
                    raise
                error = _single(raised)
        if error is not None:
            return False, None, error
        return scope.cancelled_caught, (result[0] if result else None), None

    async def _admit(self, webhook: AdmissionWebhook, request: AdmissionRequest,
                     stats: WebhookStatistics, timeout: float) -> AdmissionResponse:
        limit = handler_deadline(timeout)

        async def call(ctx: WebhookContext) -> AdmissionResponse | None:
            return await webhook.handler(request, ctx)

        timed_out, response, error = await self._call(limit, call)
        if isinstance(error, AdmissionDenied):
            stats.denied += 1
            return AdmissionResponse.deny(error.message, code=error.code).with_uid(request.uid)
        failure: tuple[str, int] | None = None
        if error is not None:
            stats.errors += 1
            logger.warning("webhook %s failed", webhook.name, exc_info=error)
            failure = f"webhook handler failed: {summarize(error)}", 500
        elif timed_out:
            stats.timeouts += 1
            failure = (f"webhook handler did not answer within {_seconds(limit)} "
                       f"(timeoutSeconds {_seconds(timeout)})", 504)
        elif response is not None and not isinstance(response, AdmissionResponse):
            stats.errors += 1
            failure = f"webhook handler answered {type(response).__name__}, not an AdmissionResponse or None", 500
        if failure is not None:
            message, code = failure
            if webhook.failure_policy == "Ignore":
                return AdmissionResponse.allow(warnings=[f"{message}; allowed by failurePolicy Ignore"]).with_uid(
                    request.uid)
            return AdmissionResponse.deny(message, code=code).with_uid(request.uid)
        if response is None:
            response = AdmissionResponse.allow()
        if not response.allowed:
            stats.denied += 1
        return response.with_uid(request.uid)

    async def _convert(self, webhook: ConversionWebhook, request: ConversionRequest,
                       stats: WebhookStatistics, timeout: float) -> dict[str, Any]:
        limit = handler_deadline(timeout)

        async def call(ctx: WebhookContext) -> list[Mapping[str, Any]]:
            converted = []
            for obj in request.objects:
                result = await webhook.handler(obj, request.desired_api_version, ctx)
                if not isinstance(result, Mapping) or result.get("apiVersion") != request.desired_api_version:
                    raise ValueError(f"converted object is not {request.desired_api_version}")
                converted.append(result)
            return converted

        timed_out, converted, error = await self._call(limit, call)
        failure = ""
        if error is not None:
            stats.errors += 1
            logger.warning("conversion webhook %s failed", webhook.crd, exc_info=error)
            failure = f"conversion failed: {summarize(error)}"
        elif timed_out:
            stats.timeouts += 1
            failure = f"conversion did not finish within {_seconds(limit)} (timeoutSeconds {_seconds(timeout)})"
        response: dict[str, Any] = {"uid": request.uid}
        if failure or converted is None:
            response["convertedObjects"] = []
            response["result"] = {"status": "Failure", "message": failure}
        else:
            response["convertedObjects"] = [dict(o) for o in converted]
            response["result"] = {"status": "Success"}
        return {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": response}


def _single(group: BaseExceptionGroup[Exception]) -> Exception:
    """The exception a handler raised, out of its request nursery's group."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found if isinstance(found, Exception) else RuntimeError(str(group))


def _seconds(value: float) -> str:
    return f"{value:g}s" if math.isfinite(value) else "inf"


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_GO_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration(text: str) -> float | None:
    """Seconds of a Go duration (``5s``, ``1m30s``, ``500ms``), as the API server's
    ``?timeout=`` gives it; ``None`` when it is not one."""
    if not text or _GO_DURATION.sub("", text):
        return None
    return sum(float(n) * _GO_UNITS[unit] for n, unit in _GO_DURATION.findall(text))
