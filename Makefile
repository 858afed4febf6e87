# The two commands of the README: `make test` and `make serve`.
# Everything lives in .venv at the repository root; packages come by name from pip.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU build on hosts without an NPU; NPU hosts use 2.14.0 with torch-npu 2.14.0.
TORCH_VERSION ?= 2.13.0
# Where the CPU build comes from. PyPI's plain torch==X on Linux x86_64 is the CUDA build
# (plus ~3 GB of nvidia-* packages); the CPU build, torch==X+cpu, is on PyTorch's own index
# or a local wheel (pip's find-links). pip prefers +cpu when it can see one. TORCH_INDEX
# adds PyTorch's CPU index, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu.
TORCH_INDEX ?=
TORCH_PIP := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# The build scripts/check_torch_build.py requires after install: cpu, or any.
TORCH_BUILD ?= cpu
VLLM_VERSION := 0.33.0
STAMP := $(VENV)/.installed

.PHONY: venv lint test unit integration e2e serve model clean-venv

venv: $(STAMP)

# Rebuilt when what it installs changes (not on every Makefile edit).
$(STAMP): pyproject.toml requirements/vllm-cpu.txt scripts/check_torch_build.py \
		scripts/install_torchvision.py scripts/torchvision_cpu/ops.cpp
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIP) torch==$(TORCH_VERSION)
	$(BIN)/python scripts/check_torch_build.py --expect $(TORCH_BUILD)
	# vLLM's wheel lists CUDA-only requirements: take it alone, then its portable ones.
	$(BIN)/pip install --quiet $(TORCH_PIP) -r requirements/vllm-cpu.txt torch==$(TORCH_VERSION)
	$(BIN)/pip install --quiet --no-deps vllm==$(VLLM_VERSION)
	# pd: the Mooncake TCP transport and vllm-router for tests/e2e/test_pd_disaggregation.py
	# (Mooncake's engine also needs the system's libibverbs1; without it that test skips).
	# spec: Arctic Inference's suffix trees (an sdist with a C++ extension) built against
	# this torch, not in an isolated environment (that would fetch PyPI's CUDA torch); its
	# build tools first, and the venv's bin on PATH, where pip's cmake lands.
	$(BIN)/pip install --quiet nanobind==2.9.2 cmake ninja wheel
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pip install --quiet --no-build-isolation \
		arctic-inference==0.3.0
	# ray: the Ray cluster of tests/e2e/test_ray_multinode.py.
	$(BIN)/pip install --quiet -e '.[dev,pd,spec,ray]'
	# torchvision (vLLM's vision-language and Qwen3.5 modules import it) paired with this
	# torch; PyPI's x86_64 wheels link CUDA torch, so the script rebuilds its operator
	# schemas against the CPU build where the wheel's own library does not load.
	$(BIN)/python scripts/install_torchvision.py
	touch $@

lint: venv
	$(BIN)/ruff check src tests examples scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

# `make test` runs everything; a contributor runs the layer they touched (docs/testing.md):
# unit (seconds: the core, the adapters with fakes of the ports, no compiler), integration
# (the real vLLM, the native kernels, the emulated NPU), e2e (`vllm serve` processes).
# PYTEST_ARGS passes options, e.g. PYTEST_ARGS='-k graphs -x'. Each target runs its tests as
# chunks in JOBS pytest processes side by side (scripts/run_suite.py; default: the cores, at
# most 2; JOBS=1 runs them one after another).
PYTEST_ARGS ?=
JOBS ?=

unit: venv
	$(BIN)/python scripts/run_suite.py --layer unit $(if $(JOBS),--jobs $(JOBS)) $(PYTEST_ARGS)

integration: venv
	$(BIN)/python scripts/run_suite.py --layer integration $(if $(JOBS),--jobs $(JOBS)) $(PYTEST_ARGS)

e2e: venv
	$(BIN)/python scripts/run_suite.py --layer e2e $(if $(JOBS),--jobs $(JOBS)) $(PYTEST_ARGS)

test: venv lint
	$(BIN)/python scripts/run_suite.py $(if $(JOBS),--jobs $(JOBS)) $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)

# The demo: a small Llama-style model made locally (scripts/make_models.py, skipped when
# already there), served on this machine's host device through the plugin.
MODEL_STYLE ?= llama
MODEL_SIZE ?= tiny
MODEL_DIR ?= models/$(MODEL_SIZE)-$(MODEL_STYLE)
PORT ?= 8000
# The host's KV cache in bytes; empty: the plugin's host default (at most 4 GiB, half of
# the memory available once the weights are loaded).
KV_CACHE_BYTES ?=
# Empty: the host's default path, compiled (one Dynamo trace + Inductor; the first start
# of a model compiles and caches it under VLLM_CACHE_ROOT). SERVE_FLAGS=--enforce-eager
# serves every op eagerly instead.
SERVE_FLAGS ?=

model: venv
	$(BIN)/python scripts/make_models.py --out $(MODEL_DIR) --style $(MODEL_STYLE) --size $(MODEL_SIZE)

serve: venv model
	@echo "When the server says 'Application startup complete', try:"
	@echo "  curl -s http://127.0.0.1:$(PORT)/v1/completions -H 'Content-Type: application/json' -d '{\"model\": \"$(MODEL_DIR)\", \"prompt\": \"The plugin\", \"max_tokens\": 16, \"temperature\": 0}'"
	VLLM_ASCEND_DEVICE=cpu $(BIN)/vllm serve $(MODEL_DIR) --host 127.0.0.1 --port $(PORT) \
		--dtype float32 --max-model-len 2048 $(SERVE_FLAGS) \
		$(if $(KV_CACHE_BYTES),--kv-cache-memory-bytes $(KV_CACHE_BYTES)) --shutdown-timeout 5

# Lowering of kernels/triton for Ascend targets up to HIVM (scripts/kernels_check.py), in a
# venv of its own: triton-ascend installs as `triton`, beside the serving venv's triton.
# No torch: lowering ahead of time needs none. pybind11: triton-ascend imports it
# without declaring it. KERNELS_CHECK_ARGS passes options (--cases FILE, --keep DIR).
KERNELS_VENV := .cache/kernels-venv
KERNELS_STAMP := $(KERNELS_VENV)/.installed
KERNELS_CHECK_ARGS ?=

.PHONY: kernels-check

$(KERNELS_STAMP):
	test -x $(KERNELS_VENV)/bin/python || $(PYTHON) -m venv $(KERNELS_VENV)
	$(KERNELS_VENV)/bin/pip install --quiet triton-ascend==3.2.0 ascendnpu-ir==1.2.0 pybind11
	touch $@

kernels-check: $(KERNELS_STAMP)
	$(KERNELS_VENV)/bin/python scripts/kernels_check.py $(KERNELS_CHECK_ARGS)
