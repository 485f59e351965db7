# Two entry points for a new user: `make demo` and `make test`. Both create the local
# virtual environment (.venv) once, from nothing but python3, and reuse it afterwards.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What demo and test need. The ray and jaxmarl tests skip without their extras; CI
# (.ci/run) installs both first: `.venv/bin/pip install -e ".[ray,jaxmarl]"`.
EXTRAS ?= dev
# extra arguments of `make demo`, e.g. `make demo DEMO_ARGS="--n-outer 5 --seed 1"`
DEMO_ARGS ?=

.PHONY: demo test test-heavy test-slow lint bench results results-merl results-coverage results-lpac clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/feudal-es demo $(DEMO_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not heavy" -q --durations=15 -n auto --dist loadfile --no-loadscope-reorder

# the oracles too slow for `make test` (multi-device, subprocess and second-path
# equivalences, the README run as written); CI runs them after `make test`
test-heavy: $(STAMP)
	$(BIN)/python -m pytest -m "heavy and not slow" -q --durations=15 -n auto --dist loadfile --no-loadscope-reorder

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[jaxmarl]"
	$(BIN)/python -m bench.all

# Every plot and table of the README's Results section, from scratch (see the README for
# its wall time; `.venv/bin/python -m experiments.all --scale 0.05` is a smoke version).
results: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[jaxmarl]"
	$(BIN)/python -m experiments.all

# MERL's rover (7 arms x 10 seeds at 2M env steps): its own job, see the README
results-merl: $(STAMP)
	$(BIN)/python -m experiments.all --only rover_merl

# Coverage (4 arms fine-tuning the LPAC imitator's wide actor): its own job, resumable by arm
results-coverage: $(STAMP)
	$(BIN)/python -m experiments.all --only coverage --resume

# Coverage's LPAC imitation (20 imitators of ~10 min each): its own job, resumable by seed
results-lpac: $(STAMP)
	$(BIN)/python -m experiments.all --only coverage_lpac --resume

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
