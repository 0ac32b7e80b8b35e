"""Who the console believes, and where a login may send a person back to."""

from __future__ import annotations

import pytest

from costguard.console.auth import safe_next


@pytest.mark.parametrize("target", [
    "/console/audit?window=1d", "/console/instances/aws/i-0abc", "/console/",
])
def test_a_path_of_this_site_is_where_the_login_returns(target: str) -> None:
    assert safe_next(target) == target


@pytest.mark.parametrize("target", [
    None, "", "https://evil.example/", "//evil.example/", "/\\evil.example/",
    "/\\\\evil.example", "\\\\evil.example", "/console/\r\nSet-Cookie: x=1", "/a\x00b",
    "javascript:alert(1)",
])
def test_anything_else_returns_to_the_overview(target: str | None) -> None:
    assert safe_next(target) == "/console/"
