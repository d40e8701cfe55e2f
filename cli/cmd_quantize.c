// pocket quantize: completes a checkpoint's int4 state. A GGUF import keeps
// the int4 codes of its Q4 tensors, but a tensor stored otherwise (often the
// tied embedding, as Q8_0) stays float, and the MNN package needs the tied
// embedding quantized: it is the lm_head. This command writes a checkpoint
// whose int4 state covers every matrix: the state's own entries unchanged,
// the missing ones round-to-nearest on the same grid.
#include <stdlib.h>
#include <string.h>
#include "../formats/checkpoint.h"
#include "../model/ops/ops.h"
#include "args.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket quantize --ckpt CKPT.h5 --out OUT.h5 [--group G] [--symmetric]\n\n"
            "Writes OUT.h5: CKPT.h5 with an int4 state (/qat) that quantizes every matrix, the\n"
            "embedding included. The checkpoint's own int4 state (QAT scales, or the codes a GGUF\n"
            "import kept) is kept as it is; matrices it leaves in float (e.g. a tied embedding that\n"
            "was Q8_0 in the GGUF) get round-to-nearest codes on its grid. A checkpoint without an\n"
            "int4 state gets RTN group 64, asymmetric. `pocket generate --int4`, `eval --int4` and the\n"
            "exporters then run and ship exactly this state.\n\n"
            "  --group G      instead, round-to-nearest of every matrix on groups of G inputs from the\n"
            "                 checkpoint's float weights (its own int4 state is dropped): e.g. to ship a\n"
            "                 GGUF import (group 32) on MNN's default grid of 64\n"
            "  --symmetric    with --group (default 64): symmetric int4, no zero point\n");
}

// q2's entries for the tensors q quantizes are q's (scale, zero; codes when frozen).
static void copy_entries(QatState *q2, const QatState *q) {
    for (int i = 0; i < q->n; i++) {
        const QatTensor *from = &q->t[i], *to = qat_find(q2, from->tensor);
        memcpy(q2->scale + to->offset, q->scale + from->offset, from->n_groups * sizeof(float));
        memcpy(q2->zero + to->offset, q->zero + from->offset, from->n_groups * sizeof(float));
    }
}

int cmd_quantize(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *v;
    int group = 0, symmetric = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if (!strcmp(argv[i], "--symmetric")) symmetric = 1;
        else if ((v = arg_value(argc, argv, &i, "--group"))) { if (arg_even("--group", v, 2, 65536, &group)) return ARGS_USAGE; }
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--out"))) out = v;
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!ckpt || !out) return arg_usage("--ckpt and --out are required (see --help)");
    PtError e;
    ModelBundle b;
    if (checkpoint_load(ckpt, &b, &e)) { fprintf(stderr, "pocket quantize: %s\n", e.msg); return 1; }
    QatState q, q2;
    int from_qat, rc = 1;
    memset(&q2, 0, sizeof q2);
    QuantSpec grid = {group ? group : QUANT_GROUP_DEFAULT, symmetric};
    const int regrid = group || symmetric;
    if (regrid) {   // nothing kept: every matrix gets RTN on the chosen grid below
        memset(&q, 0, sizeof q);
        q.spec = grid;
        from_qat = 0;
    } else if (int4_load_state(&b, ckpt, NULL, &q, &from_qat, &e)) {
        goto fail_bundle;
    }
    if (qat_init(&q2, &b.tt, &q.spec, 1, 0, ckpt, &e) ||
        qat_init_from_weights(&q2, &b.tt, b.params, QAT_INIT_RTN, NULL, NULL, ckpt, &e))
        goto fail;
    copy_entries(&q2, &q);
    int added = q2.n - q.n;
    if (q.codes) {   // a frozen state stays frozen: the codes come back from (weights, scale, zero)
        Device d;
        cpu_device_init(&d, 0, NULL);
        qat_freeze(&d, &q2, &b.tt, b.params);
        dev_free(&d);
    }
    if (checkpoint_save_qat(out, &b, &q2, &e)) goto fail;
    printf("%s: int4 state of %s (group %d, %s) over %d matrices, %d of them newly quantized (RTN)%s\n", out,
           from_qat ? "the checkpoint" : "RTN", q2.spec.group, q2.spec.symmetric ? "symmetric" : "asymmetric", q2.n,
           added, q.codes ? "; codes frozen" : "");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pocket quantize: %s\n", e.msg);
done:
    qat_free(&q2);
    qat_free(&q);
    bundle_free(&b);
    return rc;
fail_bundle:
    fprintf(stderr, "pocket quantize: %s\n", e.msg);
    bundle_free(&b);
    return 1;
}
