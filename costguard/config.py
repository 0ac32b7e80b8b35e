"""Configuration: `costguard.yaml` plus `COSTGUARD_*` environment variables.

Environment variables win over the file. Nested keys use a double underscore:
`COSTGUARD_PROVIDERS__SIM__INSTANCES=80`. A wrong key or value is a `ConfigError` that names
the key and says how to fix it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from costguard.actions.settings import SafetySettings
from costguard.alerts.settings import AlertsSettings
from costguard.bearer import token_problem
from costguard.console.settings import ConsoleSettings
from costguard.costs.settings import CostSettings
from costguard.daemon.settings import DaemonSettings
from costguard.demo.sim_settings import SimSettings
from costguard.errors import ConfigError, SourceError
from costguard.k8s.settings import KubernetesSettings
from costguard.policy.base import Duration, at_least
from costguard.providers.aws.settings import AwsSettings
from costguard.providers.gcp.settings import GcpSettings
from costguard.recommend.settings import RecommendSettings
from costguard.small_files import TooLarge, read_small_text
from costguard.yamlpos import (
    PositionMap,
    YamlLoadError,
    field_keys,
    load_yaml_with_positions,
    located_errors,
    model_at,
)

DEFAULT_CONFIG_FILE = Path("costguard.yaml")
MIN_POLL_INTERVAL = timedelta(seconds=1)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProvidersSettings(Section):
    """Which clouds to govern. With none configured (and no Kubernetes cluster to act in),
    the simulated cloud runs (the demo): `Settings` decides, knowing both."""

    sim: SimSettings | None = None
    aws: AwsSettings | None = None
    gcp: GcpSettings | None = None

    def enabled(self) -> list[str]:
        return [n for n in ("sim", "aws", "gcp") if getattr(self, n) is not None]


class AccountingSettings(Section):
    """How costs and idle dollars are counted (independent of any policy's thresholds)."""

    idle_signal: Literal["auto", "sm_active", "util_gpu"] = "auto"
    idle_below: float = Field(default=5.0, ge=0, le=100)
    # whose readings make accrued time idle (the reports' waste), as `idle: {evidence}`
    # in a policy: `agent` counts only what costguard's agent measured
    idle_evidence: Literal["any", "agent"] = "any"
    raw_retention: Duration = timedelta(days=35)  # raw cost intervals (rolled up per day)
    # GPU readings: raw minutes (kept as an hour's block once it settles), then the hourly
    # history of every GPU (docs/operations.md "Readings: raw minutes and hourly history")
    readings_raw: Duration = timedelta(days=7)
    readings_history: Duration = timedelta(days=395)

    @model_validator(mode="after")
    def _readings_kept(self) -> AccountingSettings:
        if self.readings_raw < timedelta(hours=2):
            raise ValueError("accounting.readings_raw must be at least 2h: the idle window "
                             "and the hour still settling are read from raw minutes")
        if self.readings_history < self.readings_raw:
            raise ValueError("accounting.readings_history must be at least "
                             "accounting.readings_raw: the history outlives the minutes")
        return self


AwsFormName = Literal["rsa2048", "signature", "pkcs7"]


class AgentIdentitySettings(Section):
    """How agents prove which instance they run on (docs/agent.md, "Instance identity")."""

    # required (the default): a cloud instance's readings come only from an agent that proved
    # it runs there; optional: the shared token is accepted for any instance (the simulated
    # cloud and hosts outside a cloud use the shared token in either mode)
    mode: Literal["optional", "required"] = "required"
    # a folder of AWS certificates adding to or replacing, region by region, those shipped
    # (<region>.pem for the signature form; rsa/, rsa2048/, dsa/ folders for each kind)
    aws_certs_dir: Path | None = None
    # the EC2 forms accepted: rsa2048 (RSA-2048/SHA-256, what the agent sends), signature
    # (RSA-1024/SHA-256, what agents before it sent); pkcs7 (DSA-1024/SHA-1) only if named
    aws_forms: list[AwsFormName] = Field(
        default_factory=lambda: list[AwsFormName](["rsa2048", "signature"]), min_length=1)
    google_certs_file: Path | None = None  # Google's keys as JSON (air-gapped installs)
    google_certs_url: str = "https://www.googleapis.com/oauth2/v1/certs"
    audience: str = "costguard"  # the audience GCE identity tokens are requested for

    @property
    def required(self) -> bool:
        """Only proven instances may push for cloud instances."""
        return self.mode == "required"


def _sendable(token: SecretStr | None) -> SecretStr | None:
    if token is not None and (problem := token_problem(token.get_secret_value())):
        raise ValueError(problem)
    return token


class HttpSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=1, le=65535)
    ingest_token: Annotated[SecretStr | None, AfterValidator(_sendable)] = None
    identity: AgentIdentitySettings = Field(default_factory=AgentIdentitySettings)
    # Host header values (names, without the port) accepted besides loopback's while the
    # console is served without login: a request naming any other host is refused (421), as
    # a page on another site reaching 127.0.0.1 through DNS rebinding names its own
    allowed_hosts: list[str] = Field(default_factory=list)
    # a request's head (line and headers) arrives whole within this of its connection's
    # opening or the previous response, or the connection is closed; beyond
    # `max_connections` open at once a new one is closed unanswered (daemon/connections.py)
    head_timeout: Annotated[Duration, AfterValidator(at_least(
        timedelta(seconds=1), "a client on a slow link needs a moment to send its headers"
    ))] = timedelta(seconds=10)
    # and its body within this of its head (an agent's largest batch, 1 MiB, at 17 KB/s)
    body_timeout: Annotated[Duration, AfterValidator(at_least(
        timedelta(seconds=1), "an agent's batch of up to 1 MiB needs time on a slow link"
    ))] = timedelta(seconds=60)
    max_connections: int = Field(default=1_000, ge=16, le=1_000_000)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="COSTGUARD_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    database_url: str = "sqlite:///costguard.db"
    policy_paths: list[Path] = Field(default_factory=lambda: [Path("policies")])
    # a cycle every this long (0s ran them back to back, each calling every cloud API)
    poll_interval: Annotated[Duration, AfterValidator(at_least(
        MIN_POLL_INTERVAL, "each cycle calls every cloud API it reads, and cloud metrics "
        "come a minute at a time (5m is the default)"))] = timedelta(minutes=5)
    paused: bool = False
    providers: ProvidersSettings = Field(default_factory=ProvidersSettings)
    accounting: AccountingSettings = Field(default_factory=AccountingSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    alerts: AlertsSettings = Field(default_factory=AlertsSettings)
    costs: CostSettings = Field(default_factory=CostSettings)
    recommend: RecommendSettings = Field(default_factory=RecommendSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)

    @model_validator(mode="after")
    def _default_to_sim(self) -> Settings:
        """No cloud and no Kubernetes cluster: the simulated cloud (the demo). A config that
        names only clusters governs (or reports) them alone, never simulated instances."""
        p = self.providers
        if p.sim is None and p.aws is None and p.gcp is None and not self.kubernetes.clusters:
            p.sim = SimSettings()
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init (the YAML file, passed in by load_settings) < environment
        return env_settings, init_settings


def _describe_loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _env_name(loc: tuple[int | str, ...]) -> str:
    return "COSTGUARD_" + "__".join(str(p).upper() for p in loc if not isinstance(p, int))


def _environment() -> dict[tuple[str, ...], str]:
    """The settings that COSTGUARD_* variables set (they win over the file): each one's key
    path, lower-cased as pydantic-settings reads it, -> the variable's name."""
    prefix = "COSTGUARD_"
    return {tuple(name[len(prefix):].lower().split("__")): name for name in os.environ
            if name.upper().startswith(prefix) and len(name) > len(prefix)}


def _set_by(loc: tuple[int | str, ...], environment: dict[tuple[str, ...], str]) -> str | None:
    """The variable that set the value at `loc` (or a section holding it), if one did."""
    for path, name in environment.items():
        if tuple(str(p).lower() for p in loc[:len(path)]) == path:
            return name
    return None


def _unlocated(err: ErrorDetails, variable: str | None) -> str:
    """A problem with a value that came from the environment (or with no file to point at):
    the key, the message and the variable to change."""
    loc = tuple(err["loc"])
    key = _describe_loc(loc)
    if err["type"] == "extra_forbidden":
        model = model_at(Settings, loc[:-1])
        valid = field_keys(model) if model is not None else []
        hint = f" (valid keys here: {', '.join(valid)})" if valid else ""
        where = f"remove or rename {variable}" if variable else "remove or rename it"
        return f"  {key}: unknown key{hint}; {where}"
    msg = err["msg"].removeprefix("Value error, ")
    where = f"from {variable}" if variable else f"set it in costguard.yaml or {_env_name(loc)}"
    return f"  {key}: {msg} ({where})"


def _invalid(exc: ValidationError, source: str, positions: PositionMap | None) -> ConfigError:
    """Every problem on its own line: FILE:LINE:COL for a value the file gave (the key
    paths, the valid keys and the closest one, as policy files say them), the variable's
    name for one the environment gave."""
    environment = _environment()
    others: list[str] = []
    in_file: list[ErrorDetails] = []
    for err in exc.errors():
        variable = _set_by(tuple(err["loc"]), environment)
        if positions is None or variable is not None:
            others.append(_unlocated(err, variable))
        else:
            in_file.append(err)
    located = ([] if positions is None
               else located_errors(in_file, positions, source, Settings))
    lines = [f"invalid configuration ({source}):", *others, *(f"  {e}" for e in located)]
    return ConfigError("\n".join(lines), located, [line.strip() for line in others])


MAX_CONFIG_BYTES = 2**20


def _file_settings(model: type[BaseModel]) -> dict[str, Any]:
    """The settings of `model` that name files, as a tree: a field's name -> True (a path,
    or a list of them) or the tree of its section."""
    tree: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        kinds = [field.annotation, *get_args(field.annotation)]
        kinds += [k for kind in list(kinds) for k in get_args(kind)]  # list[Path] | None
        if Path in kinds:
            tree[name] = True
            continue
        sections = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if sections and (sub := _file_settings(sections[0])):
            tree[name] = sub
    return tree


def _beside(data: dict[str, Any], folder: Path, tree: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """Relative paths in a config file (`policy_paths`, `alerts.routing_file`,
    `costs.price_overrides`, the secret files...) name files next to it (as `costguard
    init` writes them), wherever costguard runs from; an environment variable's stay as
    given."""
    if folder == Path("."):
        return data

    def beside(value: Any) -> Any:
        return (str(folder / value) if isinstance(value, str) and value
                and not Path(value).is_absolute() else value)

    out = dict(data)
    for name, kind in (_FILE_SETTINGS if tree is None else tree).items():
        if name not in out:
            continue
        value = out[name]
        if kind is True and isinstance(value, list):
            out[name] = [beside(v) for v in value]
        elif kind is True:
            out[name] = beside(value)
        elif isinstance(value, dict):
            out[name] = _beside(value, folder, kind)
    return out


_FILE_SETTINGS = _file_settings(Settings)


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Read settings from `path` (default ./costguard.yaml if present) and the environment."""
    explicit = path is not None
    path = path or Path(os.environ.get("COSTGUARD_CONFIG", DEFAULT_CONFIG_FILE))
    data: dict[str, Any] = {}
    positions: PositionMap | None = None
    if path.exists():
        try:
            text = read_small_text(path, MAX_CONFIG_BYTES)  # refused before it is parsed
            # positions for the errors; duplicate keys refused (safe_load kept the last)
            loaded, positions = load_yaml_with_positions(text, str(path))
        except TooLarge as exc:
            raise ConfigError(f"{path}: {exc.said}, over the {MAX_CONFIG_BYTES:,}-byte "
                              "limit for a config file; is this the right file?") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
        except YamlLoadError as exc:
            raise ConfigError(str(exc.error), [exc.error]) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                              ) from exc
        if loaded is not None and not isinstance(loaded, dict):
            kind = type(loaded).__name__
            _, at = positions.nearest(())
            problem = SourceError(str(path), at.line, at.column,
                                  f"expected a mapping of settings, got {kind}")
            raise ConfigError(str(problem), [problem])
        odd = [k for k in (loaded or {}) if not isinstance(k, str)]
        if odd:
            at = positions.key_or_value((odd[0],))
            problem = SourceError(str(path), at.line, at.column,
                                  f"setting names must be text, got {odd[0]!r}")
            raise ConfigError(str(problem), [problem])
        data = _beside(loaded or {}, path.parent)
    elif explicit:
        raise ConfigError(f"config file {path} does not exist; create it or drop --config")
    data.update(overrides)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise _invalid(exc, str(path) if positions is not None else "environment",
                       positions) from None


def daemon_settings(settings: Settings) -> DaemonSettings:
    """The `daemon:` section (defaults when absent), with the documented env overrides."""
    section = getattr(settings, "daemon", None)
    cfg = section if isinstance(section, DaemonSettings) else DaemonSettings()
    fmt = os.environ.get("COSTGUARD_LOG_FORMAT")
    if fmt:
        if fmt not in ("text", "json"):
            raise ConfigError(f"COSTGUARD_LOG_FORMAT={fmt[:40]!r}: use `text` or `json`")
        cfg = cfg.model_copy(update={"log_format": fmt})
    return cfg


def ingest_token(settings: Settings) -> str | None:
    """The agent token: `http.ingest_token` in costguard.yaml, else $COSTGUARD_AGENT_TOKEN."""
    if settings.http.ingest_token is not None:
        return settings.http.ingest_token.get_secret_value() or None
    token = os.environ.get("COSTGUARD_AGENT_TOKEN") or None
    if token is not None and (problem := token_problem(token)):
        raise ConfigError(f"COSTGUARD_AGENT_TOKEN: {problem}")
    return token
