"""The objects that tell an API server to call a plugin's webhooks.

:func:`webhook_configurations` builds the ``ValidatingWebhookConfiguration`` and
``MutatingWebhookConfiguration`` of a set of webhooks, :func:`with_conversion` adds the
``conversion.webhook`` stanza to the CRDs that have a conversion webhook. Where the API server
finds the webhooks is a ``clientConfig``: :func:`service_client_config` (a Service in the
cluster; the ``caBundle`` is left to cert-manager's CA injector, through the
``cert-manager.io/inject-ca-from`` annotation) or :func:`url_client_config` (a URL and the CA
bundle, as the runner registers them for the embedded server). :func:`register_webhooks`
writes them to a server.
"""

from __future__ import annotations

import base64
import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._client._client import Client
from .._client._errors import ResourceNotFoundError
from ._review import AdmissionWebhook, ConversionWebhook, Webhook

__all__ = [
    "ClientConfig",
    "INJECT_CA_ANNOTATION",
    "register_webhooks",
    "service_client_config",
    "url_client_config",
    "webhook_configurations",
    "with_conversion",
]

logger = logging.getLogger("engine.kube.webhooks")

INJECT_CA_ANNOTATION = "cert-manager.io/inject-ca-from"
"""cert-manager's CA injector writes the CA of the Certificate ``namespace/name`` this names
into every ``caBundle`` of the annotated object."""

ClientConfig = Callable[[str], dict[str, Any]]
"""The ``clientConfig`` of a webhook for its URL path."""

_FIELD_MANAGER = "engine-webhooks"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def service_client_config(name: str, namespace: str, port: int) -> ClientConfig:
    """Webhooks behind the Service ``namespace/name`` on ``port`` (no ``caBundle``)."""
    def config(path: str) -> dict[str, Any]:
        return {"service": {"name": name, "namespace": namespace, "path": path, "port": port}}
    return config


def url_client_config(base_url: str, ca_bundle: bytes | None) -> ClientConfig:
    """Webhooks at ``base_url`` + path, their certificate signed by ``ca_bundle`` (PEM)."""
    def config(path: str) -> dict[str, Any]:
        found: dict[str, Any] = {"url": base_url.rstrip("/") + path}
        if ca_bundle:
            found["caBundle"] = base64.b64encode(ca_bundle).decode()
        return found
    return config


def webhook_configurations(
    webhooks: Sequence[Webhook],
    *,
    name: str,
    client_config: ClientConfig,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """The MutatingWebhookConfiguration then the ValidatingWebhookConfiguration (each only if
    it has webhooks) named ``name``, their webhooks in the order given. With ``namespace`` (the
    one namespace the plugins watch) a webhook without a namespace selector of its own is
    called only for that namespace (``kubernetes.io/metadata.name``)."""
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    found = []
    for mutating, kind in ((True, "MutatingWebhookConfiguration"), (False, "ValidatingWebhookConfiguration")):
        entries = [w.configuration_entry(client_config(w.path)) for w in webhooks
                   if isinstance(w, AdmissionWebhook) and w.mutating is mutating]
        for entry in entries:
            if namespace is not None and not entry["namespaceSelector"]:
                entry["namespaceSelector"] = {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}
        if entries:
            found.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                          "metadata": copy.deepcopy(meta), "webhooks": entries})
    return found


def with_conversion(
    crds: Sequence[Mapping[str, Any]],
    webhooks: Sequence[Webhook],
    *,
    client_config: ClientConfig,
    annotations: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``crds`` (copies), those with a :class:`ConversionWebhook` given ``spec.conversion``
    (strategy Webhook, review version v1) and ``annotations``."""
    conversions = {w.crd: w for w in webhooks if isinstance(w, ConversionWebhook)}
    found = []
    for crd in crds:
        copied = copy.deepcopy(dict(crd))
        webhook = conversions.get(copied["metadata"]["name"])
        if webhook is not None:
            copied["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": client_config(webhook.path), "conversionReviewVersions": ["v1"]},
            }
            if annotations:
                copied["metadata"].setdefault("annotations", {}).update(annotations)
        found.append(copied)
    return found


async def register_webhooks(
    client: Client, webhooks: Sequence[Webhook], *, name: str, client_config: ClientConfig,
    namespace: str | None = None,
) -> bool:
    """Apply the configurations of ``webhooks`` (server-side apply, field manager
    ``engine-webhooks``; ``namespace`` as :func:`webhook_configurations`) and set the conversion stanza of each CRD with a conversion webhook
    (a merge patch). Returns ``False``, writing nothing, when the server does not serve
    ``admissionregistration.k8s.io/v1``.

    Cancellation: what was written stays written.
    """
    admission = [w for w in webhooks if isinstance(w, AdmissionWebhook)]
    if admission:
        try:
            await client.resource("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")
        except ResourceNotFoundError:
            logger.warning("the API server does not serve admissionregistration.k8s.io/v1: webhooks not registered")
            return False
    for obj in webhook_configurations(webhooks, name=name, client_config=client_config, namespace=namespace):
        resource = await client.resource(obj["apiVersion"], obj["kind"])
        await client.apply(resource, obj, field_manager=_FIELD_MANAGER, force=True)
    conversions = [w for w in webhooks if isinstance(w, ConversionWebhook)]
    if conversions:
        crds = await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        for webhook in conversions:
            conversion = {"strategy": "Webhook", "webhook": {"clientConfig": client_config(webhook.path),
                                                              "conversionReviewVersions": ["v1"]}}
            await client.patch(crds, webhook.crd, {"spec": {"conversion": conversion}})
    return True
