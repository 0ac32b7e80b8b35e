"""What a new user starts from: the example policies shipped inside the package, and
`costguard init`, which writes them with a commented costguard.yaml into a directory."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).with_name("examples") / "policies"

CONFIG = """\
# costguard.yaml: written by `costguard init`. Every key is optional; the defaults run
# costguard against the simulated cloud with SQLite. Reference: docs/operations.md.
# A COSTGUARD_* environment variable overrides a key (nested: COSTGUARD_HTTP__PORT=8787).

# database_url: postgresql://costguard@db:5432/costguard   # default: sqlite:///costguard.db
policy_paths: [policies]      # relative to this file: the policies next to it
poll_interval: 5m

# providers:                  # with none configured, the simulated cloud runs
#   aws:
#     regions: [us-east-1, us-west-2]
#     accounts: [{id: "123456789012"}]
#     role_name: CostguardRole
#   gcp:
#     projects: [ml-prod]
#     tpus: true                # Cloud TPU nodes too (docs/accelerators.md)

# http:
#   host: 127.0.0.1           # 0.0.0.0 to accept agents from other hosts
#   port: 8787
#   identity: {mode: required}  # the default: agents prove their instance (docs/agent.md);
#                               # optional also takes the shared token for any instance
#   allowed_hosts: []           # Host names besides loopback's, for a console without login

# alerts:
#   slack: {webhook_url_file: /run/secrets/slack-webhook}
"""


def packaged_policies() -> Path:
    """The example policies inside the installed package (the checkout's policies/)."""
    return EXAMPLES


def write_starter(directory: Path, *, force: bool = False) -> list[Path]:
    """costguard.yaml and policies/*.yml in `directory`; refuses to overwrite a file that
    exists unless `force`. Returns the files written."""
    targets = {directory / "costguard.yaml": CONFIG}
    for example in sorted(EXAMPLES.glob("*.yml")):
        targets[directory / "policies" / example.name] = example.read_text(encoding="utf-8")
    existing = [p for p in targets if p.exists()]
    if existing and not force:
        from costguard.errors import ConfigError

        raise ConfigError(f"{existing[0]} exists: nothing was written (use --force to "
                          "overwrite the starter files)")
    for path, text in targets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(targets)
