"""Bad policy files are reported completely, each problem at its exact FILE:LINE:COL."""

from __future__ import annotations

from pathlib import Path

import pytest

from costguard.errors import PolicyError, SourceError
from costguard.policy.load import load_policy_set, parse_policy_text, validate_paths

BROKEN = """\
policies:
  - name: idle-gpu
    mode: enforced
    filters:
      gpu: yes
      state: [running, sleeping]
      accounts: [123456789012]
    condition:
      idle: {signal: sm_active, bellow: 5, for: fortyfive}
    actions:
      - notify: {to: owner}
      - reboot: {}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _errors(text: str, name: str = "p.yml") -> list[SourceError]:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, name)
    return caught.value.errors


def test_broken_file_reports_every_error_at_its_exact_position(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken.yml", BROKEN)
    errors = validate_paths([path])
    located = [(e.line, e.column) for e in errors]
    assert located == [(3, 11), (6, 24), (7, 18), (9, 33), (9, 49), (12, 9)]
    assert all(e.file == str(path) for e in errors)
    mode, state, account, unknown, duration, action = (e.message for e in errors)
    assert mode == ("policies[0].mode: Input should be 'dry-run' or 'enforce' (got 'enforced'); "
                    "did you mean 'enforce'?")
    assert "'sleeping'" in state and "'running'" in state and "'terminated'" in state
    assert "quote it" in account and "'123456789012'" in account
    assert "unknown key 'bellow'" in unknown and "did you mean 'below'?" in unknown
    assert "invalid duration 'fortyfive'" in duration and "45m" in duration
    assert ("unknown key 'reboot' (valid keys: notify, tag, stop, start, terminate, scale_in, "
            "scale_to_zero, delete)" in action)
    assert str(errors[0]) == f"{path}:3:11: {mode}"


def test_load_raises_policy_error_whose_text_lists_every_problem(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken.yml", BROKEN)
    with pytest.raises(PolicyError) as caught:
        load_policy_set([path])
    assert len(str(caught.value).splitlines()) == len(caught.value.errors) == 6


def test_unknown_key_lists_the_valid_keys_of_that_element() -> None:
    missing, error = _errors(
        "policies:\n  - name: a\n    condtion: {idle: {}}\n    actions: [stop]\n"
    )
    assert (missing.line, missing.column) == (2, 5)
    assert missing.message == "policies[0]: missing required key 'condition'"
    assert (error.line, error.column) == (3, 5)
    assert error.message == (
        "policies[0]: unknown key 'condtion' (valid keys: name, description, resource, "
        "providers, mode, filters, condition, actions, limits); did you mean 'condition'?"
    )


def test_missing_required_key_points_at_the_policy() -> None:
    errors = _errors("policies:\n  - name: a\n    condition: {running_longer_than: 1h}\n")
    assert [(e.line, e.column, e.message) for e in errors] == [
        (2, 5, "policies[0]: missing required key 'actions'")
    ]


def test_bare_number_duration_asks_for_a_unit() -> None:
    (error,) = _errors(
        "policies:\n  - name: a\n    condition: {running_longer_than: 45}\n    actions: [notify]\n"
    )
    assert (error.line, error.column) == (3, 38)
    assert "a bare number has no unit (write 45m or 45s)" in error.message


def test_idle_window_shorter_than_five_minutes_is_refused_with_the_reason() -> None:
    (error,) = _errors(
        "policies:\n  - name: a\n    condition: {idle: {for: 2m}}\n    actions: [notify]\n"
    )
    assert (error.line, error.column) == (3, 29)
    assert "must be at least 5m (got 2m)" in error.message


def test_an_idle_threshold_between_two_hundredths_is_refused_with_both_neighbours() -> None:
    # readings are held and kept to a hundredth of a point, rounded down: between two grid
    # points, a GPU at 4.996 % kept as 4.99 would be "below 4.995", idle where it was not
    (error,) = _errors(
        "policies:\n  - name: a\n    condition: {idle: {below: 4.995}}\n    actions: [notify]\n"
    )
    assert (error.line, error.column) == (3, 31)
    assert error.message == (
        "policies[0].condition.idle.below: a threshold is given to a hundredth of a point "
        "(readings are kept to a hundredth, rounded down, and one between two hundredths "
        "could then look idle): use 4.99 or 5")
    (tiny,) = _errors(
        "policies:\n  - name: a\n    condition: {idle: {below: 0.001}}\n    actions: [notify]\n"
    )
    assert tiny.message.endswith("use 0.01")  # below 0 is no threshold
    for fine in ("5", "0.5", "0.29", "4.99", "0.01", "100"):
        text = "policies:\n  - name: a\n    condition: {idle: {below: BELOW}}\n"
        parse_policy_text(text.replace("BELOW", fine) + "    actions: [notify]\n", "p.yml")


def test_a_value_outside_a_fixed_set_names_the_closest_allowed_one() -> None:
    state, lifecycle, evidence = _errors(
        "policies:\n  - name: a\n    filters: {state: [runing], lifecycle: spott}\n"
        "    condition: {idle: {evidence: agnet}}\n    actions: [notify]\n")
    assert state.message.endswith("(got 'runing'); did you mean 'running'?")
    # a single value of a list field is named as itself, not as item 0 of a list
    assert lifecycle.message == ("policies[0].filters.lifecycle: Input should be 'on-demand', "
                                 "'spot' or 'capacity-block' (got 'spott'); did you mean "
                                 "'spot'?")
    assert state.message.startswith("policies[0].filters.state[0]: ")  # written as a list
    assert evidence.message.endswith("(got 'agnet'); did you mean 'agent'?")
    (far,) = _errors("policies:\n  - name: a\n    condition: {idle: {evidence: cloud}}\n"
                     "    actions: [notify]\n")
    assert far.message.endswith("Input should be 'any' or 'agent' (got 'cloud')")


def test_missing_data_other_than_not_idle_is_refused_and_explained() -> None:
    (error,) = _errors(
        "policies:\n  - name: a\n    condition:\n      idle:\n"
        "        missing_data: idle\n    actions: [notify]\n"
    )
    assert (error.line, error.column) == (5, 23)
    assert "never treats missing telemetry as idle" in error.message


def test_action_with_two_kinds_or_unknown_placeholder_is_an_error() -> None:
    text = (
        "policies:\n  - name: a\n    condition: {missing_tags: team}\n    actions:\n"
        "      - {notify: {to: owner}, stop: {grace: 1m}}\n"
        "      - tag: {set: {since: '{when}'}}\n"
    )
    two, placeholder = _errors(text)
    assert (two.line, two.column) == (5, 9)
    assert ("exactly one of notify, tag, stop, start, terminate, scale_in, scale_to_zero or delete "
            "(got notify and stop" in two.message)
    assert (placeholder.line, placeholder.column) == (6, 28)
    assert ("unknown placeholder {when} (available: {now}, {policy}, {deadline})"
            in placeholder.message)


def test_duplicate_policy_name_across_files_points_at_second_and_names_first(
    tmp_path: Path,
) -> None:
    policy = (
        "policies:\n  - name: same\n    condition: {missing_tags: team}\n    actions: [notify]\n"
    )
    first = _write(tmp_path, "a.yml", policy)
    second = _write(tmp_path, "b.yml", "# another team's file\n" + policy)
    (error,) = validate_paths([tmp_path])
    assert (error.file, error.line, error.column) == (str(second), 3, 11)
    assert f"policy 'same' is already defined at {first}:2" in error.message


def test_second_attribution_block_is_refused(tmp_path: Path) -> None:
    block = "attribution:\n  dimensions:\n    team: {keys: team}\n"
    first = _write(tmp_path, "1.yml", block)
    second = _write(tmp_path, "2.yaml", "\n" + block)
    (error,) = validate_paths([first, second])
    assert (error.file, error.line, error.column) == (str(second), 2, 1)
    assert f"already defined at {first}:2" in error.message


def test_errors_from_several_files_all_come_back_in_file_order(tmp_path: Path) -> None:
    _write(tmp_path, "a.yml", "policies:\n  - name: A\n    condition: {}\n    actions: []\n")
    _write(
        tmp_path, "b.yml", "budgets:\n  - {name: b, dimension: nope, value: x, monthly_usd: 1}\n"
    )
    errors = validate_paths([tmp_path])
    assert [(Path(e.file).name, e.line) for e in errors] == [
        ("a.yml", 2),
        ("a.yml", 3),
        ("a.yml", 4),
        ("b.yml", 2),
    ]
    assert "unknown dimension 'nope'" in errors[-1].message


def test_yaml_syntax_error_is_located_at_the_problem() -> None:
    (error,) = _errors("policies:\n  - name: a\n    mode: [dry-run\n  - name: b\n")
    # PyYAML reads the next line as part of the unclosed list and fails at its ':'
    assert (error.line, error.column) == (4, 9)
    assert error.message.startswith(
        "invalid YAML: while parsing a flow sequence (started on "
        "line 3, column 11), expected ',' or ']'"
    )


def test_tab_indentation_is_reported_with_a_hint() -> None:
    (error,) = _errors("policies:\n\t- name: a\n")
    assert (error.line, error.column) == (2, 1)
    assert "indent with spaces, not tabs" in error.message


def test_duplicate_yaml_key_is_an_error() -> None:
    (error,) = _errors("policies:\n  - name: a\n    name: b\n")
    assert (error.line, error.column) == (3, 5)
    assert error.message == "duplicate key 'name' (first defined on line 2)"


def test_non_utf8_file_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yml"
    path.write_bytes("policies:\n  - name: caf\xe9\n".encode("latin-1"))
    (error,) = validate_paths([path])
    assert (error.line, error.column) == (2, 14)
    assert "not valid UTF-8 (byte 0xe9)" in error.message


def test_empty_comment_only_or_list_file_is_a_clear_error_at_1_1(tmp_path: Path) -> None:
    empty = _write(tmp_path, "empty.yml", "")
    comments = _write(tmp_path, "comments.yml", "# nothing yet\n")
    listing = _write(tmp_path, "list.yml", "- name: a\n")
    nothing = _write(tmp_path, "nothing.yml", "{}\n")
    errors = validate_paths([empty, comments, listing, nothing])
    assert [(Path(e.file).name, e.line, e.column) for e in errors] == [
        ("empty.yml", 1, 1),
        ("comments.yml", 1, 1),
        ("list.yml", 1, 1),
        ("nothing.yml", 1, 1),
    ]
    assert "the file is empty" in errors[0].message
    assert "must be a mapping" in errors[2].message and "a list" in errors[2].message
    assert "defines nothing" in errors[3].message


def test_missing_path_and_directory_without_policies_are_errors(tmp_path: Path) -> None:
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "empty-dir" / "README.txt").write_text("not a policy")
    errors = validate_paths([tmp_path / "missing.yml", tmp_path / "empty-dir"])
    assert [e.message for e in errors] == [
        "no such file or directory",
        "no policy files (*.yml, *.yaml) in this directory",
    ]


def test_a_missing_relative_path_says_where_it_was_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `costguard demo` or `run` started outside the checkout looks for ./policies
    monkeypatch.chdir(tmp_path)
    (error,) = validate_paths([Path("policies")])
    assert error.message == f"no such file or directory (relative to {tmp_path})"


def test_valid_file_passed_twice_is_loaded_once(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "a.yml",
        "policies:\n  - name: a\n    condition: {missing_tags: team}\n    actions: [notify]\n",
    )
    policy_set = load_policy_set([path, tmp_path])
    assert [p.name for p in policy_set.policies] == ["a"]
    assert policy_set.origins == {"a": f"{path}:2"}
