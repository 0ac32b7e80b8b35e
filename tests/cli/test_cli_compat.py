"""What Typer would show a person and costguard mends (costguard/cli_compat.py): a plain
flag listed with the type `<bool>`, and pydantic's "Value error," before a bad choice."""

from __future__ import annotations

from typer.testing import CliRunner

from costguard.cli import app
from costguard.telemetry.cli import agent_app


def test_plain_flags_show_no_type_and_options_that_take_values_keep_theirs() -> None:
    for target, argv in ((app, ["billing", "import", "--help"]), (app, ["run", "--help"]),
                         (agent_app, ["--help"])):
        out = CliRunner().invoke(target, argv, env={"COLUMNS": "80"}).output
        assert "<bool>" not in out, out
    out = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "120"}).output
    assert "<path>" in out  # --output takes a value: its type stays


def test_a_bad_choice_names_the_choices_without_pydantic_s_prefix() -> None:
    result = CliRunner().invoke(app, ["report", "--format", "xml"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    flat = " ".join(result.output.split())
    assert "'xml' is not one of 'table', 'csv', 'json', 'html'" in flat
    assert "Value error" not in flat
