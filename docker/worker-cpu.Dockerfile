# syntax=docker/dockerfile:1
# A Ray node (head or worker) that runs Shunter jobs on CPUs: torch (CPU build), DeepSpeed and
# `shunter[train]`. Ray's version comes from pyproject.toml, the one place it is pinned.

FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DS_BUILD_OPS=0
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
# torch first and pinned, from the CPU index (a range would pull CUDA wheels); DeepSpeed
# without build isolation so it builds against that torch, with no prebuilt ops.
RUN pip install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-build-isolation "deepspeed==0.19.8"
COPY pyproject.toml README.md ./
COPY shunter ./shunter
COPY service ./service
COPY storage ./storage
COPY worker ./worker
COPY trainer_core ./trainer_core
COPY migrations ./migrations
RUN pip install -e ".[train]"

FROM python:3.11.14-slim-bookworm
ENV PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH HF_HOME=/var/cache/huggingface \
    RAY_AUTH_MODE=token
RUN groupadd --system --gid 10001 ray \
 && useradd --system --uid 10001 --gid ray --home-dir /home/ray --create-home ray \
 && mkdir -p /var/cache/huggingface /var/cache/shunter /storage \
 && chown ray:ray /var/cache/huggingface /var/cache/shunter /storage
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
USER 10001
HEALTHCHECK --interval=15s --timeout=5s --retries=20 CMD ["ray", "status"]
# Token auth: every node and the API get the same RAY_AUTH_TOKEN. GCS on 6380 (a Redis may
# hold 6379); the dashboard (the job API) listens on the private network only.
CMD ["ray", "start", "--head", "--block", "--port=6380", "--dashboard-host=0.0.0.0", "--disable-usage-stats"]
