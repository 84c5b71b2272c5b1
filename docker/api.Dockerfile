# The Shunter API + scheduler. No torch/CUDA here: the service never imports them; it only
# needs Ray's job-submission client to talk to the cluster (SHUNTER_RAY_ADDRESS).
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 SHUNTER_HOME=/var/lib/shunter
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY worker ./worker
COPY trainer_core ./trainer_core
COPY migrations ./migrations
# Editable (the service finds migrations/ next to its source); --no-deps + an explicit list:
# the API image skips torch/transformers/deepspeed.
RUN pip install --no-deps -e . \
 && pip install "fastapi==0.163.2" "uvicorn[standard]==0.54.0" "sqlalchemy==2.1.9" \
      "alembic==1.20.1" "psycopg[binary]==3.3.9" "pydantic==2.14.3" \
      "pydantic-settings==2.16.3" "pyyaml>=6" "httpx==0.28.1" "httpx-sse>=0.4" \
      "typer==0.29.1" "rich==15.0.0" "prometheus-client==0.26.0" "ray[default]==2.60.0"
EXPOSE 8000
# The admin token is written to $SHUNTER_HOME/admin.token on first start.
CMD ["shunter", "serve", "--host", "0.0.0.0", "--port", "8000"]
