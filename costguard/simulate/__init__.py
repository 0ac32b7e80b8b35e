"""Replaying stored history through policies (`costguard simulate`)."""
