"""`run --once` in text mode: the cycle summary in words, not Python reprs."""

from __future__ import annotations

from datetime import UTC, datetime

from costguard.engine.summary import CycleSummary


def test_a_cycle_reads_as_sentences_with_every_action_and_gap() -> None:
    summary = CycleSummary(
        cycle_id=7, started_at=datetime(2026, 11, 24, 9, 30, tzinfo=UTC),
        instances={"aws": 40, "gcp": 8}, readings=1200, accrued_usd=1234.5, idle_usd=98.25,
        findings={"idle-gpu": 3, "spot": 2}, budgets=2, anomalies=1, alerts_sent=4,
        actions={"warned": {"idle-gpu": 2}, "stopped": {"idle-gpu": 1, "night": 2},
                 "skipped": {}, "reconciled": 1, "replaced": 0},
        gaps=[{"provider": "aws", "scope": "111/eu-west-1", "error": "AccessDenied"}])
    assert summary.lines() == [
        "cycle 7 at 2026-11-24 09:30:00 UTC: 48 instances (aws 40, gcp 8), 1200 readings, "
        "1 gaps",
        "spend: accrued $1,234.50 (idle $98.25); budgets 2, anomalies opened or grown 1, "
        "alerts sent 4",
        "findings: idle-gpu 3, spot 2",
        "actions: warned 2 (idle-gpu 2); stopped 3 (idle-gpu 1, night 2); reconciled 1",
        "gap: aws 111/eu-west-1: AccessDenied",
    ]


def test_a_quiet_paused_cycle_says_so() -> None:
    summary = CycleSummary(cycle_id=1, started_at=datetime(2026, 11, 24, tzinfo=UTC),
                           paused=True)
    lines = summary.lines()
    assert lines[0] == ("cycle 1 at 2026-11-24 00:00:00 UTC: 0 instances (no provider), "
                        "0 readings, 0 gaps (paused: no actions)")
    assert lines[2:] == ["findings: none", "actions: none"]
