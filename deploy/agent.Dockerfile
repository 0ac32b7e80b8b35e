# costguard GPU agent image. Build from the repository root:
#   docker build -f deploy/agent.Dockerfile -t costguard-agent .
# Run on a GPU host (the NVIDIA Container Toolkit mounts the driver's libnvidia-ml.so):
#   docker run -d --gpus all --pid host --restart unless-stopped \
#     -e COSTGUARD_AGENT_TOKEN -v costguard-agent:/var/lib/costguard-agent \
#     costguard-agent --url http://costguard.internal:8787
# No CUDA base image is needed: NVML comes from the host driver, not from the image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY costguard ./costguard
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# NVIDIA_* tell the container toolkit to mount the driver's utility libraries (NVML).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --home-dir /var/lib/costguard-agent costguard \
    && mkdir -p /var/lib/costguard-agent && chown costguard /var/lib/costguard-agent
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER costguard
VOLUME /var/lib/costguard-agent
ENTRYPOINT ["costguard-agent", "--buffer", "/var/lib/costguard-agent/buffer.sqlite3"]
