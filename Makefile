# The targets CI and the README run. Each does its own set-up (scripts/setup-host is idempotent).
PY := .venv/bin/python
SRO := .venv/bin/sro

.PHONY: setup demo test lint types unit e2e bench chaos clean-local

setup:
	./scripts/setup-host

# `make demo DEMO_FLAGS=--nvidia`: the same story on the nvidia-gpu recipe over the simulated NVIDIA driver.
demo: setup
	$(SRO) demo $(DEMO_FLAGS)

# Everything CI checks: lint, types, architecture contracts, unit tests, then e2e on the local cluster.
test: setup lint types unit e2e

lint:
	.venv/bin/ruff check sro tests benchmarks
	.venv/bin/ruff format --check sro tests benchmarks
	.venv/bin/lint-imports

types:
	.venv/bin/mypy sro

unit:
	$(PY) -m pytest -m "not e2e" -q --timeout 120

# The cluster comes up before pytest, with its progress on the terminal (a first run builds Kubernetes
# for minutes, longer than any per-test timeout); a cluster this target started, it stops again.
e2e:
	@if $(SRO) local status >/dev/null 2>&1; then started=; else started=1; $(SRO) local up || exit 1; fi; \
	$(PY) -m pytest -m e2e -q --durations=25; rc=$$?; \
	if [ -n "$$started" ]; then $(SRO) local down; fi; \
	exit $$rc

bench: setup
	$(PY) -m benchmarks

# the seeded fault campaign on the local cluster (issue 25); e.g. make chaos CHAOS_FLAGS="--seed 7 --minutes 10"
chaos: setup
	$(PY) -m benchmarks chaos $(CHAOS_FLAGS)

clean-local:
	$(SRO) local down --purge
