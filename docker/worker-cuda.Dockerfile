# syntax=docker/dockerfile:1
# A Ray GPU worker node: torch for CUDA 12.8 (the wheels carry the CUDA runtime; the host's
# driver comes in through the NVIDIA container toolkit), DeepSpeed and `shunter[train]`.
# Ray's version comes from pyproject.toml, the one place it is pinned.

FROM python:3.11.14-slim-bookworm AS build
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DS_BUILD_OPS=0
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
RUN pip install "torch==2.13.0" --index-url "${TORCH_INDEX}" \
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
    RAY_AUTH_MODE=token NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
RUN groupadd --system --gid 10001 ray \
 && useradd --system --uid 10001 --gid ray --home-dir /home/ray --create-home ray \
 && mkdir -p /var/cache/huggingface /var/cache/shunter /storage \
 && chown ray:ray /var/cache/huggingface /var/cache/shunter /storage
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
USER 10001
HEALTHCHECK --interval=15s --timeout=5s --retries=20 CMD ["ray", "status", "--address=ray-head:6380"]
# Joins the head; Ray detects the GPUs and advertises them as the GPU resource.
CMD ["ray", "start", "--address=ray-head:6380", "--block", "--disable-usage-stats"]
