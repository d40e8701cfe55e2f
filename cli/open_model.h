// open_model.h: a checkpoint opened for inference, the one way `pocket
// forward`, `eval`, `generate` and `export` do it: the bundle, the int4 state
// when asked for (the checkpoint's QAT scales and zero points, else
// round-to-nearest from its float weights), the device, and a model over the
// weights it runs, made with the given numerics. Planning is the caller's.
// open_checkpoint is the host part alone, for the exporters: no device, no
// model, and the int4 model's weights only where they are needed.
#pragma once
#include "../model/bundle.h"
#include "../model/model.h"
#include "../formats/int4_weights.h"
#include "../formats/lora_checkpoint.h"
#include "../qat/qat.h"

typedef struct {
    int int4;                  // run (and export) the int4 weights
    const QuantSpec *grid;     // RTN grid of a float checkpoint; NULL: group 64 asymmetric
    int grid_chosen;           // the user chose `grid`: a QAT checkpoint with another grid is an error
    ModelOptions numerics;
    const char *device;        // cpu (NULL), cuda, cuda:N (train/devices.h)
    int threads;               // 0: all cores
    FILE *log;                 // which int4 scales are used (NULL: quiet)
    const char *lora;          // an adapter checkpoint to run with (NULL: none); it must be the base's
    int int4_weights;          // open_checkpoint with int4: also the int4 model's weights (int4_host); open_model
                               // always makes them, and an adapter's base hash needs them
    int pack_int4;             // open_model with int4 and fp32 products: the projections also packed as int4
                               // (qat_pack) for the passes of a few rows that decoding makes; the same bits
} OpenOptions;

typedef struct {
    ModelBundle b;             // host memory
    QatState q;                // the int4 state (opts.int4)
    int int4, from_qat;        // q is set; it came from the checkpoint's /qat
    Device dev;
    float *params;             // b.params on the device
    float *int4_host;          // the dequantized int4 weights, made on the host (int4; see int4_weights)
    float *int4_weights;       // and on the device
    LoraAdapter ad;            // opts.lora: the adapter (host memory)
    float *lora_params;        // and on the device
    PackedViews *packed;       // pack_int4: the packed int4 weights m reads where it can, else NULL
    Model m;                   // over int4_weights, else params (and the adapter)
} OpenModel;

int open_model(OpenModel *om, const char *ckpt, const OpenOptions *o, PtError *e);
// The host part: b, q and ad as open_model makes them; no device (dev.be NULL)
// and no model. Close with open_model_close.
int open_checkpoint(OpenModel *om, const char *ckpt, const OpenOptions *o, PtError *e);
// The SHA-256 of the weights om runs (the float ones, or with int4 the int4
// model's): the base an adapter is bound to (formats/lora_checkpoint.h).
void open_model_base_hash(const OpenModel *om, char hex[65]);
void open_model_close(OpenModel *om);

// --matmul fp32|bf16, --a16 off|bf16|fp16 and --device D: how forward, eval
// and generate run (RUN_FLAGS_HELP describes them). Returns 1 when argv[*i]
// is one of them (its value consumed), 0 when not, -1 after printing the
// usage error of a bad value (args.h).
int run_flag(int argc, char **argv, int *i, OpenOptions *o);
#define RUN_FLAGS_HELP                                                                                             \
    "  --matmul P         matmul products: fp32 (default) or bf16 (bf16 operands, fp32 accumulation,\n"          \
    "                     as train.matmul = bf16)\n"                                                              \
    "  --a16 M            round matmul inputs and outputs to 16 bits as the phone's runtime does:\n"             \
    "                     off (default), bf16 or fp16 (as [qat] a16)\n"                                          \
    "  --device D         cpu (default), or cuda / cuda:N in a pocket built with make CUDA=1\n"                 \
    "  --lora ADAPTER     run with a LoRA adapter (a checkpoint of a [lora] run, or pocket import of a\n"       \
    "                     PEFT folder); it must have been trained on this base (with --int4: the int4 one)\n"
