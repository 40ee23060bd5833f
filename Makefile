# Two entry points do all set-up on a fresh machine:
#   make demo   virtualenv + wheel + the main job on ./demo-store
#   make test   virtualenv + wheel + lint + every test suite + quick benchmarks
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEPS   := $(VENV)/.deps-installed
WHEEL  := $(VENV)/.wheel-installed
STORE  ?= ./demo-store
# Rust and Python sources that go into the wheel and the sdist.
SOURCES := $(shell find rust python -type f \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name 'Cargo.toml' \) 2>/dev/null) Cargo.toml Cargo.lock pyproject.toml README.md
# The platform tag of the wheel: glibc 2.28 or later (RHEL 8, Debian 10, Ubuntu 20.04, ...).
MANYLINUX := manylinux_2_28

.PHONY: demo test wheel jar lint rust-test py-test bench bench-quick bench-interop bench-interop-scheduled \
	bench-peers bench-peers-quick fmt clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(DEPS): requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

# Issue 21: the JVM Spark connector (format "rmqstore-jvm", docs/spark-jvm.md): rust/jni's
# library, built in release and linked by zig against glibc $(MANYLINUX)'s symbols as the wheel's
# extension is (cargo-zigbuild of requirements-dev.txt, for the target x86_64-unknown-linux-gnu
# with the glibc version as suffix; in a target folder of its own, as maturin's zig linker
# differs and would make each build compile the core again for the other), inside the jar that Maven builds from rust/jni/java against
# the jars of the PySpark installed in the virtualenv (Java 17; Maven Central the first time,
# then offline from ~/.m2). The jar goes to python/rmqstore/jars/, and from there into the wheel
# (pyproject.toml's include); rmqstore.spark.jar_path() finds it beside the installed package
# (or where RMQSTORE_SPARK_JAR says).
JAR         := python/rmqstore/jars/rmqstore-spark.jar
JAR_SOURCES := $(shell find rust/core rust/jni -type f \( -name '*.rs' -o -name 'Cargo.toml' -o -name '*.java' -o -name 'pom.xml' -o -name 'spark_jars.py' -o -name 'org.apache.*' \) -not -path '*/target/*' 2>/dev/null) Cargo.toml Cargo.lock
MVN         ?= mvn
JNI_TARGET  := x86_64-unknown-linux-gnu
JNI_GLIBC   := $(subst _,.,$(patsubst manylinux_%,%,$(MANYLINUX)))

$(JAR): $(DEPS) $(JAR_SOURCES)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/cargo-zigbuild zigbuild --release --quiet \
		-p rmqstore-jni --target $(JNI_TARGET).$(JNI_GLIBC) --target-dir target/jni
	flags="$$($(BIN)/python rust/jni/java/spark_jars.py)" && cd rust/jni/java && \
		$(MVN) -q -B package $$flags -Dnative.dir="$(abspath target/jni/$(JNI_TARGET)/release)"
	mkdir -p $(dir $@)
	cp rust/jni/java/target/rmqstore-spark.jar $@

jar: $(JAR)

# Build the wheel users install and install it into the virtualenv: tests and the demo use the
# installed package, never the source tree. One abi3 wheel serves CPython 3.11 and later; zig
# (the ziglang package of requirements-dev.txt, found as `python3 -m ziglang` on PATH) links it
# against glibc $(MANYLINUX)'s symbols whatever this machine's glibc is; the release profile
# strips it. The sdist goes beside it (tests/package/test_wheel.py builds a wheel from it alone; the
# wheel here is built from the tree, so a change to Python files alone needs no Rust rebuild).
# The wheel carries the JVM connector's jar (rmqstore/jars/, above), so it is built first.
$(WHEEL): $(DEPS) $(SOURCES) $(JAR)
	rm -rf dist
	$(BIN)/maturin sdist --out dist
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/maturin build --release --quiet --out dist \
		--interpreter $(BIN)/python --zig --compatibility $(MANYLINUX)
	$(BIN)/python -m pip install --quiet --force-reinstall --no-deps dist/rmqstore-*.whl
	touch $@

wheel: $(WHEEL)

demo: $(WHEEL)
	$(BIN)/python -m rmqstore.demo $(STORE)

lint: $(WHEEL)
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches
	$(BIN)/mypy
	$(BIN)/python -m mypy.stubtest rmqstore._rmqstore

rust-test:
	cargo test --workspace --quiet

py-test: $(WHEEL) $(JAR)
	$(BIN)/pytest -q tests

# Benchmarks: pytest-benchmark writes JSON, benches/report.py turns it into the issues' figures
# (ratios against baselines measured in the same run) and checks the targets.
bench-quick: $(WHEEL) $(JAR)
	mkdir -p bench-results
	RMQ_BENCH_QUICK=1 $(BIN)/pytest -q benches --benchmark-json=bench-results/quick.json \
		--benchmark-columns=median,min,rounds
	$(BIN)/python benches/report.py bench-results/quick.json --quick

bench: $(WHEEL) $(JAR)
	mkdir -p bench-results
	$(BIN)/pytest -q benches --benchmark-json=bench-results/full.json \
		--benchmark-columns=median,min,rounds
	$(BIN)/python benches/report.py bench-results/full.json

# Issue 6: Apache RocketMQ's own putMessage against rmqstore's put_message, same run (needs
# java and mvn; the interop tests' Maven build of tests/interop/java).
bench-interop: $(WHEEL)
	$(BIN)/python benches/interop_side_by_side.py

# Issue 17: delay-level delivery and timer enqueue against RocketMQ 4.9.8 / 5.5.1 (java, mvn).
bench-interop-scheduled: $(WHEEL)
	$(BIN)/python benches/interop_scheduled.py

# Issue 20: rmqstore's core and Python API against Chronicle Queue, Kafka's log and rocketmq-rust's
# store, alternating processes, medians and ratios of one run (benches/peers/run.py; needs java,
# mvn and cargo; Maven Central and crates.io the first time). Quick: 3 rounds, small counts,
# rmqstore and Chronicle Queue (part of `make test`).
bench-peers: $(WHEEL)
	$(BIN)/python benches/peers/run.py

bench-peers-quick: $(WHEEL)
	$(BIN)/python benches/peers/run.py --quick

test: lint rust-test py-test bench-quick bench-peers-quick

fmt:
	cargo fmt --all
	$(BIN)/ruff format python tests benches
	$(BIN)/ruff check --fix python tests benches

clean:
	rm -rf dist $(VENV) target .pytest_cache .ruff_cache .mypy_cache
