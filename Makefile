# Entry points. `make demo` and `make test` set everything up on a fresh machine (see README).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps build test test-unit test-sanitizers test-tsan test-asan test-asan-daemon fuzz bench demo clean

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The full suite: build, CTest, then the agent and emulation again under TSan and ASan+UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) test-sanitizers
	$(MAKE) fuzz

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitizers: test-tsan test-asan

test-tsan: deps
	cmake -S . -B build-tsan -DFR_SANITIZE=thread -DFR_AGENT_ONLY=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -L agent -j $(JOBS)

test-asan: deps
	cmake -S . -B build-asan -DFR_SANITIZE=address -DFR_AGENT_ONLY=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" ctest --output-on-failure -L agent -j $(JOBS)

# Not part of `make test` (a second full build): the daemons, with whole simulated jobs through
# them, under ASan+UBSan. The rank processes link the ASan runtime themselves and get the agent
# preloaded before it, hence verify_asan_link_order=0.
test-asan-daemon: deps
	cmake -S . -B build-asan-all -DFR_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan-all -j $(JOBS) --target frd fr-simjob fr-simjob-rank fr_agent \
	  daemon_logic_test daemon_rpc_test daemon_e2e_test
	cd build-asan-all && ASAN_OPTIONS="detect_leaks=1:verify_asan_link_order=0" \
	  UBSAN_OPTIONS="print_stacktrace=1" ctest --output-on-failure -L daemon -j $(JOBS)

# libFuzzer targets, each run briefly on its seed corpus.
fuzz: deps
	@if [ -f tests/fuzz/CMakeLists.txt ]; then \
	  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DFR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug && \
	  cmake --build build-fuzz -j $(JOBS) --target fr_fuzz_all && \
	  bash tests/fuzz/run.sh build-fuzz; \
	else echo "no fuzz targets"; fi

bench: build
	bash tests/bench/run.sh $(BUILD)

demo: build
	bash examples/demo/run.sh $(BUILD)

clean:
	rm -rf build build-tsan build-asan build-asan-all build-fuzz

# Container images with buildah, no registry needed: the agent's init container (the agent from
# this build) and frd built from source (docker/build-images.sh). The first run makes and caches a
# debootstrap base. `make test-images` builds them and runs the tools inside them (minutes, so
# not part of `make test`; it turns FR_IMAGE_TESTS on in $(BUILD), after which `make test` runs it too).
.PHONY: images test-images
images: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target fr_agent
	bash docker/build-images.sh $(BUILD)

test-images: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DFR_IMAGE_TESTS=ON
	cmake --build $(BUILD) -j $(JOBS) --target fr_images_tests
	cd $(BUILD) && ctest -L images --output-on-failure
