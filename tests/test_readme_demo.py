"""The README's `make demo` sample is what the demo prints (it had gone stale: 3 policies
and $4,159.97 where a run showed 4 and $5,266.46). scripts/readme_demo.py writes the sample
from a real run on a pinned clock; this runs the demo the same way and compares, the wall
time aside."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "readme_demo.py"


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("readme_demo", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_readme_shows_what_the_demo_prints() -> None:
    demo = _script()
    shown = [demo.normalized(line) for line in demo.readme_sample(demo.README.read_text())]
    printed = [demo.normalized(line) for line in demo.sample(demo.demo_output())]
    assert shown == printed, "run `python scripts/readme_demo.py` to rewrite the sample"
    assert any("Spend nobody answers for" in line for line in shown)
    assert shown[0].startswith("costguard demo: 11 policies from policies")
    assert any(line.startswith("Kubernetes serving/Deployment/chat-infer: scaled")
               for line in shown)


def test_the_sample_is_made_of_the_lines_it_names() -> None:
    demo = _script()
    output = "\n".join([
        f"costguard demo: 4 policies from {demo.ROOT / 'policies'}, enforced ...",
        "database: sqlite:///x.db", "",
        "Sat 12:00 note a", "Sat 12:00 note b", "Sat 12:01 warn c", "Sat 12:20 STOP d",
        "Sat 12:30 STOP e was removed from asg g (scale-in)",
        "289 cycles in 41.7 s: 36 idle warnings", "Managed fleets: x",
        "Spend nobody answers for (no team): $1 of $2.", "",
        "Spend by team  a -> b", "┏━┓", "┃ team ┃", "┡━┩", "│ research │", "│ nlp │",
        "│ vision │", "└─┘", "", "Kubernetes serving/Deployment/x: scaled it.",
        "Kubernetes research/CronJob/y: left alone.", "",
        "Kubernetes GPU spend by namespace  a -> b", "┏━┓", "│ serving │", "└─┘", "idle: ..."])
    assert demo.sample(output) == [
        "costguard demo: 4 policies from policies, enforced ...", "Sat 12:00 note a",
        "Sat 12:01 warn c", "Sat 12:20 STOP d",
        "Sat 12:30 STOP e was removed from asg g (scale-in)", "...",
        "289 cycles in 41.7 s: 36 idle warnings", "Managed fleets: x",
        "Spend nobody answers for (no team): $1 of $2.", "", "┏━┓", "┃ team ┃", "┡━┩",
        "│ research │", "│ nlp │", "│ vision │", " ...", "",
        "Kubernetes serving/Deployment/x: scaled it.", "Kubernetes research/CronJob/y: left alone.",
        "", "Kubernetes GPU spend by namespace  a -> b", "┏━┓", "│ serving │", "└─┘",
        "idle: ..."]
    assert demo.normalized("289 cycles in 41.7 s: x") == "289 cycles in N s: x"
