# shardq — top-level entry points. See README.md.
BUILD_DIR     ?= build
ASAN_DIR      ?= build-asan
TSAN_DIR      ?= build-tsan
JOBS          ?= $(shell nproc)
PYTHON        := /usr/bin/python3
CMAKE_FLAGS   := -G Ninja -DPython_EXECUTABLE=$(PYTHON)

.PHONY: all deps build test test-cc test-py demo test-asan test-tsan bench fuzz clean

all: build

deps:
	scripts/install-deps

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps build test-cc test-py

test-cc:
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Multi-process CLI tests and the Python package; /usr/bin/python3 has the
# Debian numpy/torch/grpcio (the python3 first on PATH may not).
test-py:
	SHARDQ_BIN=$(CURDIR)/$(BUILD_DIR)/bin $(PYTHON) -m pytest tests -q -p no:cacheprovider

demo: deps build
	$(BUILD_DIR)/bin/shardq demo

test-asan: deps
	cmake -S . -B $(ASAN_DIR) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDQ_SANITIZE=ON \
	  -DSHARDQ_BUILD_PYTHON=OFF -DSHARDQ_BUILD_BENCH=OFF
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(TSAN_DIR) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDQ_TSAN=ON \
	  -DSHARDQ_BUILD_PYTHON=OFF -DSHARDQ_BUILD_BENCH=OFF
	cmake --build $(TSAN_DIR) -j $(JOBS)
	cd $(TSAN_DIR) && ctest --output-on-failure -j $(JOBS) -L concurrency

bench: deps build
	@found=0; for b in bench/*/run; do [ -x "$$b" ] || continue; found=1; \
	  echo "== $$b"; $$b || exit 1; done; \
	  [ $$found = 1 ] || echo "no benchmarks under bench/ yet"

# libFuzzer targets (clang, in build-fuzz/), each run FUZZ_SECONDS (default
# 60); `make test` only replays their corpus, with GCC.
fuzz: deps
	fuzz/install-fuzz-deps
	fuzz/run-fuzzers

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR)

# Self-contained wheels for CPython 3.12 and 3.11 (pyenv) into dist/, with
# the libraries they link bundled by auditwheel (scripts/build-wheels), then
# each installed and run in a fresh venv outside the repo
# (tests/wheel/check-wheel). No apt packages needed to install them.
# Build dirs: build-wheel-cpXY/ (incremental), venvs in build/.
.PHONY: wheel
wheel:
	scripts/build-wheels
	tests/wheel/check-wheel
