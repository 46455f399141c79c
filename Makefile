# kbandit - build, test, run, benchmark.
#
#   make            libkbandit, the daemon (when server/ exists), the benchmark tool
#   make test       unit + integration tests; ends with "N passed, N failed, N skipped"
#   make asan       the same tests built with AddressSanitizer + UBSan (in build-asan/)
#   make run        the daemon on 127.0.0.1:8080 with ./kbandit.db
#   make bench      benchmarks (see docs/BENCHMARKS.md)
#   make bench-quality  kbandit against Optuna on box functions, through the daemon
#   make install    PREFIX=/usr/local: library, header, pkg-config file, daemon
#
# Sources are found by wildcard: a new engine in core/engines/ or a new test in
# tests/unit/test_*.c needs no edit here.

PREFIX ?= /usr/local
BUILD ?= build
CC ?= cc
OPT ?= -O2 -g
SAN ?=

# OpenBLAS kernels for this CPU when its model is not recognized (see the script).
BLAS_CORE := $(shell scripts/openblas-coretype)
ifneq ($(BLAS_CORE),)
export OPENBLAS_CORETYPE ?= $(BLAS_CORE)
endif

PKG_CORE := openblas lapacke nlopt
PKG_SERVER := libmicrohttpd jansson sqlite3
VERSION := $(shell sed -n 's/^\#define KB_VERSION_STRING "\([^"]*\)".*/\1/p' core/include/kbandit.h)
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter \
	-Werror=implicit-function-declaration -fPIC -pthread -Icore/include -MMD -MP
# The core sees only its own dependencies and exports only KB_API (kbandit.h); the
# daemon, tools and tests may use everything.
CFLAGS_PKG = $(shell pkg-config --cflags $(PKG_CORE) $(PKG_SERVER) cmocka 2>/dev/null)
$(BUILD)/core/%.o: CFLAGS_PKG = $(shell pkg-config --cflags $(PKG_CORE) 2>/dev/null) -fvisibility=hidden
ALL_CFLAGS = $(CFLAGS_BASE) $(OPT) $(SAN) $(CFLAGS_PKG) $(CFLAGS)
LIBS_CORE = $(shell pkg-config --libs $(PKG_CORE) 2>/dev/null) -lm -pthread
LIBS_SERVER = $(shell pkg-config --libs $(PKG_SERVER) 2>/dev/null)

CORE_SRC := $(wildcard core/src/*.c core/engines/*.c core/engines/*/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
PROTO_SRC := $(wildcard proto/*.c)
SERVER_SRC := $(wildcard server/*.c)
SERVER_OBJ := $(filter-out $(BUILD)/server/main.o,$(SERVER_SRC:%.c=$(BUILD)/%.o)) \
	$(PROTO_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(wildcard bench/*.c)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
# Unit tests of the daemon's layers (they include server/ or proto/ headers); every other
# unit test is a core test and links libkbandit alone.
SERVER_UNIT := test_blas test_domain test_group_commit test_proto test_ratelimit test_storage
SERVER_UNIT_BIN := $(SERVER_UNIT:%=$(BUILD)/tests/%)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
# Shared by the targets (the in-process daemon of the HTTP-level ones).
FUZZ_HELPERS := $(filter-out $(FUZZ_SRC),$(wildcard tests/fuzz/*.c))

LIB := $(BUILD)/libkbandit.a
DAEMON := $(if $(wildcard server/main.c),$(BUILD)/kbanditd)
BENCH := $(if $(BENCH_SRC),$(BUILD)/kb-bench)
LOAD := $(if $(wildcard bench/load/kb_load.c),$(BUILD)/kb-load $(BUILD)/kb-slow-fsync.so \
	$(BUILD)/kb-numfmt-cost)
ACQ_TOOLS := $(if $(wildcard bench/acq/acq_cost.c),$(BUILD)/kb-acq-cost $(BUILD)/kb-box-ask \
	$(BUILD)/kb-fit-cost)
FAULT := $(BUILD)/kb-fault.so

.PHONY: all deps test unit asan run bench bench-quality install clean fuzz
all: $(LIB) $(BUILD)/libkbandit.so $(DAEMON) $(BENCH) $(LOAD) $(ACQ_TOOLS) $(FAULT) $(UNIT_BIN)

deps:
	@scripts/install-deps

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Header dependencies, written by the compiler (-MMD) next to each object.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# The migrations are embedded in storage.o (.incbin).
$(BUILD)/server/storage.o: $(wildcard migrations/*.sql)

$(LIB): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libkbandit.so: $(CORE_OBJ)
	$(CC) -shared $(SAN) -o $@ $^ $(LIBS_CORE)

$(BUILD)/kbanditd: $(BUILD)/server/main.o $(SERVER_OBJ) $(LIB)
	$(CC) $(SAN) -o $@ $^ $(LIBS_SERVER) $(LIBS_CORE)

$(BUILD)/kb-bench: $(BENCH_SRC:%.c=$(BUILD)/%.o) $(LIB)
	$(CC) $(SAN) -o $@ $^ $(LIBS_CORE)

# The daemon load generator (bench/load/, outside kb-bench's wildcard): plain sockets.
$(BUILD)/kb-load: $(BUILD)/bench/load/kb_load.o
	$(CC) $(SAN) -o $@ $^ -pthread -lm

# What printing a real in a response costs (proto/numfmt.c).
$(BUILD)/kb-numfmt-cost: $(BUILD)/bench/proto/numfmt_cost.o $(BUILD)/proto/numfmt.o
	$(CC) $(SAN) -o $@ $^ -ljansson -lm

# The cost of box pool refinement, of box round trips in-process and of a hyperparameter
# fit (bench/acq/: engine internals, from the static library).
$(BUILD)/kb-acq-cost: $(BUILD)/bench/acq/acq_cost.o $(LIB)
	$(CC) $(SAN) -o $@ $^ $(LIBS_CORE)

$(BUILD)/kb-box-ask: $(BUILD)/bench/acq/box_ask.o $(LIB)
	$(CC) $(SAN) -o $@ $^ $(LIBS_CORE)

$(BUILD)/kb-fit-cost: $(BUILD)/bench/acq/fit_cost.o $(LIB)
	$(CC) $(SAN) -o $@ $^ $(LIBS_CORE)

# LD_PRELOAD shim: a slower fsync, to benchmark the daemon as on a slower disk.
$(BUILD)/kb-slow-fsync.so: bench/load/slow_fsync.c
	$(CC) $(CFLAGS_BASE) $(OPT) -shared -o $@ $< -ldl

# LD_PRELOAD fault injection for tests/integration/test_faults.py (docs/TESTING.md): the
# n-th malloc, SQLite xWrite/xSync or fdatasync fails; and for test_rebuild_retry.py, SQLite
# statements fail while a switch file exists. Never linked into the daemon, and
# built without $(SAN) in either build: the ASan runtime's allocator stays underneath it.
$(FAULT): tests/fault/fault_shim.c
	$(CC) $(CFLAGS_BASE) $(OPT) $(shell pkg-config --cflags sqlite3) -shared -o $@ $< \
		-ldl $(shell pkg-config --libs sqlite3)

# test_nomem fails the library's allocations one by one: its own and libkbandit.a's calls
# of malloc, calloc and realloc go through the test's wrappers.
$(BUILD)/tests/test_nomem: WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc

$(filter-out $(SERVER_UNIT_BIN),$(UNIT_BIN)): $(BUILD)/tests/%: $(BUILD)/tests/unit/%.o \
		$(BUILD)/tests/unit/util/testutil.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(SAN) $(WRAP) -o $@ $^ -lcmocka $(LIBS_CORE)

$(SERVER_UNIT_BIN): $(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(BUILD)/tests/unit/util/testutil.o \
		$(BUILD)/tests/unit/util/studyutil.o $(SERVER_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(SAN) -o $@ $^ -lcmocka $(LIBS_SERVER) $(LIBS_CORE)

unit: deps
	@$(MAKE) --no-print-directory all
	@tests/run-all $(BUILD) unit

test: deps
	@$(MAKE) --no-print-directory all
	@tests/run-all $(BUILD)

asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" all
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		KB_SANITIZED=1 tests/run-all build-asan

run: deps
	@$(MAKE) --no-print-directory $(DAEMON)
	$(BUILD)/kbanditd $(ARGS)

bench: deps
	@$(MAKE) --no-print-directory $(BENCH) $(LOAD) $(DAEMON)
	bench/run-all $(BUILD)

# Issue 12's quality suite against Optuna through the daemon (long: see docs/BENCHMARKS.md;
# QUALITY_ARGS selects functions, engines, seeds, budgets: bench/quality/run.py --help).
bench-quality: deps
	@$(MAKE) --no-print-directory $(DAEMON)
	bench/quality/run.py --daemon $(BUILD)/kbanditd $(QUALITY_ARGS)

FUZZ_CC ?= clang
# Sanitized objects are built once and linked into every target (each used to recompile
# the whole daemon).
FUZZ_SAN := -g -O1 -fsanitize=address,undefined
FUZZ_OBJ := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_HELPERS) \
	$(filter-out %/main.c,$(SERVER_SRC)) $(PROTO_SRC) $(CORE_SRC))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
$(FUZZ_OBJ): $(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link $(CFLAGS_BASE) $(CFLAGS_PKG) -c $< -o $@
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer $(CFLAGS_BASE) $(CFLAGS_PKG) $< $(FUZZ_OBJ) -o $@ \
		$(LIBS_SERVER) $(LIBS_CORE)
fuzz: deps
	@$(MAKE) --no-print-directory $(FUZZ_BIN)
	@tests/fuzz/run $(BUILD)/fuzz

$(BUILD)/kbandit.pc: core/kbandit.pc.in
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

install: $(LIB) $(BUILD)/libkbandit.so $(DAEMON) $(BUILD)/kbandit.pc
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libkbandit.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 core/include/kbandit.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/kbandit.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	$(if $(DAEMON),install -m 755 $(DAEMON) $(DESTDIR)$(PREFIX)/bin/)

clean:
	rm -rf build build-asan


