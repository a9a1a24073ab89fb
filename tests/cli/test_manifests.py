"""``python -m engine manifests``: what it prints, what it writes, and kubectl's verdict on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from engine.apiserver import ApiServer
from engine.cli import _manifests
from engine.kube import load_plugin

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
LABELS = {"app.kubernetes.io/name": "engine-bundles", "app.kubernetes.io/component": "controller"}
SUBJECTS = [{"kind": "ServiceAccount", "name": "engine-bundles", "namespace": "engine-system"}]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = _manifests.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _rule(group: str, resource: str, verbs: str, names: tuple[str, ...] = ()) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": [resource]}
    if names:
        rule["resourceNames"] = list(names)
    rule["verbs"] = verbs.split()
    return rule


CRD_RULE = _rule("apiextensions.k8s.io", "customresourcedefinitions", "get",
                 ("bundles.bundles.engine.dev", "sources.bundles.engine.dev"))
BUNDLES_RULES = [
    _rule("", "configmaps", "create delete get list patch"),
    _rule("bundles.engine.dev", "bundles", "get list patch watch"),
    _rule("bundles.engine.dev", "bundles/status", "patch"),
    _rule("bundles.engine.dev", "sources", "get list watch"),
    _rule("bundles.engine.dev", "sources/status", "patch"),
    _rule("events.k8s.io", "events", "create get patch"),
]


def _binding(kind: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "engine-bundles"}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = LABELS
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": "engine-bundles"},
            "subjects": SUBJECTS}


def _role(kind: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "engine-bundles"}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = LABELS
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}


WEBHOOK_ARGS = ["--webhook-bind-address=0.0.0.0:9443", "--webhook-service=engine-system/engine-bundles-webhook",
                "--webhook-configuration=engine-bundles"]
CONFIGURATION_RULES = [
    _rule("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get update", ("engine-bundles",)),
    _rule("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get update", ("engine-bundles",)),
]
CERT_ROLE_RULES = [_rule("", "secrets", "get update", ("engine-bundles-webhook-cert",))]


def _webhook_entry(name: str, path: str, namespace: str | None) -> dict[str, Any]:
    return {
        "name": name, "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "engine-bundles-webhook", "namespace": "engine-system", "path": path,
                                     "port": 9443}},
        "rules": [{"apiGroups": ["bundles.engine.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                   "resources": ["bundles"], "scope": "Namespaced"}],
        "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 5, "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}} if namespace else {},
        "objectSelector": {},
    }


def _configurations(namespace: str | None) -> list[dict[str, Any]]:
    meta = {"name": "engine-bundles", "labels": LABELS}
    mutating = {**_webhook_entry("default.bundles.engine.dev", "/mutate/default.bundles.engine.dev", namespace),
                "reinvocationPolicy": "Never"}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
         "webhooks": [mutating]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": meta,
         "webhooks": [_webhook_entry("validate.bundles.engine.dev", "/validate/validate.bundles.engine.dev",
                                     namespace)]},
    ]


WEBHOOK_SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "engine-bundles-webhook", "namespace": "engine-system", "labels": LABELS},
    "spec": {"selector": LABELS, "ports": [{"name": "webhook", "port": 9443, "targetPort": "webhook",
                                            "protocol": "TCP"}]},
}
CERT_SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "engine-bundles-webhook-cert", "namespace": "engine-system", "labels": LABELS}}


def _deployment(args: list[str], *, replicas: int, grace: int, strategy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "engine-bundles", "namespace": "engine-system", "labels": LABELS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": LABELS},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "serviceAccountName": "engine-bundles",
                    "terminationGracePeriodSeconds": grace,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "engine",
                        "image": "registry.example/engine:1",
                        "args": args,
                        "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
                                  {"name": "probes", "containerPort": 8081, "protocol": "TCP"},
                                  {"name": "webhook", "containerPort": 9443, "protocol": "TCP"}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "probes"}, "periodSeconds": 10,
                                          "failureThreshold": 3},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "probes"}, "periodSeconds": 5,
                                           "failureThreshold": 3},
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                      "limits": {"cpu": "500m", "memory": "256Mi"}},
                        "securityContext": {
                            "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


COMMON = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "engine-system"}},
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "engine-bundles", "namespace": "engine-system", "labels": LABELS}},
]
SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "engine-bundles-metrics", "namespace": "engine-system", "labels": LABELS},
    "spec": {"selector": LABELS, "ports": [{"name": "metrics", "port": 8080, "targetPort": "metrics",
                                            "protocol": "TCP"}]},
}
PROBES = ["--metrics-bind-address=0.0.0.0:8080", "--health-probe-bind-address=0.0.0.0:8081", "--progress=never",
          "--log-format=json", *WEBHOOK_ARGS]


CERT_NOTE = (
    "note: the runner provisions the webhooks' serving certificate itself (a CA and certificate in Secret "
    "engine-system/engine-bundles-webhook-cert, the caBundle injected into its webhook configurations); "
    "--cert-manager has cert-manager issue it instead\n"
)
"""What ``manifests`` tells on stderr when the plugins declare webhooks (the install prints no certificate)."""


def test_one_replica_for_a_namespace_gets_a_role_there_and_no_leader_election(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "--plugin", "bundles", "--namespace", "demo", "--image", "registry.example/engine:1")
    assert (code, err) == (0, CERT_NOTE)
    docs = list(yaml.safe_load_all(out))
    assert docs[:2] == [dict(crd) for crd in sorted(load_plugin("bundles").crds, key=lambda c: c["metadata"]["name"])]
    assert docs[2:] == [
        *COMMON,
        _role("ClusterRole", [*CONFIGURATION_RULES, CRD_RULE]),
        _binding("ClusterRole"),
        _role("Role", BUNDLES_RULES, "demo"),
        _binding("Role", "demo"),
        _role("Role", CERT_ROLE_RULES, "engine-system"),
        _binding("Role", "engine-system"),
        SERVICE,
        WEBHOOK_SERVICE,
        CERT_SECRET,
        _deployment(["--plugin=bundles", "--namespace=demo", "--skip-crd-install", "--grace-period=15", *PROBES],
                    replicas=1, grace=30, strategy={"type": "Recreate"}),
        *_configurations("demo"),
    ]
    assert "&id" not in out and "*id" not in out


def test_replicas_elect_a_leader_with_a_lease_in_the_engine_namespace_and_get_a_disruption_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "--plugin", "bundles", "--image", "registry.example/engine:1", "--replicas", "2",
                          "--grace-period", "20.5")
    assert (code, err) == (0, CERT_NOTE)
    assert list(yaml.safe_load_all(out))[2:] == [
        *COMMON,
        _role("ClusterRole", [BUNDLES_RULES[0], *CONFIGURATION_RULES, CRD_RULE, *BUNDLES_RULES[1:]]),
        _binding("ClusterRole"),
        _role("Role", [*CERT_ROLE_RULES, _rule("coordination.k8s.io", "leases", "create get update watch")],
              "engine-system"),
        _binding("Role", "engine-system"),
        SERVICE,
        WEBHOOK_SERVICE,
        CERT_SECRET,
        _deployment(["--plugin=bundles", "--skip-crd-install", "--leader-elect", "--leader-election-id=engine-bundles",
                     "--leader-election-namespace=engine-system", "--grace-period=20.5", *PROBES],
                    replicas=2, grace=36,
                    strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "engine-bundles", "namespace": "engine-system", "labels": LABELS},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": LABELS}}},
        *_configurations(None),
    ]


def test_scale_out_replicas_divide_the_objects_through_a_ring_of_leases(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--plugin", "bundles", "--replicas", "3", "--scale-out")
    assert (code, err) == (0, CERT_NOTE)
    docs = list(yaml.safe_load_all(out))
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "engine-system"
    assert role["rules"] == [*CERT_ROLE_RULES,
                             _rule("coordination.k8s.io", "leases", "create delete get list update watch")]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scale-out" in args and "--leader-elect" not in args
    assert "--leader-election-id=engine-bundles" in args


def test_the_same_input_gives_the_same_bytes_and_plugins_are_named_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = _run(capsys, "--plugin", "mirror", "--plugin", "bundles", "--namespace", "demo")
    second = _run(capsys, "--plugin", "mirror", "--plugin", "bundles", "--namespace", "demo")
    assert first == second
    docs = list(yaml.safe_load_all(first[1]))
    assert [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs] == [
        ("CustomResourceDefinition", "bundles.bundles.engine.dev", None),
        ("CustomResourceDefinition", "sources.bundles.engine.dev", None),
        ("Namespace", "engine-system", None),
        ("ServiceAccount", "engine-bundles-mirror", "engine-system"),
        ("ClusterRole", "engine-bundles-mirror", None),
        ("ClusterRoleBinding", "engine-bundles-mirror", None),
        ("Role", "engine-bundles-mirror", "demo"),
        ("RoleBinding", "engine-bundles-mirror", "demo"),
        ("Role", "engine-bundles-mirror", "engine-system"),
        ("RoleBinding", "engine-bundles-mirror", "engine-system"),
        ("Service", "engine-bundles-mirror-metrics", "engine-system"),
        ("Service", "engine-bundles-mirror-webhook", "engine-system"),
        ("Secret", "engine-bundles-mirror-webhook-cert", "engine-system"),
        ("Deployment", "engine-bundles-mirror", "engine-system"),
        ("MutatingWebhookConfiguration", "engine-bundles-mirror", None),
        ("ValidatingWebhookConfiguration", "engine-bundles-mirror", None),
    ]
    assert docs[13]["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["--plugin=mirror", "--plugin=bundles"]


def test_output_dir_gets_one_file_per_kind_and_a_kustomization(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    code, printed, _ = _run(capsys, "--plugin", "bundles", "--replicas", "3")
    target = tmp_path / "deploy"
    code, out, err = _run(capsys, "--plugin", "bundles", "--replicas", "3", "-o", str(target))
    files = ["customresourcedefinition.yaml", "namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml",
             "clusterrolebinding.yaml", "role.yaml", "rolebinding.yaml", "service.yaml", "secret.yaml", "deployment.yaml",
             "poddisruptionbudget.yaml", "mutatingwebhookconfiguration.yaml", "validatingwebhookconfiguration.yaml"]
    assert (code, out, err) == (0, "".join(f"wrote {target / f}\n" for f in [*files, "kustomization.yaml"]), CERT_NOTE)
    assert sorted(p.name for p in target.iterdir()) == sorted([*files, "kustomization.yaml"])
    assert yaml.safe_load((target / "kustomization.yaml").read_text()) == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": files}
    written = [doc for f in files for doc in yaml.safe_load_all((target / f).read_text())]
    assert written == list(yaml.safe_load_all(printed))


def test_an_unknown_plugin_is_one_error_line_and_exit_code_1_as_run_says_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run(capsys, "--plugin", "nope") == (
        1, "", "error: plugin 'nope' not found (no module 'engine.plugins.nope', no entry point in 'engine.plugins')\n")


@pytest.mark.parametrize(("argv", "message"), [
    ([], "no plugin to install (give --plugin NAME, e.g. --plugin bundles)"),
    (["--plugin", "bundles", "--replicas", "0"], "--replicas must be >= 1, got 0"),
    (["--plugin", "bundles", "--grace-period", "-1"], "--grace-period must be a number of seconds >= 0, got -1"),
    (["--plugin", "bundles", "--namespace", "Team_A"],
     "--namespace must be a DNS label (lower case letters, digits and '-', at most 63), got 'Team_A'"),
    (["--plugin", "bundles", "--image", " "], "--image must not be empty"),
])
def test_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert _run(capsys, *argv) == (2, "", f"error: {message}\n")


def test_every_option_has_help_text_and_the_command_is_listed() -> None:
    parser = _manifests._parser()
    assert [a.option_strings for a in parser._actions if not (a.help or "").strip()] == []
    assert "``" not in parser.format_help()
    listing = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, timeout=60,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "manifests" in listing.stdout


async def _manifests_of(*argv: str) -> bytes:
    result = await trio.run_process(
        [sys.executable, "-m", "engine", "manifests", *argv], capture_stdout=True, capture_stderr=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return bytes(result.stdout)


async def _kubectl(kubeconfig: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    assert KUBECTL is not None
    with trio.fail_after(60):
        result = await trio.run_process(
            [KUBECTL, "--request-timeout=20s", *args], stdin=stdin, capture_stdout=True, capture_stderr=True,
            check=False, env={**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)},
        )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)")
async def test_kubectl_applies_the_manifests_to_the_embedded_server(tmp_path: Path) -> None:
    """Server-side dry runs of each shape (the replicated one with its PodDisruptionBudget),
    then a real apply."""
    namespaced = await _manifests_of("--plugin", "bundles", "--plugin", "mirror", "--namespace", "demo")
    cluster = await _manifests_of("--plugin", "bundles", "--plugin", "mirror")
    replicated = await _manifests_of("--plugin", "bundles", "--replicas", "2")
    assert b"kind: PodDisruptionBudget" in replicated
    kubeconfig = tmp_path / "kubeconfig"
    async with ApiServer(tls=True) as api:
        api.write_kubeconfig(kubeconfig)
        for ns in ("engine-system", "demo"):
            assert (await _kubectl(kubeconfig, "create", "namespace", ns))[0] == 0
        for manifests in (namespaced, cluster, replicated):
            code, out = await _kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=manifests)
            assert code == 0, out
            assert "(server dry run)" in out
        code, out = await _kubectl(kubeconfig, "apply", "-f", "-", stdin=namespaced)
        assert code == 0, out
        code, out = await _kubectl(kubeconfig, "get", "deployment,serviceaccount,service", "-n", "engine-system",
                                   "-o", "name")
        assert (code, sorted(out.split())) == (0, [
            "deployment.apps/engine-bundles-mirror", "service/engine-bundles-mirror-metrics",
            "service/engine-bundles-mirror-webhook", "serviceaccount/engine-bundles-mirror"])
        code, out = await _kubectl(kubeconfig, "get", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                                   "-o", "name")
        assert (code, sorted(out.split())) == (0, [
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/engine-bundles-mirror",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/engine-bundles-mirror"])
        code, out = await _kubectl(kubeconfig, "get", "role,rolebinding", "-n", "demo", "-o", "name")
        assert (code, sorted(out.split())) == (0, [
            "role.rbac.authorization.k8s.io/engine-bundles-mirror",
            "rolebinding.rbac.authorization.k8s.io/engine-bundles-mirror"])


def test_the_containerfile_runs_the_runner_as_the_user_the_deployment_expects() -> None:
    lines = (ROOT / "Containerfile").read_text().splitlines()
    assert f"USER {_manifests.RUN_AS}:{_manifests.RUN_AS}" in lines
    assert 'ENTRYPOINT ["python", "-m", "engine", "run"]' in lines
    assert f"EXPOSE {_manifests.METRICS_PORT} {_manifests.PROBE_PORT}" in lines


async def _no_setup(ctx: Any) -> None:
    pass


async def _convert(obj: Any, api_version: str, ctx: Any) -> Any:
    return {**obj, "apiVersion": api_version}


def test_a_conversion_webhook_gets_its_crd_stanza_and_cert_manager_its_issuer_and_certificate() -> None:
    from engine.kube import ConversionWebhook, Plugin

    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.test.dev"},
           "spec": {"group": "test.dev", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
                    "versions": [{"name": "v1", "served": True, "storage": True}]}}
    widgets = Plugin("widgets", _no_setup, crds=[crd], webhooks=[ConversionWebhook("widgets.test.dev", _convert)])
    objects = _manifests.manifests([widgets], [], namespace=None, install_namespace="ops", name="engine-widgets",
                                   image="i", replicas=1, grace_period=15, cert_manager=True)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("CustomResourceDefinition", "widgets.test.dev"), ("Namespace", "ops"), ("ServiceAccount", "engine-widgets"),
        ("ClusterRole", "engine-widgets"), ("ClusterRoleBinding", "engine-widgets"),
        ("Service", "engine-widgets-metrics"), ("Service", "engine-widgets-webhook"),
        ("Issuer", "engine-widgets-selfsigned"), ("Certificate", "engine-widgets-webhook"),
        ("Deployment", "engine-widgets")]
    assert objects[0]["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "ops/engine-widgets-webhook"}
    assert objects[0]["spec"]["conversion"] == {"strategy": "Webhook", "webhook": {
        "clientConfig": {"service": {"name": "engine-widgets-webhook", "namespace": "ops",
                                     "path": "/convert/widgets.test.dev", "port": 9443}},
        "conversionReviewVersions": ["v1"]}}
    assert "conversion" not in crd["spec"]
    assert objects[8]["spec"] == {
        "secretName": "engine-widgets-webhook-cert",
        "dnsNames": ["engine-widgets-webhook.ops.svc", "engine-widgets-webhook.ops.svc.cluster.local"],
        "issuerRef": {"kind": "Issuer", "name": "engine-widgets-selfsigned"}}
    volumes = objects[9]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-certs", "secret": {"secretName": "engine-widgets-webhook-cert"}} in volumes


def test_plugins_without_webhooks_get_no_webhook_objects(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--plugin", "mirror")
    assert code == 0
    assert "webhook" not in out


def test_stderr_says_who_makes_the_webhooks_certificate(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--plugin", "bundles", "--cert-manager")
    assert (code, err) == (0, "note: cert-manager issues the webhooks' serving certificate (Issuer and Certificate "
                              "engine-system/engine-bundles-webhook) and injects its CA: cert-manager must be installed\n")
    code, _, err = _run(capsys, "--plugin", "mirror")
    assert (code, err) == (0, ""), "no webhooks, no note"
