"""Whatever text a user feeds it, the loader answers with a PolicySet or a PolicyError."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costguard.errors import PolicyError
from costguard.policy.load import parse_policy_text, validate_paths
from costguard.policy.schema import ELEMENTS, Policy

_TOKENS = [
    "policies",
    "name",
    "mode",
    "filters",
    "condition",
    "idle",
    "below",
    "for",
    "actions",
    "notify",
    "stop",
    "tag",
    "set",
    "remove",
    "to",
    "grace",
    "limits",
    "attribution",
    "dimensions",
    "derive",
    "from",
    "map",
    "budgets",
    "anomalies",
    "dimension",
    "keys",
    "state",
    "tags",
    "absent",
    "age",
    "cost_over",
    "usd_per_hour",
    "missing_tags",
    "enforce",
    "dry-run",
    "owner",
    "team",
    "running",
    "45m",
    "1h30m",
    "5",
    "-1",
    "0.8",
    "1e9",
    "yes",
    "no",
    "~",
    "null",
    "2024-13-45",
    "0x1F",
    "017",
    "1:30",
    "{now}",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    ": ",
    "- ",
    "? ",
    "&a ",
    "*a",
    "<<: ",
    "!!binary ",
    "!!str ",
    "!x ",
    "|",
    ">",
    "'",
    '"',
    "#",
    "\t",
    "\n",
    "\n  ",
    "\n    ",
    "\n      ",
    "---",
    "...",
    "%YAML 1.1",
    "\\",
    "\x00",
    "\ufeff",
    "é",
    "🙂",
    " ",
]
_yamlish = st.lists(st.sampled_from(_TOKENS) | st.text(max_size=3), max_size=60).map("".join)


def _assert_only_policy_errors(text: str) -> None:
    try:
        parse_policy_text(text, "fuzz.yml")
    except PolicyError as exc:
        assert exc.errors, "a PolicyError must carry at least one error"
        last_line = text.count("\n") + 2
        for error in exc.errors:
            assert error.file == "fuzz.yml"
            assert 1 <= error.line <= last_line and error.column >= 1
            assert error.message.strip()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_yamlish)
def test_random_yamlish_text_yields_a_policy_set_or_a_policy_error(text: str) -> None:
    _assert_only_policy_errors(text)


_VALID = [e.example for e in ELEMENTS]


@st.composite
def _mutated_examples(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(_VALID))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 6))
        text = text[:at] + draw(st.sampled_from(_TOKENS) | st.text(max_size=2)) + text[at + cut :]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated_examples())
def test_mutated_valid_policies_yield_a_policy_set_or_a_policy_error(text: str) -> None:
    _assert_only_policy_errors(text)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_on_disk_are_reported_not_raised(
    tmp_path_factory: object, raw: bytes
) -> None:
    assert hasattr(tmp_path_factory, "mktemp")
    path: Path = tmp_path_factory.mktemp("fuzz") / "bytes.yml"
    path.write_bytes(raw)
    for error in validate_paths([path]):
        assert error.file == str(path) and error.line >= 1 and error.column >= 1


def test_policy_model_has_no_field_the_fuzzer_cannot_name() -> None:
    # The token list drives the fuzzer into the schema; keep it in step with the model.
    assert set(Policy.model_fields) - {"description", "resource", "providers"} <= set(_TOKENS)
