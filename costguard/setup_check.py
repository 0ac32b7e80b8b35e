"""`costguard validate`; with no paths, everything the daemon will read, checked before it
runs. costguard.yaml (or --config, or $COSTGUARD_CONFIG) and the COSTGUARD_* variables, the
policies `policy_paths` names, and the files the settings name (`alerts.routing_file`,
`costs.price_overrides`, `http.identity`'s certificates): every problem at FILE:LINE:COL,
or with the variable that set it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from costguard.alerts.routing import RoutingError, load_routing
from costguard.config import Settings, load_settings
from costguard.costs.pricing import PriceOverrides
from costguard.errors import ConfigError, PolicyError, SourceError
from costguard.policy.kinds import KINDS
from costguard.policy.load import load_with_warnings
from costguard.policy.schema import PolicySet


@dataclass
class SetupCheck:
    """What was read and what was wrong with it."""

    settings: Settings | None = None
    policies: PolicySet | None = None
    files: list[str] = field(default_factory=list)  # the other files read, by setting
    problems: list[SourceError] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # problems with no place in a file
    warnings: list[SourceError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.others

    def lines(self) -> list[str]:
        """Every problem, then every warning, one line each (FILE:LINE:COL where placed)."""
        return [*map(str, self.problems), *self.others, *map(str, self.warnings)]

    def summary(self, *, whole: bool) -> str:
        """The line that says all is well (`whole`: the configuration was read too)."""
        assert self.policies is not None
        policies = self.policies.policies
        enforced = sum(1 for p in policies if p.is_enforced)
        return (("configuration ok; " if whole else "ok: ")
                + f"{len(policies)} policies ({enforced} enforced, "
                f"{len(policies) - enforced} dry-run), {len(self.policies.budgets)} budgets, "
                f"{len(self.policies.anomalies)} anomaly rules"
                + (f", {len(self.warnings)} warning(s)" if self.warnings else "")
                + "".join(f"; {f}" for f in self.files)
                + (f"; {self.agents()}" if whole and self.settings is not None else ""))

    def kinds(self) -> str:
        """The kinds of resource the policies govern, with how many policies each (the
        line `costguard validate` prints after the summary)."""
        assert self.policies is not None
        counts = Counter(p.resource for p in self.policies.policies)
        return ", ".join(f"{n} {kind} polic{'y' if n == 1 else 'ies'}"
                         for kind, n in sorted(counts.items())) or "nothing"

    def agents(self) -> str:
        """Which instance-identity mode is in force, and what `optional` allows."""
        assert self.settings is not None
        ident = self.settings.http.identity
        if ident.required:
            return (f"agents must prove their instance (http.identity.mode: required; EC2 "
                    f"forms {', '.join(ident.aws_forms)})")
        return ("agents need not prove their instance (http.identity.mode: optional): "
                "whoever holds the agent token can report any cloud instance idle; "
                "set it to required once every agent proves itself (costguard status counts "
                "them)")

    def as_json(self, *, whole: bool) -> dict[str, object]:
        """{ok, problems, warnings} (a problem with no place has null file, line, column),
        the policies, budgets and anomaly rules when ok, and `files` when `whole`."""
        def located(e: SourceError) -> dict[str, object]:
            return {"file": e.file, "line": e.line, "column": e.column, "message": e.message}

        doc: dict[str, object] = {
            "ok": self.ok,
            "problems": [located(e) for e in self.problems] + [
                {"file": None, "line": None, "column": None, "message": m}
                for m in self.others],
            "warnings": [located(w) for w in self.warnings]}
        if self.ok and self.policies is not None:
            doc |= {"policies": [{"name": p.name, "mode": p.mode, "resource": p.resource}
                                 for p in self.policies.policies],
                    "kinds": {name: {"providers": list(kind.providers),
                                     "filters": list(kind.filters),
                                     "actions": [str(a) for a in kind.actions]}
                              for name, kind in KINDS.items()},
                    "budgets": len(self.policies.budgets),
                    "anomaly_rules": len(self.policies.anomalies)}
        if whole:
            doc["files"] = self.files
            if self.settings is not None:
                ident = self.settings.http.identity
                doc["agent_identity"] = {"mode": ident.mode,
                                         "aws_forms": list(ident.aws_forms),
                                         "summary": self.agents()}
        return doc


def check_policies(paths: Sequence[Path]) -> SetupCheck:
    """The policy files or directories at `paths` alone (`costguard validate PATHS`)."""
    check = SetupCheck()
    try:
        check.policies, check.warnings = load_with_warnings(paths)
    except PolicyError as exc:
        check.problems = exc.errors
    return check


def check_setup(config: Path | None) -> SetupCheck:
    """Read the configuration as `costguard run` does, then each file it names; carry on
    past a broken file so one run reports every problem (the policies and the other files
    need the settings, so a broken costguard.yaml stops there)."""
    check = SetupCheck()
    try:
        settings = check.settings = load_settings(config)
    except ConfigError as exc:
        _config_problems(check, exc)
        return check
    try:
        check.policies, check.warnings = load_with_warnings(
            settings.policy_paths, identity_required=settings.http.identity.required)
    except PolicyError as exc:
        check.problems += exc.errors
    if settings.alerts.routing_file is not None:
        check.files.append(f"alerts.routing_file {settings.alerts.routing_file}")
        try:
            load_routing(settings.alerts.routing_file)
        except RoutingError as exc:
            check.problems += exc.errors
    if settings.costs.price_overrides is not None:
        check.files.append(f"costs.price_overrides {settings.costs.price_overrides}")
        try:
            PriceOverrides.load(settings.costs.price_overrides)
        except ConfigError as exc:
            _config_problems(check, exc)
    _check_identity_files(check, settings)
    check.problems.sort(key=lambda e: (e.file, e.line, e.column))
    return check


def _check_identity_files(check: SetupCheck, settings: Settings) -> None:
    """The certificates `http.identity` names, read as the daemon will at start."""
    identity = settings.http.identity
    if identity.aws_certs_dir is not None:
        from costguard.daemon.aws_identity import AwsDocuments

        check.files.append(f"http.identity.aws_certs_dir {identity.aws_certs_dir}")
        try:
            AwsDocuments(identity.aws_certs_dir)
        except ConfigError as exc:
            _config_problems(check, exc)
    if identity.google_certs_file is not None:
        from costguard.daemon.google_tokens import GoogleTokens

        check.files.append(f"http.identity.google_certs_file {identity.google_certs_file}")
        try:
            GoogleTokens(identity.audience, identity.google_certs_file,
                         identity.google_certs_url)
        except ConfigError as exc:
            _config_problems(check, exc)


def _config_problems(check: SetupCheck, exc: ConfigError) -> None:
    check.problems += exc.located
    check.others += exc.others
    if not exc.located and not exc.others:  # the message is the one problem
        check.others.append(str(exc))
