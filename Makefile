# normlab: the two set-up commands are `make lab` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ARGS   ?=
# Without an NVIDIA GPU, take the CPU build of torch (the CUDA build is several GB).
# Override TORCH_SPEC / TORCH_INDEX to pick another build, e.g.
#   make test TORCH_INDEX=--extra-index-url=https://download.pytorch.org/whl/cpu
HAS_GPU     := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_SPEC  ?= $(if $(HAS_GPU),torch,torch==2.13.0)
TORCH_INDEX ?=

.PHONY: lab test install clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[lab,test]"
	touch $@

install: $(VENV)/.installed

lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ARGS)

test: install
	bash scripts/install_browser.sh $(VENV)
	$(PY) -m pytest tests -q -p no:cacheprovider $(ARGS)
	$(PY) -m pytest notebooks -q -p no:cacheprovider --nbval-lax --nbval-current-env \
		--nbval-sanitize-with notebooks/nbval_sanitize.cfg --nbval-cell-timeout=600

clean:
	rm -rf $(VENV) build *.egg-info
