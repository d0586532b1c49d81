# Kiln's set-up commands: `make demo` builds the library and one trainer and runs it, `make test`
# builds everything and runs every test, `make check` runs the fast tier (no exhaustive float
# sweeps, whole-trainer runs or fuzzers). All three install the Debian packages first (a no-op
# when they are present).
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
TEST_JOBS ?= 2
CMAKE_ARGS ?=
# ctest labels outside the fast tier: exhaustive (float sweeps), slow (trainers), fuzz.
SLOW_LABELS ?= exhaustive|slow|fuzz

.PHONY: all deps configure build demo test check clean

all: build

deps:
	./scripts/install_deps.sh

configure:
	cmake -G Ninja -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	ninja -C $(BUILD_DIR) -j$(JOBS)

# The demo needs only libkiln and the MLP trainer, not the tests and benchmarks.
demo: deps
	$(MAKE) configure
	ninja -C $(BUILD_DIR) -j$(JOBS) fashion_mnist_mlp
	./$(BUILD_DIR)/examples/fashion_mnist_mlp

test: deps
	$(MAKE) build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(TEST_JOBS)

# The fast tier: the ctests that are no gtest case (their names have no '.') outside the slow
# labels, then the gtest cases but the exhaustive sweeps, in TEST_JOBS shard processes.
check: deps
	$(MAKE) build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(TEST_JOBS) -LE '$(SLOW_LABELS)' -E '\.'
	./scripts/check_gtests.sh $(BUILD_DIR) $(TEST_JOBS)

clean:
	rm -rf $(BUILD_DIR)
