"""Two things Typer (0.2x, its pydantic-based coercion) shows that a person should not see,
mended where Typer makes them, once, for every command (`costguard` and `costguard-agent`):

- a plain flag (`--strict`, `--help`) listed with the type `<bool>`, as if it took a value;
- a bad choice reported as "Value error, 'xml' is not one of ...": pydantic's prefix.

Each patch checks that the thing it mends is there, so a Typer without the quirk is left
alone (tests/cli/test_cli_compat.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_PREFIX = "Value error, "
_done = False


def _without_prefix(get_msg: Callable[[Any], str]) -> Callable[[Any], str]:
    def get_error_msg(exc: Any) -> str:
        return get_msg(exc).removeprefix(_PREFIX)

    return get_error_msg


def mend_typer() -> None:
    global _done
    if _done:
        return
    _done = True
    import importlib

    from typer import core

    option = getattr(core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if option is not None and shown is not None:
        def display_type_rich(self: Any, ctx: Any) -> str | None:
            if getattr(self, "is_bool_flag", False) and self.metavar is None:
                return None  # a flag takes no value: no type to show
            return shown(self, ctx)  # type: ignore[no-any-return]

        option.display_type_rich = display_type_rich
    for name in ("typer._display", "typer._coercion", "typer._param_types"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "get_error_msg", None)):
            module.get_error_msg = _without_prefix(module.get_error_msg)  # type: ignore[attr-defined]
