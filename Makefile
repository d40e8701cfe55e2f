# pocket-train. `make` builds ./pocket; `make test` runs the cmocka tests;
# `make test SAN=1` runs them under ASan+UBSan; `make check` also runs the
# interop tests against the reference runtimes (Python venv under tests/).
CC ?= gcc
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null || echo -I/usr/include/hdf5/serial)
HDF5_LIBS := $(shell pkg-config --libs hdf5 2>/dev/null || echo -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5)
# Hot loops call fmaf or FMA intrinsics explicitly; -ffp-contract=off stops any compiler from fusing a*b+c on
# its own (gcc's -std=c11 does not; clang does by default), so results do not depend on the compiler
# (test_cuda_math compares bit for bit). -fno-math-errno lets loops with sqrtf vectorise.
CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -fno-math-errno -ffp-contract=off $(HDF5_CFLAGS) -MMD -MP
LDLIBS = -fopenmp $(HDF5_LIBS) -ljansson -lutf8proc -lpcre2-8 -linih -lz -lm

# make MPI=1: the same pocket as one rank of an MPI job (OpenMPI's mpicc);
# `mpirun -np N pocket train RECIPE.ini` then runs data parallel.
ifeq ($(MPI),1)
  CC = mpicc
  CFLAGS_COMMON += -DPOCKET_MPI
endif
# The instruction set the C code outside the matmul kernels is compiled for
# (the kernels carry their own target attributes and are chosen at run time).
# MARCH=x86-64-v3 (AVX2 + FMA) with POCKET_KERNELS=avx2 runs the whole
# program as an AVX2-only CPU would, on a machine that has AVX-512.
MARCH ?= native
# Every variant builds in its own folder: build, build-mpi, build-cuda,
# build-mpi-cuda, build-san, build-mpi-san, build-x86-64-v3 (MARCH).
# Only the plain build makes ./pocket.
MARCH_SUFFIX = $(if $(filter-out native,$(MARCH)),-$(MARCH))
BUILD ?= build$(if $(filter 1,$(MPI)),-mpi)$(if $(filter 1,$(CUDA)),-cuda)$(if $(filter 1,$(SAN)),-san)$(MARCH_SUFFIX)
POCKET ?= $(if $(filter build,$(BUILD)),pocket,$(BUILD)/pocket)

ifeq ($(SAN),1)
  CFLAGS = $(CFLAGS_COMMON) -O2 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDFLAGS = -fsanitize=address,undefined
  # libgomp's thread pool and libhdf5's global caches are still held at exit. A failed allocation returns NULL
  # as it does outside ASan: libhdf5 asks for what a corrupt file's header declares and reports the failure
  # (tests/test_fuzz_inputs.c gives pocket such files; docs/fuzzing.md).
  export ASAN_OPTIONS = detect_leaks=0:allocator_may_return_null=1
else
  CFLAGS = $(CFLAGS_COMMON) -O3 -march=$(MARCH) -g
  LDFLAGS =
endif

LIB_SRC := $(wildcard util/*.c model/*.c model/ops/*.c data/*.c qat/*.c dist/*.c formats/*.c export/*.c train/*.c cli/*.c)
LIB_SRC := $(filter-out cli/main.c,$(LIB_SRC))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard tests/bench_*.c)
BENCH_BIN := $(BENCH_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all test test-arm64 test-clang deps-arm64 test-mpi check interop bench bench-isa demo demo-choice deps clean fuzz fuzz-lib \
        fuzz-run fuzz-replay fuzz-ci fuzz-seeds qat-experiment bench-qat bench-spec bench-cpt bench-rl
.SECONDARY:
all: $(POCKET)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libpocket.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(POCKET): $(BUILD)/cli/main.o $(BUILD)/libpocket.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libpocket.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# Tests run from the repo root; POCKET names the binary for CLI tests. Every
# test runs even after a failure; the failed ones are listed at the end.
# TEST_JOBS at a time (default: the cores), each one's output printed whole
# (tests/run_tests.sh).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: $(POCKET) $(TEST_BIN)
	@POCKET=./$(POCKET) OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE bash tests/run_tests.sh $(TEST_JOBS) $(TEST_BIN)

VENV = tests/.venv
$(VENV)/ok: tests/setup_venv.sh tests/requirements-ci.txt
	bash tests/setup_venv.sh $(VENV)
	touch $@

# TEST_JOBS workers, each taking whole files (a file's module fixtures are made once).
interop: $(POCKET) $(VENV)/ok
	POCKET=./$(POCKET) $(VENV)/bin/python -m pytest -q -n $(TEST_JOBS) --dist loadfile tests/interop

check: deps
	$(MAKE) test
	$(MAKE) test SAN=1
	$(MAKE) test-mpi
	$(MAKE) interop

# The data-parallel tests (tests/test_dist.c) against a pocket built with MPI,
# run by mpirun with 2 and 3 ranks; the other tests run in `make test`.
test-mpi:
	$(MAKE) MPI=1 build-mpi/pocket build-mpi/tests/test_dist build-mpi/tests/test_loader
	POCKET=build-mpi/pocket OMP_NUM_THREADS=1 build-mpi/tests/test_dist
	build-mpi/tests/test_loader

# The README's first command: deps, build, corpus from Debian packages, CPT, SFT, eval (recipes/demo/).
demo:
	bash recipes/demo/run.sh

# The Dec decision head against generative SFT on a 9-category task (recipes/demo/choice.sh).
demo-choice:
	bash recipes/demo/choice.sh

# make test-arm64: the op tests cross-built for AArch64 (Debian's gcc-aarch64-linux-gnu, qemu-user and the arm64
# cmocka and jansson through multiarch; its C library headers from libc6-dev-arm64-cross, which the compiler only
# recommends: `make deps-arm64`) and run under qemu-aarch64: the NEON kernels (and
# portable) against the double references. Only the compute folders are built (util/ without HDF5, model/,
# model/ops/), so no other arm64 library is needed; then a full training step on both sides (below). CI runs it
# (.ci/run; about two minutes).
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_BUILD = build-arm64
ARM64_SRC := $(filter-out util/h5%.c,$(wildcard util/*.c)) $(wildcard model/*.c model/ops/*.c)
ARM64_OBJ := $(ARM64_SRC:%.c=$(ARM64_BUILD)/%.o)
ARM64_TESTS := $(patsubst %,$(ARM64_BUILD)/tests/%,test_matmul test_ops_attention test_ops_classifier test_ops_fast \
                 test_ops_grad test_ops_torch)
ARM64_OPT = -O3
# Debian's aarch64 gcc 12 vectoriser fails (an internal error) on reductions in the op tests: off for them.
$(ARM64_BUILD)/tests/%.o: ARM64_OPT = -O2 -fno-tree-vectorize
$(ARM64_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(ARM64_CC) $(CFLAGS_COMMON) $(ARM64_OPT) -g -c $< -o $@
$(ARM64_BUILD)/tests/%: $(ARM64_BUILD)/tests/%.o $(ARM64_OBJ)
	$(ARM64_CC) -o $@ $^ -fopenmp -lcmocka -ljansson -lm -Wl,-rpath,/usr/lib/aarch64-linux-gnu
# One OpenMP thread (OMP_THREAD_LIMIT=1): Debian's qemu-user 7.2 hangs when the guest creates a thread (seen on
# this project's machine, Linux 6.18), so the results' independence of the thread count is checked on x86 only.
# Then one full training step (tests/step_grads.c, issue #20): built here and for AArch64 from the same source over
# the compute folders only, run on every kernel set each side runs (here natively, there under qemu-aarch64), its
# loss and gradients written to $(ARM64_BUILD)/step and compared: the host's pick against AArch64's and against its
# other sets, AArch64's pick against its other sets, and portable on both. One thread on both sides (qemu's limit;
# on x86 the step is the same bits on any thread count: test_step_grads).
STEP_BIN = $(BUILD)/tests/step_grads
$(STEP_BIN): $(BUILD)/tests/step_grads.o $(ARM64_SRC:%.c=$(BUILD)/%.o)
	$(CC) $(LDFLAGS) -o $@ $^ -fopenmp -ljansson -lm
QEMU_ARM64 = OMP_THREAD_LIMIT=1 qemu-aarch64 -L /usr/aarch64-linux-gnu
test-arm64: $(ARM64_TESTS) $(ARM64_BUILD)/tests/step_grads $(STEP_BIN)
	@failed=""; for t in $(ARM64_TESTS); do echo "== $$t (qemu-aarch64, one thread)"; \
	  $(QEMU_ARM64) $$t || failed="$$failed $$t"; done; \
	echo "== a full training step: $$(uname -m) and aarch64 (qemu-aarch64, one thread)"; \
	d=$(ARM64_BUILD)/step h=$$(uname -m); rm -rf $$d; \
	{ OMP_NUM_THREADS=1 $(STEP_BIN) run $$d && $(QEMU_ARM64) $(ARM64_BUILD)/tests/step_grads run $$d && \
	  $(STEP_BIN) compare $$d/$$h.bin $$d/aarch64.bin $$d/$$h-*.bin && \
	  $(STEP_BIN) compare $$d/aarch64.bin $$d/aarch64-*.bin && \
	  $(STEP_BIN) compare $$d/$$h-portable.bin $$d/aarch64-portable.bin; } || failed="$$failed step_grads"; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi
	@echo "== test_matmul on a core without FEAT_BF16 (qemu-aarch64 -cpu cortex-a72: neon+round, neonbf16 refused)"; \
	  OMP_THREAD_LIMIT=1 qemu-aarch64 -cpu cortex-a72 -L /usr/aarch64-linux-gnu $(ARM64_BUILD)/tests/test_matmul
-include $(ARM64_OBJ:.o=.d) $(ARM64_TESTS:=.d) $(ARM64_BUILD)/tests/step_grads.d
ARM64_PKGS = gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libcmocka-dev:arm64 libjansson-dev:arm64
# The arm64 package lists come with the next apt-get update: one here when the architecture is new, unless
# the caller added it before its own update (APT_UPDATED=1, as .ci/run does).
deps-arm64:
	@if dpkg --print-foreign-architectures | grep -qx arm64; then $(MAKE) deps DEB_PKGS="$(ARM64_PKGS)"; \
	else dpkg --add-architecture arm64 && $(MAKE) deps DEB_PKGS="$(ARM64_PKGS)" APT_UPDATED=; fi

# make test-clang: everything built with clang into build-clang (needs clang and libomp-dev) and `make test` run
# there; a compiler warning fails it. macOS's compiler is clang; this is the check of it that runs here.
test-clang:
	@log=$$(mktemp); $(MAKE) CC=clang BUILD=build-clang POCKET=build-clang/pocket build-clang/pocket \
	  $(TEST_SRC:tests/%.c=build-clang/tests/%) -j2 >$$log 2>&1; status=$$?; cat $$log; \
	if grep -q "warning:" $$log; then echo "clang build warnings:"; grep "warning:" $$log; rm -f $$log; exit 1; fi; \
	rm -f $$log; [ $$status = 0 ]
	$(MAKE) CC=clang BUILD=build-clang POCKET=build-clang/pocket test

# fp32 vs RTN int4 vs QAT int4 on the demo corpus (recipes/qat-experiment/run.sh)
qat-experiment:
	bash recipes/qat-experiment/run.sh

# pocket QAT (on text and data-free) against RTN and MNN's exporter (RTN, HQQ, AWQ) on SmolLM2-135M-Instruct, every
# int4 package judged on the MNN runtime's logits of a held-out split (recipes/qat-bench/run.sh; hours, resumable)
bench-qat:
	bash recipes/qat-bench/run.sh

# GRPO on a verifiable task (multi-step arithmetic, Chinese and English): SFT, then GRPO through the int4 rounding
# with two seeds, each int4 package judged in the MNN 3.6.1 runtime on 200 held-out problems (recipes/rl/run.sh;
# hours on 2 cores, resumable)
bench-rl: $(POCKET) $(VENV)/ok
	bash recipes/rl/run.sh

# Speculative decoding in the MNN 3.6.1 runtime: a DFlash draft pocket trains, against no draft and MNN's lookahead,
# on held-out prompts of the demo's task for the demo model (after make demo) and SmolLM2, and of a second task
# (customer messages -> JSON) for SmolLM2, with the speed-up draft_plan.py expected beside the measured one
# (recipes/spec/run.sh; about 2.5 hours on 2 cores, resumable)
bench-spec: $(POCKET) $(VENV)/ok
	bash recipes/spec/run.sh demo
	bash recipes/spec/run.sh smollm2
	bash recipes/spec/run.sh extract

# Continued pre-training with English replay: SmolLM2-135M-Instruct on the demo's Chinese corpus with 0%, 10% and 25%
# of the tokens replayed from English text, same budget; held-out Chinese and English losses before and after
# (recipes/cpt-bench/run.sh; about an hour on 2 cores, resumable; NICE=19 on a shared machine)
bench-cpt: $(POCKET) $(VENV)/ok
	POCKET=./$(POCKET) bash recipes/cpt-bench/run.sh

# Our kernels and training step, PyTorch's step and HF tokenizers, in one run.
bench: $(POCKET) $(BENCH_BIN) $(VENV)/ok
	$(MAKE) MPI=1 build-mpi$(MARCH_SUFFIX)/pocket
	PYTHON=$(VENV)/bin/python bash tests/bench.sh ./$(POCKET) $(BUILD)/tests

# The training step once per instruction set this CPU runs (AVX-512, AVX2 as an AVX2-only CPU runs it, portable C;
# NEON on AArch64), beside PyTorch held to the same set: tests/bench_isa.sh, ending with docs/performance.md's table.
bench-isa: pocket build/tests/bench_model $(VENV)/ok
	if [ "$$(uname -m)" = x86_64 ]; then $(MAKE) MARCH=x86-64-v3 build-x86-64-v3/pocket build-x86-64-v3/tests/bench_model; fi
	PYTHON=$(VENV)/bin/python bash tests/bench_isa.sh

DEB_PKGS = gcc g++ cmake ninja-build make pkg-config libhdf5-dev hdf5-tools zlib1g-dev libcmocka-dev libjansson-dev \
           libinih-dev libutf8proc-dev libpcre2-dev python3-venv libopenblas0 libopenmpi-dev openmpi-bin
deps:
	@arch=$$(dpkg --print-architecture); has() { dpkg-query -W -f='$${Status}\n' "$$1" 2>/dev/null | grep -q "ok installed"; }; \
	missing=""; for p in $(DEB_PKGS); do case $$p in *:*) has $$p;; *) has $$p:$$arch || has $$p:all;; esac || \
	  missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  [ -n "$(APT_UPDATED)" ] || apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "all Debian packages present"; fi

# libFuzzer targets, one per parser (tests/fuzz/fuzz_*.c; how to run them: tests/fuzz/README.md, what each
# covers and the campaigns' figures: docs/fuzzing.md). fuzz_gguf is the GGUF reader alone, linked with nothing
# but what the reader uses. Every other target links the library, compiled again by clang into build-fuzz/lib
# with the fuzzer's coverage and the sanitizers: in the gcc-built build/libpocket.a libFuzzer would see no
# coverage and ASan no memory errors.
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -fno-sanitize-recover=undefined
FUZZ_TARGETS := $(sort $(filter-out fuzz_util,$(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))))
FUZZ_GGUF_SRC = tests/fuzz/fuzz_gguf.c formats/gguf_reader.c util/util.c
fuzz: $(FUZZ_TARGETS:%=build-fuzz/%)
build-fuzz/fuzz_gguf: $(FUZZ_GGUF_SRC) formats/gguf_reader.h util/util.h
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -o $@ $(FUZZ_GGUF_SRC) -lm
# The library in build-fuzz/lib is made by a second make with these flags, which knows its dependencies; the
# targets relink only when it changed.
fuzz-lib:
	$(MAKE) --no-print-directory BUILD=build-fuzz/lib CC=clang \
	  CFLAGS="$(FUZZ_FLAGS) -Wno-pass-failed -march=native -fopenmp -fsanitize=fuzzer-no-link,address,undefined $(HDF5_CFLAGS) -MMD -MP" \
	  build-fuzz/lib/libpocket.a
ifneq ($(BUILD),build-fuzz/lib)
build-fuzz/lib/libpocket.a: fuzz-lib
	@:
endif
# The targets find the fixtures they load (a tokenizer, chat templates, a base config) from the repo root.
build-fuzz/fuzz_util.o: tests/fuzz/fuzz_util.c tests/fuzz/fuzz_util.h
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) $(HDF5_CFLAGS) -fopenmp -fsanitize=fuzzer-no-link,address,undefined -DFUZZ_ROOT='"$(CURDIR)"' -c $< -o $@
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c build-fuzz/fuzz_util.o build-fuzz/lib/libpocket.a
	clang $(FUZZ_FLAGS) $(HDF5_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< build-fuzz/fuzz_util.o \
	  build-fuzz/lib/libpocket.a $(LDLIBS)

# The options every run uses: an input over 1 s is a hang, over 2 GB of memory (or one allocation over 1 GB)
# a failure, leaks are checked after each input. A failed allocation returns NULL as it does outside ASan
# (pocket's x* allocators then die, which libFuzzer reports). The HDF5 targets take any one allocation the
# memory limit allows: libhdf5 asks for what a corrupt header declares and reports the failure itself
# (docs/fuzzing.md); LeakSanitizer skips blocks libhdf5 loses on its own error paths (tests/fuzz/lsan.supp).
FUZZ_OPTS = -timeout=1 -rss_limit_mb=2048 -detect_leaks=1
FUZZ_HDF5 = fuzz_checkpoint fuzz_lora_checkpoint fuzz_draft_checkpoint fuzz_dataset
FUZZ_ENV = UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=allocator_may_return_null=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp
fuzz_limit = $$(case " $(FUZZ_HDF5) " in (*" $$t "*) echo -malloc_limit_mb=1048576;; (*) echo -malloc_limit_mb=1024;; esac)
# make fuzz-run SECONDS=N: each target N seconds (default 60), one after the other, from its committed corpus
# (tests/fuzz/corpus/<target>, for the GGUF targets tests/fixtures/gguf too) and dictionary (tests/fuzz/dict/<target>.dict) into build-fuzz/corpus/<target>;
# a crash, hang or leak is written to build-fuzz/artifacts/<target>/ and fails the run. FUZZ=t1,t2 picks targets;
# FUZZ_EXTRA adds libFuzzer options (the campaigns on a loaded machine: docs/fuzzing.md).
SECONDS ?= 60
comma := ,
FUZZ ?= $(FUZZ_TARGETS)
fuzz-run: fuzz
	@failed=""; for t in $(subst $(comma), ,$(FUZZ)); do \
	  mkdir -p build-fuzz/corpus/$$t build-fuzz/artifacts/$$t; \
	  dict=; [ -f tests/fuzz/dict/$$t.dict ] && dict=-dict=tests/fuzz/dict/$$t.dict; \
	  seeds=tests/fuzz/corpus/$$t; case $$t in fuzz_gguf*) seeds="$$seeds tests/fixtures/gguf";; esac; \
	  echo "== $$t: $(SECONDS) s"; \
	  $(FUZZ_ENV) build-fuzz/$$t -max_total_time=$(SECONDS) $(FUZZ_OPTS) $(fuzz_limit) $(FUZZ_EXTRA) $$dict -print_final_stats=1 \
	    -artifact_prefix=build-fuzz/artifacts/$$t/ build-fuzz/corpus/$$t $$seeds \
	    >build-fuzz/artifacts/$$t/log 2>&1 || failed="$$failed $$t"; \
	  grep -E "^#[0-9]+ +DONE|^stat::number_of_executed_units|^Done" build-fuzz/artifacts/$$t/log | tail -2; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed (logs and inputs in build-fuzz/artifacts/)"; exit 1; fi
# make fuzz-replay: every committed input (the corpora and the regressions, tests/fuzz/regressions/<target>)
# run once through its target, as a regression test; fast (CI runs it).
fuzz-replay: fuzz
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  files=$$(find tests/fuzz/corpus/$$t tests/fuzz/regressions/$$t -type f 2>/dev/null | sort); \
	  [ -n "$$files" ] || continue; \
	  echo "== $$t: $$(echo "$$files" | wc -l) inputs"; \
	  $(FUZZ_ENV) build-fuzz/$$t $(FUZZ_OPTS) $(fuzz_limit) $$files >build-fuzz/replay-$$t.log 2>&1 || \
	    { failed="$$failed $$t"; tail -40 build-fuzz/replay-$$t.log; }; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi
# make fuzz-seeds: rewrites the seed files of tests/fuzz/corpus (tests/fuzz/make_seeds.c; commit what changed).
fuzz-seeds: $(BUILD)/tests/fuzz/make_seeds
	$(BUILD)/tests/fuzz/make_seeds
# CI: the replay, then each target 2 s from its corpus (about 3 minutes with the build).
fuzz-ci: fuzz-replay
	$(MAKE) --no-print-directory fuzz-run SECONDS=2

clean:
	rm -rf build build-san build-mpi build-mpi-san build-cuda build-mpi-cuda build-fuzz pocket

# ---- CUDA backend (cuda/, `make CUDA=1`): the .cu files join the library,
# C files see -DPOCKET_CUDA (tests/test_backends.h adds a "cuda" device), the
# binaries link the CUDA runtime, cuBLASLt and NCCL. Hopper only: sm_90 machine code
# plus compute_90 PTX. `make cuda-check` runs tests/cuda/check.sh on a GPU
# machine (cuda/README.md). Without CUDA=1 nothing here applies.
ifeq ($(CUDA),1)
  NVCC ?= nvcc
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC)))
  NVCCFLAGS = -std=c++17 -O3 -g -gencode arch=compute_90,code=[sm_90,compute_90] -Xcompiler -Wall,-Wextra -MMD -MP
  CUDA_SRC := $(wildcard cuda/*.cu)
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
  LIB_OBJ += $(CUDA_OBJ)
  # The binaries are built here and carried to the GPU machine, whose CPU may
  # differ: x86-64-v3 (AVX2, FMA) instead of -march=native (the AVX-512 CPU
  # kernels are still chosen at run time).
  CFLAGS := $(filter-out -march=native,$(CFLAGS)) -march=x86-64-v3 -DPOCKET_CUDA
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
  # NCCL (GPU data parallel) where the toolkit has it; without it the GPUs run one rank each (cuda/nccl.cu).
  NCCL ?= $(if $(wildcard $(CUDA_HOME)/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so),1,0)
  ifeq ($(NCCL),1)
    NVCCFLAGS += -DPOCKET_NCCL
    LDLIBS += -lnccl
  endif
$(BUILD)/libpocket.a: $(CUDA_OBJ)
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
endif
.PHONY: cuda-prepare cuda-check
# Here (no GPU needed): build with CUDA=1 and gather what a GPU machine needs.
cuda-prepare:
	bash tests/cuda/prepare.sh
# On the GPU machine: the op tests, the model test and the benchmarks, a report into $$OUT.
cuda-check:
	bash tests/cuda/check.sh

-include $(shell find $(BUILD) -name "*.d" 2>/dev/null)
