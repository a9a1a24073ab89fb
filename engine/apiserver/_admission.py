"""Admission webhooks, called as kube-apiserver 1.36 calls them.

On a create, update, patch or delete, the stored ``MutatingWebhookConfiguration`` objects
(sorted by name, webhooks in order) are consulted first: each matching webhook gets an
``admission.k8s.io/v1`` ``AdmissionReview`` and may answer a JSON patch, applied at once, so the
next webhook sees the patched object; webhooks with ``reinvocationPolicy: IfNeeded`` are called
once more when a later webhook changed the object. The storage then validates the result
(schema, CEL rules), and the ``ValidatingWebhookConfiguration`` webhooks are called, all at the
same time, on the object about to be stored.

A webhook matches by its ``rules`` (operations, API groups and versions, resources with ``*``,
``*/*``, ``name/sub`` and ``*/sub``, scope), its ``namespaceSelector`` (the namespace's labels;
a Namespace's own), its ``objectSelector`` (the new or the old object's labels) and its
``matchConditions`` (CEL over ``object``, ``oldObject`` and ``request``). ``matchPolicy:
Equivalent`` also matches a rule naming another served version of the same custom resource
(the object is then sent in that version). Configurations themselves are never sent to
webhooks, as on the real server.

Answers follow the real server's words: a denial is the webhook's ``Status`` (code at least
400) with the message ``admission webhook "NAME" denied the request: MESSAGE``; a call that
failed (timeout after ``timeoutSeconds``, refused connection, an HTTP error, a malformed or
mismatched answer, an undecodable patch) is a 500 ``Internal error occurred: failed calling
webhook "NAME": ...`` under ``failurePolicy: Fail`` and is skipped under ``Ignore``; match
conditions that cannot be evaluated refuse the request (403) under ``Fail``. A dry-run
request calls only webhooks whose ``sideEffects`` is ``None`` or ``NoneOnDryRun`` (others get
400 ``admission webhook "NAME" does not support dry run``). Warnings are returned for the
response's ``Warning`` headers.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from ._authn import UserInfo
from ._cel import evaluate_condition
from ._errors import RequestRejected
from ._fields import unknown_fields
from ._objects import Obj, meta
from ._patch import apply_json_patch
from ._resources import BUILTIN_TYPES, ResourceType
from ._responses import typed
from ._status import details
from ._storage import ObjectStorage
from ._webhookconfigs import MUTATING, VALIDATING
from ._webhooks import WebhookCallError, WebhookClient

__all__ = ["Admission", "AdmissionRequest", "internal_error"]

logger = logging.getLogger("engine.apiserver.admission")

_NAMESPACES = ("", "namespaces")
_REVIEW_VERSION = "admission.k8s.io/v1"


def internal_error(message: str) -> RequestRejected:
    """The real server's ``NewInternalError``: 500 ``Internal error occurred: MESSAGE``."""
    return RequestRejected(
        500, "InternalError", f"Internal error occurred: {message}", details={"causes": [{"message": message}]}
    )


@attrs.frozen
class AdmissionRequest:
    """One write as admission sees it."""

    rt: ResourceType
    operation: str
    """``CREATE``, ``UPDATE`` or ``DELETE``."""
    namespace: str | None
    name: str
    subresource: str | None
    obj: Obj | None
    old: Obj | None
    user: UserInfo
    dry_run: bool
    options: dict[str, Any]
    """The write's options (``kind`` ``CreateOptions``, ``UpdateOptions``, ``PatchOptions`` or
    ``DeleteOptions``)."""
    kind: dict[str, str] | None = None
    """The objects' group, version and kind when they are not the resource's (``autoscaling/v1``
    ``Scale`` for ``scale``); the objects are then sent as they are."""


@attrs.frozen
class _Hook:
    configuration: str
    spec: dict[str, Any]
    mutating: bool

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def ignore_failures(self) -> bool:
        return bool(self.spec.get("failurePolicy", "Fail") == "Ignore")


@attrs.define(eq=False)
class Admission:
    """Runs the webhooks of ``store``'s configurations for the writes of one server."""

    store: ObjectStorage
    client: WebhookClient
    convert: Callable[[ResourceType, list[Obj]], Awaitable[list[Obj]]] | None = None
    """Converts custom resources to another version (the CRD's conversion webhook), for
    webhooks matched through ``matchPolicy: Equivalent``; ``None``: only ``apiVersion`` changes."""

    async def _in_version(self, rt: ResourceType, obj: Obj | None) -> Obj | None:
        if obj is None:
            return None
        if self.convert is not None:
            [converted] = await self.convert(rt, [obj])
            if converted is not obj:
                return converted
        return {**copy.deepcopy(obj), "apiVersion": rt.api_version}

    def configured(self, key: tuple[str, str]) -> bool:
        """Whether any configuration of the ``key`` kind (:data:`MUTATING`, :data:`VALIDATING`) is stored."""
        return bool(self.store.objects_of(key))

    def _hooks(self, key: tuple[str, str]) -> list[_Hook]:
        configurations = sorted(self.store.objects_of(key), key=lambda item: str(meta(item[1]).get("name", "")))
        return [
            _Hook(str(meta(obj).get("name", "")), hook, key == MUTATING)
            for _, obj in configurations
            for hook in obj.get("webhooks") or []
            if isinstance(hook, dict)
        ]

    async def mutate(self, request: AdmissionRequest, warnings: list[str]) -> Obj | None:
        """Call the matching mutating webhooks in order; the object as they left it (their
        warnings are appended to ``warnings``). Raises :class:`RequestRejected` for a denial or a
        failed call under ``Fail``. Cancellation propagates (webhook calls are abandoned)."""
        if request.rt.storage_key in (MUTATING, VALIDATING) or not self.configured(MUTATING):
            return request.obj
        obj = request.obj
        invoked: list[tuple[int, _Hook]] = []
        last_change = -1
        for index, hook in enumerate(self._hooks(MUTATING)):
            current = attrs.evolve(request, obj=obj)
            changed, obj = await self._mutate_once(hook, current, warnings)
            if changed is None:
                continue
            invoked.append((index, hook))
            if changed:
                last_change = index
        for index, hook in invoked:
            if hook.spec.get("reinvocationPolicy") == "IfNeeded" and index < last_change:
                _, obj = await self._mutate_once(hook, attrs.evolve(request, obj=obj), warnings)
        return obj

    async def _mutate_once(self, hook: _Hook, request: AdmissionRequest, warnings: list[str]) -> tuple[bool | None, Obj | None]:
        """``(changed, object)``; ``changed`` is ``None`` when the webhook was not called."""
        try:
            review = await self._review_for(hook, request)
            if review is None:
                return None, request.obj
            response = await self._call(hook, review)
        except WebhookCallError as exc:
            self._call_failed(hook, exc)
            return None, request.obj
        warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed"):
            raise _denial(hook.name, response.get("status"))
        patch = response.get("patch")
        if not patch:
            return False, request.obj
        try:
            operations = json.loads(base64.b64decode(str(patch), validate=True))
            if not isinstance(operations, list):
                raise ValueError("a JSON patch is a list of operations")
        except ValueError as exc:
            self._call_failed(hook, WebhookCallError(f"received undecodable patch in webhook response: {exc}"))
            return None, request.obj
        if not operations:
            return False, request.obj
        if request.obj is None:
            raise internal_error(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not supported for this operation'
            )
        sent = review["request"]["object"]
        try:
            patched = apply_json_patch(sent, operations)
        except RequestRejected as exc:
            raise internal_error(str(exc)) from None
        if not isinstance(patched, dict):
            raise internal_error(f"the patch of webhook {hook.name!r} did not leave an object")
        if request.rt in BUILTIN_TYPES and request.kind is None:
            unknown_fields(f"{request.rt.api_version}/{request.rt.kind}", patched)
        if patched == sent:
            return False, request.obj
        if request.kind is None and patched.get("apiVersion") != request.rt.api_version:
            patched = await self._in_version(request.rt, patched)
        return True, patched

    async def validate(self, request: AdmissionRequest, warnings: list[str]) -> None:
        """Call the matching validating webhooks, all at once, appending their warnings to
        ``warnings``. Raises :class:`RequestRejected` for the first denial or failed call (in
        configuration order). Cancellation propagates (the calls are abandoned)."""
        if request.rt.storage_key in (MUTATING, VALIDATING) or not self.configured(VALIDATING):
            return
        calls: list[tuple[_Hook, dict[str, Any]]] = []
        for hook in self._hooks(VALIDATING):
            try:
                review = await self._review_for(hook, request)
            except WebhookCallError as exc:
                self._call_failed(hook, exc)
                continue
            if review is not None:
                calls.append((hook, review))
        outcomes: list[Any] = [None] * len(calls)

        async def run(i: int, hook: _Hook, review: dict[str, Any]) -> None:
            try:
                outcomes[i] = await self._call(hook, review)
            except WebhookCallError as exc:
                outcomes[i] = exc

        async with trio.open_nursery() as nursery:
            for i, (hook, review) in enumerate(calls):
                nursery.start_soon(run, i, hook, review)
        first: RequestRejected | None = None
        for (hook, _), outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, WebhookCallError):
                try:
                    self._call_failed(hook, outcome)
                except RequestRejected as exc:
                    first = first or exc
                continue
            warnings.extend(str(w) for w in outcome.get("warnings") or [])
            if not outcome.get("allowed"):
                first = first or _denial(hook.name, outcome.get("status"))
        if first is not None:
            raise first

    def _call_failed(self, hook: _Hook, exc: WebhookCallError) -> None:
        """Fail open (log) or closed (raise) as the hook's ``failurePolicy`` says."""
        if hook.ignore_failures:
            logger.warning("failed calling webhook, failing open %s: %s", hook.name, exc)
            return
        logger.warning("failed calling webhook, failing closed %s: %s", hook.name, exc)
        raise internal_error(f'failed calling webhook "{hook.name}": {exc}')

    async def _call(self, hook: _Hook, review: dict[str, Any]) -> dict[str, Any]:
        timeout = float(hook.spec.get("timeoutSeconds") or 10)
        answer = await self.client.post(hook.spec.get("clientConfig") or {}, timeout, review)
        return _verify(review["request"]["uid"], answer, mutating=hook.mutating)

    async def _review_for(self, hook: _Hook, request: AdmissionRequest) -> dict[str, Any] | None:
        """The AdmissionReview to send ``hook``, ``None`` when it does not match; raises
        :class:`RequestRejected` for a dry run the hook does not support and for match
        conditions that cannot be evaluated under ``failurePolicy: Fail``."""
        rt = _match_rules(hook.spec, request, self.store)
        if rt is None:
            return None
        obj, old = request.obj, request.old
        if rt is not request.rt:
            obj = await self._in_version(rt, typed(request.rt, obj) if obj is not None else None)
            old = await self._in_version(rt, typed(request.rt, old) if old is not None else None)
        if not self._selectors_match(hook.spec, request):
            return None
        if request.dry_run and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise RequestRejected(400, "BadRequest", f'admission webhook "{hook.name}" does not support dry run')
        review = _review(request, rt, obj, old)
        if not _conditions_hold(hook, request, review["request"]):
            return None
        return review

    def _selectors_match(self, spec: dict[str, Any], request: AdmissionRequest) -> bool:
        objects = [o for o in (request.obj, request.old) if o is not None]
        object_selector = spec.get("objectSelector") or {}
        if object_selector and not any(_selector_matches(object_selector, meta(o).get("labels") or {}) for o in objects):
            return False
        namespace_selector = spec.get("namespaceSelector") or {}
        if not namespace_selector:
            return True
        if request.rt.storage_key == _NAMESPACES:
            labels = meta(objects[0]).get("labels") or {} if objects else {}
        elif request.rt.namespaced and request.namespace:
            ns = self.store.stored(_NAMESPACES, ("", request.namespace))
            labels = meta(ns).get("labels") or {} if ns is not None else {}
        else:
            return True
        return _selector_matches(namespace_selector, labels)


def _selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, op, values = str(expression.get("key")), expression.get("operator"), expression.get("values") or []
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and key in labels and labels[key] in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def _rule_matches(rule: dict[str, Any], request: AdmissionRequest, rt: ResourceType) -> bool:
    operations = rule.get("operations") or []
    if "*" not in operations and request.operation not in operations:
        return False
    groups, versions = rule.get("apiGroups") or [], rule.get("apiVersions") or []
    if "*" not in groups and rt.group not in groups:
        return False
    if "*" not in versions and rt.version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster" and rt.namespaced or scope == "Namespaced" and not rt.namespaced:
        return False
    sub = request.subresource
    for resource in rule.get("resources") or []:
        name, _, wanted_sub = str(resource).partition("/")
        if name not in ("*", rt.plural):
            continue
        if (sub is None and not wanted_sub) or (wanted_sub == "*") or (sub is not None and wanted_sub == sub):
            return True
    return False


def _match_rules(spec: dict[str, Any], request: AdmissionRequest, store: ObjectStorage) -> ResourceType | None:
    """The resource type the hook is called for: the request's own, or under ``matchPolicy:
    Equivalent`` another served version of the same custom resource."""
    rules = [r for r in spec.get("rules") or [] if isinstance(r, dict)]
    if any(_rule_matches(r, request, request.rt) for r in rules):
        return request.rt
    if spec.get("matchPolicy", "Equivalent") != "Equivalent" or request.rt in BUILTIN_TYPES:
        return None
    for other in store.types():
        if other.storage_key != request.rt.storage_key or other.version == request.rt.version:
            continue
        if any(_rule_matches(r, request, other) for r in rules):
            return other
    return None


def _group_version_kind(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _group_version_resource(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "resource": rt.plural}


def _review(request: AdmissionRequest, rt: ResourceType, obj: Obj | None, old: Obj | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": request.kind or _group_version_kind(rt),
        "resource": _group_version_resource(rt),
    }
    if request.subresource:
        body["subResource"] = request.subresource
    body["requestKind"] = request.kind or _group_version_kind(request.rt)
    body["requestResource"] = _group_version_resource(request.rt)
    if request.subresource:
        body["requestSubResource"] = request.subresource
    if request.name:
        body["name"] = request.name
    if request.namespace and request.rt.namespaced:
        body["namespace"] = request.namespace
    body["operation"] = request.operation
    body["userInfo"] = request.user.to_json()
    body["object"] = _sent(request, rt, obj)
    body["oldObject"] = _sent(request, rt, old)
    body["dryRun"] = request.dry_run
    body["options"] = {**request.options, "apiVersion": "meta.k8s.io/v1"}
    return {"kind": "AdmissionReview", "apiVersion": _REVIEW_VERSION, "request": body}


def _sent(request: AdmissionRequest, rt: ResourceType, obj: Obj | None) -> Obj | None:
    if obj is None or request.kind is not None:
        return obj
    return typed(rt, obj)


def _conditions_hold(hook: _Hook, request: AdmissionRequest, review_request: dict[str, Any]) -> bool:
    """Whether the hook's ``matchConditions`` let it be called: a false one skips it; one that
    cannot be evaluated (when none is false) skips it under ``failurePolicy: Ignore`` and
    refuses the request (403) under ``Fail``, as the real server's matcher does."""
    conditions = hook.spec.get("matchConditions") or []
    if not conditions:
        return True
    variables = {
        "object": review_request.get("object"),
        "oldObject": review_request.get("oldObject"),
        "request": {k: v for k, v in review_request.items() if k not in ("object", "oldObject")},
    }
    errors: list[str] = []
    for condition in conditions:
        expression = str(condition.get("expression") or "")
        result = evaluate_condition(expression, variables)
        if isinstance(result, str):
            errors.append(f"expression '{expression}' resulted in error: {result}")
        elif not result:
            return False
    if not errors:
        return True
    if hook.ignore_failures:
        logger.warning("failed evaluating match conditions of %s, skipping it: %s", hook.name, "; ".join(errors))
        return False
    rt = request.rt
    resource = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    text = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    message = f'{resource} "{request.name}" is forbidden: {text}' if request.name else f"{resource} is forbidden: {text}"
    raise RequestRejected(403, "Forbidden", message, details=details(rt.group, rt.plural, request.name or None))


def _verify(uid: str, answer: dict[str, Any], *, mutating: bool) -> dict[str, Any]:
    """The ``response`` of an AdmissionReview answer, checked as ``VerifyAdmissionResponse``
    does; raises :class:`WebhookCallError`."""

    def bad(why: str) -> WebhookCallError:
        return WebhookCallError(f"received invalid webhook response: {why}")

    response = answer.get("response")
    if not isinstance(response, dict):
        raise bad("webhook response was absent")
    got = response.get("uid")
    if got != uid:
        raise bad(f'expected response.uid="{uid}", got "{got if isinstance(got, str) else ""}"')
    api_version, kind = answer.get("apiVersion") or "", answer.get("kind") or ""
    if (api_version, kind) != (_REVIEW_VERSION, "AdmissionReview"):
        group, _, version = str(api_version).rpartition("/")
        raise bad(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{version}, Kind={kind}")
    patch_type, patch = response.get("patchType") or "", response.get("patch") or ""
    if mutating:
        if patch and not patch_type:
            raise bad("webhook returned response.patch but not response.patchType")
        if patch_type and patch_type != "JSONPatch":
            raise bad(f'webhook returned invalid response.patchType of "{patch_type}"')
    elif patch or patch_type:
        raise bad("validating webhook may not return response.patch or response.patchType")
    return response


def _denial(name: str, status: Any) -> RequestRejected:
    """A webhook's refusal as ``ToStatusErr`` builds it."""
    status = status if isinstance(status, dict) else {}
    code = status.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    denied = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied}: {status['reason']}"
    else:
        message = f"{denied} without explanation"
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return RequestRejected(code, str(status.get("reason") or ""), message, details=details)
