"""Policies: the YAML language (schema), loading with located errors (load), evaluation."""
