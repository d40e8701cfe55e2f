#!/usr/bin/env python3
"""What another libhdf5 makes of the inputs that break Debian's 1.10.8.

    tests/.venv/bin/python tests/fuzz/walk_h5py.py tests/fuzz/regressions/*/libhdf5-*.h5

Each file is opened by h5py (whose wheel carries its own libhdf5) in a child
process that reads every attribute and every dataset, as pocket's loaders do;
the parent prints one line per file: the first error libhdf5 reported, that
everything was read, that the child died of a signal, or that it gave no
answer within --seconds (libhdf5 looping). docs/fuzzing.md has the results.
"""
import argparse
import subprocess
import sys


def walk(path):
    import h5py

    errors = []

    def read(name, obj):
        for key in list(obj.attrs.keys()):
            try:
                obj.attrs[key]
            except Exception as e:   # libhdf5's refusal, as h5py raises it
                errors.append(f"attribute {name}@{key}: {e}")
        if isinstance(obj, h5py.Dataset):
            try:
                obj[()]
            except Exception as e:
                errors.append(f"dataset {name}: {e}")

    try:
        with h5py.File(path, "r") as f:
            read("/", f)
            f.visititems(read)
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
    print(f"refused: {errors[0]}" if errors else "read whole", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        walk(a.files[0])
        return
    import h5py
    print(f"h5py {h5py.version.version}, libhdf5 {h5py.version.hdf5_version}")
    for path in a.files:
        try:
            r = subprocess.run([sys.executable, __file__, "--child", path], capture_output=True, text=True,
                               timeout=a.seconds)
            said = r.stdout.strip().splitlines()
            what = said[-1] if r.returncode == 0 and said else f"died (exit {r.returncode})"
        except subprocess.TimeoutExpired:
            what = f"no answer in {a.seconds:g} s"
        print(f"{path}: {what}")


if __name__ == "__main__":
    main()
