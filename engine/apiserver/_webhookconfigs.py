"""Webhook configurations: ``admissionregistration.k8s.io/v1`` ``MutatingWebhookConfiguration`` and
``ValidatingWebhookConfiguration``: their defaults and validation, as the real server applies
them (``SetDefaults_*`` and ``ValidateValidatingWebhookConfiguration``; the common rules: names,
duplicates, ``clientConfig``, ``rules``, ``sideEffects``, ``admissionReviewVersions``,
``timeoutSeconds``, the policies and ``matchConditions``), and a CustomResourceDefinition's
``spec.conversion``."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import urlsplit

from ._cel import Rule
from ._objects import Obj, meta
from ._resources import ResourceType
from ._status import CauseSpec, invalid_causes

__all__ = ["MUTATING", "VALIDATING", "default_configuration", "validate_configuration", "client_config_causes", "conversion_causes"]

MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")

_OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def _unsupported(path: str, value: Any, allowed: tuple[str, ...]) -> CauseSpec:
    listed = ", ".join(f'"{a}"' for a in allowed)
    return ("FieldValueNotSupported", path, f"Unsupported value: {_quote(value)}: supported values: {listed}")


def _bad(path: str, value: Any, why: str) -> CauseSpec:
    return ("FieldValueInvalid", path, f"Invalid value: {_quote(value)}: {why}")


def _required(path: str, why: str = "") -> CauseSpec:
    return ("FieldValueRequired", path, f"Required value: {why}" if why else "Required value")


def default_configuration(rt: ResourceType, obj: Obj, now: Any = None) -> None:
    """Fill the defaults of every webhook in place: ``failurePolicy: Fail``, ``matchPolicy:
    Equivalent``, empty selectors, ``timeoutSeconds: 10``, rule ``scope: "*"``, service port
    443, and ``reinvocationPolicy: Never`` for mutating webhooks."""
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        if rt.storage_key == MUTATING:
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def validate_configuration(rt: ResourceType, obj: Obj) -> None:
    """Raise 422 Invalid (every cause at once) for a configuration the real server refuses."""
    causes: list[CauseSpec] = []
    hooks = obj.get("webhooks") or []
    if not isinstance(hooks, list):
        hooks = []
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        path = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(_required(path))
            continue
        _check_hook(rt, hook, path, seen, causes)
    if causes:
        raise invalid_causes(rt, str(meta(obj).get("name", "")), causes)


def _check_hook(rt: ResourceType, hook: dict[str, Any], path: str, seen: set[str], causes: list[CauseSpec]) -> None:
    name = hook.get("name")
    if not name:
        causes.append(_required(f"{path}.name"))
    elif not isinstance(name, str) or len(name.split(".")) < 3:
        causes.append(_bad(f"{path}.name", name, "should be a domain with at least three segments separated by dots"))
    elif name in seen:
        causes.append(("FieldValueDuplicate", f"{path}.name", f"Duplicate value: {_quote(name)}"))
    if isinstance(name, str):
        seen.add(name)
    for j, rule in enumerate(hook.get("rules") or []):
        _check_rule(rule, f"{path}.rules[{j}]", causes)
    policy = hook.get("failurePolicy")
    if policy is not None and policy not in ("Fail", "Ignore"):
        causes.append(_unsupported(f"{path}.failurePolicy", policy, ("Fail", "Ignore")))
    match_policy = hook.get("matchPolicy")
    if match_policy is not None and match_policy not in ("Equivalent", "Exact"):
        causes.append(_unsupported(f"{path}.matchPolicy", match_policy, ("Equivalent", "Exact")))
    side_effects = hook.get("sideEffects")
    if side_effects is None:
        causes.append(_required(f"{path}.sideEffects", "must specify one of None, NoneOnDryRun"))
    elif side_effects not in ("None", "NoneOnDryRun"):
        causes.append(_unsupported(f"{path}.sideEffects", side_effects, ("None", "NoneOnDryRun")))
    versions = hook.get("admissionReviewVersions")
    if not versions:
        causes.append(_required(f"{path}.admissionReviewVersions", "must specify one of v1, v1beta1"))
    elif not isinstance(versions, list) or not {"v1", "v1beta1"} & set(map(str, versions)):
        shown = "[]string{" + ", ".join(_quote(str(v)) for v in versions or []) + "}"
        causes.append(("FieldValueInvalid", f"{path}.admissionReviewVersions",
                       f"Invalid value: {shown}: must include at least one of v1, v1beta1"))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30):
        causes.append(_bad(f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"))
    if rt.storage_key == MUTATING:
        reinvocation = hook.get("reinvocationPolicy")
        if reinvocation is not None and reinvocation not in ("IfNeeded", "Never"):
            causes.append(_unsupported(f"{path}.reinvocationPolicy", reinvocation, ("IfNeeded", "Never")))
    causes.extend(client_config_causes(hook.get("clientConfig"), f"{path}.clientConfig"))
    for selector in ("namespaceSelector", "objectSelector"):
        _check_selector(hook.get(selector), f"{path}.{selector}", causes)
    _check_match_conditions(hook.get("matchConditions"), f"{path}.matchConditions", causes)


def _check_selector(selector: Any, path: str, causes: list[CauseSpec]) -> None:
    """A label selector's expressions, as ``ValidateLabelSelector`` checks them."""
    if not isinstance(selector, dict):
        return
    for k, expression in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{k}]"
        if not isinstance(expression, dict):
            causes.append(_required(where))
            continue
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                causes.append(_required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                causes.append(("FieldValueForbidden", f"{where}.values",
                               "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            causes.append(_bad(f"{where}.operator", operator, "not a valid selector operator"))


def _check_rule(rule: Any, path: str, causes: list[CauseSpec]) -> None:
    if not isinstance(rule, dict):
        causes.append(_required(path))
        return
    operations = rule.get("operations") or []
    if not operations:
        causes.append(_required(f"{path}.operations"))
    for k, op in enumerate(operations):
        if op not in _OPERATIONS:
            causes.append(_unsupported(f"{path}.operations[{k}]", op, _OPERATIONS))
    if len(operations) > 1 and "*" in operations:
        causes.append(_bad(f"{path}.operations", operations, "if '*' is present, must not specify other operations"))
    for field in ("apiGroups", "apiVersions", "resources"):
        values = rule.get(field) or []
        if not values:
            causes.append(_required(f"{path}.{field}"))
        if len(values) > 1 and "*" in values:
            shown = "[]string{" + ", ".join(_quote(str(v)) for v in values) + "}"
            causes.append(("FieldValueInvalid", f"{path}.{field}", f"Invalid value: {shown}: if '*' is present, must not specify other {field}"))
    for k, resource in enumerate(rule.get("resources") or []):
        if not isinstance(resource, str) or not resource:
            causes.append(_required(f"{path}.resources[{k}]", "resource must not be empty"))
        elif resource.count("/") > 1:
            causes.append(_bad(f"{path}.resources[{k}]", resource, "resource must have the form 'resource' or 'resource/subresource'"))
    scope = rule.get("scope")
    if scope is not None and scope not in ("*", "Cluster", "Namespaced"):
        causes.append(_unsupported(f"{path}.scope", scope, ("*", "Cluster", "Namespaced")))


def client_config_causes(config: Any, path: str) -> list[CauseSpec]:
    """What is wrong with a webhook's ``clientConfig`` at ``path``."""
    causes: list[CauseSpec] = []
    _check_client_config(config, path, causes)
    return causes


def _check_client_config(config: Any, path: str, causes: list[CauseSpec]) -> None:
    if not isinstance(config, dict):
        config = {}
    url, service = config.get("url"), config.get("service")
    if (url is None) == (service is None):
        causes.append(_required(path, "exactly one of url or service is required"))
        return
    bundle = config.get("caBundle")
    if bundle:
        try:
            base64.b64decode(str(bundle), validate=True)
        except (binascii.Error, ValueError):
            causes.append(_bad(f"{path}.caBundle", "<bytes>", "must be base64 encoded"))
    if url is not None:
        parts = urlsplit(str(url))
        if parts.scheme != "https":
            causes.append(_bad(f"{path}.url", url, "'https' is the only allowed URL scheme"))
        elif not parts.hostname:
            causes.append(_bad(f"{path}.url", url, "host must be specified"))
        if parts.username or parts.password:
            causes.append(_bad(f"{path}.url", url, "user information is not permitted in the URL"))
        if parts.fragment:
            causes.append(_bad(f"{path}.url", url, "fragments are not permitted in the URL"))
        if parts.query:
            causes.append(_bad(f"{path}.url", url, "query parameters are not permitted in the URL"))
        return
    if not isinstance(service, dict):
        causes.append(_required(f"{path}.service"))
        return
    for field in ("name", "namespace"):
        value = service.get(field)
        if not value:
            causes.append(_required(f"{path}.service.{field}", f"service {field} is required"))
        elif not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) > 63:
            causes.append(_bad(f"{path}.service.{field}", value, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"))
    service_path = service.get("path")
    if service_path is not None and (not isinstance(service_path, str) or not service_path.startswith("/")):
        causes.append(_bad(f"{path}.service.path", service_path, "must start with a '/'"))
    port = service.get("port", 443)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        causes.append(_bad(f"{path}.service.port", port, "port is not valid: must be between 1 and 65535, inclusive"))


def _check_match_conditions(conditions: Any, path: str, causes: list[CauseSpec]) -> None:
    if conditions is None:
        return
    if not isinstance(conditions, list):
        causes.append(_required(path))
        return
    if len(conditions) > 64:
        causes.append(("FieldValueTooMany", path, f"Too many: {len(conditions)}: must have at most 64 items"))
    names: set[str] = set()
    for k, condition in enumerate(conditions):
        where = f"{path}[{k}]"
        if not isinstance(condition, dict):
            causes.append(_required(where))
            continue
        name = condition.get("name")
        if not name:
            causes.append(_required(f"{where}.name"))
        elif not isinstance(name, str) or len(name) > 63 or not _QUALIFIED.match(name):
            causes.append(_bad(f"{where}.name", name, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"))
        elif name in names:
            causes.append(("FieldValueDuplicate", f"{where}.name", f"Duplicate value: {_quote(name)}"))
        if isinstance(name, str):
            names.add(name)
        expression = condition.get("expression")
        if not expression:
            causes.append(_required(f"{where}.expression"))
            continue
        error = Rule(rule=str(expression)).compile_error()
        if error is not None:
            causes.append(_bad(f"{where}.expression", expression, error))


def conversion_causes(spec: dict[str, Any]) -> list[CauseSpec]:
    """What is wrong with a CRD's ``spec.conversion`` (validated as the real server does)."""
    conversion = spec.get("conversion")
    if not isinstance(conversion, dict):
        return []
    causes: list[CauseSpec] = []
    strategy = conversion.get("strategy")
    webhook = conversion.get("webhook")
    if strategy not in ("None", "Webhook"):
        causes.append(("FieldValueNotSupported", "spec.conversion.strategy",
                       f'Unsupported value: "{strategy}": supported values: "None", "Webhook"'))
    elif strategy == "None" and webhook is not None:
        causes.append(("FieldValueForbidden", "spec.conversion.webhook", "Forbidden: should not be set when strategy is not set to Webhook"))
    elif strategy == "Webhook":
        if not isinstance(webhook, dict) or not webhook.get("clientConfig"):
            causes.append(("FieldValueRequired", "spec.conversion.webhook.clientConfig", "Required value: required when strategy is set to Webhook"))
        else:
            versions = webhook.get("conversionReviewVersions")
            if not versions:
                causes.append(("FieldValueRequired", "spec.conversion.webhook.conversionReviewVersions",
                               "Required value: must specify one of v1, v1beta1"))
            elif not {"v1", "v1beta1"} & set(map(str, versions)):
                shown = "[]string{" + ", ".join(f'"{v}"' for v in versions) + "}"
                causes.append(("FieldValueInvalid", "spec.conversion.webhook.conversionReviewVersions",
                               f"Invalid value: {shown}: must include at least one of v1, v1beta1"))
            causes.extend(client_config_causes(webhook["clientConfig"], "spec.conversion.webhook.clientConfig"))
    return causes
