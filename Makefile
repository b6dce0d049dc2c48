# Set-up and the everyday commands.  Every target installs what it needs first (idempotent):
# a virtualenv in .venv with this project (editable) and its test tools.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-nodes demo-pipeline test lint bench peers clean

$(STAMP): setup.cfg pyproject.toml $(wildcard agent/_spawn-src/*.c agent/_spawn-src/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,observe]' --config-settings editable_mode=compat
	@# the native spawner is optional (no C compiler: posix_spawn); never silently missing
	@$(PY) -c "from pilot.agent import native; native.why_not and print('*** WARNING:', native.why_not)"
	touch $(STAMP)

demo: $(STAMP)            ## the partitions RFC flow: two partitions, units, a reconfig
	$(PY) examples/partitions_demo.py

demo-nodes: $(STAMP)      ## a multi-node pilot: four logical nodes, a node daemon each
	$(PY) examples/multinode_demo.py

demo-pipeline: $(STAMP)   ## an EnTK-style pipeline of stages, a reconfig between them; docs/timeline.png
	$(PY) examples/pipeline.py --plot docs/timeline.png

# the end-to-end and fault tests again without agent/_spawn-src/ (the pure-Python spawn path)
PURE_TESTS = tests/test_pilot_e2e.py tests/test_faults.py tests/test_work_conserving.py \
	tests/test_unit_output.py tests/test_function_units.py

test: $(STAMP)            ## lint + the whole test suite + the pure-Python spawn path
	$(PY) -m ruff check .
	$(PY) -m pytest -q
	PILOT_NATIVE=0 $(PY) -m pytest -q $(PURE_TESTS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: $(STAMP)           ## throughput, workloads, reconfig, scheduler, store, bring-up (~10 min)
	$(PY) bench/throughput.py
	$(PY) bench/workloads.py
	$(PY) bench/reconfig.py
	$(PY) bench/scheduler.py
	$(PY) bench/store.py
	$(PY) bench/bringup.py

PEERS ?= limit cf parsl dask ray
peers: $(STAMP)           ## the shared peer benchmark with our row: PEERS="limit" for a quick one
	PEERS="$(PEERS)" BENCH_OUT=$(CURDIR)/bench/results/peers \
	OURS_CMD="$(CURDIR)/$(PY) $(CURDIR)/bench/peers_ours.py" \
	bash ../shared/bench/peers/run_all.sh

clean:
	rm -rf $(VENV) *.egg-info agent/*.so
