"""The long-running service: scheduler, leader election, HTTP surface, logs and metrics."""
