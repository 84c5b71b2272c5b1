# A Ray node (head or worker) that can run Shunter jobs: CUDA runtime, torch 2.13.0, Ray,
# and our packages (the driver runs `python -m worker.driver`; workers import trainer_core).
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH DS_BUILD_OPS=0 HF_HUB_OFFLINE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev \
      build-essential git \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY worker ./worker
COPY trainer_core ./trainer_core
COPY migrations ./migrations
# torch first, pinned (a range would resolve a different CUDA build), then the project.
RUN pip install "torch==2.13.0" && pip install -e .
# Token auth: the same RAY_AUTH_TOKEN must be given to every node and to the API.
ENV RAY_AUTH_MODE=token
CMD ["ray", "start", "--head", "--block", "--dashboard-host=0.0.0.0", "--port=6380"]
