"""Java String.hashCode and the group -> __consumer_offsets partition mapping.

Expected values were worked out over UTF-16 code units and cross-checked with jshell
(``s.hashCode()`` and ``Utils.abs(h) % 50``) on Java 17.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcoord.protocol.javahash import java_string_hashcode, kafka_abs, partition_for


@pytest.mark.parametrize(
    ("group", "partition"),
    [
        ("test-group", 12),
        ("my-group", 12),
        ("group1", 40),
        ("", 0),
        ("polygenelubricants", 0),
    ],
)
def test_required_vectors(group: str, partition: int) -> None:
    assert partition_for(group) == partition


def test_min_value_hash_maps_to_partition_zero() -> None:
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert kafka_abs(-(2**31)) == 0
    assert partition_for("polygenelubricants", 7) == 0


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("ab", 97 * 31 + 98),
        ("test-group", 627841412),
        ("my-group", -1906497762),
        ("group1", -1237460590),
        # BMP, non-ASCII: one UTF-16 unit per character
        ("héllo", 103094734),
        ("grüppe-1", 243490808),
        ("日本語グループ", -305235731),
        # astral: U+1F600 is the surrogate pair D83D DE00 -> 31 * 0xD83D + 0xDE00
        ("😀", 31 * 0xD83D + 0xDE00),
        ("a😀b", 57849694),
        ("𝄞music", 1496085755),
        # a lone surrogate is a single code unit
        ("\ud800", 0xD800),
    ],
)
def test_hashcode(s: str, expected: int) -> None:
    assert java_string_hashcode(s) == expected


@pytest.mark.parametrize(
    ("s", "partition"),
    [
        ("héllo", 34),
        ("grüppe-1", 8),
        ("日本語グループ", 31),
        ("😀", 49),
        ("a😀b", 44),
        ("𝄞music", 5),
    ],
)
def test_non_ascii_partitions(s: str, partition: int) -> None:
    assert partition_for(s) == partition


def test_astral_character_counts_as_two_units() -> None:
    # Same hash as the explicit surrogate pair spelt out as two code units.
    assert java_string_hashcode("x😀") == ((ord("x") * 31 + 0xD83D) * 31 + 0xDE00)


def test_other_partition_counts() -> None:
    assert partition_for("my-group", 1) == 0
    assert partition_for("my-group", 3) == 1906497762 % 3
    with pytest.raises(ValueError):
        partition_for("g", 0)


def _reference(s: str) -> int:
    # The textbook definition: sum of unit[i] * 31^(n-1-i), reduced to a signed int32.
    data = s.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
    total = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@given(st.text())
def test_matches_definition(s: str) -> None:
    h = java_string_hashcode(s)
    assert -(2**31) <= h < 2**31
    assert h == _reference(s)
    assert 0 <= partition_for(s) < 50
