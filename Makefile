# The two commands: `make run` and `make test`. Both install what they need.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
UFS        ?=

.PHONY: all deps build build-asan test test-unit run bench format format-check clean

all: build

deps:
	@scripts/install-deps.sh

build:
	@scripts/install-deps.sh --build-only
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

# clang so that the libFuzzer targets build alongside the sanitizers.
build-asan:
	@scripts/install-deps.sh --build-only
	CC=clang cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCISTERN_SANITIZE=ON -DCISTERN_FUZZ=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS) -- --no-print-directory

# Everything: formatting, the release build's unit and integration tests,
# then the sanitizer build's unit tests, the integration tests labelled
# "sanitized" (the daemons under real traffic; tests/CMakeLists.txt) and
# the fuzzers for a bounded time.
# Both phases run even when the first fails, so one run shows every failure.
test: deps format-check build build-asan
	@rc=0; skips=$(abspath $(BUILD))/skipped.txt; rm -f $$skips; export CIS_SKIP_LOG=$$skips; \
	(cd $(BUILD) && ctest --output-on-failure --timeout 900) || rc=1; \
	(cd $(ASAN_BUILD) && ctest --output-on-failure --timeout 900 -L 'unit|fuzz|sanitized') || rc=1; \
	if [ -s $$skips ]; then echo "Sections skipped on this machine:"; sort -u $$skips; fi; \
	exit $$rc

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

# What the stack needs, not the test rig: `deps` would npm-install s3rver,
# helm and kubectl, and hang where the npm registry cannot be reached.
run: build
	@scripts/install-deps.sh --run
	@scripts/run-local.sh "$(UFS)"

bench: deps build
	@bench/run-all.sh

FORMAT_FILES = $(shell git ls-files '*.c' '*.h')

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format-check: ok"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
