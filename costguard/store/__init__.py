"""The store: one source of truth for inventory, readings, costs, findings, actions, alerts."""
