"""The demo room: everything that stands in for a cloud, kept apart from the adapters to
real clouds (costguard/providers/).

- `sim`, `sim_groups`, `sim_settings`: the simulated cloud, the default provider when none
  is configured (a seeded fleet with GPU telemetry, spot and managed groups).
- `aws_fleet`: a GPU fleet seeded inside moto, for `costguard demo --cloud aws`.
- `gcp_fake`: local HTTP fakes of Compute Engine and Cloud Monitoring, for
  `costguard demo --cloud gcp` and the tests (google-cloud-compute over real HTTP).
- `clouds`: which of those a demo runs on; `run`: the `costguard demo` story itself.
"""
