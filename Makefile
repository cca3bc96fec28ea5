# Two commands on a fresh machine: `make demo` and `make test`.
# Everything is installed into .venv; torch is pinned to the CPU build first so
# pip never pulls the multi-gigabyte CUDA wheels.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint bench fuzz clean bytecode

$(STAMP): pyproject.toml Makefile
	@command -v $(PY) >/dev/null || { echo "python3 is required"; exit 1; }
	@$(PY) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "installing python3-venv with apt-get (Debian package): this python3 cannot create the .venv without it"; \
	  (apt-get update -qq && apt-get install -y -qq python3-venv) >/dev/null; }
	@# Slurm tests (tests/test_slurm_recover.py) need slurm-wlm + munge; installed when root with apt, else skipped.
	@test -x /usr/sbin/slurmctld || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "installing slurm-wlm and munge with apt-get (Debian packages): the Slurm tests start a real two-node Slurm on this machine" && \
	  (apt-get update -qq && apt-get install -y -qq slurm-wlm munge) >/dev/null 2>&1; } || \
	  echo "slurm-wlm/munge not installed: the Slurm tests will be skipped"
	@# Preemption tests (tests/test_training_preemption.py, test_slurm_preemption.py) read each worker's exit status with
	@# strace (torchrun reports none once signalled): Debian's strace, installed when root with apt, else those tests are skipped.
	@command -v strace >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "installing strace (Debian package, ~2 MB): the preemption tests read the workers' exit statuses with it" && \
	  (apt-get update -qq && apt-get install -y -qq strace) >/dev/null 2>&1; } || \
	  echo "strace not installed: the preemption tests that read worker exit statuses will be skipped"
	@# HTML report tests (tests/test_report.py) open `ckptctl report`'s page in a real headless browser:
	@# Debian's chromium, installed when root with apt (about 480 MB with its libraries), else those tests are skipped.
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "installing chromium (Debian package, ~480 MB with its libraries): the HTML report tests look at the page in a headless browser" && \
	  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "chromium not installed: the browser tests of the HTML report will be skipped"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	# torch is named again so the resolver keeps it: backtracking elsewhere (s3fs/aiobotocore
	# vs moto's botocore) once made pip swap it for a newer torch with CUDA wheels.
	$(BIN)/python -m pip install -q -e ".[torch,s3,fast,tensorboard,report,dev]" "$(TORCH_SPEC)"
	$(BIN)/python -c 'import sys, torch; s, v = "$(TORCH_SPEC)", torch.__version__.split("+")[0]; print("torch", torch.__version__); sys.exit(s.startswith("torch==") and s[7:] != v and f"got torch {v}, wanted {s}")'
	touch $(STAMP)

venv: $(STAMP)

# ckptctl's own modules compiled ahead (an editable install leaves them as source): where
# PYTHONDONTWRITEBYTECODE is set (CI images, this machine) every `ckptctl` process would
# otherwise compile ~50 modules again (~0.15 s each start; the suite starts hundreds).
# Up-to-date files are skipped, so this costs nothing the second time.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 ckptctl >/dev/null

demo: $(STAMP) bytecode
	$(BIN)/python examples/demo.py
	@echo "ckptctl is in $(VENV): run $(BIN)/ckptctl, or 'source $(BIN)/activate' and then ckptctl"

# Two workers, one test file each at a time (pytest-xdist, --dist loadfile keeps a file's
# module fixtures such as its Slurm cluster in one worker): most tests wait on real processes
# (torchrun, Slurm), so two overlap on two cores (one worker: ~27 min; two: ~16 min).
test: $(STAMP) lint bytecode
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

test-fast: $(STAMP) bytecode
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check ckptctl tests bench examples
	$(BIN)/mypy

# Longer fuzzing run (issue 9): 1,000 inputs per target through the capped worker; prints runs/s.
fuzz: $(STAMP)
	CKPTCTL_FUZZ_EXAMPLES=$${CKPTCTL_FUZZ_EXAMPLES:-1000} $(BIN)/python -m pytest -q -s tests/fuzz tests/test_hostile_metadata.py

bench: $(STAMP) bytecode
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-run .bench-data
