"""The ``engine`` pytest plugin: fixtures, virtual time, real-server selection and skip reasons,
run in a subprocess pytest (pytester) as a plugin author's suite would run them."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from engine.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]

SUITE = '''
import time
import pytest
import trio
from engine.kube import Client
from engine.apiserver import ApiServer
from engine.testing import KubeTarget

async def test_embedded_under_virtual_time(kube_target: KubeTarget, kube_client: Client) -> None:
    wall = time.monotonic()
    assert kube_target.kind == "embedded" and kube_target.namespace == "test"
    await trio.sleep(3600)
    assert trio.current_time() >= 3600 and time.monotonic() - wall < 5
    cms = await kube_client.resource("v1", "ConfigMap")
    await kube_client.create(cms, {"metadata": {"name": "c"}}, namespace=kube_target.namespace)

async def test_faults(kube_api: ApiServer) -> None:
    assert kube_api.faults is not None

async def test_own_clock(kube_target: KubeTarget, autojump_clock) -> None:
    await trio.sleep(10)
    assert trio.current_time() == autojump_clock.current_time()

@pytest.mark.kube_real
async def test_real(kube_target: KubeTarget, kube_client: Client) -> None:
    assert kube_target.kind == "cluster" and kube_target.namespace.startswith("engine-test-")
    ns = await kube_client.resource("v1", "Namespace")
    assert (await kube_client.get(ns, kube_target.namespace))["metadata"]["name"] == kube_target.namespace
    print("REAL-NAMESPACE", kube_target.namespace)
'''

CONFTEST = '''
from importlib.metadata import distributions
import pytest, trio.testing

PLUGIN = "engine.testing._pytest_plugin"
# installed, the package loads the plugin through its pytest11 entry point; a source checkout names it
pytest_plugins = [] if any(
    ep.group == "pytest11" and ep.value == PLUGIN for dist in distributions() for ep in dist.entry_points
) else [PLUGIN]

@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in ("KUBEBUILDER_ASSETS", "USE_EXISTING_CLUSTER", "TEST_ASSET_ETCD", "TEST_ASSET_KUBE_APISERVER"):
        monkeypatch.delenv(name, raising=False)
    return pytester


def test_embedded_by_default_and_real_server_tests_skip_with_the_reason(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines([
        "SKIPPED [[]1] test_suite.py:* needs a real API server: set KUBEBUILDER_ASSETS to a folder holding the etcd and "
        "kube-apiserver binaries (envtest), or USE_EXISTING_CLUSTER=true to use the kubeconfig's cluster",
    ])


def test_kube_target_real_skips_what_needs_the_embedded_server(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-rs", "-p", "no:cacheprovider", "--kube-target=real")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines_random([
        "SKIPPED [[]1] test_suite.py:* needs the embedded API server (fault injection and the server's own state), "
        "not available against a real kube-apiserver",
        "SKIPPED [[]1] test_suite.py:* needs the embedded API server (virtual time (MockClock)), not available against "
        "a real kube-apiserver",
        "SKIPPED [[]1] test_suite.py: needs a real API server: *",
        "SKIPPED [[]1] test_suite.py:*: needs a real API server: *",
    ])


def test_under_kube_target_real_the_marker_kube_real_selects_what_runs_on_the_real_server(
    suite: pytest.Pytester,
) -> None:
    """``--kube-target=real -m kube_real``: the tests that use the fixtures and need nothing only
    the embedded server has, and those marked; not what needs virtual time or fault injection."""
    result = suite.runpytest("-p", "no:cacheprovider", "--kube-target=real", "-m", "kube_real", "--collect-only", "-q")
    selected = sorted(line.split("::")[1] for line in result.outlines if line.startswith("test_suite.py::"))
    assert selected == ["test_embedded_under_virtual_time", "test_real"]
    result.stdout.fnmatch_lines(["2/4 tests collected (2 deselected)*"])
    default = suite.runpytest("-p", "no:cacheprovider", "-m", "kube_real", "--collect-only", "-q")
    default.stdout.fnmatch_lines(["1/4 tests collected (3 deselected)*"])


def test_an_existing_cluster_from_the_kubeconfig_gives_each_test_its_own_namespace(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with ApiServer().run_in_thread() as api:
        api.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv("USE_EXISTING_CLUSTER", "true")
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        result = suite.runpytest("-rs", "-s", "-p", "no:cacheprovider", "-k", "real")
        result.assert_outcomes(passed=1, deselected=3)
        [line] = [line for line in result.outlines if "REAL-NAMESPACE" in line]
        namespace = line.split()[-1]
        assert namespace.startswith("engine-test-")
        gone = httpx.get(f"{api.url}/api/v1/namespaces/{namespace}", headers={"Authorization": f"Bearer {api.admin_token}"})
        assert gone.status_code == 404, "the test's namespace is deleted after it"


def test_the_plugin_is_not_registered_twice_once_the_entry_point_is_installed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    dist = site / "fake_engine-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-engine\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nengine = engine.testing._pytest_plugin\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_one="async def test_one(kube_target):\n    assert kube_target.kind == 'embedded'\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "trio")
    result.assert_outcomes(passed=1)


REAL_SUITE = '''
import pytest
import trio
from engine.testing import KubeTarget

@pytest.mark.timeout(4)
async def test_overruns(kube_target: KubeTarget) -> None:
    print("OVERRUN-NAMESPACE", kube_target.namespace)
    await trio.sleep_forever()

async def test_next(kube_target: KubeTarget) -> None:
    assert kube_target.kind == "cluster"

@pytest.mark.kube_embedded(reason="thirty minutes of requeues in virtual time")
async def test_marked(kube_target: KubeTarget) -> None:
    pass
'''


def test_a_real_server_test_that_overruns_ends_before_pytest_timeout_and_the_next_one_runs(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A trio deadline (4 s - 1 s) ends the overrunning test, tears its fixtures down (its
    namespace is deleted) and leaves trio ready for the next test; a ``kube_embedded`` reason
    is the skip's."""
    suite.makepyfile(test_real_suite=REAL_SUITE)
    with ApiServer().run_in_thread() as api:
        api.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv("USE_EXISTING_CLUSTER", "true")
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        result = suite.runpytest_subprocess("-rfs", "-s", "-p", "no:cacheprovider", "--kube-target=real",
                                            "test_real_suite.py")
        result.assert_outcomes(failed=1, passed=1, skipped=1)
        result.stdout.fnmatch_lines_random([
            "FAILED test_real_suite.py::test_overruns - Failed: did not finish within 3s*",
            "did not finish within 3s against a real API server (ended before pytest-timeout interrupts trio)",
            "SKIPPED [[]1] test_real_suite.py:* needs the embedded API server (thirty minutes of requeues in virtual "
            "time), not available against a real kube-apiserver",
        ])
        [line] = [line for line in result.outlines if "OVERRUN-NAMESPACE" in line]
        gone = httpx.get(f"{api.url}/api/v1/namespaces/{line.split()[-1]}", headers={"Authorization": f"Bearer {api.admin_token}"})
        assert gone.status_code == 404 or gone.json()["metadata"].get("deletionTimestamp"), (
            "the overrunning test's namespace was deleted (or is being deleted by the namespace controller)"
        )
