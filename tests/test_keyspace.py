import pytest

from engine._keyspace import KEY_SPACE, KeyRange, KeyRanges, fnv1a64

# uids and hashes recorded from a real kube-apiserver 1.36.2 (../shared/conformance/real-kube-apiserver-1.36-sharded.md)
RECORDED = {
    "bbfdefd7-55a7-4f4a-927d-bfe3a8463b65": 0xAA41933608978189,
    "10da58af-8c82-4967-bccd-bb1919cfea29": 0x7FFEF76F5B3C065E,
    "1b0cf3a2-b08e-4cc5-825e-aa186613dc57": 0x7301DF6E7D6598EB,
}


@pytest.mark.parametrize(("uid", "key"), RECORDED.items())
def test_fnv1a64_matches_the_server(uid: str, key: int) -> None:
    assert fnv1a64(uid) == key


def test_the_empty_string_hashes_to_the_offset_basis() -> None:
    assert fnv1a64("") == 0xCBF29CE484222325


def test_halves_partition_the_key_space() -> None:
    lower = KeyRanges([KeyRange(0, KEY_SPACE // 2)])
    upper = KeyRanges.everything() - lower
    for uid in RECORDED:
        assert lower.contains_uid(uid) != upper.contains_uid(uid)
    assert (lower | upper) == KeyRanges.everything()
    assert (lower & upper) == KeyRanges.nothing()
    assert lower.share == 0.5


def test_selector_is_the_canonical_rendering() -> None:
    ranges = KeyRanges([KeyRange(3 * KEY_SPACE // 4, KEY_SPACE), KeyRange(0, KEY_SPACE // 4)])
    assert ranges.selector() == (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')"
        " || shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
    )


def test_adjacent_ranges_merge() -> None:
    assert KeyRanges([KeyRange(0, 5), KeyRange(5, 9)]).ranges == (KeyRange(0, 9),)


def test_empty_ranges_have_no_selector() -> None:
    with pytest.raises(ValueError, match=r"^empty key ranges have no shardSelector"):
        KeyRanges.nothing().selector()


@pytest.mark.parametrize(("start", "end"), [(5, 5), (6, 5), (-1, 3), (0, KEY_SPACE + 1)])
def test_invalid_ranges_are_refused(start: int, end: int) -> None:
    with pytest.raises(ValueError, match=r"^a key range needs 0 <= start < end <= 2\*\*64"):
        KeyRange(start, end)
