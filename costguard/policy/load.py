"""Read policy files into one `PolicySet`, reporting every problem with FILE:LINE:COL.

Each file is parsed and validated on its own; names, the single `attribution` block and
budget/anomaly dimensions are then checked across files on the raw documents, so one
broken policy does not hide a duplicate name elsewhere.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from costguard.errors import PolicyError, SourceError
from costguard.policy.schema import BUILTIN_DIMENSIONS, PolicyFile, PolicySet
from costguard.policy.warnings import policy_warnings
from costguard.small_files import TooLarge, read_small
from costguard.yamlpos import (
    PositionMap,
    YamlLoadError,
    load_yaml_with_positions,
    validation_errors_to_source_errors,
)

POLICY_SUFFIXES = (".yml", ".yaml")
MAX_POLICY_BYTES = 2**20  # a policy file of hundreds of policies is tens of KiB
_SECTIONS = "policies, attribution, budgets, anomalies"


@dataclass
class _Document:
    """One file's raw data, positions, and (when valid) its typed model."""

    filename: str
    data: dict[Any, Any]
    positions: PositionMap
    model: PolicyFile | None = None
    errors: list[SourceError] = field(default_factory=list)

    def error_at(self, path: tuple[Hashable, ...], message: str, *, key: bool = False) -> None:
        pos = self.positions.key_or_value(path) if key else self.positions.nearest(path)[1]
        self.errors.append(SourceError(self.filename, pos.line, pos.column, message))

    def where(self, path: tuple[Hashable, ...]) -> str:
        pos = self.positions.nearest(path)[1]
        return f"{self.filename}:{pos.line}"


def load_policy_set(paths: Sequence[Path]) -> PolicySet:
    """Load files and directories (their *.yml/*.yaml, sorted) into one PolicySet.

    Raises PolicyError listing every problem in every file.
    """
    policy_set, errors = _load(paths)
    if errors or policy_set is None:
        raise PolicyError(errors)
    return policy_set


def validate_paths(paths: Sequence[Path]) -> list[SourceError]:
    """Every problem in the given files and directories; empty when they are all valid."""
    return _load(paths)[1]


def load_with_warnings(paths: Sequence[Path], *, identity_required: bool = True
                       ) -> tuple[PolicySet, list[SourceError]]:
    """`load_policy_set`, and the warnings about policies that load but may surprise their
    author (`policy.warnings`; `identity_required`: `http.identity.mode` is `required`, or
    no settings were read), each at FILE:LINE:COL. Raises PolicyError as it does."""
    policy_set, errors, warnings = _load_all(paths, identity_required)
    if errors or policy_set is None:
        raise PolicyError(errors)
    return policy_set, warnings


def parse_policy_text(text: str, filename: str = "<policy>") -> PolicySet:
    """Load one policy document from a string (tests, `costguard demo`, inline configs)."""
    errors: list[SourceError] = []
    doc = _parse(text, filename, errors)
    docs = [doc] if doc is not None else []
    policy_set = _merge(docs, errors, [filename])
    if errors or policy_set is None:
        raise PolicyError(errors)
    return policy_set


def _load(paths: Sequence[Path]) -> tuple[PolicySet | None, list[SourceError]]:
    policy_set, errors, _ = _load_all(paths)
    return policy_set, errors


def _load_all(paths: Sequence[Path], identity_required: bool = True
              ) -> tuple[PolicySet | None, list[SourceError], list[SourceError]]:
    errors: list[SourceError] = []
    docs = []
    files = _expand(paths, errors)
    for path in files:
        text = _read(path, errors)
        if text is not None:
            doc = _parse(text, str(path), errors)
            if doc is not None:
                docs.append(doc)
    policy_set = _merge(docs, errors, [str(p) for p in (*paths, *files)])
    warnings = [w for d in docs if d.model is not None
                for w in policy_warnings(d.filename, d.model.policies, d.positions,
                                         identity_required=identity_required)]
    return (None if errors else policy_set), errors, warnings


def _expand(paths: Sequence[Path], errors: list[SourceError]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in POLICY_SUFFIXES and p.is_file())
            if not found:
                errors.append(
                    SourceError(
                        str(path), 1, 1, "no policy files (*.yml, *.yaml) in this directory"
                    )
                )
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
            errors.append(SourceError(str(path), 1, 1, f"no such file or directory{where}"))
    seen: set[Path] = set()
    unique = []
    for f in files:
        resolved = f.resolve()
        if resolved not in seen:
            seen.add(resolved)
            unique.append(f)
    return unique


def _read(path: Path, errors: list[SourceError]) -> str | None:
    try:
        raw = read_small(path, MAX_POLICY_BYTES)  # refused before anything parses it
    except TooLarge as exc:
        errors.append(SourceError(
            str(path), 1, 1, f"the file is {exc.said}, over the {MAX_POLICY_BYTES:,}-"
                             "byte limit for a policy file: split it into several files"))
        return None
    except OSError as exc:
        errors.append(SourceError(str(path), 1, 1, f"cannot read file: {exc.strerror or exc}"))
        return None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        line = raw.count(b"\n", 0, exc.start) + 1
        column = len(raw[line_start : exc.start].decode("utf-8", errors="replace")) + 1
        errors.append(
            SourceError(
                str(path),
                line,
                column,
                f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
            )
        )
        return None


def _parse(text: str, filename: str, errors: list[SourceError]) -> _Document | None:
    try:
        data, positions = load_yaml_with_positions(text, filename)
    except YamlLoadError as exc:
        errors.append(exc.error)
        return None
    if data is None:
        errors.append(
            SourceError(
                filename,
                1,
                1,
                f"the file is empty: a policy file is a mapping with at least one of {_SECTIONS}",
            )
        )
        return None
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({data!r})"
        errors.append(
            SourceError(
                filename,
                1,
                1,
                f"a policy file must be a mapping with keys {_SECTIONS}, but this one is {kind}",
            )
        )
        return None
    doc = _Document(filename, data, positions)
    try:
        doc.model = PolicyFile.model_validate(data)
    except ValidationError as exc:
        errors.extend(validation_errors_to_source_errors(exc, positions, filename, PolicyFile))
    return doc


def _named_items(doc: _Document, section: str) -> list[tuple[int, str]]:
    items = doc.data.get(section)
    if not isinstance(items, list):
        return []
    return [
        (i, item["name"])
        for i, item in enumerate(items)
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    ]


def _check_unique_names(docs: list[_Document]) -> None:
    for section, kind in (("policies", "policy"), ("budgets", "budget"), ("anomalies", "anomaly")):
        first: dict[str, str] = {}
        for doc in docs:
            for i, name in _named_items(doc, section):
                path = (section, i, "name")
                if name in first:
                    doc.error_at(
                        path,
                        f"{section}[{i}].name: {kind} {name!r} is already defined at "
                        f"{first[name]}; names must be unique across all policy files",
                    )
                else:
                    first[name] = doc.where(path)


def _check_attribution(docs: list[_Document]) -> tuple[str, ...] | None:
    """Refuse a second attribution block; return the known dimensions (None if unknown)."""
    owners = [d for d in docs if "attribution" in d.data]
    for doc in owners[1:]:
        doc.error_at(
            ("attribution",),
            f"attribution is already defined at {owners[0].where(('attribution',))}; "
            "only one policy file may define it",
            key=True,
        )
    if not owners:
        return BUILTIN_DIMENSIONS
    attribution = owners[0].data["attribution"]
    dims = attribution.get("dimensions") if isinstance(attribution, dict) else None
    if not isinstance(dims, dict):
        return None  # broken attribution is reported already; don't guess dimensions
    return tuple(str(d) for d in dims) + BUILTIN_DIMENSIONS


def _check_dimensions(docs: list[_Document], known: tuple[str, ...]) -> None:
    for doc in docs:
        for section in ("budgets", "anomalies"):
            items = doc.data.get(section)
            if not isinstance(items, list):
                continue
            for i, item in enumerate(items):
                dim = item.get("dimension") if isinstance(item, dict) else None
                if isinstance(dim, str) and dim not in known:
                    doc.error_at(
                        (section, i, "dimension"),
                        f"{section}[{i}].dimension: unknown dimension {dim!r} (known: "
                        f"{', '.join(known)}; define it under attribution.dimensions)",
                    )


def _merge(
    docs: list[_Document], errors: list[SourceError], file_order: list[str]
) -> PolicySet | None:
    _check_unique_names(docs)
    known = _check_attribution(docs)
    if known is not None:
        _check_dimensions(docs, known)
    for doc in docs:
        errors.extend(doc.errors)
    order: dict[str, int] = {}
    for name in file_order:
        order.setdefault(name, len(order))
    errors.sort(key=lambda e: (order.get(e.file, len(order)), e.line, e.column))
    if errors:
        return None
    models = [d.model for d in docs if d.model is not None]
    origins = {
        name: doc.where(("policies", i, "name"))
        for doc in docs
        for i, name in _named_items(doc, "policies")
    }
    try:
        return PolicySet(
            policies=tuple(p for m in models for p in m.policies),
            attribution=next((m.attribution for m in models if m.attribution), None),
            budgets=tuple(b for m in models for b in m.budgets),
            anomalies=tuple(a for m in models for a in m.anomalies),
            origins=origins,
        )
    except ValidationError as exc:  # the checks above should have caught it first
        first = docs[0].filename if docs else "<policies>"
        errors.extend(SourceError(first, 1, 1, e["msg"]) for e in exc.errors())
        return None
