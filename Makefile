# Two commands on a fresh machine:  `make demo` (PaCoRe on the embedded model)  and  `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint install

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# llama-cpp-python compiles from source the first time (about 8 minutes on 2 cores)
	$(PY) -m pip install -q -e '.[local,swe,bench,server,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pacore solve "What is 17*23?"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP)
	bash scripts/docker-setup.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -ra
