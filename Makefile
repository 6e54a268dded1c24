# scalify — hand-written Makefile (STYLE 12).
#
#   make demo    install what is missing, build, run the bundled samples
#   make test    every test; ends with "N passed, N failed"
#   make deps    install missing Debian packages (apt-get, as root)
#   make asan / ubsan    the test suite under AddressSanitizer / UBSan
#   make fuzz    each reader and the checker under libFuzzer for FUZZ_SECONDS (default 60),
#                then structural mutations of the sample texts (make fuzz-mutate)
#   make bench   benchmarks (measure, never assert timing); the checker on the full-size
#                pairs of samples/manifest.json, then the 405B training step of samples/bigtrain,
#                then the scaling section (make bench-scale: deep pairs at 1x, 10x, 100x)
#   make install PREFIX=/usr/local [DESTDIR=]   the binary, PREFIX/share/scalify (rules,
#                templates, assets) and the man page; make uninstall removes exactly those
#   make lint / format / clean / samples

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2 -g
SAN     ?=
CFLAGS_STRICT = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes \
                -Wmissing-prototypes -Wno-unused-parameter -MMD -MP
PKGS    = zlib libdeflate libprotobuf-c jansson libcmark libcgraph libgvc libpng
CFLAGS_ALL = $(CFLAGS_STRICT) $(OPT) $(SAN) -Isrc -I$(BUILD)/gen $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(CFLAGS)
LIBS    = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread
FUZZ_SECONDS ?= 60

SRC      := $(filter-out src/main.c,$(wildcard src/*.c))
LIB_OBJ  := $(SRC:src/%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/hlo.pb-c.o
MAIN_OBJ := $(BUILD)/obj/main.o
TEST_SRC := $(wildcard tests/unit/*.c)
TEST_OBJ := $(TEST_SRC:tests/unit/%.c=$(BUILD)/obj/test_%.o)
PB_GEN   := $(BUILD)/gen/hlo.pb-c.c $(BUILD)/gen/hlo.pb-c.h

.PHONY: install uninstall all test test-jax demo deps asan ubsan fuzz fuzz-mutate bench bench-scale lint format clean samples check-deps

all: check-deps $(BUILD)/scalify

# Installs missing packages when root, otherwise fails with what to install.
deps:
	@tools/deps.sh

check-deps:
	@tools/deps.sh

# Order-only on check-deps: under make -j the generator must wait for the
# packages (protoc-c) that check-deps installs on a fresh machine.
$(BUILD)/gen/hlo.pb-c.c $(BUILD)/gen/hlo.pb-c.h &: proto/hlo.proto | check-deps
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen proto/hlo.proto

$(BUILD)/obj/hlo.pb-c.o: $(BUILD)/gen/hlo.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Wmissing-prototypes -Wshadow,$(CFLAGS_ALL)) -c $< -o $@

$(BUILD)/obj/%.o: src/%.c | $(PB_GEN)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/test_%.o: tests/unit/%.c | $(PB_GEN)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -c $< -o $@

# Everything but main.c, as an archive: each program links only what it uses.
$(BUILD)/libscalify.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/scalify: $(MAIN_OBJ) $(BUILD)/libscalify.a
	$(CC) $(OPT) $(SAN) $^ $(LIBS) -o $@

$(BUILD)/run-tests: $(TEST_OBJ) $(BUILD)/libscalify.a
	$(CC) $(OPT) $(SAN) $^ $(LIBS) -o $@

$(BUILD)/bench-parse: tests/bench/bench_parse.c $(BUILD)/libscalify.a
	$(CC) $(CFLAGS_ALL) $^ $(LIBS) -o $@

$(BUILD)/bench-egraph: tests/bench/bench_egraph.c $(BUILD)/libscalify.a
	$(CC) $(CFLAGS_ALL) $^ $(LIBS) -o $@

# The test runner finds its inputs relative to the repository root and runs the
# scalify binary as users do (SCALIFY names it).
test: check-deps $(BUILD)/scalify $(BUILD)/run-tests
	SCALIFY=$(BUILD)/scalify $(BUILD)/run-tests

# The JAX exporter (python/scalify_jax) against the built binary; needs a
# Python with JAX: make test-jax JAX_PYTHON=venv/bin/python. Without one the
# tests are skipped and say so; `make test` never needs Python.
JAX_PYTHON ?= python3
test-jax: $(BUILD)/scalify
	SCALIFY=$(BUILD)/scalify $(JAX_PYTHON) -m unittest discover -s python/tests -v

asan:
	$(MAKE) test BUILD=build/asan OPT="-O1 -g" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DSCALIFY_INVARIANTS -DSCALIFY_MOVE_ON_GROW"

ubsan:
	$(MAKE) test BUILD=build/ubsan OPT="-O1 -g" SAN="-fsanitize=undefined -fno-sanitize-recover=undefined -DSCALIFY_INVARIANTS"

# libFuzzer needs clang; installed here when missing (root only).
FUZZ_TARGETS := text pb check
fuzz: check-deps
	@command -v clang >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q clang; } || \
	  { echo "make fuzz needs clang (apt-get install clang)"; exit 1; }
	$(MAKE) $(FUZZ_TARGETS:%=build/fuzz/fuzz-%) BUILD=build/fuzz CC=clang OPT="-O1 -g" \
	  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus-$$t; \
	  cp tests/fuzz/seeds-$$t/* build/fuzz/corpus-$$t/ 2>/dev/null; \
	  echo "fuzzing $$t for $(FUZZ_SECONDS)s"; \
	  dict=tests/fuzz/$$t.dict; [ -f $$dict ] || dict=tests/fuzz/text.dict; \
	  build/fuzz/fuzz-$$t -dict=$$dict -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096 \
	    build/fuzz/corpus-$$t || exit 1; \
	done
	$(MAKE) fuzz-mutate

# Structural mutations of the sample texts (tests/fuzz/mutate.c), ASan and
# UBSan on; any C compiler. A crash leaves its input in build/asan/mutant.hlo.
# Then bug-like mutations of the corpora's correct distributed programs,
# checked against their baselines (pair-mutant.hlo; FUZZ_SEED varies them):
# contradictions between the rules and execution are kept beside it.
FUZZ_SEED ?= 1
fuzz-mutate:
	$(MAKE) build/asan/mutate BUILD=build/asan OPT="-O1 -g" \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DSCALIFY_MOVE_ON_GROW"
	build/asan/mutate -o build/asan/mutant.hlo -t $(FUZZ_SECONDS) -n 0 $(wildcard samples/*/*.hlo tests/fuzz/seeds-text/*.hlo)
	build/asan/mutate -o build/asan/pair-mutant.hlo -t $(FUZZ_SECONDS) -n 0 -s $(FUZZ_SEED) \
	  $(foreach m,probe fresh fresh2 fresh3 fresh4,-m samples/$(m)/manifest.json)

$(BUILD)/mutate: tests/fuzz/mutate.c $(BUILD)/libscalify.a
	$(CC) $(CFLAGS_ALL) $^ $(LIBS) -o $@

build/fuzz/fuzz-%: tests/fuzz/fuzz_%.c build/fuzz/libscalify.a
	$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $^ $(LIBS) -o $@

$(BUILD)/bench-check: tests/bench/bench_check.c $(BUILD)/libscalify.a
	$(CC) $(CFLAGS_ALL) $^ $(LIBS) -o $@

$(BUILD)/gen-deep: tests/bench/gen_deep.c
	$(CC) $(CFLAGS_ALL) $^ -o $@

$(BUILD)/bench-scale: tests/bench/bench_scale.c $(BUILD)/libscalify.a
	$(CC) $(CFLAGS_ALL) $^ $(LIBS) -o $@

bench: check-deps $(BUILD)/scalify $(BUILD)/bench-parse $(BUILD)/bench-egraph $(BUILD)/bench-check
	$(BUILD)/bench-parse
	$(BUILD)/bench-egraph
	$(BUILD)/bench-check samples/manifest.json samples/bigtrain/manifest.json
	$(MAKE) bench-scale

# The scaling section alone (deep pairs at 1x, 10x, 100x the 405B pair's
# instructions in build/deep/, about 1.2 GB; BENCH_SCALE_MAX=10 skips 100x).
bench-scale: check-deps $(BUILD)/scalify $(BUILD)/gen-deep $(BUILD)/bench-scale
	$(BUILD)/bench-scale $(BUILD)/scalify $(BUILD)/gen-deep samples/wild/manifest.json tests/bench/RESULTS.md

# The binary finds its data relative to itself (src/home.h): PREFIX/bin/scalify
# reads PREFIX/share/scalify, so nothing about PREFIX is compiled in. Install
# records every file it puts down (paths relative to DESTDIR) in
# share/scalify/installed-files; uninstall removes those files, that list, and
# the folders of share/scalify they leave empty, nothing else.
PREFIX  ?= /usr/local
DATA_FILES := $(wildcard rules/*.rules rules/README.md templates/*.html templates/findings/*.md assets/*)
INST_DATA  := $(PREFIX)/share/scalify
INST_LIST  := $(INST_DATA)/installed-files

install: all
	@set -e; d='$(DESTDIR)'; list=$$(mktemp); \
	install -d "$$d$(PREFIX)/bin" "$$d$(PREFIX)/share/man/man1"; \
	install -m 755 $(BUILD)/scalify "$$d$(PREFIX)/bin/scalify"; echo "$(PREFIX)/bin/scalify" >> $$list; \
	install -m 644 docs/scalify.1 "$$d$(PREFIX)/share/man/man1/scalify.1"; \
	echo "$(PREFIX)/share/man/man1/scalify.1" >> $$list; \
	for f in $(DATA_FILES); do \
	  install -d "$$d$(INST_DATA)/$$(dirname $$f)"; install -m 644 $$f "$$d$(INST_DATA)/$$f"; \
	  echo "$(INST_DATA)/$$f" >> $$list; \
	done; \
	echo "$(INST_LIST)" >> $$list; install -m 644 $$list "$$d$(INST_LIST)"; rm -f $$list; \
	echo "installed $$(wc -l < "$$d$(INST_LIST)") files under $$d$(PREFIX)"

uninstall:
	@set -e; d='$(DESTDIR)'; \
	if [ ! -f "$$d$(INST_LIST)" ]; then echo "nothing installed under $$d$(PREFIX) ($$d$(INST_LIST) missing)"; exit 0; fi; \
	n=0; while IFS= read -r f; do \
	  case "$$f" in "$(PREFIX)"/*) ;; *) echo "uninstall: skipping $$f (outside $(PREFIX))"; continue;; esac; \
	  [ "$$f" = "$(INST_LIST)" ] && continue; rm -f "$$d$$f"; n=$$((n+1)); \
	done < "$$d$(INST_LIST)"; \
	rm -f "$$d$(INST_LIST)"; \
	find "$$d$(INST_DATA)" -depth -type d -empty -delete 2>/dev/null || true; \
	echo "removed $$((n+1)) files under $$d$(PREFIX)"

demo: check-deps $(BUILD)/scalify
	@tools/demo.sh $(BUILD)/scalify

samples:
	bash samples/gen/run.sh

lint: check-deps
	@command -v cppcheck >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q cppcheck; } || \
	  { echo "make lint needs cppcheck (apt-get install cppcheck)"; exit 1; }
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem --suppressions-list=tools/cppcheck.supp --inline-suppr -Isrc src tests/unit

format:
	@command -v clang-format >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q clang-format; } || \
	  { echo "make format needs clang-format"; exit 1; }
	clang-format -i src/*.c src/*.h tests/unit/*.c tests/unit/*.h tests/fuzz/*.c tests/bench/*.c

clean:
	rm -rf build site

-include $(wildcard $(BUILD)/obj/*.d)
