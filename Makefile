# `make demo`, `make test` and `make docs` each create .venv when it is missing or older than the package metadata.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test test-fast test-numerics lint docs benchmark clean

# setup.cfg states compatible ranges; constraints.txt the exact versions tested, which every install here uses.
$(STAMP): setup.cfg pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[tensorflow,jax,inspection,train,test,docs]"
	# Test-only timm parity: --no-deps keeps the CPU torch (tests/conftest.py makes torchvision's ops optional).
	$(BIN)/python -m pip install --quiet --no-deps timm==1.0.31 torchvision==0.28.0
	# Test-only: the TF Serving request protos; --no-deps, since it requires the CUDA `tensorflow` package.
	$(BIN)/python -m pip install --quiet --no-deps tensorflow-serving-api==2.21.0
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m vit_keras.demo --output-dir demo_output

lint: $(STAMP)
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link, a missing page or an
# API reference that no longer resolves. The model zoo's tables are generated from the package (docs/hooks.py).
# The build runs the package (generated tables, figures): Keras and matplotlib get a temporary home of their own, so a
# user's keras.json (its backend) cannot change the site and the build leaves nothing in the home directory.
docs: $(STAMP)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	KERAS_HOME="$$tmp/keras" MPLCONFIGDIR="$$tmp/matplotlib" XDG_CACHE_HOME="$$tmp/cache" NO_MKDOCS_2_WARNING=1 \
		$(BIN)/mkdocs build --strict --site-dir site

.PHONY: docs-check
# `make docs`, then every page opened in headless Chromium 1280 and 1400 px wide (scripts/docs_check.py): fails on a
# code block clipped or wrapped, a table wider than the column, a page that scrolls sideways, or a table cell's code
# token broken across lines. Needs Chromium: `apt-get install chromium` (Debian, Ubuntu), or CHROMIUM=/path/to/chrome.
# About two minutes on 2 cores; not part of `make test`.
docs-check: docs
	@command -v "$${CHROMIUM:-chromium}" >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		{ echo "make docs-check needs Chromium: apt-get install chromium (or set CHROMIUM=/path/to/chrome)"; exit 2; }
	$(BIN)/python scripts/docs_check.py site --width 1280 1400

# Test tiers. `make test` is the whole suite, the one CI runs (.ci/run): about 25 minutes on 2 cores.
# `make test-fast` leaves out the tests marked slow (pytest -m "not slow"): about 3 minutes on 2 cores, for the
# edit-test loop; run `make test` before pushing. A test is marked @pytest.mark.slow (a whole file: `pytestmark`)
# when it takes over 1.5 s on 2 cores, its fixtures' setup included (`pytest --durations=0` shows each phase), or
# when it starts a Python process, trains for epochs, exports SavedModel/TFLite/ONNX files, or runs a notebook or
# the demo; a parametrized test is marked whole when one of its cases is. `pytest -m slow` runs only those.
# Both spread the test files over TEST_WORKERS pytest processes (pytest-xdist, one file per process at a time, so a
# file's module fixtures are built once): many tests wait on subprocesses, file writes and Python, not on the CPU.
TEST_WORKERS ?= 2
test: lint docs
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

test-fast: lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" --durations=10

# The numerics-sensitive tests (pytest -m numerics) once per setting that changes float arithmetic: oneDNN capped
# at lower instruction sets or off, TFLite without XNNPACK, 1 and 2 threads. Prints each bound beside the spread
# measured across the settings and its margin (also written to numerics_report.md); fails if any setting fails.
# Not part of `make test` (26 minutes on 2 shared cores), which runs the same tests once under the defaults.
test-numerics: $(STAMP)
	$(BIN)/python scripts/test_numerics.py --report numerics_report.md

# The peers: keras-hub (--no-deps: its tensorflow-text requirement would pull the CUDA `tensorflow` package) and
# the earlier Keras port vit-keras 0.2.0, in a directory of its own since it also imports as `vit_keras`.
PEERS := $(VENV)/.peers
$(PEERS): $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps keras-hub==0.32.0
	# ONNX Runtime on timm's ONNX export (the `benchmark` extra: onnxruntime and onnx, pinned there).
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[tensorflow,jax,inspection,train,test,benchmark]"
	$(BIN)/python -m pip install --quiet --no-deps --target .venv-vitkeras020 vit-keras==0.2.0 validators==0.35.0 \
		opencv-python-headless==5.0.0.93
	touch $(PEERS)

# The tables of docs/performance.md: float32 everywhere (every peer, every Keras backend), bfloat16 at batch 16 for
# the precision rule. `python scripts/benchmark.py` with no arguments runs the whole matrix instead (about 2 hours on 2 cores).
# Each run prints the machine class and writes benchmarks/<date>-<machine class>-<suite>-<precision>.json.
benchmark: $(PEERS)
	$(BIN)/python scripts/benchmark.py --suite inference --precisions float32
	$(BIN)/python scripts/benchmark.py --suite inference --precisions bfloat16 --batch-sizes 16 \
		--libraries vit_keras,keras-hub,timm --backends tensorflow
	$(BIN)/python scripts/benchmark.py --suite training --precisions float32

clean:
	rm -rf $(VENV) .venv-vitkeras020 demo_output .pytest_cache site

.PHONY: benchmark-export
# Size, CPU latency and agreement of every deployment format for the demo's trained model (run `make demo` first).
benchmark-export: $(STAMP)
	$(BIN)/python scripts/benchmark_export.py --keras-model demo_output/vit_digits.keras

.PHONY: compat-check
# vit-keras 0.2.0's own test suite, unmodified, against this package's compatibility modules (vit_keras.vit, .utils,
# .visualize). Only its tests/ directory is copied out of the sdist, so its own `vit_keras` cannot shadow this one.
# tests/test_urls.py checks that 0.2.0's download URLs answer: it needs the internet, so it runs only with
# COMPAT_NETWORK=1.
COMPAT_NETWORK ?= 0
compat-check: $(STAMP)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: vit-keras==0.2.0 -d "$$tmp/sdist"; \
	tar -xzf "$$tmp"/sdist/vit_keras-0.2.0.tar.gz -C "$$tmp"; \
	mkdir "$$tmp/run"; cp -r "$$tmp/vit_keras-0.2.0/tests" "$$tmp/run/tests"; \
	select=$$([ "$(COMPAT_NETWORK)" = 1 ] || echo "--deselect tests/test_urls.py::test_urls"); \
	cd "$$tmp/run" && PYTHONPATH="$(CURDIR)" "$(abspath $(BIN))/python" -m pytest -v -rA -p no:cacheprovider \
		--rootdir . $$select tests

.PHONY: check-jax-install
# The core install plus [jax] in a fresh virtualenv (from PyPI; a few minutes): TensorFlow must not be installed,
# and a model, a timm directory (from_pretrained), predict and fit must run on JAX.
check-jax-install:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install --quiet --upgrade pip; \
	"$$tmp/venv/bin/python" -m pip install --quiet -c "$(CURDIR)/constraints.txt" "$(CURDIR)[jax]"; \
	cd "$$tmp" && KERAS_BACKEND=jax "$$tmp/venv/bin/python" "$(CURDIR)/scripts/check_core_install.py" \
		--timm-dir "$(CURDIR)/tests/fixtures/family/timm_deit_distilled"

.PHONY: check-wheel
# `python -m build` (sdist and wheel), `twine check`, then the wheel with [tensorflow] and constraints.txt in a fresh
# virtualenv under a temporary directory, a quickstart run there, and the same beside numpy one patch release from
# the pin (scripts/check_wheel.py). Not part of `make test`: 8 to 13 minutes on 2 shared cores, most of it pip installing TensorFlow.
check-wheel: $(STAMP)
	$(BIN)/python scripts/check_wheel.py
