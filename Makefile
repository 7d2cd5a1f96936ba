# docflow — the front door. `make help` lists the targets.

SHELL := /usr/bin/env bash
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/docflow
# Build outputs live outside the clone, so fresh clones (CI) reuse them.
export CARGO_TARGET_DIR ?= $(CACHE)/target
export DOCFLOW_BROKER_BIN ?= $(CURDIR)/.tools/bin/nisshi
export DOCFLOW_PDFIUM_LIB ?= $(CURDIR)/.tools/lib/libpdfium.so

CARGO ?= cargo
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)
# Every service under services/ (each package is docflow-<folder>): `make run` builds their
# binaries (the stages start theirs as their isolated workers).
SERVICES := $(patsubst services/%,-p docflow-%,$(wildcard services/*))

.DEFAULT_GOAL := help
.PHONY: help tools run test image image-test image-bench bench lint fmt fmt-check clippy schemas-check registry gpu-bundle docs-check

help: ## List targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

tools: ## Install the embedded broker (Nisshi), libpdfium, the OCR/embedding models, onnxruntime, the Confluent Python client (interop tests) into the cache, link them under .tools/; and Debian's chromium + chromedriver (the console's browser test)
	@./scripts/install-broker.sh
	@./scripts/install-pdfium.sh
	@./scripts/install-models.sh
	@./scripts/install-python-clients.sh
	@./scripts/install-browser.sh

# What `make run` needs of `make tools` (the Python client and the browser are the tests').
RUN_TOOLS := ./scripts/install-broker.sh && ./scripts/install-pdfium.sh && ./scripts/install-models.sh

run: ## Start the embedded stack and push the sample documents through it end to end (the first run installs the tools and builds docflow side by side)
	@echo "==> installing the broker, pdfium and the models while docflow builds (cargo's progress below)"
	@( $(RUN_TOOLS) ) & tools=$$!; \
	  $(CARGO) build -p docflow-cli $(SERVICES); built=$$?; \
	  if [ $$built != 0 ]; then echo "make run: the build failed (above); waiting for the tools' install to end" >&2; fi; \
	  wait $$tools; installed=$$?; \
	  if [ $$installed != 0 ]; then echo "make run: installing the tools failed (above)" >&2; fi; \
	  [ $$built = 0 ] && [ $$installed = 0 ]
	@RUST_LOG=$${RUST_LOG:-warn} $(CARGO_TARGET_DIR)/debug/docflow dev $(ARGS)

# NVRTC (no GPU needed) for the test that compiles the GPU kernels; see scripts/install-models.sh.
TEST_ENV := LD_LIBRARY_PATH=$(CURDIR)/.tools/cuda$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}

test: docs-check tools ## Run every test: the docs' links first, then unit, integration (real broker, registry, SQLite; Postgres when DATABASE_URL is set)
ifeq ($(NEXTEST),yes)
	$(TEST_ENV) $(CARGO) nextest run --workspace --no-fail-fast
else
	$(TEST_ENV) $(CARGO) test --workspace --no-fail-fast
endif

image: tools ## Build the OCI image (every binary, libpdfium, onnxruntime, the models, their system libraries) into dist/: oci-archive, docker-archive, SBOM, digest (root; installs umoci + skopeo from Debian's packages)
	@./scripts/build-image.sh

image-test: tools ## Build the image, check its archives, and run every service from its root filesystem end to end (root; tools/testbed/tests/chaos/image.rs)
	@./scripts/image-test.sh

image-bench: tools ## The image's size by part, build time and each service's cold start from it: bench/results/image.md (root)
	@./scripts/image-bench.sh

bench: tools ## Run the benchmarks (release build) and write bench/results/*.md (ST_PYTHON=venv python with sentence-transformers + rapidocr adds the reference runs; RAPIDOCR_PYTHON=venv python with rapidocr the real-page cost table)
	$(CARGO) run --release --quiet -p docflow-bench --bin runtime-bench -- --out bench/results/runtime.md
	$(CARGO) run --release --quiet -p docflow-bench --bin ingest-bench -- --out bench/results/ingest.md
	$(CARGO) build --release --quiet -p docflow-thumbnails
	$(CARGO) run --release --quiet -p docflow-bench --bin thumbnails-bench -- --out bench/results/thumbnails.md
	$(CARGO) run --release --quiet -p docflow-bench --bin analytics-bench -- --out bench/results/analytics.md
	$(CARGO) build --release --quiet -p docflow-testbed
	$(CARGO) run --release --quiet -p docflow-bench --bin replay-bench -- --out bench/results/replay.md
	$(CARGO) run --release --quiet -p docflow-bench --bin quarantine-bench -- --out bench/results/quarantine.md
	$(CARGO) run --release --quiet -p docflow-bench --bin autoscale-bench -- --out bench/results/autoscale-local.md
	$(CARGO) run --release --quiet -p docflow-cli --bin docflow -- simulate --out bench/results/autoscale.md
	@./scripts/fetch-bench-pdfs.sh
	$(CARGO) build --release --quiet -p docflow-ocr-embeddings
	$(CARGO) run --release --quiet -p docflow-bench --bin ocr-embed-bench -- --out bench/results/ocr-embed.md \
		--real-pdfs .tools/bench-pdfs --pages-out .run/ocr-pages $(if $(ST_PYTHON),--st-python $(ST_PYTHON))
	$(if $(ST_PYTHON),$(ST_PYTHON) bench/reference/rapidocr_bench.py .run/ocr-pages bench/results/ocr-reference.md 10)
	$(CARGO) run --release --quiet -p docflow-bench --bin embed-bench -- fairness --out bench/results/fairness.md
	$(CARGO) run --release --quiet -p docflow-bench --bin ocr-pages-bench -- --out bench/results/ocr-pages.md \
		--csv .run/ocr-pages.csv $(if $(RAPIDOCR_PYTHON),--rapidocr-python $(RAPIDOCR_PYTHON))
	$(CARGO) run --release --quiet -p docflow-bench --bin ocr-pages-bench -- --orientation-only \
		--out bench/results/ocr-orientation.md
	$(CARGO) run --release --quiet -p docflow-bench --bin ocr-pages-bench -- --memory-only --per-pdf 2 --pages 40 \
		--out bench/results/ocr-memory.md
	$(if $(RAPIDOCR_PYTHON),$(CARGO) run --release --quiet -p docflow-bench --bin ocr-pages-bench -- --cost-only \
		--out bench/results/ocr-cost.md --rapidocr-python $(RAPIDOCR_PYTHON))

gpu-bundle: tools ## Put the release embed-bench and the model as f16 safetensors under .tools/gpu (what bench/gpu/check.sh runs on a GPU machine)
	$(CARGO) build --release --quiet -p docflow-bench --bin embed-bench
	@mkdir -p .tools/gpu
	cp $(CARGO_TARGET_DIR)/release/embed-bench .tools/gpu/embed-bench
	strip .tools/gpu/embed-bench
	.tools/gpu/embed-bench export-f16 --from .tools/models/minilm --to .tools/gpu/minilm-f16
	@du -sh .tools/gpu

docs-check: ## Check every relative link and heading anchor in README.md, docs/ and bench/results/ (python3, no build)
	python3 scripts/docs-check.py

schemas-check: ## Prove every committed schema version is BACKWARD_TRANSITIVE compatible with the earlier ones
	$(CARGO) run --quiet -p docflow-cli -- schemas check --dir schemas --level BACKWARD_TRANSITIVE

lint: fmt-check clippy ## Formatting and clippy (-D warnings)

fmt: ## Format the code
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

registry: ## Run the schema registry alone on 127.0.0.1:8081 (SQLite file .run/registry.db)
	@mkdir -p .run
	$(CARGO) run --quiet -p docflow-registry -- --database-url sqlite://.run/registry.db
