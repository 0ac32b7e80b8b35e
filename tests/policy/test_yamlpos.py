"""The position-keeping YAML loader reads what safe_load reads and knows where it was."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from costguard.yamlpos import (
    Position,
    YamlLoadError,
    load_yaml_with_positions,
    model_at,
    validation_errors_to_source_errors,
)


def test_positions_of_values_and_keys_are_one_based() -> None:
    text = "a:\n  - {b: 1, c: [x, y]}\n  - z\nd: |\n  text\n"
    data, pos = load_yaml_with_positions(text, "f.yml")
    assert data == {"a": [{"b": 1, "c": ["x", "y"]}, "z"], "d": "text\n"}
    assert pos.value(()) == Position(1, 1)
    assert pos.key(("a",)) == Position(1, 1)
    assert pos.value(("a",)) == Position(2, 3)
    assert pos.value(("a", 0)) == Position(2, 5)
    assert pos.key(("a", 0, "b")) == Position(2, 6)
    assert pos.value(("a", 0, "b")) == Position(2, 9)
    assert pos.value(("a", 0, "c", 1)) == Position(2, 19)
    assert pos.value(("a", 1)) == Position(3, 5)
    assert pos.key(("d",)) == Position(4, 1)
    assert pos.value(("d",)) == Position(4, 4)
    assert pos.nearest(("a", 0, "c", 1, "deeper", 3)) == (("a", 0, "c", 1), Position(2, 19))


def test_yaml_11_scalars_read_as_safe_load_reads_them() -> None:
    text = (
        "yes: on\nno: off\noctal: 017\nhex: 0x1F\nsexagesimal: 1:30\nfloat: 1e3\n"
        "null: ~\nstamp: 2024-05-01 10:00:00\nday: 2024-05-01\naccount: 012345678901\n"
        "quoted: 'yes'\n"
    )
    data, _ = load_yaml_with_positions(text, "f.yml")
    assert data == yaml.safe_load(text)
    assert data[True] is True and data["octal"] == 15 and data["sexagesimal"] == 90
    assert data["day"] == dt.date(2024, 5, 1)
    assert data["account"] == "012345678901"


def test_merge_keys_fill_only_what_the_mapping_does_not_set() -> None:
    text = "base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 3\n"
    data, pos = load_yaml_with_positions(text, "f.yml")
    assert data == yaml.safe_load(text) == {"base": {"x": 1, "y": 2}, "child": {"x": 1, "y": 3}}
    assert pos.value(("child", "y")) == Position(4, 6)


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("a: 1\nb: 2\na: 3\n", (3, 1), "duplicate key 'a' (first defined on line 1)"),
        ("a: &x [*x]\n", (1, 4), "alias refers to the value containing it"),
        ("a: !python/object {}\n", (1, 4), "unsupported YAML tag"),
        ("a: !!binary 'a'\n", (1, 4), "failed to decode base64"),
        ("d: 2024-13-45\n", (1, 4), "invalid value '2024-13-45'"),
        ("? [a, b]\n: 1\n", (1, 3), "mapping keys must be plain values"),
        ("a: 1\n---\nb: 2\n", (2, 1), "expected a single document"),
        ("a: 'unterminated\n", (2, 1), "found unexpected end of stream"),
        ("a: \x07\n", (1, 4), "character '\\x07' is not allowed in YAML"),
        # YAML's escapes make NUL and lone surrogates, which no store, cloud API or UTF-8
        # writer takes: in a notice's message or a tag they failed the cycle (a traceback)
        # after `validate` had passed the file
        ('a: "idle\\0gpu"\n', (1, 4), "NUL character"),
        ('"k\\x00": 1\n', (1, 1), "NUL character"),
        ('a: [ok, "x\\ud800y"]\n', (1, 9), 'unpaired surrogate ("\\ud800")'),
        ('a: "\\ude00\\ud83d"\n', (1, 4), 'unpaired surrogate ("\\ude00")'),
        ('a: "\\ud83d\\ude00 x \\ud800"\n', (1, 4), 'unpaired surrogate ("\\ud800")'),
        ('tag:\n  set: {k: "v\\uDBFF"}\n', (2, 12), 'unpaired surrogate ("\\udbff")'),
    ],
)
def test_malformed_yaml_is_one_located_error(
    text: str, where: tuple[int, int], fragment: str
) -> None:
    with pytest.raises(YamlLoadError) as caught:
        load_yaml_with_positions(text, "f.yml")
    error = caught.value.error
    assert (error.file, error.line, error.column) == ("f.yml", *where)
    assert fragment in error.message


def test_a_pair_of_surrogate_escapes_is_the_character_it_stands_for() -> None:
    data, _ = load_yaml_with_positions('a: "\\ud83d\\ude00 \\u00e9 \\x01"\n', "f.yml")
    assert data == {"a": "\U0001f600 \u00e9 \x01"}


def test_exponential_aliases_are_refused_instead_of_expanded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(YamlLoadError) as caught:
        load_yaml_with_positions("\n".join(lines) + "\n", "bomb.yml")
    assert "aliases expand to more than 50000 values" in caught.value.error.message


def test_a_large_file_without_aliases_is_no_alias_bomb() -> None:
    # 3,000 ordinary policies (150,000 values, 560 KB) were refused as "more than 50000
    # values (check for aliases...)": only what aliases repeat is bounded now
    policy = ("  - name: p{i}\n    mode: dry-run\n    filters: {{gpu: true, state: running}}\n"
              "    condition:\n      idle: {{below: 5, for: 45m}}\n"
              "    actions:\n      - notify: {{to: owner}}\n      - stop: {{grace: 15m}}\n")
    text = "policies:\n" + "".join(policy.format(i=i) for i in range(3000))
    value, positions = load_yaml_with_positions(text, "many.yml")
    assert len(value["policies"]) == 3000
    assert positions.value(("policies", 2999, "name")) is not None
    assert positions.value(("policies", 2999, "name")).line == 2 + 2999 * 8  # type: ignore[union-attr]


def test_the_fast_parser_s_errors_are_the_python_parser_s() -> None:
    for text, where in [("a: [1, 2\n", None), ("a: 1\na: 2\n", (2, 1)),
                        ("a:\n\t- x\n", None), ("x: \x07\n", (1, 4))]:
        with pytest.raises(YamlLoadError) as caught:
            load_yaml_with_positions(text, "f.yml")
        if where is not None:
            assert (caught.value.error.line, caught.value.error.column) == where, text


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(YamlLoadError) as caught:
        load_yaml_with_positions("a: " + "[" * 150 + "]" * 150 + "\n", "deep.yml")
    assert caught.value.error.message == "nested deeper than 100 levels"


class _Leaf(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int
    colour: str = "red"


class _Root(BaseModel):
    model_config = ConfigDict(extra="forbid")
    leaves: dict[str, list[_Leaf]]


def test_validation_errors_map_to_positions_in_a_generic_model() -> None:
    text = "leaves:\n  oak:\n    - {size: big}\n    - {size: 2, color: green}\n  7: []\n"
    data, pos = load_yaml_with_positions(text, "tree.yml")
    with pytest.raises(ValidationError) as caught:
        _Root.model_validate(data)
    errors = validation_errors_to_source_errors(caught.value, pos, "tree.yml", _Root)
    assert [(e.line, e.column) for e in errors] == [(3, 14), (4, 17), (5, 3)]
    size, colour, key = (e.message for e in errors)
    assert size.startswith("leaves.oak[0].size: Input should be a valid integer")
    assert colour == (
        "leaves.oak[1]: unknown key 'color' (valid keys: size, colour); did you mean 'colour'?"
    )
    assert key.startswith("leaves.7: invalid key: Input should be a valid string")
    assert "quote it if you meant text: '7'" in key
    assert model_at(_Root, ("leaves", "oak", 0)) is _Leaf


# any text but NUL and lone surrogates, which the loader refuses
# (test_malformed_yaml_is_one_located_error)
_chars = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_chars, max_size=12),
)
_documents = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(_chars, min_size=1, max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(_documents, st.booleans())
def test_any_dumped_document_loads_like_safe_load(doc: Any, flow: bool) -> None:
    text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True)
    data, pos = load_yaml_with_positions(text, "gen.yml")
    assert data == yaml.safe_load(text)
    lines = text.splitlines()
    for p in pos.values.values():
        assert 1 <= p.line <= max(len(lines), 1)
