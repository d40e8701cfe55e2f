#!/usr/bin/env bash
# tests/setup_venv.sh VENV: create the Python virtualenv that the interop tests
# (tests/interop, `make interop`) and the fixture scripts run in.
#
# - Installs tests/requirements-ci.txt with --no-deps: the file pins the whole
#   closure, so nothing unpinned comes in.
# - torch from PyPI is a CUDA build whose libraries name about a dozen CUDA
#   libraries (cuBLAS, cuDNN, NCCL, ...) that come as multi-GB nvidia-* wheels.
#   The tests only use the CPU, so instead we build tiny stand-ins for those
#   libraries from the symbols torch asks for: the loader is satisfied, every
#   call into them fails with "no device", and torch.cuda.is_available() is
#   False. They go into torch/lib, which is on torch's own library search path
#   ($ORIGIN), so no LD_LIBRARY_PATH is needed.
# - llama-cpp-python (llama.cpp itself, for tests/interop/test_gguf_llamacpp.py)
#   has no binary wheel on PyPI. Its pinned sdist is built ONCE into a wheel in
#   the wheelhouse and installed from there: CPU only; GGML_NATIVE off, so the
#   wheel and llama.cpp's numbers do not depend on the CPU that built it (it
#   still needs AVX2/FMA); without llama.cpp's common and mtmd libraries, which
#   the Python package never loads (about half of the build); without build
#   isolation: its build backend (scikit-build-core, pathspec) is pinned in
#   requirements-ci.txt, and cmake, ninja and g++ are Debian packages (.ci/run
#   installs them).
# - With PIP_CACHE_DIR set, the downloaded wheels and the built llama-cpp-python
#   wheel are kept in $PIP_CACHE_DIR/pocket-wheelhouse and a later run installs
#   from there without the network or a compiler; without it they go to a
#   temporary folder.
#
# Environment: PYTHON (default python3), PIP_CACHE_DIR (optional).
set -euo pipefail

if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    echo "usage: tests/setup_venv.sh VENV   (env: PYTHON=python3, PIP_CACHE_DIR=optional wheel cache)" >&2
    exit 2
fi
VENV=$1
HERE=$(cd "$(dirname "$0")" && pwd)
REQ=$HERE/requirements-ci.txt
PYTHON=${PYTHON:-python3}
# llama.cpp's Python bindings, built from source (see the top of this file).
LLAMA_CPP_PYTHON=llama-cpp-python==0.3.36
LLAMA_CPP_CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF"
start=$(date +%s)

for tool in "$PYTHON" gcc readelf; do
    command -v "$tool" >/dev/null || { echo "setup_venv.sh: $tool not found" >&2; exit 1; }
done
TEMP_DIRS=()
trap 'rm -rf "${TEMP_DIRS[@]}"' EXIT

echo "setup_venv.sh: creating $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv --clear "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
INSTALL=(install --quiet --no-deps --only-binary=:all: -r "$REQ")

if [ -n "${PIP_CACHE_DIR:-}" ]; then
    WHEELS=$PIP_CACHE_DIR/pocket-wheelhouse
else
    WHEELS=$(mktemp -d)
    TEMP_DIRS+=("$WHEELS")
fi
mkdir -p "$WHEELS"
if [ -n "${PIP_CACHE_DIR:-}" ]; then
    if "${PIP[@]}" "${INSTALL[@]}" --no-index --find-links "$WHEELS" >/dev/null 2>&1; then
        echo "setup_venv.sh: installed from the wheel cache $WHEELS"
    else
        echo "setup_venv.sh: downloading wheels into $WHEELS"
        "${PIP[@]}" download --quiet --no-deps --only-binary=:all: -r "$REQ" -d "$WHEELS"
        "${PIP[@]}" "${INSTALL[@]}" --no-index --find-links "$WHEELS"
    fi
else
    echo "setup_venv.sh: installing from the package index (set PIP_CACHE_DIR to keep the wheels)"
    "${PIP[@]}" "${INSTALL[@]}"
fi

# llama-cpp-python: the wheel from the wheelhouse, built there first if missing.
LLAMA_VERSION=${LLAMA_CPP_PYTHON#*==}
if ! compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    for tool in cmake g++; do
        command -v "$tool" >/dev/null || { echo "setup_venv.sh: $tool not found (needed to build $LLAMA_CPP_PYTHON)" >&2; exit 1; }
    done
    echo "setup_venv.sh: building $LLAMA_CPP_PYTHON from its sdist into $WHEELS (once; about 6 minutes on 2 cores)"
    BUILD_LOG=$(mktemp)
    TEMP_DIRS+=("$BUILD_LOG")
    t0=$(date +%s)
    # llama-cpp-python's CMakeLists forces llama.cpp's common library on; the
    # Python package never loads it, and it is a third of the build. This
    # file, run right after llama.cpp's project() call, turns it off again.
    NO_COMMON=$(mktemp -d)
    TEMP_DIRS+=("$NO_COMMON")
    echo 'set(LLAMA_BUILD_COMMON OFF CACHE BOOL "not loaded by the Python package" FORCE)' >"$NO_COMMON/no_common.cmake"
    if ! CMAKE_ARGS="$LLAMA_CPP_CMAKE_ARGS -DCMAKE_PROJECT_llama.cpp_INCLUDE=$NO_COMMON/no_common.cmake" \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "${PIP[@]}" wheel --no-deps --no-build-isolation --no-binary llama-cpp-python -w "$WHEELS" "$LLAMA_CPP_PYTHON" \
        >"$BUILD_LOG" 2>&1; then
        tail -n 40 "$BUILD_LOG" >&2
        echo "setup_venv.sh: building $LLAMA_CPP_PYTHON failed (the end of its log is above)" >&2
        exit 1
    fi
    echo "setup_venv.sh: built $LLAMA_CPP_PYTHON in $(( $(date +%s) - t0 )) s"
fi
"${PIP[@]}" install --quiet --no-deps --no-index --find-links "$WHEELS" "$LLAMA_CPP_PYTHON"

# Stand-ins for the CUDA libraries torch links to (see the top of this file).
TORCH_DIR=$("$VENV/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')
STUB_SRC=$(mktemp -d)
TEMP_DIRS+=("$STUB_SRC")
"$VENV/bin/python" - "$TORCH_DIR" "$STUB_SRC" <<'PY'
import collections, ctypes, glob, os, re, subprocess, sys

torch_dir, src_dir = sys.argv[1], sys.argv[2]
lib_dir = os.path.join(torch_dir, "lib")
CUDA_LIB = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|cudnn\w*|cufft\w*|cufile|cupti|curand|cusolver\w*"
                      r"|cusparse|cusparseLt|nccl|nvrtc\w*|nvshmem\w*|nvJitLink|nvToolsExt)\.so")

def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True).stdout

objects = [p for p in glob.glob(os.path.join(torch_dir, "**", "*.so*"), recursive=True) if os.path.isfile(p)]
shipped = {os.path.basename(p) for p in objects}
stand_ins = set()                        # CUDA sonames torch needs and does not ship
versions = collections.defaultdict(set)  # soname -> symbol versions asked of it
version_file = {}                        # version name -> soname that defines it
undefined = {}                           # (symbol, version or None) -> (type, size)
defined = set()
for path in objects:
    for m in re.finditer(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", readelf("-d", path)):
        if m.group(1) not in shipped and CUDA_LIB.match(m.group(1)):
            stand_ins.add(m.group(1))
    current = None
    for line in readelf("-V", path).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"Name: (\S+)\s+Flags", line)
        if m and current:
            versions[current].add(m.group(1))
            version_file[m.group(1)] = current
    for line in readelf("--dyn-syms", path).splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":"):
            continue
        name, _, ver = f[7].partition("@")
        ver = ver.lstrip("@").split("(")[0].strip() or None
        if f[6] != "UND":
            defined.add(name)
        elif f[4] != "WEAK" and name:
            undefined[(name, ver)] = (f[3], int(f[2], 0))

# Versioned symbols belong to their version's library. Unversioned ones that
# neither torch nor the system libraries every process here has provide
# (the CUDA driver, cuFile, cuSPARSELt, NCCL entry points) go into every
# stand-in, so they resolve whichever library asks.
system = [ctypes.CDLL(None)] + [ctypes.CDLL(n) for n in ("libstdc++.so.6", "libgcc_s.so.1", "libm.so.6")]
by_lib = collections.defaultdict(dict)
loose = {}
for (name, ver), info in undefined.items():
    if name in defined:
        continue
    if ver:
        if version_file.get(ver) in stand_ins:
            by_lib[version_file[ver]][name] = (ver, info)
    elif not any(hasattr(h, name) for h in system):
        loose[name] = info

MSG = '"no CUDA device (CPU-only stand-in library from tests/setup_venv.sh)"'
def definition(name, kind, size):
    if kind == "OBJECT":
        return f"char {name}[{max(size, 1)}];"
    if name in ("cudaGetDeviceCount", "cuDeviceGetCount"):
        return f"int {name}(int *n) {{ *n = 0; return 100; }}"
    if name in ("cuGetErrorString", "cuGetErrorName"):
        return f"int {name}(int e, const char **s) {{ (void)e; *s = {MSG}; return 0; }}"
    if re.search(r"Get(Error|Status)(String|Name)$", name) or name == "ncclGetLastError":
        return f"const char *{name}(void) {{ return {MSG}; }}"
    if name in ("cudaGetLastError", "cudaPeekAtLastError"):
        return f"int {name}(void) {{ return 0; }}"
    return f"long {name}(void) {{ return 100; }}"   # 100: "no device" in the runtime and driver APIs

for lib in sorted(stand_ins):
    own = by_lib[lib]
    symbols = {n: info for n, info in loose.items()}
    symbols.update({n: info for n, (_, info) in own.items()})
    src = os.path.join(src_dir, lib + ".c")
    with open(src, "w") as f:
        f.write("/* CPU-only stand-in generated by tests/setup_venv.sh; every call reports no device. */\n")
        f.write("".join(definition(n, *symbols[n]) + "\n" for n in sorted(symbols)))
    cmd = ["gcc", "-shared", "-fPIC", "-w", "-o", os.path.join(lib_dir, lib), "-Wl,-soname," + lib, src]
    names = sorted(versions.get(lib, ()))
    if names:   # define every version node torch's libraries ask this soname for
        script = os.path.join(src_dir, lib + ".map")
        with open(script, "w") as f:
            for i, v in enumerate(names):
                syms = sorted([n for n, (vv, _) in own.items() if vv == v] + ([n for n in loose if n not in own] if i == 0 else []))
                f.write(v + " {\n  global:\n" + "".join(f"    {n};\n" for n in syms)
                        + ("  local: *;\n" if i == 0 else "") + "};\n")
        cmd.append("-Wl,--version-script," + script)
    subprocess.run(cmd, check=True)
print(f"setup_venv.sh: {len(stand_ins)} CUDA stand-in libraries in {lib_dir}")
PY

# Smoke check: the CPU paths the tests rely on.
"$VENV/bin/python" - <<'PY'
import h5py, llama_cpp, numpy, pytest, safetensors, tokenizers, torch, transformers
from transformers import Qwen3Config, Qwen3ForCausalLM
assert not torch.cuda.is_available()
assert float(torch.ones(2) @ torch.ones(2)) == 2.0
cfg = Qwen3Config(vocab_size=32, hidden_size=16, intermediate_size=20, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=8)
ids = torch.arange(8)[None]
Qwen3ForCausalLM(cfg)(input_ids=ids, labels=ids).loss.backward()
print(f"setup_venv.sh: ok: torch {torch.__version__} (CPU), transformers {transformers.__version__}, "
      f"tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}, numpy {numpy.__version__}, "
      f"h5py {h5py.__version__}, pytest {pytest.__version__}, llama-cpp-python {llama_cpp.__version__}")
PY
echo "setup_venv.sh: $VENV ready in $(( $(date +%s) - start )) s"
