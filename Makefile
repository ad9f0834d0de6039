# Two commands for a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-podman podman-images lint format install migrate bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# xds-protos (the EPP's Envoy API) ships an older copy of OpenTelemetry's protos in the very
	# files opentelemetry-proto installs; whichever pip writes last wins. OpenTelemetry's go last.
	$(BIN)/python -m pip install --quiet --force-reinstall --no-deps \
	  "opentelemetry-proto==$$($(BIN)/python -c 'from importlib.metadata import version; print(version("opentelemetry-proto"))')"
	touch $(STAMP)

install: $(STAMP)

var/secret_key:
	mkdir -p var
	$(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > var/secret_key
	chmod 600 var/secret_key

migrate: install var/secret_key
	$(BIN)/python manage.py migrate --noinput

demo: migrate
	TRAFFICMGR_TLS=0 $(BIN)/python manage.py demo $(DEMO_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	SECRET_KEY=lint-only $(BIN)/mypy --config-file mypy-django.ini regions dashboard trafficmgr/asgi.py
	$(BIN)/python -m tests.architecture.layers
	$(BIN)/python -m tests.architecture.contract_keys

test: install lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The edit-test loop: the engine, the request-path core, the DNS responder, the simulator and
# the API units, without services, processes, browsers or long runs (under a minute).
FAST_TESTS := tests/routing tests/requestpath tests/dns tests/sim tests/regions/api tests/testing
test-fast: install
	$(BIN)/python -m pytest -q -m "not (integration or e2e or browser or slow)" $(FAST_TESTS) $(PYTEST_ARGS)

# The shipped deployment under Podman without an image registry (docs/operations.md): base
# images from Debian packages, trafficmgr:latest from the Dockerfile (both kept while current),
# then docker-compose.yml brought up, checked from the host and taken down.
podman-images:
	bash scripts/podman/build-base-images.sh
	bash scripts/podman/build-image.sh

test-podman: install
	$(BIN)/python -m pytest -m podman tests/deploy $(PYTEST_ARGS)

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The quick set (a few minutes, no services): the engine, the simulator and the request-path
# core; bench/README.md lists every benchmark. Results go to var/bench/ (git-ignored); the
# committed figures are bench/results/.
BENCH_OUT = var/bench
bench: install
	mkdir -p $(BENCH_OUT)
	$(BIN)/python -m bench.engine.table --runs 10 --json $(BENCH_OUT)/engine_table.json
	$(BIN)/python -m bench.engine.pick > $(BENCH_OUT)/engine_pick.txt && cat $(BENCH_OUT)/engine_pick.txt
	$(BIN)/python -m bench.engine.sim_policies --json $(BENCH_OUT)/sim_policies.json
	$(BIN)/python -m bench.gateway.core > $(BENCH_OUT)/requestpath_core.txt && cat $(BENCH_OUT)/requestpath_core.txt
	@echo "results: $(BENCH_OUT)/ (committed figures: bench/results/, see bench/README.md)"

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
