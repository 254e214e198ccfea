# shardq — top-level entry points. See README.md.
BUILD_DIR     ?= build
ASAN_DIR      ?= build-asan
TSAN_DIR      ?= build-tsan
JOBS          ?= $(shell nproc)
PYTHON        := /usr/bin/python3
CMAKE_FLAGS   := -G Ninja -DPython_EXECUTABLE=$(PYTHON)

.PHONY: all deps build test test-cc test-py demo test-asan test-tsan bench clean

all: build

deps:
	scripts/install-deps

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: deps build
	$(BUILD_DIR)/bin/shardq demo

test-asan: deps
	cmake -S . -B $(ASAN_DIR) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDQ_SANITIZE=ON
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(TSAN_DIR) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDQ_TSAN=ON
	cmake --build $(TSAN_DIR) -j $(JOBS)
	cd $(TSAN_DIR) && ctest --output-on-failure -j $(JOBS) -L concurrency

bench: deps build
	@for b in bench/*/run; do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR)
