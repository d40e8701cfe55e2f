// pocket forward: the probe that tests and users compare against other
// frameworks. Runs the model on N token ids, writes logits, the
// transformers-convention loss and (with --grad) every parameter gradient.
#include <stdlib.h>
#include <string.h>
#include "../formats/safetensors.h"
#include "args.h"
#include "commands.h"
#include "open_model.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: pocket forward --ckpt CKPT.h5 --tokens-file F --dump OUT.safetensors [--grad] [--int4]\n"
            "                      [--matmul fp32|bf16] [--a16 off|bf16|fp16] [--lora ADAPTER]\n\n"
            "Reads N token ids (whitespace-separated) from F and runs the model on all N.\n"
            "Writes to OUT.safetensors: logits [N, vocab] (F32), loss [1] = mean next-token\n"
            "cross-entropy over the first N-1 positions (transformers' labels=input_ids), and\n"
            "with --grad the gradient of that loss for every parameter under its HF name (with\n"
            "--lora: of every adapter tensor under its PEFT name; the base is frozen).\n"
            "--int4 runs the int4 weights: the checkpoint's QAT scales, or RTN (group 64,\n"
            "asymmetric) from its float weights; gradients are then those of the dequantized weights.\n\n"
            RUN_FLAGS_HELP);
}

// Whitespace-separated ids; errors name the file and the token's index.
static int read_tokens(const char *path, int vocab, int **out, int *n_out, PtError *e) {
    uint8_t *text;
    size_t len;
    if (read_whole_file(path, &text, &len, e)) return -1;
    int rc = arg_ids((const char *)text, " \n\t\r", vocab, 2, path, "token", out, n_out, e);
    free(text);
    return rc;
}

int cmd_forward(int argc, char **argv) {
    const char *ckpt = NULL, *tokens_path = NULL, *dump = NULL, *v;
    int grad = 0, int4 = 0, flag;
    OpenOptions oo = {.log = stderr};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(stdout); return 0; }
        else if ((flag = run_flag(argc, argv, &i, &oo))) { if (flag < 0) return ARGS_USAGE; }
        else if (!strcmp(argv[i], "--grad")) grad = 1;
        else if (!strcmp(argv[i], "--int4")) int4 = 1;
        else if ((v = arg_value(argc, argv, &i, "--ckpt"))) ckpt = v;
        else if ((v = arg_value(argc, argv, &i, "--tokens-file"))) tokens_path = v;
        else if ((v = arg_value(argc, argv, &i, "--dump"))) dump = v;
        else return arg_usage("unknown argument '%s' (see --help)", argv[i]);
    }
    if (!ckpt || !tokens_path || !dump) return arg_usage("--ckpt, --tokens-file and --dump are required (see --help)");
    PtError e;
    OpenModel om;
    oo.int4 = int4;
    if (open_model(&om, ckpt, &oo, &e)) { fprintf(stderr, "pocket forward: %s\n", e.msg); return 1; }
    Model *m = &om.m;
    int *tokens = NULL, N = 0, rc = 1;
    float *logits = NULL, *logits_dev = NULL, *grads = NULL;
    int *targets = NULL;
    Device *dev = &om.dev;
    if (read_tokens(tokens_path, om.b.cfg.vocab_size, &tokens, &N, &e) || model_plan(m, 1, N, grad, NULL, &e)) {
        fprintf(stderr, "pocket forward: %s\n", e.msg);
        goto out;
    }
    targets = xmalloc(N * sizeof(int), "targets");
    for (int i = 0; i < N; i++) targets[i] = i + 1 < N ? tokens[i + 1] : -1;
    ModelInput in = {.B = 1, .T = N, .tokens = tokens, .targets = targets};
    int V = om.b.cfg.vocab_size, count;
    const size_t logit_bytes = (size_t)N * V * sizeof(float);
    logits = xmalloc(logit_bytes, "logits");
    logits_dev = dev_mirror(dev, logits, logit_bytes, "logits");
    double sum;
    if (grad) {
        model_zero_grads(m);
        sum = model_forward_backward(m, &in, 1.0f / (N - 1), logits_dev, &count);
    } else {
        sum = model_forward(m, &in, logits_dev, &count);
    }
    OP(dev, download, logits, logits_dev, logit_bytes);
    float loss = (float)(sum / count);
    const TensorTable *tt = model_grad_table(m);   // with --lora: the adapter's (PEFT names)
    if (grad) {   // the gradients on the host, to write
        grads = xmalloc(tt->total * sizeof(float), "gradients");
        OP(dev, download, grads, m->grads, tt->total * sizeof(float));
    }
    int nt = 2 + (grad ? tt->n : 0);
    StWriteTensor *w = xcalloc(nt, sizeof *w, "tensor list");
    w[0] = (StWriteTensor){.name = "logits", .dtype = "F32", .ndim = 2, .shape = {N, V}, .data = logits};
    w[1] = (StWriteTensor){.name = "loss", .dtype = "F32", .ndim = 1, .shape = {1}, .data = &loss};
    for (int i = 0; grad && i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        w[2 + i] = (StWriteTensor){.name = t->name, .dtype = "F32", .ndim = t->ndim,
                                   .shape = {t->shape[0], t->shape[1]}, .data = grads + t->offset};
    }
    if (st_write(dump, w, nt, &e)) fprintf(stderr, "pocket forward: %s\n", e.msg);
    else {
        printf("loss %.6f over %d positions; wrote %s\n", loss, count, dump);
        rc = 0;
    }
    free(w);
out:
    dev_unmirror(dev, logits_dev, logits);
    free(logits);
    free(grads);
    free(targets);
    free(tokens);
    open_model_close(&om);
    return rc;
}
