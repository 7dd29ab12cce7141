# kvfs - a FUSE filesystem that stores and composes LLM KV caches.
# Plain Makefile: `make`, `make test`, `make asan`, `make run`, `make bench`.

PKGS      := sqlite3 libzstd liburing libxxhash libpcre2-8 libcrypto
CORE_PKGS := sqlite3 libzstd liburing libxxhash libcrypto
MODEL_PKGS:= libpcre2-8

BUILD     ?= build
PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
MANDIR    ?= $(PREFIX)/share/man
# /etc and /lib/systemd/system for PREFIX=/usr (the Debian package), else under PREFIX
SYSCONFDIR     ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
SYSTEMDUNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
CC        ?= cc
OPT       ?= -O2
# A portable build by default: everything for x86-64-v2 (SSE4.2, POPCNT;
# any x86-64 CPU since 2009), and the CPU backend's kernels (gpu/cpu/) once
# per ISA level below, the best the CPU runs picked at run time
# (KVFS_CPU_LEVEL forces a lower one).  `make ARCHFLAGS=-march=native` tunes
# the rest for the build machine; `make CUDA_ARCH=sm_80` for an A100.
ARCHFLAGS ?= -march=x86-64-v2 -mtune=generic
CPU_LEVELS := v2 v3 v4 vnni
CPU_FLAGS_v2   := -march=x86-64-v2 -mtune=generic
CPU_FLAGS_v3   := -march=x86-64-v3 -mtune=generic
CPU_FLAGS_v4   := -march=x86-64-v4 -mtune=generic
CPU_FLAGS_vnni := -march=x86-64-v4 -mavx512vnni -mtune=generic
CUDA_ARCH ?= sm_90
CFLAGS    ?=
# -ffp-contract=off: never fuse a * b + c (GCC's default for -std=c11, not
# every compiler's): the SIMD kernels reproduce the scalar definitions'
# values bit for bit, which round each operation
CFLAGS    += -std=c11 -ffp-contract=off -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 $(OPT) -g $(ARCHFLAGS) \
             -Wall -Wextra -Werror -MMD -MP -pthread $(LAYER_INC)
# Layers, bottom to top: storage core (index/) -> ggml's types and decoders
# (gpu/ggml/) -> compute backends (gpu/, gpu/cpu/, gpu/cuda/) -> model
# runtime (blend/runtime/) -> blending (blend/) -> FUSE (fs/) -> library,
# tools, benchmarks, tests.  Each layer's files see only the include paths of
# the layers below them, so an upward include fails to compile.
INC_INDEX   := -Iindex
INC_GGML    := $(INC_INDEX) -Igpu/ggml
INC_GPU     := $(INC_GGML) -Igpu
INC_RUNTIME := $(INC_GPU) -Iblend/runtime
INC_BLEND   := $(INC_RUNTIME) -Iblend
INC_FS      := $(INC_BLEND) -Ifs
LAYER_INC   := $(INC_FS) -Itools
SAN       ?=
CFLAGS    += $(SAN)
# One short line per step (`CC fs/ops.c`); `make V=1` prints the commands.
ifeq ($(V),1)
Q    :=
say   =
else
Q    := @
say   = printf '  %-7s %s\n' '$(1)' '$(2)';
endif
LDFLAGS   += $(SAN) -pthread

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CORE_LIBS  := $(shell pkg-config --libs $(CORE_PKGS) 2>/dev/null)
MODEL_LIBS := $(shell pkg-config --libs $(MODEL_PKGS) 2>/dev/null)
CFLAGS     += $(PKG_CFLAGS)
# libfuse: the system's when it is >= 3.17.1 (FUSE passthrough), else 3.17
# built from Debian trixie's fuse3 source into the build tree
# (tools/build-libfuse.sh, static; nothing on the system changes).
# FUSE=system uses the system's whatever its version: no passthrough.
FUSE      ?= $(if $(shell pkg-config --atleast-version=3.17.1 fuse3 2>/dev/null && echo y),system,built)
ifeq ($(FUSE),system)
FUSE_CFLAGS := $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS   := $(shell pkg-config --libs fuse3 2>/dev/null)
FUSE_LIB    :=
else
FUSE_PREFIX := $(BUILD)/third_party/fuse3/inst
FUSE_LIB    := $(FUSE_PREFIX)/lib/libfuse3.a
FUSE_CFLAGS := -I$(FUSE_PREFIX)/include/fuse3
FUSE_LIBS   := $(FUSE_LIB) -ldl -lrt
endif
CFLAGS     += $(FUSE_CFLAGS)
# BLAS: OpenBLAS is loaded at run time by gpu/cpu/blas.c (so it can pick the
# kernel before the library initialises); cblas.h comes from here.
CFLAGS     += -I/usr/include/x86_64-linux-gnu/openblas-pthread
SYSLIBS    := -ldl -lm
# librados: Debian's librados-dev ships no rados.pc, so test for the header
# (NO_RADOS=1 builds without the remote tier, e.g. for a machine without Ceph)
ifneq ($(NO_RADOS),1)
ifneq ($(wildcard /usr/include/rados/librados.h),)
CFLAGS     += -DKVFS_HAVE_RADOS
SYSLIBS    += -lrados
endif
endif

# CUDA: compiled when nvcc is found (NO_CUDA=1 to skip).
NVCC      ?= $(shell command -v nvcc 2>/dev/null)
ifeq ($(NO_CUDA),1)
NVCC :=
endif
ifneq ($(SAN),)
NVCC :=
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

CORE_SRC  := $(wildcard index/*.c)
MODEL_SRC := $(wildcard blend/*.c) $(wildcard blend/runtime/*.c) $(wildcard gpu/*.c) $(wildcard gpu/ggml/*.c)
# the CPU backend: its level-free files once, its kernels once per level
CPU_LEVEL_SRC := $(addprefix gpu/cpu/,iface.c matmul.c qdot.c qmm_vnni.c act_quant.c attention.c elementwise.c \
                   kv_upload.c dequant_simd.c)
CPU_ONCE_SRC  := $(filter-out $(CPU_LEVEL_SRC),$(wildcard gpu/cpu/*.c))
MODEL_SRC += $(CPU_ONCE_SRC)
FS_SRC    := $(wildcard fs/*.c)
TOOL_SRC  := $(wildcard tools/*.c)
CUDA_SRC  := $(wildcard gpu/cuda/*.cu)
TEST_SRC  := $(wildcard tests/unit/test_*.c)
GPU_TEST_SRC := $(wildcard tests/unit/gpu_test_*.c)

CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/%.o)
MODEL_OBJ := $(MODEL_SRC:%.c=$(BUILD)/%.o) \
             $(foreach L,$(CPU_LEVELS),$(CPU_LEVEL_SRC:gpu/cpu/%.c=$(BUILD)/gpu/cpu/$(L)/%.o))
FS_OBJ    := $(FS_SRC:%.c=$(BUILD)/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
GPU_TEST_BIN := $(GPU_TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

LIBCORE   := $(BUILD)/libkvfs_core.a
LIBMODEL  := $(BUILD)/libkvfs_model.a
LIBS_ALL  := $(LIBMODEL) $(LIBCORE)
LINK_LIBS := $(MODEL_LIBS) $(CORE_LIBS) $(SYSLIBS)

# The CUDA backend is a plugin (gpu/backend.c loads it on first use), so
# kvfs and kvfsctl link no CUDA library and a host without a GPU maps none.
ifneq ($(NVCC),)
ifneq ($(CUDA_SRC),)
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CUDA_PLUGIN := $(BUILD)/libkvfs-cuda.so
CFLAGS    += -DKVFS_HAVE_CUDA
TEST_BIN  += $(GPU_TEST_BIN)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
GPU_BENCH := $(BUILD)/gpu_blend
NVCCFLAGS ?= -O2 -std=c++17 -arch=$(CUDA_ARCH) $(INC_GPU) -DKVFS_HAVE_CUDA \
             -Xcompiler -fPIC,-fvisibility=hidden,-ffp-contract=off,-Wall,-Wextra,-Werror
endif
endif

.PHONY: all asan tsan soak load fleet-soak test test-gpu test-engines llama-server bench bench-gpu run serve model deps need-deps oracle clean install

all: $(BUILD)/kvfs $(BUILD)/kvfsctl $(TEST_BIN) $(CUDA_PLUGIN) $(GPU_BENCH) $(BUILD)/includes.ok
	@ln -sf $(BUILD)/kvfs kvfs; ln -sf $(BUILD)/kvfsctl kvfsctl

# No include cycle between modules or folders (the layers' include paths
# stop upward includes; this also catches cycles inside a layer)
INCLUDE_CHECKED := $(wildcard index/*.[ch] gpu/*.[ch] gpu/*/*.[ch] gpu/cuda/*.cu gpu/cuda/*.cuh blend/*.[ch] \
                     blend/runtime/*.[ch] fs/*.[ch] lib/*.[ch] tools/*.[ch] tools/*/*.[ch])
$(BUILD)/includes.ok: tools/check-includes.py $(INCLUDE_CHECKED)
	@mkdir -p $(@D)
	$(Q)$(call say,CHECK,include cycles)python3 tools/check-includes.py > $@.log || { cat $@.log; exit 1; }
	@touch $@

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(@D); rm -f $@
	$(Q)$(call say,AR,$@)ar rcs $@ $^
$(LIBMODEL): $(MODEL_OBJ)
	@mkdir -p $(@D); rm -f $@
	$(Q)$(call say,AR,$@)ar rcs $@ $^
$(CUDA_PLUGIN): $(CUDA_OBJ) $(BUILD)/libkvfs-pic/index/log.o $(BUILD)/libkvfs-pic/gpu/gelu.o
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ $(CUDA_LIBS) -ldl -lpthread -lm

# libsystemd: the daemons tell systemd when they are ready (sd_notify(3):
# kvfs@.service and kvfs-serve.service are Type=notify; tools/deb/)
SYSTEMD_CFLAGS := $(shell pkg-config --cflags libsystemd 2>/dev/null)
SYSTEMD_LIBS   := $(shell pkg-config --libs libsystemd 2>/dev/null)
$(FS_OBJ): CFLAGS += $(SYSTEMD_CFLAGS)
$(BUILD)/kvfs: $(FS_OBJ) $(LIBS_ALL) $(FUSE_LIB)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $(FS_OBJ) $(LIBS_ALL) $(FUSE_LIBS) $(LINK_LIBS) $(SYSTEMD_LIBS)
ifneq ($(FUSE_LIB),)
$(FS_OBJ): $(FUSE_LIB) # its headers: built with it, rebuilt with it
$(FUSE_LIB):
	@BUILD=$(BUILD) tools/build-libfuse.sh
endif
$(BUILD)/kvfsctl: $(TOOL_OBJ) $(LIBS_ALL)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(LIBS_ALL) $(LINK_LIBS)
# kvfs-serve (tools/serve/, kvfs-serve(1)): the OpenAI-compatible front that
# answers RAG requests through a mount and llama-server; libmicrohttpd (HTTP
# server), libcurl (the engines' client) and jansson (JSON)
SERVE_PKGS := libmicrohttpd libcurl jansson
SERVE_SRC  := $(wildcard tools/serve/*.c)
SERVE_OBJ  := $(SERVE_SRC:%.c=$(BUILD)/%.o)
SERVE_LIBS := $(shell pkg-config --libs $(SERVE_PKGS) 2>/dev/null)
$(SERVE_OBJ): CFLAGS += -Ilib $(shell pkg-config --cflags $(SERVE_PKGS) 2>/dev/null) $(SYSTEMD_CFLAGS)
$(BUILD)/kvfs-serve: $(SERVE_OBJ) $(BUILD)/libkvfs.a $(LIBS_ALL)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $(SERVE_OBJ) $(BUILD)/libkvfs.a $(LIBS_ALL) $(LINK_LIBS) $(SERVE_LIBS) $(SYSTEMD_LIBS)
all: $(BUILD)/kvfs-serve
$(BUILD)/batch_quality: $(BUILD)/bench/batch_quality.o $(LIBS_ALL)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(LIBS_ALL) $(LINK_LIBS)
# bench/remote_populate.c: a pool of N synthetic chunks in kvfs's own format
# (bench/remote_scale.sh, tests/integration/remote_scale.sh)
ifneq ($(filter -DKVFS_HAVE_RADOS,$(CFLAGS)),)
$(BUILD)/remote_populate: $(BUILD)/bench/remote_populate.o $(LIBS_ALL)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(LIBS_ALL) $(LINK_LIBS)
all: $(BUILD)/remote_populate
endif
# the analyses tokenize their passage files as kvfsctl does (tools/model_util.c)
BENCH_TOOL_OBJ := $(BUILD)/tools/model_util.o $(BUILD)/tools/tool_util.o
$(BUILD)/oracle: $(BUILD)/bench/oracle.o $(BENCH_TOOL_OBJ) $(LIBS_ALL)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_TOOL_OBJ) $(LIBS_ALL) $(LINK_LIBS)
$(BUILD)/deviation: $(BUILD)/bench/deviation.o $(BENCH_TOOL_OBJ) $(LIBS_ALL)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_TOOL_OBJ) $(LIBS_ALL) $(LINK_LIBS)
# the device's weight decoder run on the host, against the CPU's (no GPU needed)
ifneq ($(CUDA_PLUGIN),)
$(BUILD)/tests/test_cuda_decode: $(BUILD)/tests/unit/test_cuda_decode.o $(BUILD)/gpu/cuda/quant_cuda.o $(LIBS_ALL)
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $^ $(LINK_LIBS) $(CUDA_LIBS)
$(BUILD)/tests/unit/test_cuda_decode.o: CFLAGS += -Igpu/cuda
endif
$(BUILD)/gpu_blend: $(BUILD)/bench/gpu_blend.o $(LIBS_ALL) $(CUDA_PLUGIN)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(LIBS_ALL) $(LINK_LIBS) $(CUDA_LIBS)
$(BUILD)/bench/gpu_blend.o: CFLAGS += -I$(CUDA_HOME)/include

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBS_ALL)
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(LIBS_ALL) $(LINK_LIBS)
# The test objects are intermediates of the rule above: without this make
# deletes them after linking, and the next make (which sees them named in
# their .d files) recompiles and relinks every test.
.SECONDARY: $(TEST_SRC:%.c=$(BUILD)/%.o) $(GPU_TEST_SRC:%.c=$(BUILD)/%.o)

# libkvfs, the engines' library (lib/kvfs.h, libkvfs(3)): lib/ and the format
# code of index/ it needs, -fPIC with hidden visibility so that only the
# libkvfs_* API is exported.  libkvfs.a is one object with everything else
# made local, so it links beside libkvfs_core.a (kvfsctl does) without clashes.
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
LIBKVFS_OBJ  := $(patsubst %.c,$(BUILD)/libkvfs-pic/%.o,lib/libkvfs.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c index/log.c)
LIBKVFS_DEPS := $(shell pkg-config --libs libxxhash libcrypto 2>/dev/null)
$(BUILD)/libkvfs-pic/%.o: %.c
	@mkdir -p $(@D)
	$(Q)$(call say,CC,$< [pic])$(CC) $(CFLAGS) -Ilib -fPIC -fvisibility=hidden -c -o $@ $<
$(BUILD)/libkvfs.a: $(LIBKVFS_OBJ)
	$(Q)$(call say,AR,$@)$(LD) -r -o $(BUILD)/libkvfs-pic/libkvfs.o $^ && \
	    objcopy --localize-hidden $(BUILD)/libkvfs-pic/libkvfs.o && \
	    rm -f $@ && ar rcs $@ $(BUILD)/libkvfs-pic/libkvfs.o
$(BUILD)/libkvfs.so: $(LIBKVFS_OBJ)
	$(Q)$(call say,LD,$@)$(CC) $(LDFLAGS) -shared -Wl,-soname,libkvfs.so.1 -o $@ $^ $(LIBKVFS_DEPS)
all: $(BUILD)/libkvfs.a $(BUILD)/libkvfs.so
$(TOOL_OBJ) $(BUILD)/tests/unit/test_libkvfs.o: CFLAGS += -Ilib
$(BUILD)/kvfsctl $(BUILD)/tests/test_libkvfs: $(BUILD)/libkvfs.a
$(BUILD)/kvfsctl $(BUILD)/tests/test_libkvfs: LINK_LIBS := $(BUILD)/libkvfs.a $(LINK_LIBS)
.PHONY: install-libkvfs
install: install-libkvfs
install-libkvfs: $(BUILD)/libkvfs.a $(BUILD)/libkvfs.so
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MANDIR)/man3
	install -m 0644 lib/kvfs.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 0644 $(BUILD)/libkvfs.a $(DESTDIR)$(LIBDIR)/
	install -m 0755 $(BUILD)/libkvfs.so $(DESTDIR)$(LIBDIR)/libkvfs.so.1
	ln -sf libkvfs.so.1 $(DESTDIR)$(LIBDIR)/libkvfs.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    lib/libkvfs.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/libkvfs.pc
	install -m 0644 man/libkvfs.3 $(DESTDIR)$(MANDIR)/man3/

$(BUILD)/index/%.o: LAYER_INC := $(INC_INDEX)
$(BUILD)/gpu/ggml/%.o: LAYER_INC := $(INC_GGML)
$(BUILD)/gpu/%.o: LAYER_INC := $(INC_GPU)
$(BUILD)/blend/runtime/%.o: LAYER_INC := $(INC_RUNTIME)
$(BUILD)/blend/%.o: LAYER_INC := $(INC_BLEND)
$(BUILD)/fs/%.o: LAYER_INC := $(INC_FS)
$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(Q)$(call say,CC,$<)$(CC) $(CFLAGS) -c -o $@ $<
# the CPU kernels of level L: build/gpu/cpu/L/*.o, names suffixed _L (level.h)
define cpu_level_rule
$$(BUILD)/gpu/cpu/$(1)/%.o: gpu/cpu/%.c
	@mkdir -p $$(@D)
	$$(Q)$$(call say,CC,$$< [$(1)])$$(CC) $$(CFLAGS) $$(CPU_FLAGS_$(1)) -DKVFS_CPU_LEVEL=$(1) -c -o $$@ $$<
endef
$(foreach L,$(CPU_LEVELS),$(eval $(call cpu_level_rule,$(L))))
$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(Q)$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c -o $@ $<

# Sanitizer build: same tree, separate build dir (build-asan/); run the tests
# against it with `make asan; BUILD=build-asan tests/run.sh`.
asan:
	$(MAKE) BUILD=build-asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" OPT=-O1 all
# Data races: ThreadSanitizer into build-tsan/ (`make tsan; BUILD=build-tsan
# tests/run.sh PATTERN`): the worker pool, the blend service, the daemon's
# FUSE threads; TSan stops a test at the first race (halt_on_error).
tsan:
	$(MAKE) BUILD=build-tsan SAN="-fsanitize=thread -fno-omit-frame-pointer" OPT=-O1 all
# Crash soak: SOAK_ITERS rounds of ingest, reads and rm killed by SIGKILL at
# random moments, each checked after a remount (tests/soak/crash_soak.sh), and
# the same with blends in flight and eviction running (crash_soak_blend.sh)
# and with remote-tier uploads cut (crash_soak_remote.sh, a real Ceph cluster).
SOAK_ITERS ?= 200
soak: all
	tests/soak/crash_soak.sh $(SOAK_ITERS)
	tests/soak/crash_soak_blend.sh $(SOAK_ITERS)
	tests/soak/crash_soak_remote.sh $(SOAK_ITERS)
# Load: 16 clients for LOAD_SECONDS on a capacity-limited mount (tests/soak/load.sh).
LOAD_SECONDS ?= 600
load: all
	tests/soak/load.sh $(LOAD_SECONDS)
# Fleet soak (issue 44, not part of `make test` or `make soak`): 8 mounts on a
# real Ceph cluster with remote_capacity, FLEET_SECONDS of Zipf-popular
# copy-in / read / blend / rm / remote evict, an OSD killed, a mount SIGKILLed,
# one mount's network cut for 30 s (tests/soak/fleet_soak.sh; root, nftables).
FLEET_SECONDS ?= 600
fleet-soak: all
	FLEET_SECONDS=$(FLEET_SECONDS) tests/soak/fleet_soak.sh

# Fuzzing (issue 19): one libFuzzer target per parser, built with clang and
# ASan + UBSan into build-fuzz/ from the parser's own sources (no FUSE, no
# BLAS).  `make fuzz` runs each for FUZZ_SECONDS (default 60) from the seeds
# in tests/fuzz/corpus/; tests/integration/fuzz_smoke.sh runs them briefly
# in `make test`.
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 \
                -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 $(LAYER_INC)
FUZZ_LIBS    := $(shell pkg-config --libs libxxhash libcrypto libpcre2-8 2>/dev/null) -lm
FUZZ_TARGETS := chunk recipe gguf tokenizer llama_state ioctl rebuild serve_plan
$(FUZZ_BUILD)/fuzz_chunk: tests/fuzz/fuzz_chunk.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c index/log.c
$(FUZZ_BUILD)/fuzz_recipe: tests/fuzz/fuzz_recipe.c blend/recipe.c blend/select.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c index/log.c
$(FUZZ_BUILD)/fuzz_ioctl: tests/fuzz/fuzz_ioctl.c fs/ioctl_req.c blend/recipe.c blend/select.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c \
                          index/log.c
$(FUZZ_BUILD)/fuzz_gguf: tests/fuzz/fuzz_gguf.c blend/runtime/gguf.c gpu/ggml/quant.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c index/log.c
$(FUZZ_BUILD)/fuzz_llama_state: tests/fuzz/fuzz_llama_state.c index/llama_state.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c index/log.c
$(FUZZ_BUILD)/fuzz_tokenizer: tests/fuzz/fuzz_tokenizer.c blend/runtime/tokenizer.c blend/runtime/gguf.c \
                              gpu/ggml/quant.c index/kvformat.c index/bigbuf.c index/half.c index/kvquant.c index/log.c
# kvfs-serve's request planner (the engine's template rendering stubbed in the target)
$(FUZZ_BUILD)/fuzz_serve_plan: tests/fuzz/fuzz_serve_plan.c tools/serve/plan.c tools/serve/memo.c blend/runtime/tokenizer.c \
                               blend/runtime/gguf.c gpu/ggml/quant.c index/kvformat.c index/bigbuf.c index/half.c \
                               index/kvquant.c index/log.c
$(FUZZ_BUILD)/fuzz_serve_plan: FUZZ_FLAGS += -Itools/serve $(shell pkg-config --cflags jansson 2>/dev/null)
$(FUZZ_BUILD)/fuzz_serve_plan: FUZZ_LIBS += $(shell pkg-config --libs jansson 2>/dev/null) -lpthread
# the index rebuild: the store core without the RADOS tier
$(FUZZ_BUILD)/fuzz_rebuild: tests/fuzz/fuzz_rebuild.c $(filter-out index/remote_rados.c,$(wildcard index/*.c))
$(FUZZ_BUILD)/fuzz_rebuild: FUZZ_LIBS += -lsqlite3 -lzstd -luring -lpthread
$(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%):
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(filter %.c,$^) $(FUZZ_LIBS)
.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) tests/fuzz/run.sh $(FUZZ_SECONDS)

# `make deps` installs what is missing (tools/install-deps.sh: apt-get, as
# root).  The targets below call it only when a cheap check (the libraries'
# pkg-config files, OpenBLAS's cblas.h, the commands the tests use, pip) finds
# something missing, so `make test` on a ready machine never runs apt-get.
DEP_CMDS  := cc pkg-config fusermount3 setfattr getfattr python3 unzip bc zstd sqlite3 \
             $(if $(FUSE_LIB),meson ninja dpkg-source apt-get)
deps:
	@tools/install-deps.sh
need-deps:
	@( pkg-config --exists $(PKGS) $(SERVE_PKGS) libsystemd fuse3 openblas && \
	   test -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h && \
	   for c in $(DEP_CMDS); do command -v $$c >/dev/null || exit 1; done && \
	   python3 -m pip --version >/dev/null ) 2>/dev/null || tools/install-deps.sh

model: need-deps
	@tools/fetch-model.sh

oracle: need-deps
	@tools/install-oracle.sh

test: need-deps
	@$(MAKE) --no-print-directory all
	@tools/fetch-model.sh || true
	@tools/install-oracle.sh || true
	@SOURCE_ONLY=1 BUILD=$(BUILD) tools/build-llama-server.sh > /dev/null || true
	@BUILD=$(BUILD) tests/run.sh

test-gpu: need-deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/run.sh gpu

# llama.cpp's own server, built from the llama.cpp inside the pinned
# llama-cpp-python sdist (tools/build-llama-server.sh): the real engine that
# tests/engines and the llama-server benchmark drive.  kvfs does not need it.
llama-server:
	@BUILD=$(BUILD) tools/build-llama-server.sh

test-engines: need-deps
	@$(MAKE) --no-print-directory all llama-server
	@tools/fetch-model.sh smollm2 || true
	@BUILD=$(BUILD) tests/run.sh engines

bench: need-deps
	@$(MAKE) --no-print-directory all $(BUILD)/batch_quality llama-server
	@tools/fetch-model.sh smollm2
	@tools/install-oracle.sh
	@BUILD=$(BUILD) bench/run.sh

bench-gpu: need-deps
	@$(MAKE) --no-print-directory all $(GPU_BENCH)
	@BUILD=$(BUILD) bench/run-gpu.sh

run: need-deps
	@$(MAKE) --no-print-directory all
	@tools/fetch-model.sh smollm2
	@BUILD=$(BUILD) tools/run-demo.sh

# kvfs, llama-server and kvfs-serve on embedded defaults (tools/serve-demo.sh):
# an OpenAI-compatible RAG server on 127.0.0.1:8090 until Ctrl-C
serve: need-deps
	@$(MAKE) --no-print-directory all llama-server
	@tools/fetch-model.sh smollm2
	@BUILD=$(BUILD) tools/serve-demo.sh

# `make install` (PREFIX=/usr/local, DESTDIR= for staging): the two programs
# and their man pages.
install: $(BUILD)/kvfs $(BUILD)/kvfsctl $(BUILD)/kvfs-serve $(CUDA_PLUGIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(BUILD)/kvfs $(BUILD)/kvfsctl $(BUILD)/kvfs-serve $(DESTDIR)$(BINDIR)/
	install -m 0644 man/kvfsctl.1 man/kvfs-serve.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 man/kvfs.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 man/kvfs.8 $(DESTDIR)$(MANDIR)/man8/
ifneq ($(CUDA_PLUGIN),)
	install -d $(DESTDIR)$(LIBDIR)/kvfs
	install -m 0755 $(CUDA_PLUGIN) $(DESTDIR)$(LIBDIR)/kvfs/
endif

# The systemd units (tools/systemd/, kvfs(8) SYSTEMD): kvfs@.service, one
# mount per instance, and kvfs-serve.service with its options' file.
.PHONY: install-systemd
install-systemd:
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(SYSCONFDIR)/kvfs
	for u in kvfs@.service kvfs-serve.service; do \
	    sed -e 's|@BINDIR@|$(BINDIR)|g; s|@SYSCONFDIR@|$(SYSCONFDIR)|g' tools/systemd/$$u.in \
	        > $(DESTDIR)$(SYSTEMDUNITDIR)/$$u && chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; \
	done
	install -m 0644 tools/systemd/kvfs-serve.default $(DESTDIR)$(SYSCONFDIR)/default/kvfs-serve

# `make deb`: the Debian package kvfs_VERSION_amd64.deb into $(BUILD)/
# (tools/deb/build.sh: dpkg-buildpackage on a copy of this tree, through the
# rules above, objects kept in $(BUILD)/deb/obj for the next time)
.PHONY: deb
deb: need-deps $(FUSE_LIB)
	@command -v dh >/dev/null && command -v dpkg-buildpackage >/dev/null || tools/install-deps.sh deb
	@BUILD=$(BUILD) tools/deb/build.sh

# Everything the build makes: the build dirs (yours if BUILD= names another,
# build-asan/ and build-tsan/ from `make asan` / `make tsan`, build-gpu/ from tools/build-device-kit.sh),
# with the test logs and the demo's store inside them, tests/tmp/, and the two
# links.  Downloads (models/, the pip-installed oracle) stay, and so do the
# /tmp/kvfs-it.* dirs a failing test keeps for inspection (one may be in use).
clean:
	rm -rf build build-asan build-tsan build-gpu $(BUILD) tests/tmp kvfs kvfsctl

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
