"""Policy texts the provider tests of both clouds run an engine's cycle with."""

# a policy that only notifies: an engine's cycle over a fake cloud without acting
IDLE_NOTIFY_POLICY = """\
policies:
  - name: idle-gpu
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 30m}
    actions: [{notify: {to: owner}}]
"""
