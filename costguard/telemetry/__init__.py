"""GPU telemetry: the NVML sampler, the agent that pushes per-minute summaries, trace
record/replay, the ingest endpoint, and the idle classifier."""
