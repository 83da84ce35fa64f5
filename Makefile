# Entry points. `make demo` and `make test` set everything up on a fresh machine (see README).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps build test test-unit test-sanitizers test-tsan test-asan test-asan-daemon fuzz-build \
  fuzz-check fuzz fuzz-long bench demo install package wheel clean shape gpu-check gpu-bundle mutate

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The full suite: build, CTest, the agent and emulation again under TSan and ASan+UBSan, the short
# fuzz run; then, whatever failed, the test inventory (each build's Catch2 cases against the CTest
# tests that run them, one to one: tests/test_inventory.py) and a summary of what ran and why each
# skipped test was skipped (tests/ctest_report.py over each step's JUnit file). Under CI (FR_CI=1, set by .ci/run) a skip
# whose reason this machine kind can meet fails the run.
JUNIT = ctest-junit.xml
test: build
	@rm -f $(BUILD)/$(JUNIT) build-tsan/$(JUNIT) build-asan/$(JUNIT)
	@status=0; \
	$(MAKE) --no-print-directory test-unit REPORT= || status=1; \
	$(MAKE) --no-print-directory test-sanitizers REPORT= || status=1; \
	$(MAKE) --no-print-directory fuzz-check || status=1; \
	python3 tests/test_inventory.py $(BUILD) build-tsan build-asan || status=1; \
	python3 tests/ctest_report.py $(BUILD)/$(JUNIT) build-tsan/$(JUNIT) build-asan/$(JUNIT) || status=1; \
	exit $$status

# REPORT= (empty) leaves the summary to `make test`.
REPORT ?= 1
report = $(if $(REPORT),python3 tests/ctest_report.py $(1)/$(JUNIT),true)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit $(JUNIT)
	@$(call report,$(BUILD))

test-sanitizers: test-tsan test-asan

test-tsan: deps
	cmake -S . -B build-tsan -DFR_SANITIZE=thread -DFR_AGENT_ONLY=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -L agent -j $(JOBS) --output-junit $(JUNIT)
	@$(call report,build-tsan)

test-asan: deps
	cmake -S . -B build-asan -DFR_SANITIZE=address -DFR_AGENT_ONLY=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" ctest --output-on-failure -L agent -j $(JOBS) --output-junit $(JUNIT)
	@$(call report,build-asan)

# Not part of `make test` (a second full build): the daemons, with whole simulated jobs through
# them, and the stack capture (ptrace, libdw, the frd stacks helper), under ASan+UBSan. The rank processes link the ASan runtime themselves and get the agent
# preloaded before it, hence verify_asan_link_order=0.
test-asan-daemon: deps
	cmake -S . -B build-asan-all -DFR_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan-all -j $(JOBS) --target frd fr-simjob fr-simjob-rank fr_agent \
	  fr-analyze frsim_nvml stack_target daemon_crc32c_test daemon_names_test daemon_clock_test \
	  daemon_watcher_test daemon_coordinator_test daemon_coordinator_uploads_test \
	  daemon_coordinator_recovery_test daemon_coordinator_status_test daemon_assembly_test \
	  daemon_node_state_test daemon_rpc_test daemon_e2e_test daemon_context_test
	cd build-asan-all && ASAN_OPTIONS="detect_leaks=1:verify_asan_link_order=0" \
	  UBSAN_OPTIONS="print_stacktrace=1" ctest --output-on-failure -L daemon -j $(JOBS)

# libFuzzer targets on their committed corpora (tests/fuzz/corpus/<target>/, see tests/fuzz/run.sh).
# fuzz-check: the short run of `make test`, which replays every committed input and writes nothing.
# fuzz: the same, then merges what it found into the corpus, minimized (commit the result).
# fuzz-long: FUZZ_SECONDS per target (default 600), merged likewise; crashes become regress-* inputs.
FUZZ_SECONDS ?= 600
fuzz-build: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -DFR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-fuzz -j $(JOBS) --target fr_fuzz_all

fuzz-check: fuzz-build
	bash tests/fuzz/run.sh build-fuzz

fuzz: fuzz-build
	bash tests/fuzz/run.sh build-fuzz --merge

fuzz-long: fuzz-build
	FR_FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh build-fuzz --merge

bench: build
	bash tests/bench/run.sh $(BUILD)

# fr on a real GPU with a real torch and NCCL (tests/gpu/README.md): prints a table of figures, or
# exits 77 with one line per missing prerequisite (no GPU, no torch with CUDA, no real NCCL). No
# `build` prerequisite: a GPU machine may have no network for deps; run.sh builds what is missing.
# gpu-bundle packs the check and this build's tools for a bare GPU machine (BUILD/gpu-bundle, at
# most 60 MiB, carried there and run as `bash run.sh` in it).
gpu-check:
	bash tests/gpu/run.sh $(BUILD)

gpu-bundle: build
	bash tests/gpu/bundle.sh $(BUILD)

# The shape check alone (also part of CTest, label `shape`): files over 700 lines, functions over
# 100 lines, outside tests/ (docs/architecture.md).
shape:
	python3 scripts/check-shape
	python3 scripts/check-format

# Mutation testing (scripts/mutate, docs/mutation.md), not part of `make test`: each mutation of
# tests/mutations/mutations.txt applied alone to a scratch copy (build-mutate/), its targets
# rebuilt and its tests run; prints the score and the survivors. MUTATE_ARGS passes options
# (e.g. MUTATE_ARGS="--only reader.ring_end --keep").
MUTATE_ARGS ?=
mutate:
	python3 scripts/mutate -j $(JOBS) $(MUTATE_ARGS)

# The demo installs only the packages its build needs (scripts/install-deps.sh --demo) and builds
# only what it runs. It says so in one line before each step, which then goes quietly to
# $(BUILD)/demo-build.log (its tail and path are shown if a step fails); then the demo itself.
# DEMO_MINUTES: the first build of DEMO_TARGETS on a 2-core machine, no ccache (a later one only
# rebuilds what changed).
DEMO_TARGETS = fr-simjob fr-simjob-rank frsim_nccl frsim_cuda fr_agent fr-analyze frd
DEMO_MINUTES = 7
demo:
	@mkdir -p $(BUILD); log=$(BUILD)/demo-build.log; : > $$log; \
	fail() { tail -n 40 $$log >&2; echo "make demo: $$1 failed; the whole log is $$log" >&2; \
	  exit 1; }; \
	echo "make demo: setting up packages (first run only, a few minutes)..."; \
	bash scripts/install-deps.sh --demo >> $$log 2>&1 || fail "setting up packages"; \
	echo "make demo: building the demo's $(words $(DEMO_TARGETS)) targets (about $(DEMO_MINUTES)" \
	  "minutes on 2 cores the first time; log in $$log)..."; \
	start=$$(date +%s); \
	{ cmake -S . -B $(BUILD) $(CMAKE_FLAGS) && \
	  cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS); } >> $$log 2>&1 || fail building; \
	echo "make demo: built in $$(( $$(date +%s) - start )) s"; echo
	@bash examples/demo/run.sh $(BUILD)

# Install (PREFIX, default /usr/local) or build the .deb packages into $(BUILD)/packages (see
# docs/install.md). COMPONENT=fr leaves out the emulation.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX) --strip $(if $(COMPONENT),--component $(COMPONENT))

package: build
	cd $(BUILD) && cpack -B packages

# The wheel a PyTorch user installs with pip (`pip install build/wheels/fr-*.whl`): the tools as
# cli/wheel links them (C++ runtime, gRPC, protobuf and the C libraries inside; glibc 2.28), the
# agent, and the Python package `fr` (scripts/build-wheel).
wheel: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target fr-run-wheel frd-wheel fr-analyze-wheel fr_agent
	python3 scripts/build-wheel --build $(BUILD) --out $(BUILD)/wheels

clean:
	rm -rf build build-tsan build-asan build-asan-all build-fuzz build-mutate

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
	cmake --build $(BUILD) -j $(JOBS) --target examples_images_test
	cd $(BUILD) && ctest -L images --output-on-failure
