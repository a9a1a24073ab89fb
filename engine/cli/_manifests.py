"""``python -m engine manifests``: the installation of a run of plugins in a cluster, as YAML.

The objects, in the order they are printed: the plugins' CRDs, the Namespace the engine runs
in, its ServiceAccount, the ClusterRole and ClusterRoleBinding and the Role and RoleBinding of
each namespace that the plugins' rules need (derived by setting the plugins up against an
embedded API server that never leaves the process, see :func:`engine.kube.plugin_rules`, plus
Events, and the leader election Lease when there is more than one replica), a Service for
metrics, the Deployment, and a PodDisruptionBudget when there is more than one replica.

When a plugin declares webhooks (:attr:`engine.kube.Plugin.webhooks`): a Service
``<name>-webhook`` on port 9443, the Deployment serves them there, the
``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration`` (printed last) call that
Service, and CRDs with a conversion webhook get their ``conversion`` stanza. No ``caBundle`` is
written: by default the runner provisions its certificate itself (``run --webhook-service``,
:class:`engine.kube.CertRotator`): it keeps a CA and a serving certificate in the Secret
``<name>-webhook-cert`` (printed empty, filled by the runner; its Role may get and update only
that Secret) and writes the CA into those configurations and conversion stanzas (its
ClusterRole may get and update only those). With ``--cert-manager`` cert-manager does it: a
self-signed Issuer and a Certificate write the Secret, mounted at ``/etc/engine/webhook-certs``,
and the objects carry ``cert-manager.io/inject-ca-from: <namespace>/<name>-webhook`` for its CA
injector.

The same command line always gives the same bytes. With ``-o DIR`` each kind goes to its own
file there, with a ``kustomization.yaml`` listing them.

Exit codes, as ``run``: 0 when written, 1 for a plugin that cannot be loaded or set up (one
``error:`` line), 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
import yaml

from .. import __version__
from .._errors import EngineError
from .._manager import DEFAULT_GRACE_PERIOD
from ._args import ArgumentParser
from ._run import default_lease_name

if TYPE_CHECKING:
    from ..kube import Permissions, Plugin, PolicyRule

__all__ = ["main", "manifests"]

METRICS_PORT = 8080
PROBE_PORT = 8081
WEBHOOK_PORT = 9443
"""The webhook server's port: the container's, the webhook Service's and the configurations'."""
WEBHOOK_CERT_DIR = "/etc/engine/webhook-certs"
"""Where the Deployment mounts cert-manager's Secret holding the webhook server's ``tls.crt``
and ``tls.key`` (``--cert-manager``)."""
RUN_AS = 65532
"""The uid and gid the runner image's user has (the Containerfile's ``engine`` user)."""
SHUTDOWN_MARGIN = 15
"""Seconds of ``terminationGracePeriodSeconds`` beyond ``--grace-period``: the event flush,
shielded status writes and releasing the Lease."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

_DESCRIPTION = """\
Print the manifests that install a run of plugins in a cluster: the plugins' CRDs, a
Namespace, a ServiceAccount, the least-privilege ClusterRole/Role and bindings the plugins
declare (with Events, and the leader election Lease when --replicas > 1), a Service for
metrics, the Deployment running `python -m engine run` and, when --replicas > 1, a
PodDisruptionBudget. With -o DIR, one file per kind and a kustomization.yaml.

Plugins with webhooks also get a webhook Service, the Mutating/ValidatingWebhookConfiguration
and CRD conversion stanzas, and an empty Secret in which the runner keeps the CA and serving
certificate it makes, writing the CA into their caBundle itself (no cert-manager needed). With
--cert-manager, a cert-manager Issuer and Certificate write that Secret instead and its CA
injector fills the caBundle (the cert-manager.io/inject-ca-from annotation).

Exit codes: 0 when written, 1 when a plugin cannot be loaded or set up, 2 for a bad flag.
"""


class _UsageError(Exception):
    """A flag has a value that cannot work: exit code 2."""


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m engine manifests", description=_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plugin", action="append", default=[], metavar="NAME|module:attr",
                   help="a plugin to install (repeatable), as `run --plugin` takes it")
    p.add_argument("--namespace", help="the namespace the plugins watch (a Role there); default: all (a ClusterRole)")
    p.add_argument("--install-namespace", default="engine-system", metavar="NS",
                   help="the namespace the engine runs in: its Deployment, ServiceAccount and leader election "
                        "Lease (default engine-system)")
    p.add_argument("--name", help="the name of the Deployment, ServiceAccount, roles and Lease "
                                  "(default: engine-<plugins>, the Lease name `run` uses)")
    p.add_argument("--image", default=f"engine:{__version__}",
                   help=f"the runner image, built from the Containerfile (default engine:{__version__})")
    p.add_argument("--replicas", type=int, default=1,
                   help="replicas; more than one runs with --leader-elect and adds a PodDisruptionBudget (default 1)")
    p.add_argument("--scale-out", action="store_true",
                   help="with --replicas > 1: the replicas divide the objects (run --scale-out) instead of "
                        "electing a leader")
    p.add_argument("--grace-period", type=float, default=DEFAULT_GRACE_PERIOD, metavar="SECONDS",
                   help=f"the runner's --grace-period; the pod's terminationGracePeriodSeconds is "
                        f"{SHUTDOWN_MARGIN} s more (default {DEFAULT_GRACE_PERIOD:g})")
    p.add_argument("--cert-manager", action="store_true",
                   help="plugins with webhooks: let cert-manager make the serving certificate (a self-signed "
                        "Issuer and a Certificate; its CA injector writes the caBundle) instead of the runner "
                        "(default: the runner keeps it in a Secret and writes the caBundle itself)")
    p.add_argument("-o", "--output-dir", metavar="DIR",
                   help="write one file per kind and a kustomization.yaml into DIR instead of printing")
    return p


def _check(args: argparse.Namespace) -> None:
    if not args.plugin:
        raise _UsageError("no plugin to install (give --plugin NAME, e.g. --plugin bundles)")
    for flag, value in (("--namespace", args.namespace), ("--install-namespace", args.install_namespace),
                        ("--name", args.name)):
        if value is not None and not _DNS_LABEL.match(value):
            raise _UsageError(f"{flag} must be a DNS label (lower case letters, digits and '-', "
                              f"at most 63), got {value!r}")
    if args.replicas < 1:
        raise _UsageError(f"--replicas must be >= 1, got {args.replicas}")
    if not (math.isfinite(args.grace_period) and args.grace_period >= 0):
        raise _UsageError(f"--grace-period must be a number of seconds >= 0, got {args.grace_period:g}")
    if not args.image.strip():
        raise _UsageError("--image must not be empty")


async def _derive_rules(plugins: Sequence[Plugin], namespace: str | None) -> tuple[PolicyRule, ...]:
    from ..apiserver import ApiServer
    from ..kube import Client, Config, install_crds, plugin_rules

    async with ApiServer(listen=False, controllers=False) as api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            await install_crds(client, [crd for plugin in plugins for crd in plugin.crds])
            return await plugin_rules(client, plugins, namespace=namespace)


def manifests(
    plugins: Sequence[Plugin],
    rules: Sequence[PolicyRule],
    *,
    namespace: str | None,
    install_namespace: str,
    name: str,
    image: str,
    replicas: int,
    grace_period: float,
    scale_out: bool = False,
    cert_manager: bool = False,
) -> list[dict[str, Any]]:
    """The objects that install ``plugins`` (whose own rules are ``rules``, as
    :func:`engine.kube.plugin_rules` derives them), in the order they must be applied.
    With ``scale_out`` several replicas divide the objects (a ring of member Leases) instead
    of electing a leader."""
    from ..kube import (
        EVENT_RULES,
        INJECT_CA_ANNOTATION,
        CertProvisioning,
        Permissions,
        PolicyRule,
        leader_election_rules,
        service_client_config,
        webhook_configurations,
        with_conversion,
    )

    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "controller"}
    leader = replicas > 1
    lease_rules = (
        (PolicyRule("coordination.k8s.io", "leases", ("create", "delete", "get", "list", "update", "watch"),
                    namespace=install_namespace),)
        if scale_out else leader_election_rules(install_namespace)
    )
    webhooks = [webhook for plugin in plugins for webhook in plugin.webhooks]
    provision = CertProvisioning(f"{name}-webhook", install_namespace, name) if webhooks and not cert_manager else None
    all_rules = [*rules, *EVENT_RULES, *(lease_rules if leader else ()),
                 *(provision.rules(webhooks) if provision is not None else ())]
    permissions = Permissions.resolve(all_rules, namespace=namespace)
    inject = {INJECT_CA_ANNOTATION: f"{install_namespace}/{name}-webhook"} if cert_manager else {}
    client_config = service_client_config(f"{name}-webhook", install_namespace, WEBHOOK_PORT)
    crds = sorted(with_conversion([crd for plugin in plugins for crd in plugin.crds], webhooks,
                                  client_config=client_config, annotations=inject),
                  key=lambda c: c["metadata"]["name"])
    objects: list[dict[str, Any]] = [*crds]
    objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": install_namespace}})
    objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": install_namespace, "labels": labels}})
    objects.extend(_rbac(permissions, name=name, install_namespace=install_namespace, labels=labels))
    objects.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{name}-metrics", "namespace": install_namespace, "labels": labels},
        "spec": {"selector": labels,
                 "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}]},
    })
    if webhooks:
        objects.append({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{name}-webhook", "namespace": install_namespace, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "webhook", "port": WEBHOOK_PORT, "targetPort": "webhook",
                                                    "protocol": "TCP"}]},
        })
        if cert_manager:
            objects.extend(_cert_manager(name=name, install_namespace=install_namespace, labels=labels))
        else:
            objects.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                            "metadata": {"name": f"{name}-webhook-cert", "namespace": install_namespace,
                                         "labels": labels}})
    objects.append(_deployment(plugins, namespace=namespace, install_namespace=install_namespace, name=name,
                               image=image, replicas=replicas, grace_period=grace_period, labels=labels,
                               scale_out=scale_out, webhooks=bool(webhooks), cert_manager=cert_manager))
    if leader:
        objects.append({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": install_namespace, "labels": labels},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        })
    objects.extend(webhook_configurations(webhooks, name=name, client_config=client_config, labels=labels,
                                          annotations=inject, namespace=namespace))
    return objects


def _cert_manager(*, name: str, install_namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """A self-signed Issuer and the serving Certificate of the webhook Service, written to the
    Secret the Deployment mounts."""
    service = f"{name}-webhook"
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
         "metadata": {"name": f"{name}-selfsigned", "namespace": install_namespace, "labels": dict(labels)},
         "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": service, "namespace": install_namespace, "labels": dict(labels)},
         "spec": {"secretName": f"{service}-cert",
                  "dnsNames": [f"{service}.{install_namespace}.svc", f"{service}.{install_namespace}.svc.cluster.local"],
                  "issuerRef": {"kind": "Issuer", "name": f"{name}-selfsigned"}}},
    ]


def _rbac(
    permissions: Permissions, *, name: str, install_namespace: str, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    from ..kube import role_objects

    return role_objects(permissions, name=name, service_account=name, service_account_namespace=install_namespace,
                        labels=labels)


def _deployment(
    plugins: Sequence[Plugin],
    *,
    namespace: str | None,
    install_namespace: str,
    name: str,
    image: str,
    replicas: int,
    grace_period: float,
    labels: Mapping[str, str],
    scale_out: bool = False,
    webhooks: bool = False,
    cert_manager: bool = False,
) -> dict[str, Any]:
    args = [f"--plugin={plugin.name}" for plugin in plugins]
    if namespace is not None:
        args.append(f"--namespace={namespace}")
    args.append("--skip-crd-install")
    if replicas > 1:
        args += ["--scale-out" if scale_out else "--leader-elect", f"--leader-election-id={name}",
                 f"--leader-election-namespace={install_namespace}"]
    args += [
        f"--grace-period={grace_period:g}",
        f"--metrics-bind-address=0.0.0.0:{METRICS_PORT}",
        f"--health-probe-bind-address=0.0.0.0:{PROBE_PORT}",
        "--progress=never",
        "--log-format=json",
    ]
    ports = [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
             {"name": "probes", "containerPort": PROBE_PORT, "protocol": "TCP"}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if webhooks:
        args.append(f"--webhook-bind-address=0.0.0.0:{WEBHOOK_PORT}")
        ports.append({"name": "webhook", "containerPort": WEBHOOK_PORT, "protocol": "TCP"})
        if cert_manager:
            args.append(f"--webhook-cert-dir={WEBHOOK_CERT_DIR}")
            mounts.append({"name": "webhook-certs", "mountPath": WEBHOOK_CERT_DIR, "readOnly": True})
            volumes.append({"name": "webhook-certs", "secret": {"secretName": f"{name}-webhook-cert"}})
        else:
            args += [f"--webhook-service={install_namespace}/{name}-webhook", f"--webhook-configuration={name}"]
    container = {
        "name": "engine",
        "image": image,
        "args": args,
        "ports": ports,
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "probes"}, "periodSeconds": 10,
                          "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "probes"}, "periodSeconds": 5,
                           "failureThreshold": 3},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "500m", "memory": "256Mi"}},
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": install_namespace, "labels": dict(labels)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
            if replicas > 1 else {"type": "Recreate"},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": math.ceil(grace_period) + SHUTDOWN_MARGIN,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    """Writes every value in place: no ``&anchor``/``*alias`` for values used twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(objects: Sequence[Mapping[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def _write(directory: Path, objects: Sequence[Mapping[str, Any]]) -> list[Path]:
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(f"{str(obj['kind']).lower()}.yaml", []).append(obj)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, docs in by_kind.items():
        (directory / filename).write_text(_dump(docs))
        written.append(directory / filename)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": list(by_kind)}
    (directory / "kustomization.yaml").write_text(_dump([kustomization]))
    written.append(directory / "kustomization.yaml")
    return written


def _certificate_note(name: str, install_namespace: str, *, cert_manager: bool) -> str:
    """Who makes the webhooks' serving certificate, for the person applying the install."""
    if cert_manager:
        return (f"note: cert-manager issues the webhooks' serving certificate (Issuer and Certificate "
                f"{install_namespace}/{name}-webhook) and injects its CA: cert-manager must be installed")
    return (f"note: the runner provisions the webhooks' serving certificate itself (a CA and certificate in Secret "
            f"{install_namespace}/{name}-webhook-cert, the caBundle injected into its webhook configurations); "
            f"--cert-manager has cert-manager issue it instead")


def main(argv: list[str]) -> int:
    """Run the ``manifests`` command; returns the exit code (see the description above)."""
    from ..kube import PluginError, load_plugins

    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        _check(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        plugins, _ = load_plugins(args.plugin, strict=True)
        rules = trio.run(_derive_rules, plugins, args.namespace)
    except (PluginError, EngineError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1
    name = args.name or default_lease_name([plugin.name for plugin in plugins])
    if not _DNS_LABEL.match(name):
        print(f"error: the name {name!r} made of the plugins' names is not a DNS label; give --name",
              file=sys.stderr, flush=True)
        return 2
    objects = manifests(
        plugins, rules, namespace=args.namespace, install_namespace=args.install_namespace, name=name,
        image=args.image, replicas=args.replicas, grace_period=args.grace_period, scale_out=args.scale_out,
        cert_manager=args.cert_manager,
    )
    if any(plugin.webhooks for plugin in plugins):
        print(_certificate_note(name, args.install_namespace, cert_manager=args.cert_manager), file=sys.stderr,
              flush=True)
    if args.output_dir is None:
        sys.stdout.write(_dump(objects))
        return 0
    try:
        written = _write(Path(args.output_dir), objects)
    except OSError as exc:
        print(f"error: -o {args.output_dir}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return 1
    for path in written:
        print(f"wrote {path}", flush=True)
    return 0
