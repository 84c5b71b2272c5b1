# syntax=docker/dockerfile:1
# The Shunter API + scheduler: `shunter[server]`, no torch, no CUDA. It talks to the Ray
# cluster over the Ray Jobs API (SHUNTER_RAY_ADDRESS). Ray's version comes from pyproject.toml
# (the one place it is pinned), so the API and the worker images always match.

FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shunter ./shunter
COPY service ./service
COPY storage ./storage
COPY launcher ./launcher
COPY worker ./worker
COPY trainer_core ./trainer_core
COPY migrations ./migrations
# Editable: the service finds migrations/ next to its source.
RUN pip install -e ".[server]"

FROM python:3.11.14-slim-bookworm
ENV PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH SHUNTER_HOME=/var/lib/shunter \
    SHUNTER_HOST=0.0.0.0 SHUNTER_PORT=8000
RUN groupadd --system --gid 10001 shunter \
 && useradd --system --uid 10001 --gid shunter --home-dir /var/lib/shunter --create-home shunter
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=12 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# The admin token is written to $SHUNTER_HOME/admin.token (0600) on first start.
CMD ["shunter", "serve"]
