# Two entry points for a new user: `make demo` and `make test`. Both create the local
# virtual environment (.venv) once, from nothing but python3, and reuse it afterwards.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow lint bench results clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,ray,jaxmarl]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/feudal-es demo

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q --durations=15

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m bench.all

# Every plot and table of the README's Results section, from scratch (CPU-sized budget,
# about 40-60 min on 2 cores; `python -m experiments.all --scale 4` for longer runs).
results: $(STAMP)
	$(BIN)/python -m experiments.all

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
