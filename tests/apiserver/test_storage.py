"""The object storage used directly (synchronously), as tests seeding a server would."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from engine.apiserver import ObjectStorage, RequestRejected, ResourceType
from engine.apiserver._selectors import parse_field_selector, parse_label_selector

ALL_LABELS = parse_label_selector(None)
ALL_FIELDS = parse_field_selector(None)


def _configmaps(storage: ObjectStorage) -> ResourceType:
    rt = storage.find_type("", "v1", "configmaps")
    assert rt is not None
    return rt


def _page_through(
    storage: ObjectStorage, namespace: str | None, limit: int, labels: str | None = None
) -> tuple[list[tuple[str, str]], list[int | None]]:
    rt = _configmaps(storage)
    seen: list[tuple[str, str]] = []
    remaining: list[int | None] = []
    token: str | None = None
    while True:
        items, _, token, left = storage.list_objects(
            rt, namespace, parse_label_selector(labels), ALL_FIELDS, limit=limit, continue_token=token
        )
        assert len(items) <= limit
        seen += [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]
        remaining.append(left)
        if token is None:
            return seen, remaining


@pytest.fixture
def filled() -> tuple[ObjectStorage, list[tuple[str, str]]]:
    storage = ObjectStorage(seed=3)
    rt = _configmaps(storage)
    namespaces = storage.find_type("", "v1", "namespaces")
    assert namespaces is not None
    for ns in ("alpha", "beta"):
        storage.create(namespaces, None, {"metadata": {"name": ns}})
    keys = [(ns, f"cm-{i:03d}") for ns in ("alpha", "beta", "default") for i in range(97)]
    rng = random.Random(7)
    for ns, name in rng.sample(keys, len(keys)):
        labels = {"parity": "even" if int(name[3:]) % 2 == 0 else "odd"}
        storage.create(rt, ns, {"metadata": {"name": name, "labels": labels}})
    return storage, sorted(keys)


def test_paging_returns_every_object_once_in_order(filled: tuple[ObjectStorage, list[tuple[str, str]]]) -> None:
    storage, keys = filled
    seen, remaining = _page_through(storage, None, 10)
    assert seen == keys
    assert remaining == [len(keys) - 10 * (n + 1) for n in range(len(remaining) - 1)] + [None]


def test_paging_within_one_namespace_stays_in_it(filled: tuple[ObjectStorage, list[tuple[str, str]]]) -> None:
    storage, keys = filled
    seen, _ = _page_through(storage, "beta", 8)
    assert seen == [k for k in keys if k[0] == "beta"]
    seen, _ = _page_through(storage, "nothing-here", 8)
    assert seen == []


def test_paging_with_a_selector_leaves_the_remaining_count_out(
    filled: tuple[ObjectStorage, list[tuple[str, str]]],
) -> None:
    storage, keys = filled
    seen, remaining = _page_through(storage, "alpha", 9, labels="parity=odd")
    odd = [k for k in keys if k[0] == "alpha" and int(k[1][3:]) % 2 == 1]
    assert seen == odd
    assert len(remaining) == 6 and set(remaining) == {None}


def test_pages_after_the_first_read_the_first_pages_snapshot(
    filled: tuple[ObjectStorage, list[tuple[str, str]]],
) -> None:
    storage, keys = filled
    rt = _configmaps(storage)
    items, _, token, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS, limit=50)
    assert [o["metadata"]["name"] for o in items] == [k[1] for k in keys if k[0] == "default"][:50]
    storage.delete(rt, "default", "cm-000")
    storage.delete(rt, "default", "cm-060")
    storage.create(rt, "default", {"metadata": {"name": "cm-000a"}})
    storage.create(rt, "default", {"metadata": {"name": "cm-060a"}})
    rest, _, token, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS, continue_token=token)
    names = [o["metadata"]["name"] for o in rest]
    assert token is None
    assert names[:2] == ["cm-050", "cm-051"] and "cm-060" in names and "cm-060a" not in names
    assert "cm-000a" not in names and names == sorted(names)
    assert [o["metadata"]["name"] for o in items] + names == [k[1] for k in keys if k[0] == "default"]


def test_exact_lists_read_an_older_state_and_expire_with_the_history() -> None:
    storage = ObjectStorage(seed=3, history_size=10)
    rt = _configmaps(storage)
    storage.create(rt, "default", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    before = storage.resource_version
    storage.update(rt, "default", "a", {"metadata": {"name": "a"}, "data": {"v": "2"}})
    storage.create(rt, "default", {"metadata": {"name": "b"}})
    storage.delete(rt, "default", "a")
    items, rv, _, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS, exact=before)
    assert rv == before and [(o["metadata"]["name"], o["data"]) for o in items] == [("a", {"v": "1"})]
    items, _, _, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS)
    assert [o["metadata"]["name"] for o in items] == ["b"]
    for i in range(12):
        storage.create(rt, "default", {"metadata": {"name": f"x{i}"}})
    with pytest.raises(RequestRejected, match=r"^too old resource version"):
        storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS, exact=before)


def test_lists_stay_sorted_under_random_creates_and_deletes() -> None:
    storage = ObjectStorage(seed=5)
    rt = _configmaps(storage)
    rng = random.Random(11)
    present: set[str] = set()
    for _ in range(400):
        name = f"x{rng.randrange(60)}"
        if name in present:
            storage.delete(rt, "default", name)
            present.discard(name)
        else:
            storage.create(rt, "default", {"metadata": {"name": name}})
            present.add(name)
    items, _, _, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS)
    assert [o["metadata"]["name"] for o in items] == sorted(present)


def test_a_zero_or_negative_limit_lists_everything(filled: tuple[ObjectStorage, list[tuple[str, str]]]) -> None:
    storage, keys = filled
    for limit in (0, -1):
        items, _, token, remaining = storage.list_objects(
            _configmaps(storage), None, ALL_LABELS, ALL_FIELDS, limit=limit
        )
        assert len(items) == len(keys) and token is None and remaining is None


def test_lookup_answers_none_where_get_answers_404() -> None:
    storage = ObjectStorage()
    rt = _configmaps(storage)
    assert storage.lookup(rt, "default", "missing") is None
    with pytest.raises(RequestRejected, match=r'^configmaps "missing" not found$'):
        storage.get(rt, "default", "missing")


def test_restore_puts_objects_and_the_resource_version_back() -> None:
    storage = ObjectStorage(seed=3)
    rt = _configmaps(storage)
    a = storage.create(rt, "default", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    b = storage.create(rt, "default", {"metadata": {"name": "b"}})
    snapshot = storage.snapshot()
    assert snapshot.resource_version == storage.resource_version == int(b["metadata"]["resourceVersion"])
    updated = storage.update(rt, "default", "a", {"metadata": {"name": "a"}, "data": {"v": "2"}})
    storage.delete(rt, "default", "b")
    c = storage.create(rt, "default", {"metadata": {"name": "c"}})
    assert storage.resource_version > snapshot.resource_version

    storage.restore(snapshot)
    assert storage.resource_version == snapshot.resource_version
    assert storage.lookup(rt, "default", "a") == a and storage.lookup(rt, "default", "b") == b
    assert storage.lookup(rt, "default", "c") is None
    items, rv, _, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS)
    assert rv == snapshot.resource_version and [o["metadata"]["name"] for o in items] == ["a", "b"]
    again = storage.create(rt, "default", {"metadata": {"name": "c"}})
    assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"], "numbers seen before"
    assert again["metadata"]["uid"] != c["metadata"]["uid"]
    storage.restore(snapshot)
    assert storage.lookup(rt, "default", "c") is None, "a snapshot can be restored more than once"


def test_restore_forgets_the_types_of_definitions_created_since() -> None:
    storage = ObjectStorage(seed=3)
    crds = storage.find_type("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert crds is not None
    snapshot = storage.snapshot()
    storage.create(crds, None, {"metadata": {"name": "widgets.example.com"}, "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    }})
    assert storage.find_type("example.com", "v1", "widgets") is not None
    storage.restore(snapshot)
    assert storage.find_type("example.com", "v1", "widgets") is None
    assert storage.crd_types("widgets.example.com") == []


async def test_restore_ends_every_watch_abruptly_and_empties_the_history() -> None:
    storage = ObjectStorage(seed=3)
    rt = _configmaps(storage)
    storage.create(rt, "default", {"metadata": {"name": "a"}})
    snapshot = storage.snapshot()
    storage.create(rt, "default", {"metadata": {"name": "b"}})
    _, sub = storage.subscribe(rt, None, None)
    restored: list[int] = []
    storage.add_restore_listener(lambda: restored.append(storage.resource_version))

    storage.restore(snapshot)
    assert (sub.dropped, sub.abrupt, sub.closed.is_set()) == (True, True, True)
    assert storage.subscriptions() == [] and restored == [snapshot.resource_version]
    assert storage.history_floor == snapshot.resource_version
    with pytest.raises(RequestRejected, match=rf"^too old resource version: {snapshot.resource_version - 1} "):
        storage.subscribe(rt, None, snapshot.resource_version - 1)
    replay, _ = storage.subscribe(rt, None, snapshot.resource_version)
    assert replay == []
    storage.create(rt, "default", {"metadata": {"name": "c"}})
    replay, _ = storage.subscribe(rt, None, snapshot.resource_version)
    assert [(c.type, c.obj["metadata"]["name"]) for c in replay] == [("ADDED", "c")]


def test_a_continue_token_from_before_a_restore_is_refused() -> None:
    storage = ObjectStorage(seed=3)
    rt = _configmaps(storage)
    snapshot = storage.snapshot()
    for name in ("a", "b", "c"):
        storage.create(rt, "default", {"metadata": {"name": name}})
    _, _, token, _ = storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS, limit=1)
    storage.restore(snapshot)
    with pytest.raises(RequestRejected, match=r"^etcdserver: mvcc: required revision is a future revision$"):
        storage.list_objects(rt, "default", ALL_LABELS, ALL_FIELDS, continue_token=token)


def test_a_write_fenced_before_a_restore_is_refused_and_stores_nothing() -> None:
    storage = ObjectStorage(seed=3)
    rt = _configmaps(storage)
    snapshot = storage.snapshot()
    with storage.fence_writes():
        storage.create(rt, "default", {"metadata": {"name": "before"}})
        storage.restore(snapshot)
        with pytest.raises(
            RequestRejected,
            match=r"^the API server restarted on restored storage while answering; the request was not carried out$",
        ):
            storage.create(rt, "default", {"metadata": {"name": "after"}})
    assert storage.resource_version == snapshot.resource_version
    assert storage.lookup(rt, "default", "before") is None and storage.lookup(rt, "default", "after") is None
    with storage.fence_writes():
        storage.create(rt, "default", {"metadata": {"name": "fenced-after-the-restore"}})
    storage.create(rt, "default", {"metadata": {"name": "unfenced"}})


def test_only_the_storage_that_took_a_snapshot_restores_it() -> None:
    with pytest.raises(ValueError, match=r"^a snapshot can be restored only into the storage that took it$"):
        ObjectStorage().restore(ObjectStorage().snapshot())


def test_the_watch_window_keeps_nothing_the_history_has_dropped() -> None:
    storage = ObjectStorage(seed=3, history_size=50)
    rt = _configmaps(storage)
    storage.create(rt, "default", {"metadata": {"name": "a"}, "data": {"v": "0"}})
    for i in range(1, 400):
        storage.update(rt, "default", "a", {"metadata": {"name": "a"}, "data": {"v": str(i)}})
    window = storage._windows[rt.storage_key]
    assert len(window) <= 50
    assert storage.watch_floor(rt.storage_key) >= storage.resource_version - 50


async def test_a_restore_wakes_a_read_waiting_for_a_resource_version_it_reaches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    storage = ObjectStorage(seed=3)
    rt = _configmaps(storage)
    storage.create(rt, "default", {"metadata": {"name": "a"}})
    behind = storage.snapshot()
    storage.create(rt, "default", {"metadata": {"name": "b"}})
    ahead = storage.snapshot()
    storage.restore(behind)
    woken_at: list[float] = []

    async def read() -> None:
        await storage.wait_for_resource_version(str(ahead.resource_version))
        woken_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        storage.restore(ahead)
    assert woken_at == [0.0]
