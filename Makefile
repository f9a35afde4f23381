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

# Short forms of every benchmark, under 10 minutes on 2 cores; the bench extra brings the peers
# (Ray Tune, SMAC3, LCDB; Optuna is a core dependency). Long forms below; figures and commands in
# docs/benchmarks.md.
bench:
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,bench]"
	$(PY) bench/capacity.py --agents 100 --seconds 60
	$(PY) bench/bus_floor.py --messages 5000
	$(PY) -m bench.search --seeds 3 --problems synthetic:0.9,synthetic:0.3,mfh6:good,lcdb:1485 \
		--methods swarm-tpe,swarm-heuristic,optuna-tpe-hyperband,optuna-tpe-sh,ray-asha,random
	$(PY) -m bench.search.savings --pools 5 --ideas 40
	$(PY) -m bench.search.verdicts --problem mfh6:bad --seeds 1
	$(PY) -m bench.search.false_stacks 2,2,2 0,0,2 --swarms 10 --trials 20
	rm -rf /tmp/swarm-util && $(PY) bench/utilisation.py --minutes 2 --workspace /tmp/swarm-util
	$(PY) bench/ledger_bench.py --events 100000

bench-long:
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,bench]"
	$(PY) bench/capacity.py --agents 100 --seconds 300
	$(PY) bench/capacity.py --agents 100 --seconds 300 --steady
	$(PY) bench/bus_floor.py --messages 20000
	$(PY) -m bench.search --seeds 10 \
		--methods swarm-tpe,swarm-heuristic,swarm-portfolio,optuna-tpe-hyperband,optuna-tpe-sh,ray-asha,random
	$(PY) -m bench.search --seeds 5 --problems synthetic:0.9,synthetic:0.3,mfh6:good,lcdb:1485 \
		--methods swarm-heuristic,swarm-heuristic-screened --plots /tmp/plots-screened
	$(PY) -m bench.search.verdicts --problem mfh6:bad --seeds 4 --no-screens
	$(PY) -m bench.search.verdicts --problem mfh6:bad --seeds 4
	$(PY) -m bench.search.false_stacks 2,2,2 0,0,2 0,0,2.5 0,0,3 1,1,2
	$(PY) -m bench.search --seeds 2 --problems synthetic:0.9,mfh6:good \
		--methods swarm-gp,smac-mf --plots /tmp/plots-gp
	$(PY) -m bench.search --seeds 10 --problems synthetic:0.9:4,synthetic:0.3:4 \
		--methods swarm-tpe,swarm-heuristic,optuna-tpe-hyperband,optuna-tpe-sh,ray-asha,random
	$(PY) -m bench.search.savings --pools 20 --ideas 40
	$(PY) -m bench.search.savings --pools 20 --ideas 40 --noise 4
	rm -rf /tmp/swarm-util && $(PY) bench/utilisation.py --minutes 10 --workspace /tmp/swarm-util
	$(PY) bench/ledger_bench.py --events 1000000
	$(PY) bench/training_bench.py --seeds 5
	$(PY) bench/budget_noise.py --seeds 4
	$(PY) -m bench.readable_text
	rm -rf /tmp/bytelm-bench && $(PY) -m bench.search.bytelm --minutes 15 --repeats 2 \
		--methods swarm-tpe,optuna-tpe-hyperband --out /tmp/bytelm-bench
