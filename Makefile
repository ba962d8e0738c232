# normlab: the two set-up commands are `make lab` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ARGS   ?=
# torch: with an NVIDIA GPU (nvidia-smi lists one), TORCH_SPEC=torch from pip's indexes (a CUDA
# build). Without one, TORCH_SPEC=torch==2.13.0 and TORCH_INDEX=cpu: the CPU build, taken from
# TORCH_CPU_INDEX (PyTorch's CPU index, added as an extra index: its 2.13.0+cpu outranks PyPI's
# CUDA 2.13.0) when that index answers; otherwise from pip's configured indexes, and the install
# stops if pip would pull the CUDA build (nvidia-* wheels, several GB). Overrides, e.g.
#   make install TORCH_INDEX=--extra-index-url=https://my.mirror/whl/cpu   (any pip options)
#   make install TORCH_INDEX=                    (no check: whatever pip resolves)
#   make install TORCH_SPEC=torch==2.14.0
HAS_GPU         := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_SPEC      ?= $(if $(HAS_GPU),torch,torch==2.13.0)
TORCH_INDEX     ?= $(if $(HAS_GPU),,cpu)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# JupyterLab refuses to start as root (containers) unless given --allow-root.
LAB_UID         ?= $(shell id -u)
LAB_ROOT_FLAG   := $(if $(filter 0,$(LAB_UID)),--allow-root)

# Tests run on JOBS processes (pytest-xdist): the interpreter is single-threaded.
JOBS            ?= 2
# nbval's options: outputs compared where a cell asks (NBVAL_CHECK_OUTPUT), volatile text masked.
NBVAL           := --nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
                   --nbval-cell-timeout=600

.PHONY: lab test test-quick install clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@set -e; index='$(TORCH_INDEX)'; \
	if [ "$$index" = cpu ]; then \
	  if $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=15)' '$(TORCH_CPU_INDEX)' 2>/dev/null; then \
	    index='--extra-index-url $(TORCH_CPU_INDEX)'; \
	    echo "no NVIDIA GPU: torch's CPU build, $(TORCH_SPEC) from $(TORCH_CPU_INDEX)"; \
	  else \
	    index=; \
	    echo "no NVIDIA GPU, and $(TORCH_CPU_INDEX) does not answer: $(TORCH_SPEC) from pip's configured indexes (pip config list)"; \
	  fi; \
	  $(PY) -m pip install -q --dry-run --ignore-installed --report $(VENV)/torch-plan.json $$index '$(TORCH_SPEC)'; \
	  if $(PY) -c 'import json, sys; sys.exit(any(p["metadata"]["name"].lower().startswith("nvidia-") for p in json.load(open(sys.argv[1]))["install"]))' $(VENV)/torch-plan.json; then :; else \
	    echo "error: $(TORCH_SPEC) resolves to the CUDA build here (nvidia-* wheels, several GB), on a machine without an NVIDIA GPU."; \
	    echo "  Take the CPU build from a reachable index: make install TORCH_INDEX=--extra-index-url=URL (a mirror of $(TORCH_CPU_INDEX)),"; \
	    echo "  or accept the CUDA build: make install TORCH_INDEX="; \
	    exit 1; \
	  fi; \
	fi; \
	echo "$(PY) -m pip install -q $$index '$(TORCH_SPEC)'"; \
	$(PY) -m pip install -q $$index '$(TORCH_SPEC)'
	$(PY) -m pip install -q -e ".[lab,test]"
	touch $@

install: $(VENV)/.installed

lab: install
	$(if $(LAB_ROOT_FLAG),@echo "make lab: running as root (uid 0, e.g. in a container): starting JupyterLab with --allow-root")
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(LAB_ROOT_FLAG) $(ARGS)

# The unit tests and the notebooks in one run: --dist loadfile keeps each file on one worker, so
# a notebook's cells run in order on its one kernel while other workers take other files.
test: install
	bash scripts/install_browser.sh $(VENV)
	$(PY) -m pytest tests notebooks -q -p no:cacheprovider -n $(JOBS) --dist loadfile $(NBVAL) $(ARGS)

# The edit-test loop: the unit tests but those marked slow and the browser test (under 3 minutes
# on 2 cores); every kernel family still runs against its fp64 reference.
test-quick: install
	$(PY) -m pytest tests -q -p no:cacheprovider -n $(JOBS) -m "not slow and not browser" $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
