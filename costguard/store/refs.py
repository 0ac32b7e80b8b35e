"""How the store names an instance across providers (`InstanceRef`), and refs grouped the
way its queries ask for them (`ids_by_provider`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

InstanceRef = tuple[str, str]  # (provider, instance_id)


def ids_by_provider(refs: Iterable[InstanceRef]) -> dict[str, list[str]]:
    """`refs`' instance ids by provider, each once, in the order given."""
    out: dict[str, list[str]] = defaultdict(list)
    for provider, instance_id in dict.fromkeys(refs):
        out[provider].append(instance_id)
    return out
