#!/usr/bin/env python3
"""HDF5 files written by h5py (its wheel's own libhdf5), for pocket's chunk reader.

    tests/.venv/bin/python tests/ref/make_h5_fixtures.py   # writes tests/fixtures/h5/h5py_chunks.h5

Each dataset's values follow a formula that tests/test_h5_read.c computes
again, so the test compares pocket's reading with what h5py wrote, not with
pocket's own writer: chunk shapes that do not divide the shape (edge chunks),
ranks 1 to 3, shuffle and deflate alone and together, a float64 read as
float32, chunks never written (the fill value), and a filter pocket does not
undo (lzf), which it must refuse.
"""
import pathlib

import h5py
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "h5" / "h5py_chunks.h5"


def main():
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(OUT, "w", track_order=False) as f:
        f.attrs["writer"] = f"h5py {h5py.version.version}, libhdf5 {h5py.version.hdf5_version}"
        i = np.arange(37 * 19, dtype=np.float32).reshape(37, 19)
        f.create_dataset("f32_shuffle_gzip", data=i * 0.5 - 100, chunks=(8, 5), shuffle=True, compression="gzip")
        j = np.arange(1000, dtype=np.float64)
        f.create_dataset("f64_gzip", data=j * 0.1 - 20, chunks=(128,), compression="gzip", compression_opts=9)
        k = np.arange(777, dtype=np.uint32)
        f.create_dataset("u16_shuffle", data=((k * 97) % 65536).astype(np.uint16), chunks=(100,), shuffle=True)
        m = np.arange(5 * 6 * 7, dtype=np.uint32).reshape(5, 6, 7)
        f.create_dataset("u32_rank3", data=m * 3 + 1, chunks=(2, 3, 4), compression="gzip")
        b = np.arange(300, dtype=np.uint32)
        f.create_dataset("u8_gzip", data=((b * 7) % 256).astype(np.uint8), chunks=(64,), compression="gzip")
        sparse = f.create_dataset("i32_sparse", shape=(100,), dtype=np.int32, chunks=(10,), fillvalue=-7,
                                  compression="gzip")
        sparse[20:35] = np.arange(15, dtype=np.int32)   # chunks 2 and 3 written, the others never
        f.create_dataset("f32_lzf", data=i, chunks=(8, 5), compression="lzf")


if __name__ == "__main__":
    main()
