"""Load YAML and remember where every value came from, so errors can say FILE:LINE:COL.

`load_yaml_with_positions` reads one document the way `yaml.safe_load` does (YAML 1.1
scalars: `yes` is true, `017` is octal, timestamps become datetimes, merge keys
`<<` work) but, unlike it, rejects duplicate keys and records the 1-based line and column
of every value and every mapping key under its path, e.g.
`("policies", 0, "condition", "idle", "below")`.

`validation_errors_to_source_errors` turns a pydantic `ValidationError` raised while
validating that data into `SourceError`s that point at the offending text. Policy files,
costguard.yaml and alert routes all go through here.
"""

from costguard.yamlpos.loader import (
    MAX_ALIAS_VALUES,
    MAX_DEPTH,
    Position,
    PositionMap,
    YamlLoadError,
    YamlPath,
    load_yaml_with_positions,
)
from costguard.yamlpos.validation import (
    field_keys,
    format_path,
    located_errors,
    model_at,
    validation_errors_to_source_errors,
)

__all__ = [
    "MAX_ALIAS_VALUES",
    "MAX_DEPTH",
    "Position",
    "PositionMap",
    "YamlLoadError",
    "YamlPath",
    "field_keys",
    "format_path",
    "load_yaml_with_positions",
    "located_errors",
    "model_at",
    "validation_errors_to_source_errors",
]
