# Kiln's set-up commands: `make demo` builds and runs the demo, `make test` builds and runs
# every test. Both install the Debian packages first (a no-op when they are present).
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
TEST_JOBS ?= 2
CMAKE_ARGS ?=

.PHONY: all deps build demo test clean

all: build

deps:
	./scripts/install_deps.sh

build:
	cmake -G Ninja -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)
	ninja -C $(BUILD_DIR) -j$(JOBS)

demo: deps
	$(MAKE) build
	./$(BUILD_DIR)/examples/fashion_mnist_mlp

test: deps
	$(MAKE) build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(TEST_JOBS)

clean:
	rm -rf $(BUILD_DIR)
