# The two commands a newcomer needs: `make serve` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
export PYTHONUNBUFFERED := 1

.PHONY: setup setup-browser serve test test-fast test-gpu lint check-deploy bench-api bench-trainer bench-strategies bench-overhead bench-mfu

setup:
	bash scripts/bootstrap.sh

setup-browser:
	bash scripts/bootstrap.sh --browser

serve: setup
	$(BIN)/shunter serve

lint: setup
	$(BIN)/ruff check shunter service storage launcher worker trainer_core tests bench migrations
	$(BIN)/ruff format --check shunter service storage launcher worker trainer_core tests bench migrations
	$(BIN)/mypy shunter service storage launcher worker trainer_core
	$(BIN)/lint-imports

test: setup-browser lint
	$(BIN)/pytest -q --durations=20

test-fast: setup lint
	$(BIN)/pytest -q -m "not slow"

# The GPU set on this node's own Python/torch (no venv, no `setup`): PYTHON=python3 by default.
test-gpu:
	bash scripts/test_gpu.sh

bench-mfu:
	$${PYTHON:-python3} bench/mfu.py

bench-api: setup
	@# wrk (Debian) is the load generator; without it the bench falls back to a Python client.
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } || true
	$(BIN)/python bench/api_load.py

bench-trainer: setup
	$(BIN)/python bench/trainer_vs_hf.py

bench-strategies: setup
	$(BIN)/python bench/strategies.py

bench-overhead: setup
	$(BIN)/python bench/overhead.py

check-deploy:
	@# hadolint, docker-compose config, helm lint/template, kubernetes-validate, checkov (own venv)
	bash scripts/check_deploy.sh
