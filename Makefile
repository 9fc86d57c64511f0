# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench install java compiler clean

$(STAMP): pyproject.toml hanet/store/_speedups.c hanet/protocol/_speedups.c
	@command -v java >/dev/null 2>&1 || $(MAKE) java
	@(command -v cc >/dev/null 2>&1 && test -f /usr/include/zlib.h) || $(MAKE) compiler
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=25.1"
	$(BIN)/python -m pip install -q -e ".[cli,spark,connect]" --group test --group lint
	touch $(STAMP)

install: $(STAMP)

# The benchmarks' extras: Twisted (bench/decode.py's baseline) and iperf3 (bench/bulk.py,
# bench/replication.py compare against it when it is installed).
bench: $(STAMP)
	$(BIN)/python -m pip install -q --group bench
	@command -v iperf3 >/dev/null 2>&1 || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iperf3) || echo "iperf3 not installed: its columns are skipped"
	@echo "benchmarks ready: the commands are in the README's Benchmarks table"

# PySpark needs a JVM; install Debian's JRE when none is on the machine.
java:
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless

# The native record scanner (hanet/store/_speedups.c) needs a C compiler, Python's headers and
# zlib's; install Debian's when missing (without them the install still works, pure Python).
compiler:
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc python3-dev zlib1g-dev || echo "no compiler: hanet falls back to the pure-Python scanner"

demo: $(STAMP)
	$(BIN)/hanet demo

lint: $(STAMP)
	$(BIN)/ruff check hanet tests examples bench
	$(BIN)/ruff format --check hanet tests examples bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV)
