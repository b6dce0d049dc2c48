# Set-up and the everyday commands.  Every target installs what it needs first (idempotent):
# a virtualenv in .venv with this project (editable) and its test tools.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# pytest-xdist workers for `make test` (tests/conftest.py: the modules that must run alone):
# twice the cores this process may use, at most 8.  The suite mostly waits (for processes,
# deadlines, the store): on 2 cores, measured in a fresh clone, 2 workers kept the cores ~30%
# busy and ran the suite in 9:43; 4 workers ~55% and 6:23, every test passing.
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min(8, 2 * len(os.sched_getaffinity(0))))')

.PHONY: demo demo-nodes demo-pipeline test lint typecheck docs bench peers chaos clean bytecode

$(STAMP): setup.cfg pyproject.toml $(wildcard agent/_spawn-src/*.c agent/_spawn-src/*.h) pilot/rp_bin/radical-pilot-hello.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,observe,parsl,snakemake]' --config-settings editable_mode=compat
	@# the native spawner is optional (no C compiler: posix_spawn); never silently missing
	@$(PY) -c "from pilot.agent import native; native.why_not and print('*** WARNING:', native.why_not)"
	touch $(STAMP)

# Suites nobody here wrote, run against rp.Executor and pilot.parsl (tests/test_executor.py,
# tests/test_parsl_executor.py), installed from their packages, not copied here:
# - CPython's test_concurrent_futures: the interpreter's own `test` package when it ships it,
#   else Debian's libpython3.X-testsuite, unpacked (not installed) into .venv/cpython-tests;
# - Parsl's tests (in the parsl package): their conftest needs pytest < 9, and one regression
#   test pandas; both go into .venv/parsl-pytest, seen only by that run.
SUITES := $(VENV)/.suites
$(SUITES): $(STAMP)
	@v=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	if ! $(PY) -c 'import test.test_concurrent_futures' 2>/dev/null \
	    && [ ! -e $(VENV)/cpython-tests/test_concurrent_futures.py ] \
	    && [ ! -d $(VENV)/cpython-tests/test_concurrent_futures ]; then \
	  d=$$(mktemp -d); \
	  (cd $$d && (apt-get download -q libpython$$v-testsuite \
	    || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get download -q libpython$$v-testsuite; }) \
	    && dpkg-deb -x libpython$$v-testsuite_*.deb x) >/dev/null 2>&1 \
	  && mkdir -p $(VENV)/cpython-tests \
	  && cp -r $$d/x/usr/lib/python$$v/test/test_concurrent_futures* $(VENV)/cpython-tests/ \
	  || echo "*** WARNING: CPython's test_concurrent_futures not found (libpython$$v-testsuite): its run is skipped"; \
	  rm -rf $$d; \
	fi
	$(PY) -m pip install -q --no-deps --target $(VENV)/parsl-pytest 'pytest>=8,<9' 'pandas>=2'
	touch $(SUITES)

demo: $(STAMP) bytecode            ## the partitions RFC flow: two partitions, units, a reconfig
	$(PY) examples/partitions_demo.py

demo-nodes: $(STAMP) bytecode      ## a multi-node pilot: four logical nodes, a node daemon each
	$(PY) examples/multinode_demo.py

demo-pipeline: $(STAMP) bytecode   ## an EnTK-style pipeline of stages, a reconfig between them; docs/timeline.png
	$(PY) examples/pipeline.py --plot docs/timeline.png

# the end-to-end and fault tests again without agent/_spawn-src/ (the pure-Python spawn path)
PURE_TESTS = tests/test_pilot_e2e.py tests/test_faults.py tests/test_work_conserving.py \
	tests/test_unit_output.py tests/test_function_units.py

# Every process a pilot starts (bootstrap, agents, node daemons) imports the project anew: its
# bytecode compiled once here, so that none compiles it again (under PYTHONDONTWRITEBYTECODE=1,
# as CI sets it, each did: 0.2 s of every start); only what changed is compiled again.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 agent partition pmgr pilot tests bench examples >/dev/null

test: $(STAMP) $(SUITES) bytecode  ## lint + type check + the whole test suite + the pure-Python spawn path
	$(PY) -m ruff check .
	$(PY) tests/typecheck.py
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup
	PILOT_NATIVE=0 $(PY) -m pytest -q -n $(WORKERS) --dist loadgroup $(PURE_TESTS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)                ## mypy over pilot/, agent/, partition/, pmgr/ (tests/typecheck.py)
	$(PY) tests/typecheck.py

# The manual (mkdocs.yml, docs/): into build/site, warnings as errors (a broken link or
# reference, a public name without a docstring); its runnable examples are tests/test_docs.py.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,observe,parsl,snakemake,docs]' --config-settings editable_mode=compat
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)       ## the manual into build/site (mkdocs build --strict)
	@# build/docs-src (the installed package's layout, in symlinks) must exist before mkdocs
	@# reads its config: mkdocstrings drops a search path that does not exist yet
	$(PY) -c "import sys; sys.path.insert(0, 'docs'); import hooks; hooks.source_tree()"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(STAMP) bytecode           ## zero-launch, latency, a call's cost, throughput, workloads, reconfig, scheduler, store, bring-up, executors, grow (~19 min)
	$(PY) bench/zero.py
	$(PY) bench/latency.py
	$(PY) bench/call_cost.py
	$(PY) bench/throughput.py
	$(PY) bench/workloads.py
	$(PY) bench/reconfig.py
	$(PY) bench/scheduler.py
	$(PY) bench/store.py
	$(PY) bench/bringup.py
	$(PY) bench/executors.py
	$(PY) bench/grow.py

# The randomized fault campaign (tests/chaos/, docs/guarantees.md): SEEDS seeds from FIRST, each
# a plan of faults drawn from its seed over a workload of real processes, then the checker;
# RESOURCE=slurm-netns or mix (root: the namespace SLURM of tests/slurm.sh) too.  Exit code 1
# on any violation; a failing seed prints the command that replays it.  Three short seeds run
# in `make test` (tests/test_chaos.py).
SEEDS ?= 20
FIRST ?= 1
RESOURCE ?= local.nodes4
chaos: $(STAMP) bytecode           ## the fault campaign: SEEDS=20 FIRST=1 RESOURCE=local.nodes4 (~50 s a seed)
	$(PY) -m tests.chaos.run --seeds $(SEEDS) --first $(FIRST) --resource $(RESOURCE)

PEERS ?= limit cf parsl dask ray
peers: $(STAMP) bytecode           ## the shared peer benchmark with our row: PEERS="limit" for a quick one
	PEERS="$(PEERS)" BENCH_OUT=$(CURDIR)/bench/results/peers \
	OURS_CMD="$(CURDIR)/$(PY) $(CURDIR)/bench/peers_ours.py && $(CURDIR)/$(PY) $(CURDIR)/bench/executors.py --peers-row" \
	bash ../shared/bench/peers/run_all.sh

clean:
	rm -rf $(VENV) *.egg-info agent/*.so
