"""Every policy element documents itself with an example that really loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from costguard.policy.docs import render_reference
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import ELEMENTS, Element, PolicyFile

REPO = Path(__file__).resolve().parents[2]


def _instances(value: object) -> list[BaseModel]:
    """Every model object inside `value`, depth first."""
    found: list[BaseModel] = []
    if isinstance(value, BaseModel):
        found.append(value)
        for name in type(value).model_fields:
            found.extend(_instances(getattr(value, name)))
    elif isinstance(value, tuple | list):
        for item in value:
            found.extend(_instances(item))
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(_instances(item))
    return found


@pytest.mark.parametrize("element", ELEMENTS, ids=lambda e: e.__name__)
def test_every_element_example_loads_and_shows_that_element(element: type[Element]) -> None:
    assert element.__doc__ and element.__doc__.strip(), "element needs a docstring"
    assert element.example.strip(), "element needs an example"
    policy_set = parse_policy_text(element.example, f"{element.__name__}.example.yml")
    if element is PolicyFile:
        assert policy_set.policies and policy_set.attribution and policy_set.budgets
        assert policy_set.anomalies
        return
    shown = [m for m in _instances(policy_set) if type(m) is element]
    assert shown, f"{element.__name__}.example never uses {element.__name__}"


@pytest.mark.parametrize("element", ELEMENTS, ids=lambda e: e.__name__)
def test_every_field_is_described(element: type[Element]) -> None:
    missing = [n for n, f in element.model_fields.items() if not f.description]
    assert not missing


def test_reference_documents_every_element_and_its_example() -> None:
    text = render_reference()
    for element in ELEMENTS:
        assert f"\n## {element.__name__}\n" in text
        assert element.example in text
    assert "| `for` | duration | `45m` |" in text  # aliases and durations render readably


def test_docs_policies_md_is_up_to_date() -> None:
    committed = (REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    assert committed == render_reference(), (
        "docs/policies.md is stale: run `python -m costguard.policy.docs > docs/policies.md`"
    )


def test_docs_module_prints_the_reference() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "costguard.policy.docs"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.stdout == render_reference()
