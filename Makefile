# Two commands: `make serve` and `make test`. Everything else is a helper for them.
# The Python the container image runs (deploy/Dockerfile: 3.12) when the machine has it — as python3.12 or
# as a pyenv-installed 3.12 — else python3 (3.11 or newer, pyproject.toml). `make PYTHON=...` picks another.
# On 3.12 the coverage of `make test` uses sys.monitoring, which costs almost nothing once each line has been
# seen: tests/gateway took 40 s with coverage against 38 s without, where 3.11's C tracer took 52 s against 37 s.
PYTHON ?= $(or $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12),\
	$(shell $(p) -c 'import sys; print("$(p)" if sys.version_info[:2] == (3, 12) else "")' 2>/dev/null))),python3)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV := .venv
BIN := $(VENV)/bin
# One stamp per Python version: a .venv made by another Python is made again.
STAMP := $(VENV)/.installed-$(PY_VERSION)

# Only `make serve` uses the demo config; tests build their own configuration.
serve: export HEARTH_CONFIG ?= examples/hearth.demo.yaml

.PHONY: serve test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/hearth migrate
	$(BIN)/hearth serve

# pytest in two parts: all but the `serial` tests on four workers (xdist; most tests wait on sockets,
# databases and child processes, so a third worker on two cores measured 139 s instead of 182 s, and a fourth
# 229 s instead of 291 s on tests/gateway + tests/workflows with coverage; a fifth was slower again, 286 s;
# worksteal: a worker that runs out takes tests queued on a busy one, so a slow test late in a queue — the
# schemathesis run takes 33 s — leaves no tail; 441 against 467 s, one run each),
# then those on two workers (they mostly wait for faults to play out: one worker kept the CPU half idle, 232 s;
# two took 143-145 s with those whose checks bound a recovery to a few seconds never side by side —
# E2E_TIGHT_BOUNDS in tests/conftest.py — and 117-124 s without; three raced a fault test's own checks):
# tests/e2e/ (real processes; fault and load tests that should not share the CPU with four), which is where every
# serial test lives (tests/test_test_hygiene.py), so the second run collects only that directory. Coverage of
# src/hearth is collected across both and reported at the end (the test processes only: the e2e
# tests' Hearth processes are not measured).
# Line coverage: on 3.12 only lines can be measured with sys.monitoring (branches need 3.14), and with the
# C tracer even 3.11's branch coverage cost +54 % of tests/gateway's time against +40 % for lines; for it, run
# `make test PYTEST_COV="--cov=hearth --cov-branch"` (which then takes the C tracer).
PYTEST_COV ?= --cov=hearth
PYTEST_WORKERS ?= 4
E2E_WORKERS ?= 2
# Bytecode caches on, whatever the shell says: the suite starts hundreds of Python processes (xdist workers,
# `hearth serve` and CLI children), and PYTHONDONTWRITEBYTECODE=1 made each compile every module again —
# about a second per process here (`import hearth.app`: 4.3 s against 3.4 s). Caches go to __pycache__/ (ignored).
test: export PYTHONDONTWRITEBYTECODE :=
# sys.monitoring coverage where the Python has it (3.12+; see PYTHON above), coverage's C tracer before and for branches.
test: export COVERAGE_CORE := $(if $(or $(filter 3.11,$(PY_VERSION)),$(findstring --cov-branch,$(PYTEST_COV))),ctrace,sysmon)
# mypy (17 s without its cache) runs beside the e2e part, which leaves about 40 % of the two cores idle; its
# output is printed when both are done, and either failing fails `make test`.
test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal -m "not serial" $(PYTEST_COV) --cov-report=
	@echo "$(BIN)/mypy (in the background) and the e2e part"; \
	$(BIN)/mypy > $(VENV)/mypy.out 2>&1 & mypy=$$!; \
	$(BIN)/pytest -q -n $(E2E_WORKERS) --dist loadgroup -m serial tests/e2e $(PYTEST_COV) --cov-append \
		--cov-report=term:skip-covered; e2e=$$?; \
	wait $$mypy; typed=$$?; echo "$(BIN)/mypy:"; cat $(VENV)/mypy.out; \
	test $$e2e -eq 0 -a $$typed -eq 0

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/gateway_bench.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.*

# The gRPC door's generated code (docs/grpc.md): src/hearth/v1 from proto/hearth/v1/ai_service.proto, with the
# .proto copied beside it (package data). The generated files are committed; tests/grpc_api/test_generated_code.py
# regenerates them into a temporary directory and fails if they differ.
.PHONY: proto
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=src --pyi_out=src --grpc_python_out=src \
		proto/hearth/v1/ai_service.proto
	cp proto/hearth/v1/ai_service.proto src/hearth/v1/ai_service.proto
