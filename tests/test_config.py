"""Configuration: YAML plus COSTGUARD_* variables; a wrong key or value names the fix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from costguard.config import load_settings
from costguard.errors import ConfigError


def test_defaults_are_sqlite_in_the_working_directory_and_the_simulated_cloud(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.database_url == "sqlite:///costguard.db"
    assert s.providers.enabled() == ["sim"]
    assert s.poll_interval == timedelta(minutes=5)


def test_a_config_of_kubernetes_clusters_alone_runs_no_simulated_cloud(tmp_path: Path) -> None:
    from costguard.clock import ManualClock
    from costguard.providers.registry import build_providers

    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("kubernetes:\n  clusters:\n    - {name: ml-prod, prometheus_url: "
                   "'http://prometheus:9090', api: {in_cluster: true}}\n")
    s = load_settings(cfg)
    assert s.providers.enabled() == []  # the simulated cloud is the demo's, never beside
    assert list(build_providers(s, ManualClock(datetime(2026, 12, 2, tzinfo=UTC)))) == ["k8s"]
    cfg.write_text(cfg.read_text() + "providers:\n  sim: {instances: 5}\n")
    assert load_settings(cfg).providers.enabled() == ["sim"]  # unless asked for


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("poll_interval: 10m\nproviders:\n  sim: {instances: 5}\n")
    monkeypatch.setenv("COSTGUARD_POLL_INTERVAL", "2m")
    monkeypatch.setenv("COSTGUARD_PROVIDERS__SIM__SEED", "11")
    s = load_settings(cfg)
    assert s.poll_interval == timedelta(minutes=2)
    assert s.providers.sim is not None and s.providers.sim.seed == 11
    assert s.providers.sim.instances == 5


def test_unknown_key_points_at_it_and_names_the_closest_valid_one(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("paused: false\npol_interval: 5m\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    assert f"{cfg}:2:1: unknown key 'pol_interval'" in str(exc.value)
    assert "did you mean 'poll_interval'?" in str(exc.value)


def test_nested_problems_each_point_at_their_line_and_column(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("providers:\n  aws:\n    regions: [us-east-1]\n    acounts: []\n"
                   "    max_workers: 500\nhttp:\n  port: eighty\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    lines = str(exc.value).splitlines()
    assert lines[0] == f"invalid configuration ({cfg}):"
    assert lines[1].startswith(f"  {cfg}:4:5: providers.aws: unknown key 'acounts'")
    assert lines[1].endswith("did you mean 'accounts'?")
    assert lines[2].startswith(f"  {cfg}:5:18: providers.aws.max_workers: ")
    assert "less than or equal to 64 (got 500)" in lines[2]
    assert lines[3].startswith(f"  {cfg}:7:9: http.port: ")
    assert "(got 'eighty')" in lines[3]
    assert len(lines) == 4


def test_bad_value_names_the_line_and_the_fix(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("poll_interval: soon\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    assert f"{cfg}:1:16: poll_interval: invalid duration 'soon'" in str(exc.value)
    assert "45m" in str(exc.value)


def test_a_poll_interval_under_a_second_is_refused_where_it_is_written(tmp_path: Path) -> None:
    # 0s ran cycles back to back, each calling every cloud API it reads
    cfg = tmp_path / "costguard.yaml"
    for value in ("0s", "0m"):
        cfg.write_text(f"poll_interval: {value}\n")
        with pytest.raises(ConfigError) as exc:
            load_settings(cfg)
        assert f"{cfg}:1:16: poll_interval: must be at least 1s (got 0s)" in str(exc.value)
    cfg.write_text("poll_interval: 1s\n")
    assert load_settings(cfg).poll_interval.total_seconds() == 1


def test_a_value_from_the_environment_names_its_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("http:\n  port: 8080\n")  # valid: the variable's value wins, and fails
    monkeypatch.setenv("COSTGUARD_HTTP__PORT", "99999")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    lines = str(exc.value).splitlines()
    assert lines[1].startswith("  http.port: Input should be less than or equal to 65535")
    assert lines[1].endswith("(from COSTGUARD_HTTP__PORT)")
    assert str(cfg) not in lines[1]


def test_with_no_file_a_bad_variable_is_named(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_POLL_INTERVAL", "soon")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert str(exc.value).startswith("invalid configuration (environment):\n")
    assert "poll_interval: invalid duration 'soon'" in str(exc.value)
    assert "(from COSTGUARD_POLL_INTERVAL)" in str(exc.value)


def test_a_duplicate_key_is_refused_where_it_repeats(tmp_path: Path) -> None:
    # yaml.safe_load kept the last silently: which poll interval runs was a guess
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("poll_interval: 5m\npaused: false\npoll_interval: 1m\n")
    with pytest.raises(ConfigError, match=r"costguard.yaml:3:1: duplicate key 'poll_interval'"):
        load_settings(cfg)


def test_broken_yaml_points_at_the_line(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("providers:\n  sim: [\n")
    with pytest.raises(ConfigError, match=r"costguard.yaml:3:1: invalid YAML"):
        load_settings(cfg)


def test_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml")


def test_relative_files_a_config_names_are_beside_it_wherever_costguard_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon started from / (systemd) or a container's working directory reads the
    files its costguard.yaml names next to that file, as `policy_paths` always did."""
    folder = tmp_path / "etc" / "costguard"
    folder.mkdir(parents=True)
    (folder / "costguard.yaml").write_text(
        "policy_paths: [policies, /opt/more]\n"
        "alerts:\n"
        "  routing_file: alerts/routes.yaml\n"
        "  slack: {webhook_url_file: secrets/slack-url}\n"
        "  email: {host: mail, from_addr: cg@example.com, ca_file: /etc/ssl/ca.pem}\n"
        "costs: {price_overrides: prices.yml}\n"
        "daemon: {leader_lock_file: run/costguard.leader}\n"
        "http: {identity: {aws_certs_dir: certs/aws}}\n"
        "database_url: sqlite:///state/costguard.db\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("COSTGUARD_COSTS__PRICE_OVERRIDES", "from-env.yml")
    settings = load_settings(folder / "costguard.yaml")
    assert settings.policy_paths == [folder / "policies", Path("/opt/more")]
    assert settings.alerts.routing_file == folder / "alerts" / "routes.yaml"
    assert settings.alerts.slack.webhook_url_file == folder / "secrets" / "slack-url"
    assert settings.alerts.email is not None
    assert settings.alerts.email.ca_file == Path("/etc/ssl/ca.pem")  # absolute: as given
    assert settings.daemon.leader_lock_file == folder / "run" / "costguard.leader"
    assert settings.http.identity.aws_certs_dir == folder / "certs" / "aws"
    # the database is state: in the working directory (systemd's StateDirectory), as given
    assert settings.database_url == "sqlite:///state/costguard.db"
    # a variable's value is the operator's, relative to where costguard runs
    assert settings.costs.price_overrides == Path("from-env.yml")
    monkeypatch.delenv("COSTGUARD_COSTS__PRICE_OVERRIDES")
    assert load_settings(folder / "costguard.yaml").costs.price_overrides == folder / "prices.yml"
    # run from the config's own folder: nothing changes
    monkeypatch.chdir(folder)
    assert load_settings(Path("costguard.yaml")).alerts.routing_file == Path(
        "alerts/routes.yaml")


@pytest.mark.parametrize(("yaml_text", "where", "says"), [
    # infinity launched simulated instances without end
    ("providers:\n  sim:\n    launches_per_day: .inf\n", ":3:23", "less than or equal to 20000"),
    # a state read a day before is no re-check before a stop
    ("safety:\n  recheck_reuse_seconds: 86400\n", ":2:26", "less than or equal to 300"),
])
def test_a_figure_past_what_the_setting_can_mean_is_refused_where_it_is(
        tmp_path: Path, yaml_text: str, where: str, says: str) -> None:
    path = tmp_path / "costguard.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert f"costguard.yaml{where}" in str(caught.value) and says in str(caught.value)


def test_a_long_bad_log_format_is_named_in_a_line_not_echoed_whole(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from costguard.config import daemon_settings

    monkeypatch.chdir(tmp_path)
    settings = load_settings(None)
    monkeypatch.setenv("COSTGUARD_LOG_FORMAT", "jsonl" + "x" * 5000)
    with pytest.raises(ConfigError) as err:
        daemon_settings(settings)
    assert "'jsonlxxx" in str(err.value) and len(str(err.value)) < 100, str(err.value)[:200]
    monkeypatch.setenv("COSTGUARD_LOG_FORMAT", "json")
    assert daemon_settings(settings).log_format == "json"
