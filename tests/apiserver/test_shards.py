"""``shardSelector`` (KEP-5866) in the embedded server: the parser against every case the real
1.36 server's digest tables (``conformance/data/real-kube-apiserver-1.36-sharded.md``, which
also holds cases the JSON transcript leaves out), the gate, GET, OpenAPI and the CLI flag."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from engine._keyspace import fnv1a64
from engine.apiserver import ApiServer
from engine.apiserver._shards import ShardSelectorError, parse_shard_selector
from engine.cli._apiserver import _parser, main, server_from_args

DIGEST = Path(__file__).parent / "conformance" / "data" / "real-kube-apiserver-1.36-sharded.md"
CM = "/api/v1/namespaces/default/configmaps"
LOWER = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"


def _error_rows() -> list[tuple[str, str, int, str]]:
    """``(case, selector, status, message)`` of the digest's table of errors."""
    rows = []
    for line in DIGEST.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 4 or not cells[2].isdigit():
            continue
        case, selector, status, message = cells
        selector = selector[1:-1] if selector.startswith("`") and selector.endswith("`") else selector
        rows.append((case, selector.replace("\\|", "|"), int(status), message.replace("\\|", "|")))
    return rows


ERRORS = [r for r in _error_rows() if r[2] == 500]


def test_the_digest_has_the_error_table() -> None:
    assert len(ERRORS) >= 28


@pytest.mark.parametrize(("case", "selector", "status", "message"), ERRORS, ids=[r[0] for r in ERRORS])
def test_parser_refuses_as_the_real_server(case: str, selector: str, status: int, message: str) -> None:
    with pytest.raises(ShardSelectorError) as caught:
        parse_shard_selector(selector)
    assert str(caught.value) == message
    assert caught.value.code == 500 and "reason" not in caught.value.status and "details" not in caught.value.status


@pytest.mark.parametrize(
    ("selector", "canonical"),
    [
        (
            "  shardRange(  object.metadata.uid ,\"0x0000000000000000\",   \"0x8000000000000000\" )  ",
            LOWER,
        ),
        (
            "(shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')) || "
            "(shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000'))",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || "
            "shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')",
        ),
        (
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000') || "
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x9000000000000000')",
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000') || "
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x9000000000000000')",
        ),
    ],
)
def test_canonical_echo_keeps_request_order_and_drops_parentheses(selector: str, canonical: str) -> None:
    assert parse_shard_selector(selector).canonical == canonical


def test_matching_hashes_the_uid_or_the_namespace() -> None:
    lower = parse_shard_selector(LOWER)
    # Values recorded from the real server (cm-02 in the lower half, cm-00 in the upper).
    assert fnv1a64("10da58af-8c82-4967-bccd-bb1919cfea29") == 0x7FFEF76F5B3C065E
    assert lower.matches({"metadata": {"uid": "10da58af-8c82-4967-bccd-bb1919cfea29"}})
    assert not lower.matches({"metadata": {"uid": "bbfdefd7-55a7-4f4a-927d-bfe3a8463b65"}})
    by_namespace = parse_shard_selector(LOWER.replace("uid", "namespace"))
    assert fnv1a64("kube-system") == 0xDF65C7BC1D82B35E
    assert not by_namespace.matches({"metadata": {"namespace": "kube-system"}})
    # A cluster-scoped object's namespace is "", whose hash is the offset basis (upper half).
    assert not by_namespace.matches({"metadata": {"name": "n"}})
    assert parse_shard_selector(LOWER.replace("'0x0000000000000000', '0x8000000000000000'", "'0x8000000000000000', '0x10000000000000000'").replace("uid", "namespace")).matches({"metadata": {}})


@pytest.fixture
async def on() -> AsyncIterator[httpx.AsyncClient]:
    async with ApiServer(listen=False, feature_gates={"ShardedListAndWatch": True}) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
            yield client


@pytest.fixture
async def off() -> AsyncIterator[httpx.AsyncClient]:
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url) as client:
            yield client


async def test_get_of_one_object_ignores_the_selector(on: httpx.AsyncClient) -> None:
    await on.post(CM, json={"metadata": {"name": "c"}})
    r = await on.get(f"{CM}/c", params={"shardSelector": "bogus("})
    assert r.status_code == 200 and r.json()["metadata"]["name"] == "c"
    r = await on.get(CM, params={"shardSelector": "bogus("})
    assert r.status_code == 500 and r.json()["message"].startswith("invalid shard selector: ")


async def test_empty_selector_is_absent_and_whitespace_is_an_error(on: httpx.AsyncClient) -> None:
    await on.post(CM, json={"metadata": {"name": "c"}})
    r = await on.get(CM, params={"shardSelector": ""})
    assert r.status_code == 200 and "shardInfo" not in r.json()["metadata"] and len(r.json()["items"]) == 1
    r = await on.get(CM, params={"shardSelector": "   "})
    assert r.status_code == 500


async def test_gate_off_ignores_the_parameter_even_malformed(off: httpx.AsyncClient) -> None:
    for i in range(4):
        await off.post(CM, json={"metadata": {"name": f"c{i}"}})
    for selector in (LOWER, "bogus(", "   "):
        r = await off.get(CM, params={"shardSelector": selector})
        assert r.status_code == 200 and len(r.json()["items"]) == 4 and "shardInfo" not in r.json()["metadata"]
    r = await off.request("DELETE", CM, params={"shardSelector": "bogus(", "labelSelector": "none=1"})
    assert r.status_code == 200


async def test_openapi_documents_the_parameter_only_with_the_gate(on: httpx.AsyncClient, off: httpx.AsyncClient) -> None:
    def shard_params(doc: dict[str, object]) -> list[str]:
        operation = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["get"]  # type: ignore[index]
        return [p["name"] for p in operation["parameters"] if p["name"].startswith("shard")]

    doc = (await on.get("/openapi/v3/api/v1")).json()
    assert shard_params(doc) == ["shardSelector"]
    schemas = doc["components"]["schemas"]
    assert "shardInfo" in schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"]["properties"]
    assert schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ShardInfo"]["required"] == ["selector"]
    assert shard_params((await off.get("/openapi/v3/api/v1")).json()) == []


def test_feature_gates_are_checked() -> None:
    assert ApiServer(listen=False).feature_gates == {"ShardedListAndWatch": False}
    with pytest.raises(ValueError, match="unrecognized feature gate: Nope"):
        ApiServer(listen=False, feature_gates={"Nope": True})


def test_cli_feature_gates_flag(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["--feature-gates", "ShardedListAndWatch=true"])
    assert server_from_args(args).feature_gates == {"ShardedListAndWatch": True}
    assert server_from_args(_parser().parse_args([])).feature_gates == {"ShardedListAndWatch": False}
    assert main(["--feature-gates", "Sharded=true"]) == 2
    assert "unrecognized feature gate: Sharded" in capsys.readouterr().err
    assert main(["--feature-gates", "ShardedListAndWatch=yes"]) == 2


def test_a_selector_of_thousands_of_ranges_parses_and_deep_nesting_is_a_parse_error() -> None:
    from engine._keyspace import KeyRange, KeyRanges
    from engine.apiserver._shards import ShardSelectorError, parse_shard_selector

    ranges = KeyRanges([KeyRange(i * 2**50, i * 2**50 + 2**49) for i in range(2000)])
    assert parse_shard_selector(ranges.selector()).canonical == ranges.selector()
    nested = "(" * 600 + ranges.ranges[0].shard_range() + ")" * 600
    with pytest.raises(ShardSelectorError, match=r"^invalid shard selector: CEL parse error: Syntax error: "
                       r"expression recursion limit exceeded: 250$"):
        parse_shard_selector(nested)
