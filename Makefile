# Everyday tasks. The README's two commands need nothing but Python; these assume the venv exists.
PY := .venv/bin/python

.PHONY: setup test lint format bench bench-long

setup:
	python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e ".[dev]"

test:
	$(PY) -m pytest

lint:
	.venv/bin/ruff format --check . && .venv/bin/ruff check . && .venv/bin/mypy

format:
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .

# Short forms of every benchmark (minutes); long forms are documented in README.md.
bench:
	$(PY) bench/ledger_bench.py --events 100000
	$(PY) bench/training_bench.py --seeds 2 --scale 0.2
	$(PY) bench/budget_noise.py --seeds 2

bench-long:
	$(PY) bench/ledger_bench.py --events 1000000
	$(PY) bench/training_bench.py --seeds 5
	$(PY) bench/budget_noise.py --seeds 4
	rm -rf /tmp/swarm-30min && .venv/bin/swarm --workspace /tmp/swarm-30min start --agents 4 --minutes 30
	$(PY) bench/swarm_figures.py /tmp/swarm-30min
