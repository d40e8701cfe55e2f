// checkpoint_qat.h: the /qat part of an HDF5 checkpoint, for formats/checkpoint.c and
// the exporters.
//
// Layout (h5py / h5dump readable):
//     /qat                          attributes: group (int), symmetric (int),
//                                   quant_embedding (int), format "int4 w=(u-8)*scale+zero"
//     /qat/<hf name>/scale          float32 [rows, cols / group], fp16-exact values
//     /qat/<hf name>/zero           float32 [rows, cols / group] (all 0 when symmetric)
//     /qat/<hf name>/{scale_m, scale_v, zero_m, zero_v}
//                                   Adam moments, only when scales are learned
//     /qat/<hf name>/codes          uint8 [rows, cols], only once the codes are
//                                   frozen (qat_freeze): the int4 code of every weight
// One group per quantized tensor of the QatState, named by its HF name.
#pragma once
#include "../qat/qat.h"
#include "../util/h5.h"

// Writes /qat into an open file. `path` names the file in errors.
int qat_save(hid_t file, const QatState *q, const TensorTable *tt, const char *path, PtError *e);

// Reads the attributes of /qat: returns 1 when the file has no /qat, 0 when
// *spec and *quant_embedding were read, -1 on error. For an exporter that
// must rebuild the QatState a checkpoint was trained with.
int qat_read_spec(hid_t file, QuantSpec *spec, int *quant_embedding, const char *path, PtError *e);

// Reads /qat into a QatState already made by qat_init for the same table.
// Returns 1 when the file has no /qat (the caller initialises from the
// weights), 0 when read, -1 on error: a spec or tensor set that differs from
// q's, a wrong shape, or a value that is not finite and fp16-exact (negative
// scale, non-zero zero for symmetric). Moments absent from the file are
// zeroed; moments in the file are ignored when q does not learn scales.
// Frozen codes in the file (on every tensor or none; each in the spec's code
// range) are read into q->codes, which makes q frozen and gives it the scale
// training arrays, whose moments are then read too.
int qat_load(hid_t file, QatState *q, const TensorTable *tt, const char *path, PtError *e);
