# Every target sets itself up: a fresh checkout needs only python3 (3.10+) and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; pyproject's range accepts it, so pip pulls no CUDA wheels.
# On a GPU machine: make TORCH_SPEC='torch==2.13.0' with the CUDA index of your choice.
TORCH_SPEC ?= torch==2.13.0
MODEL_DIR ?= models/default
STAMP := $(VENV)/.installed

.PHONY: help install serve test test-unit test-integration lint typecheck model clean

help:
	@echo "make serve   run the service on 127.0.0.1:8000 with the default model"
	@echo "make test    lint, type-check and run every test"
	@echo "make model   build the default model into $(MODEL_DIR)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(STAMP)

# Serve SENTIMENT_MODEL_PATH when set, else the default model (built first if missing).
serve: $(STAMP)
ifeq ($(SENTIMENT_MODEL_PATH),)
	@test -f $(MODEL_DIR)/config.json || { echo "No model in $(MODEL_DIR): building the default model first (make model)."; $(MAKE) --no-print-directory model; }
	$(PY) -m service serve --model-path $(MODEL_DIR)
else
	$(PY) -m service serve
endif

model: $(STAMP)
	$(PY) -m training build-default --out $(MODEL_DIR)

lint: $(STAMP)
	$(VENV)/bin/ruff check service training tests
	$(VENV)/bin/ruff format --check service training tests

typecheck: $(STAMP)
	$(VENV)/bin/mypy service training

test: lint typecheck
	$(PY) -m pytest

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
