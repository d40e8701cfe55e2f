// recipe.c: the recipe key table and the INI reader/writer built on it.
#include "recipe.h"
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include "../model/draft.h"
#include "data_spec.h"

typedef enum { KT_INT, KT_LONG, KT_FLOAT, KT_BOOL, KT_CHOICE, KT_STR } KeyType;

typedef struct {
    const char *section, *key;
    KeyType type;
    size_t offset;          // of the field in Recipe
    const char *def;        // default, as INI text (parsed by the same code as a file)
    const char *range;      // numbers: "[lo, hi]" with ( ) for open ends, "inf" allowed; NULL = any
    const char *choices;    // KT_CHOICE: "a|b|c", the field holds the index
    int required;           // strings only: must be non-empty after loading
    const char *help;
} KeySpec;

#define F(field) offsetof(Recipe, field)

// THE list of recipe keys. A new key: a field in Recipe and a row here.
// A new section: rows with its name (the order here is the order in files).
static const KeySpec KEYS[] = {
    {"model", "init", KT_STR, F(model.init), "", NULL, NULL, 1,
     "checkpoint .h5 to start from, or a preset name for a fresh model"},
    {"model", "tokenizer", KT_STR, F(model.tokenizer), "", NULL, NULL, 0,
     "tokenizer.json for a fresh model (a checkpoint carries its own)"},
    {"data", "train", KT_STR, F(data.train), "", NULL, NULL, 1,
     "training token dataset (.h5 from pocket tokenize), or a mixture PATH:WEIGHT, ... (each weight the share of "
     "the training tokens drawn from that set)"},
    {"data", "val", KT_STR, F(data.val), "", NULL, NULL, 0,
     "validation token dataset, or several NAME:PATH, ... each evaluated on its own; empty = no evaluation"},
    {"train", "mode", KT_CHOICE, F(train.mode), "cpt", NULL, "cpt|sft|choice|dpo|grpo|onpolicy_distill", 0,
     "cpt: continued pre-training on every token; sft: loss on assistant tokens only; choice: the decision head's "
     "cross-entropy over each group's candidates (tokenize --choice); dpo: a [preference] loss over pairs of a "
     "chosen and a rejected response (tokenize --pairs); grpo: [rl] rewards of the model's own completions of an "
     "SFT set's prompts; onpolicy_distill: the KL of the model's own completions to a teacher's (the [distill] "
     "teacher, else model.init)"},
    {"train", "choice_token", KT_INT, F(train.choice_token), "0", "[0, 2147483647]", NULL, 0,
     "choice: the lm_head row that is the decision head; 0 = the model's own head, else the first row past the "
     "tokenizer's tokens (one is appended when there is none)"},
    {"train", "micro_batch", KT_INT, F(train.micro_batch), "4", "[1, 65536]", NULL, 0, "sequences per forward/backward"},
    {"train", "seq_len", KT_INT, F(train.seq_len), "256", "[2, 1048576]", NULL, 0, "tokens per sequence"},
    {"train", "grad_accum", KT_INT, F(train.grad_accum), "1", "[1, 65536]", NULL, 0,
     "micro-batches summed into one optimizer update"},
    {"train", "steps", KT_LONG, F(train.steps), "0", "[0, 1e12]", NULL, 0,
     "optimizer updates; 0 = derive from tokens (or epochs)"},
    {"train", "tokens", KT_LONG, F(train.tokens), "0", "[0, 1e15]", NULL, 0,
     "training tokens when steps = 0; 0 = derive from epochs"},
    {"train", "epochs", KT_FLOAT, F(train.epochs), "1", "(0, 1000]", NULL, 0,
     "passes over the train set when steps and tokens are both 0"},
    {"train", "stop_after", KT_LONG, F(train.stop_after), "0", "[0, 1e12]", NULL, 0,
     "stop and save once this many updates are done (the run resumes later); 0 = run to the end"},
    {"train", "eval_interval", KT_LONG, F(train.eval_interval), "100", "[0, 1e12]", NULL, 0,
     "updates between evaluations on [data] val; 0 = never"},
    {"train", "eval_batches", KT_INT, F(train.eval_batches), "20", "[1, 1000000]", NULL, 0,
     "micro-batches per evaluation"},
    {"train", "best_by", KT_STR, F(train.best_by), "", NULL, NULL, 0,
     "the validation figure best.h5 has the lowest of: a [data] val set's NAME, sum (every set's loss), or "
     "NAME:WEIGHT, ... (a weighted sum); empty = the first set's loss"},
    {"train", "save_interval", KT_LONG, F(train.save_interval), "100", "[0, 1e12]", NULL, 0,
     "updates between checkpoints; 0 = only at the end"},
    {"train", "keep_last", KT_INT, F(train.keep_last), "2", "[1, 1000000]", NULL, 0,
     "checkpoints kept in run_dir (older ones are deleted)"},
    {"train", "seed", KT_LONG, F(train.seed), "1234", "[0, 9e15]", NULL, 0, "seed for data order, init and sampling"},
    {"train", "threads", KT_INT, F(train.threads), "0", "[0, 4096]", NULL, 0, "CPU threads; 0 = all cores"},
    {"train", "run_dir", KT_STR, F(train.run_dir), "", NULL, NULL, 0,
     "checkpoints, log and resolved recipe; empty = runs/<recipe file name>"},
    {"train", "max_bad_steps", KT_INT, F(train.max_bad_steps), "5", "[1, 1000000]", NULL, 0,
     "stop after this many non-finite updates in a row (each is skipped)"},
    {"train", "sample_prompt", KT_STR, F(train.sample_prompt), "", NULL, NULL, 0,
     "text to sample from at each evaluation; empty = none"},
    {"train", "sample_tokens", KT_INT, F(train.sample_tokens), "48", "[1, 1000000]", NULL, 0,
     "tokens generated per sample"},
    {"train", "doc_mask", KT_BOOL, F(train.doc_mask), "0", NULL, NULL, 0,
     "cpt: attention stays inside each packed document"},
    {"train", "recompute", KT_BOOL, F(train.recompute), "0", NULL, NULL, 0,
     "keep one layer of activations and recompute the rest in the backward (less memory, ~1/3 more compute)"},
    // choice order = TRAIN_MATMUL_* in recipe.h
    {"train", "matmul", KT_CHOICE, F(train.matmul), "fp32", NULL, "fp32|bf16", 0,
     "matmul operands: fp32, or bf16 rounded (fp32 accumulation and master weights; AVX512_BF16 when present)"},
    {"train", "device", KT_STR, F(train.device), "cpu", NULL, NULL, 0,
     "where the step runs: cpu, or cuda / cuda:N (a GPU, in a pocket built with make CUDA=1)"},
    // choice order = GRAD_REDUCE_* in recipe.h
    {"train", "grad_reduce", KT_CHOICE, F(train.grad_reduce), "fp32", NULL, "fp32|bf16", 0,
     "data parallel on GPUs: the gradient sum over NCCL in fp32, or in bf16 (half the bytes)"},
    // choice order = NCCL_* in recipe.h
    {"train", "nccl", KT_CHOICE, F(train.nccl), "auto", NULL, "auto|always", 0,
     "GPUs: the collectives go through NCCL with more than one rank (auto), or also with one (always: a check)"},
    {"train", "comm_timeout", KT_FLOAT, F(train.comm_timeout), "600", "[1, 1e6]", NULL, 0,
     "data parallel: seconds a rank waits for another before ending the run, naming it"},
    {"optim", "lr", KT_FLOAT, F(optim.lr), "3e-4", "(0, 1)", NULL, 0, "peak learning rate"},
    {"optim", "beta1", KT_FLOAT, F(optim.beta1), "0.9", "[0, 1)", NULL, 0, "AdamW first-moment decay"},
    {"optim", "beta2", KT_FLOAT, F(optim.beta2), "0.95", "[0, 1)", NULL, 0, "AdamW second-moment decay"},
    {"optim", "eps", KT_FLOAT, F(optim.eps), "1e-8", "(0, 1)", NULL, 0, "AdamW denominator epsilon"},
    {"optim", "weight_decay", KT_FLOAT, F(optim.weight_decay), "0.1", "[0, 10]", NULL, 0,
     "decoupled weight decay on matrices and embeddings (not norms)"},
    {"optim", "grad_clip", KT_FLOAT, F(optim.grad_clip), "1.0", "[0, 1e6]", NULL, 0,
     "max global gradient L2 norm; 0 = no clipping"},
    // choice order = SCHED_* in schedule.h
    {"optim", "schedule", KT_CHOICE, F(optim.schedule), "cosine", NULL, "constant|cosine|linear|wsd", 0,
     "learning-rate shape after warmup (wsd = warmup, stable, decay)"},
    {"optim", "warmup", KT_LONG, F(optim.warmup), "100", "[0, 1e12]", NULL, 0,
     "updates of linear warmup from 0 to lr"},
    {"optim", "min_lr_ratio", KT_FLOAT, F(optim.min_lr_ratio), "0.1", "[0, 1]", NULL, 0,
     "final lr as a fraction of lr (cosine, linear, wsd)"},
    {"optim", "decay_fraction", KT_FLOAT, F(optim.decay_fraction), "0.2", "[0, 1]", NULL, 0,
     "wsd: fraction of all updates, at the end, that decays to the final lr"},
    {"qat", "enabled", KT_BOOL, F(qat.enabled), "0", NULL, NULL, 0,
     "W4A16 quantization-aware training: matmul weights are fake-quantized to int4"},
    {"qat", "group", KT_INT, F(qat.group), "64", "[2, 4096]", NULL, 0,
     "input-dimension weights per int4 group (64 as the released INT4 model; 32, 128)"},
    {"qat", "symmetric", KT_BOOL, F(qat.symmetric), "0", NULL, NULL, 0, "symmetric int4 (no zero point)"},
    {"qat", "quant_embedding", KT_BOOL, F(qat.quant_embedding), "1", NULL, NULL, 0,
     "also quantize the embedding (with tied weights it is the lm_head the runtime quantizes)"},
    {"qat", "init", KT_CHOICE, F(qat.init), "rtn", NULL, "rtn|mse", 0,
     "scale/zero initialisation: min/max (rtn) or a small MSE search over the range"},
    {"qat", "learn_scales", KT_BOOL, F(qat.learn_scales), "0", NULL, NULL, 0,
     "train scale and zero point (LSQ-style gradients, Adam) besides the weights"},
    {"qat", "scale_lr", KT_FLOAT, F(qat.scale_lr), "1e-4", "(0, 1)", NULL, 0,
     "learning rate of scale/zero (learn_scales = 1, or after freeze_codes_step)"},
    {"qat", "start_step", KT_LONG, F(qat.start_step), "0", "[0, 1e12]", NULL, 0,
     "update at which fake-quant starts (float training before it)"},
    {"qat", "freeze_codes_step", KT_LONG, F(qat.freeze_codes_step), "-1", "[-1, 1e12]", NULL, 0,
     "update from which the int4 codes are frozen and only scale/zero (scale_lr) and unquantized tensors train; "
     "-1 = never"},
    {"qat", "a16", KT_CHOICE, F(qat.a16), "off", NULL, "off|bf16|fp16", 0,
     "round matmul inputs and outputs to this 16-bit type, as the device computes"},
    {"lora", "enabled", KT_BOOL, F(lora.enabled), "0", NULL, NULL, 0,
     "train a LoRA adapter on the frozen model.init checkpoint instead of the model itself"},
    {"lora", "rank", KT_INT, F(lora.rank), "16", "[1, 4096]", NULL, 0, "adapter rank r"},
    {"lora", "alpha", KT_FLOAT, F(lora.alpha), "32", "(0, 1e6]", NULL, 0, "the update is scaled by alpha / rank"},
    {"lora", "dropout", KT_FLOAT, F(lora.dropout), "0", "[0, 1)", NULL, 0,
     "dropout rate on the adapter's input in training (PEFT's lora_dropout; masks from train.seed)"},
    {"lora", "targets", KT_STR, F(lora.targets), "q,k,v,o,gate,up,down", NULL, NULL, 0,
     "adapted projections, any of q, k, v, o, gate, up, down (or q_proj, ...), comma-separated"},
    // choice order = LORA_INIT_* in model/lora.h
    {"lora", "init", KT_CHOICE, F(lora.init), "peft", NULL, "peft|gaussian", 0,
     "B = 0 and A kaiming-uniform (PEFT's default), or A ~ N(0, 1/r) (PEFT's gaussian)"},
    // choice order = LORA_BASE_* in recipe.h
    {"lora", "base", KT_CHOICE, F(lora.base), "fp32", NULL, "fp32|int4", 0,
     "the frozen base: the checkpoint's float weights, or its int4 model as deployed (QLoRA; its QAT state, "
     "else round-to-nearest group 64)"},
    {"distill", "enabled", KT_BOOL, F(distill.enabled), "0", NULL, NULL, 0,
     "train on a teacher's next-token distributions as well as (or instead of) the data's tokens"},
    {"distill", "teacher", KT_STR, F(distill.teacher), "", NULL, NULL, 0,
     "teacher checkpoint (same vocabulary, tokenizer and shape); empty = model.init, frozen as it starts"},
    {"distill", "kd_weight", KT_FLOAT, F(distill.kd_weight), "1", "[0, 1]", NULL, 0,
     "loss = (1 - kd_weight) x cross-entropy + kd_weight x T^2 x KL(teacher || model), both at temperature T"},
    {"distill", "temperature", KT_FLOAT, F(distill.temperature), "1", "(0, 100]", NULL, 0,
     "softmax temperature T of both distributions in the KL term"},
    // choice order = DISTILL_* in recipe.h
    {"distill", "source", KT_CHOICE, F(distill.source), "forward", NULL, "forward|topk", 0,
     "the teacher's full distribution from its own forward in every step, or its top-k logits stored in "
     "data.train by pocket teacher-topk"},
    {"draft", "enabled", KT_BOOL, F(draft.enabled), "0", NULL, NULL, 0,
     "train a DFlash speculative draft for the frozen int4 model of model.init (train.mode = sft)"},
    {"draft", "layers", KT_INT, F(draft.layers), "1", "[1, 16]", NULL, 0, "the draft's decoder layers"},
    {"draft", "block", KT_INT, F(draft.block), "8", "[2, 64]", NULL, 0,
     "tokens per drafting pass: the last accepted token and block - 1 mask tokens"},
    {"draft", "target_layers", KT_STR, F(draft.target_layers), "", NULL, NULL, 0,
     "0-based target layers whose outputs are the draft's context, comma-separated and increasing; empty = "
     "min(3, L) of the target's L layers, spaced as DFlash does (layers 1 to L-3 of a deep target)"},
    {"draft", "mask_token", KT_INT, F(draft.mask_token), "-1", "[-1, 2147483647]", NULL, 0,
     "the id of the block's mask rows; -1 = the target's pad_id, else its eos_id, else 0"},
    {"draft", "d_ff", KT_INT, F(draft.d_ff), "0", "[0, 1048576]", NULL, 0, "the draft's MLP width; 0 = the target's"},
    {"draft", "anchors", KT_INT, F(draft.anchors), "16", "[1, 4096]", NULL, 0,
     "blocks drawn per training sequence, each at a response token followed by another"},
    {"draft", "loss_decay", KT_FLOAT, F(draft.loss_decay), "7", "(0, 1e6]", NULL, 0,
     "block position i of the loss weighs exp(-(i-1)/loss_decay): the first drafted tokens count most"},
    {"draft", "ce_weight", KT_FLOAT, F(draft.ce_weight), "1", "[0, 1e6]", NULL, 0,
     "the weight of the cross-entropy on the target's token at each block position"},
    {"draft", "kl_weight", KT_FLOAT, F(draft.kl_weight), "0", "[0, 1e6]", NULL, 0,
     "the weight of the KL divergence of the draft from the int4 target's own next-token distribution at each "
     "block position (the forward KL, target to draft); 0 = the cross-entropy alone. Both are weighted by the "
     "position's loss_decay weight"},
    {"draft", "vocab", KT_INT, F(draft.vocab), "0", "[0, 2147483647]", NULL, 0,
     "the draft proposes only the `vocab` tokens most frequent in the training data's responses (its lm_head in "
     "the MNN package keeps only their rows); 0 = every token"},
    // choice order = PrefLossKind in model/preference.h
    {"preference", "loss", KT_CHOICE, F(preference.loss), "sigmoid", NULL, "sigmoid|robust|ipo|simpo", 0,
     "train.mode = dpo: sigmoid (DPO; with label_smoothing, conservative DPO), robust (robust DPO), ipo, or simpo "
     "(no reference; per-token log-probabilities); defined as TRL defines them (docs/preference.md)"},
    {"preference", "beta", KT_FLOAT, F(preference.beta), "0.1", "(0, 1000]", NULL, 0,
     "the loss's beta: how far from the reference the policy may move (SimPO's reward scale: 2 to 2.5 is usual)"},
    {"preference", "label_smoothing", KT_FLOAT, F(preference.label_smoothing), "0", "[0, 0.5)", NULL, 0,
     "sigmoid, robust, simpo: the assumed share of pairs whose preference is flipped"},
    {"preference", "simpo_gamma", KT_FLOAT, F(preference.simpo_gamma), "0.5", "[0, 1000]", NULL, 0,
     "simpo: the target reward margin gamma (the loss uses gamma / beta)"},
    {"preference", "sft_weight", KT_FLOAT, F(preference.sft_weight), "0", "[0, 1000]", NULL, 0,
     "adds this times the chosen responses' mean next-token loss (TRL's loss_type [..., \"sft\"], RPO): keeps "
     "the chosen answers likely, which the preference loss alone may lower until replies no longer stop; 1 is usual"},
    {"rl", "group", KT_INT, F(rl.group), "4", "[1, 65536]", NULL, 0,
     "train.mode = grpo (at least 2) or onpolicy_distill: completions sampled per prompt"},
    {"rl", "prompts", KT_INT, F(rl.prompts), "0", "[0, 65536]", NULL, 0,
     "prompts a micro-batch; 0: train.micro_batch / group, one completion a row. More: their completions are "
     "packed several to a row of seq_len and a pass runs over the rows they fill (prompts x group completions of "
     "the longest prompt plus max_new must fit in micro_batch rows)"},
    {"rl", "max_new", KT_INT, F(rl.max_new), "64", "[1, 1048576]", NULL, 0,
     "new tokens per completion at most; a prompt with fewer than this many positions left in train.seq_len is "
     "counted and dropped"},
    {"rl", "temperature", KT_FLOAT, F(rl.temperature), "1", "[0, 100]", NULL, 0, "sampling temperature; 0 = greedy"},
    {"rl", "top_k", KT_INT, F(rl.top_k), "0", "[0, 2147483647]", NULL, 0, "sample from the k most likely; 0 = all"},
    {"rl", "top_p", KT_FLOAT, F(rl.top_p), "1", "(0, 1]", NULL, 0, "sample from the nucleus of this mass"},
    {"rl", "epsilon", KT_FLOAT, F(rl.epsilon), "0.2", "[0, 1]", NULL, 0,
     "the policy ratio is clipped below at 1 - epsilon"},
    {"rl", "epsilon_high", KT_FLOAT, F(rl.epsilon_high), "0.2", "[0, 100]", NULL, 0,
     "... and above at 1 + epsilon_high (DAPO's clip-higher: 0.28)"},
    {"rl", "beta", KT_FLOAT, F(rl.beta), "0", "[0, 1000]", NULL, 0,
     "weight of the KL penalty to model.init (a second model in memory); 0 = none, as TRL's default"},
    // choice order = GrpoScale, GrpoNorm in model/grpo.h
    {"rl", "scale", KT_CHOICE, F(rl.scale), "group", NULL, "group|batch|none", 0,
     "advantages: rewards less their group's mean, divided by the group's or the micro-batch's std, or not "
     "(Dr. GRPO)"},
    {"rl", "loss_type", KT_CHOICE, F(rl.loss_type), "grpo", NULL, "grpo|bnpo", 0,
     "grpo: each completion's mean over its tokens, then their mean; bnpo: the mean over every token"},
    {"rl", "rewards", KT_STR, F(rl.rewards), "exact", NULL, NULL, 0,
     "the rewards, separated by ';': exact, json, json_fields, regex=P, number, length=L, program=CMD, each "
     "optionally :WEIGHT (docs/rl.md)"},
    {"rl", "reward_timeout", KT_FLOAT, F(rl.reward_timeout), "10", "(0, 1e6]", NULL, 0,
     "seconds a reward program may take for one completion"},
    {"rl", "updates_per_rollout", KT_INT, F(rl.updates_per_rollout), "1", "[1, 1024]", NULL, 0,
     "train.mode = grpo: optimizer steps over each rollout (TRL's num_iterations); 1 = strictly on-policy; above 1 "
     "the steps after a rollout's first weigh it by the ratio to the probabilities of that first step, clipped"},
};
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))
#undef F

// inih's line buffer (INI_MAX_LINE = 200) holds 197 characters plus "\r\n\0".
#define MAX_LINE_CHARS 197

static const KeySpec *find_key(const char *section, const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].section, section) == 0 && strcmp(KEYS[i].key, key) == 0) return &KEYS[i];
    return NULL;
}

static int section_known(const char *section) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].section, section) == 0) return 1;
    return 0;
}

// "model, data, train, optim": the sections in table order.
static void section_list(char *out, size_t cap) {
    out[0] = 0;
    for (int i = 0; i < N_KEYS; i++) {
        if (i > 0 && strcmp(KEYS[i - 1].section, KEYS[i].section) == 0) continue;
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", len ? ", " : "", KEYS[i].section);
    }
}

// ---- values ----

typedef struct {
    double lo, hi;
    int lo_open, hi_open;
} Range;

static Range parse_range(const char *text) {
    Range r = {-INFINITY, INFINITY, 0, 0};
    if (!text) return r;
    char *end;
    r.lo_open = text[0] == '(';
    r.lo = strtod(text + 1, &end);
    r.hi = strtod(end + 1, &end);   // skips the comma
    r.hi_open = *end == ')';
    return r;
}

static int in_range(const KeySpec *k, double x) {
    Range r = parse_range(k->range);
    return (r.lo_open ? x > r.lo : x >= r.lo) && (r.hi_open ? x < r.hi : x <= r.hi);
}

static int choice_index(const char *choices, const char *text) {
    size_t len = strlen(text);
    int idx = 0;
    for (const char *c = choices; *c; idx++) {
        size_t n = strcspn(c, "|");
        if (n == len && strncmp(c, text, n) == 0) return idx;
        c += n + (c[n] == '|');
    }
    return -1;
}

// Writes choice number idx of "a|b|c" into out.
static void choice_name(const char *choices, int idx, char *out, size_t cap) {
    const char *c = choices;
    for (int i = 0; i < idx && *c; i++) c += strcspn(c, "|") + (c[strcspn(c, "|")] == '|');
    size_t n = strcspn(c, "|");
    snprintf(out, cap, "%.*s", (int)n, c);
}

static void set_string(char *field, const char *value) {
    memset(field, 0, RECIPE_STR);   // zero tail: equal recipes compare equal bytewise
    memcpy(field, value, strlen(value));
}

// Parses `text` (already trimmed, outer quotes removed) into the field of r;
// on failure writes the reason to why and returns -1.
static int parse_value(const KeySpec *k, const char *text, Recipe *r, char *why, size_t why_cap) {
    void *field = (char *)r + k->offset;
    char *end;
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (*text == 0 || *end != 0 || errno) {
            // also accept integral numbers in float notation ("2e9")
            double d = strtod(text, &end);
            if (*text == 0 || *end != 0 || !isfinite(d) || d != floor(d) || fabs(d) > 9.2e18) {
                snprintf(why, why_cap, "'%s' is not an integer", text);
                return -1;
            }
            v = (long long)d;
        }
        if (!in_range(k, (double)v) || (k->type == KT_INT && (v < -2147483647LL || v > 2147483647LL))) {
            snprintf(why, why_cap, "%lld is out of range %s", v, k->range ? k->range : "for an int");
            return -1;
        }
        if (k->type == KT_INT) *(int *)field = (int)v;
        else *(long *)field = (long)v;
        return 0;
    }
    case KT_FLOAT: {
        errno = 0;
        double d = strtod(text, &end);
        if (*text == 0 || *end != 0 || !isfinite(d) || errno == ERANGE) {
            snprintf(why, why_cap, "'%s' is not a number", text);
            return -1;
        }
        if (!in_range(k, d) || !in_range(k, (float)d)) {
            snprintf(why, why_cap, "%s is out of range %s", text, k->range);
            return -1;
        }
        *(float *)field = (float)d;
        return 0;
    }
    case KT_BOOL: {
        static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(text, yes[i]) == 0) return *(int *)field = 1, 0;
            if (strcasecmp(text, no[i]) == 0) return *(int *)field = 0, 0;
        }
        snprintf(why, why_cap, "'%s' is not 0 or 1 (or true/false, yes/no, on/off)", text);
        return -1;
    }
    case KT_CHOICE: {
        int idx = choice_index(k->choices, text);
        if (idx < 0) {
            snprintf(why, why_cap, "'%s' is not one of %s", text, k->choices);
            return -1;
        }
        *(int *)field = idx;
        return 0;
    }
    case KT_STR:
        if (strlen(text) >= RECIPE_STR) {
            snprintf(why, why_cap, "value is %zu characters long, at most %d allowed", strlen(text), RECIPE_STR - 1);
            return -1;
        }
        // What the resolved recipe could not hold: inih ends a value at " ;".
        if (strpbrk(text, "\r\n") || strstr(text, " ;") || strstr(text, "\t;")) {
            snprintf(why, why_cap, "value contains a line break or ' ;', which an INI value cannot hold");
            return -1;
        }
        set_string(field, text);
        return 0;
    }
    return -1;
}

// The first n characters of `in`, spaces trimmed and one pair of surrounding
// double quotes removed, as a malloc'd string.
static char *clean_value(const char *in, size_t n) {
    while (n > 0 && (*in == ' ' || *in == '\t')) in++, n--;
    while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\t')) n--;
    if (n >= 2 && in[0] == '"' && in[n - 1] == '"') in++, n -= 2;
    char *out = xmalloc(n + 1, "recipe value");
    memcpy(out, in, n);
    out[n] = 0;
    return out;
}

void recipe_defaults(Recipe *r) {
    memset(r, 0, sizeof *r);
    char why[256];
    for (int i = 0; i < N_KEYS; i++)
        if (parse_value(&KEYS[i], KEYS[i].def, r, why, sizeof why))
            die("recipe table: default of [%s] %s: %s", KEYS[i].section, KEYS[i].key, why);
}

// ---- reading a file with inih ----

typedef struct {
    Recipe *r;
    const char *path;
    FILE *f;
    char *line;             // getline buffer: whole lines, however long
    size_t line_cap;
    int lineno;             // line inih is working on (it asks for one line per read)
    int set_line[N_KEYS];   // where each key was set, 0 = not yet
    int failed;             // line of the first error we found, 0 = none
    PtError *e;
} Reader;

static int reader_fail(Reader *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reader_fail(Reader *rd, const char *fmt, ...) {
    if (rd->failed) return 0;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pt_fail(rd->e, "%s:%d: %s", rd->path, rd->lineno, msg);
    rd->failed = rd->lineno;
    return 0;
}

// fgets-style source for ini_parse_stream. It counts lines, drops leading
// whitespace (so an indented key is a key, not an inih continuation line),
// shortens over-long comments, refuses other over-long lines, and checks
// section names where they are written. Returning NULL ends the parse.
static char *read_line(char *str, int num, void *stream) {
    Reader *rd = stream;
    if (rd->failed) return NULL;
    ssize_t got = getline(&rd->line, &rd->line_cap, rd->f);
    if (got < 0) return NULL;
    rd->lineno++;
    char *s = rd->line;
    if (rd->lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;   // UTF-8 byte order mark
    while (*s == ' ' || *s == '\t') s++;
    size_t len = strcspn(s, "\r\n");
    s[len] = 0;
    int max = num - 3 < MAX_LINE_CHARS ? num - 3 : MAX_LINE_CHARS;
    if (*s == '#' || *s == ';') {
        len = 0;   // the comment's text is not needed
    } else if ((int)len > max) {
        reader_fail(rd, "line is %zu characters long, at most %d allowed", len, max);
        return NULL;
    } else if (*s == '[') {
        char name[64];
        size_t n = strcspn(s + 1, "]");
        if (s[1 + n] == ']' && n < sizeof name) {
            memcpy(name, s + 1, n);
            name[n] = 0;
            if (!section_known(name)) {
                char known[128];
                section_list(known, sizeof known);
                reader_fail(rd, "unknown section [%s] (sections: %s)", name, known);
                return NULL;
            }
        }
    }
    memcpy(str, s, len);
    str[len] = '\n';
    str[len + 1] = 0;
    return str;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    Reader *rd = user;
    if (rd->failed) return 0;
    if (!section[0]) return reader_fail(rd, "key '%s' comes before any [section]", name);
    if (!section_known(section)) return reader_fail(rd, "unknown section [%s]", section);
    const KeySpec *k = find_key(section, name);
    if (!k) return reader_fail(rd, "unknown key '%s' in [%s] (pocket train --help lists the keys)", name, section);
    int idx = (int)(k - KEYS);
    if (rd->set_line[idx]) return reader_fail(rd, "[%s] %s is set twice (first on line %d)", section, name, rd->set_line[idx]);
    rd->set_line[idx] = rd->lineno;
    char why[512], *text = clean_value(value, strlen(value));
    int bad = parse_value(k, text, rd->r, why, sizeof why);
    free(text);
    if (bad) return reader_fail(rd, "[%s] %s: %s", section, name, why);
    return 1;
}

static int load_file(Recipe *r, const char *path, PtError *e) {
    Reader rd = {.r = r, .path = path, .e = e};
    rd.f = fopen(path, "r");
    if (!rd.f) return pt_fail(e, "%s: cannot open recipe: %s", path, strerror(errno));
    int bad_line = ini_parse_stream(read_line, &rd, on_key, &rd);
    int read_error = ferror(rd.f);
    fclose(rd.f);
    free(rd.line);
    // inih reports its own (syntax) errors only at the end: the earlier error wins.
    if (bad_line > 0 && (!rd.failed || bad_line < rd.failed))
        return pt_fail(e, "%s:%d: not a [section] or key = value line", path, bad_line);
    if (rd.failed) return -1;
    if (read_error) return pt_fail(e, "%s: read error", path);
    if (bad_line < 0) return pt_fail(e, "%s: the INI parser failed (%d)", path, bad_line);
    return 0;
}

// ---- --set ----

static int apply_set(Recipe *r, const char *arg, PtError *e) {
    const char *eq = strchr(arg, '=');
    const char *dot = eq ? memchr(arg, '.', (size_t)(eq - arg)) : NULL;
    if (!eq || !dot) return pt_fail(e, "--set '%s': expected section.key=value", arg);
    char *section = clean_value(arg, (size_t)(dot - arg)), *key = clean_value(dot + 1, (size_t)(eq - dot - 1));
    char *text = clean_value(eq + 1, strlen(eq + 1)), why[512], known[128];
    const KeySpec *k = find_key(section, key);
    int rc = 0;
    if (!section_known(section)) {
        section_list(known, sizeof known);
        rc = pt_fail(e, "--set '%s': unknown section [%s] (sections: %s)", arg, section, known);
    } else if (!k) {
        rc = pt_fail(e, "--set '%s': unknown key '%s' in [%s] (pocket train --help lists the keys)", arg, key,
                     section);
    } else if (parse_value(k, text, r, why, sizeof why)) {
        rc = pt_fail(e, "--set '%s': [%s] %s: %s", arg, section, key, why);
    }
    free(section), free(key), free(text);
    return rc;
}

// ---- the whole load ----

// "runs/<file name without directory and extension>"
static void default_run_dir(Recipe *r, const char *path) {
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path ? path : "run";
    const char *ext = strrchr(base, '.');
    size_t n = ext ? (size_t)(ext - base) : strlen(base);
    if (n == 0) base = "run", n = 3;
    if (n > RECIPE_STR - 6) n = RECIPE_STR - 6;
    char dir[RECIPE_STR];
    snprintf(dir, sizeof dir, "runs/%.*s", (int)n, base);
    set_string(r->train.run_dir, dir);
}

// The modes that train on the model's own completions ([rl]'s sampling, rollout.h).
static int samples_rollouts(const Recipe *r) {
    return r->train.mode == TRAIN_MODE_GRPO || r->train.mode == TRAIN_MODE_ONPOLICY;
}

// What a mixture or several validation sets cannot be combined with.
static int data_combinations_check(const DataSpec *s, const Recipe *r, const char *src, PtError *e) {
    if (samples_rollouts(r) && s->n_train > 1)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with train.mode = %s (its prompts come "
                          "from one SFT set)", src, train_mode_name(r->train.mode));
    if (r->train.mode == TRAIN_MODE_DPO && s->n_train > 1)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with train.mode = dpo (the reference "
                          "log-probabilities are kept per document of one training set)", src);
    if (r->train.mode == TRAIN_MODE_DPO && s->n_val > 1)
        return pt_fail(e, "%s: [data] val: several validation sets are not supported with train.mode = dpo (the "
                          "reference log-probabilities are kept for one validation set)", src);
    if (s->n_train == 1) return 0;
    if (r->draft.enabled)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with [draft] (the draft's vocabulary is "
                          "counted on one training set)", src);
    if (r->distill.enabled && r->distill.source == DISTILL_TOPK)
        return pt_fail(e, "%s: [data] train: a mixture is not supported with [distill] source = topk (the "
                          "teacher's logits are stored in one dataset)", src);
    if (r->train.steps == 0 && r->train.tokens == 0)
        return pt_fail(e, "%s: [data] train: a mixture's length is set by [train] tokens or steps (train.epochs "
                          "counts passes over one set; each set of a mixture has epochs of its own)", src);
    return 0;
}

// [lora]: its targets and values, and what it cannot be combined with.
static int lora_check(const Recipe *r, const char *src, PtError *e) {
    LoraConfig lc;
    char where[RECIPE_STR + 16];
    snprintf(where, sizeof where, "%s: [lora]", src);
    if (recipe_lora(r, &lc, where, e) || lora_config_check(&lc, where, e)) return -1;
    if (r->lora.enabled && r->qat.enabled)
        return pt_fail(e, "%s: [lora] enabled with [qat] enabled is not supported (the base is frozen: train the "
                       "adapter on the int4 model with [lora] base = int4 instead)", src);
    return 0;
}

// [draft]: its target layers' syntax (the target checks them against its
// layers), and what it cannot be combined with: the target is frozen and int4.
static int draft_check(const Recipe *r, const char *src, PtError *e) {
    char where[RECIPE_STR + 32];
    snprintf(where, sizeof where, "%s: [draft] target_layers", src);
    DraftConfig dc;
    if (r->draft.target_layers[0] && draft_layers_parse(r->draft.target_layers, &dc, where, e)) return -1;
    if (!r->draft.enabled) return 0;
    if (r->lora.enabled)
        return pt_fail(e, "%s: [draft] enabled with [lora] enabled is not supported (a draft serves the frozen "
                       "int4 model of model.init as it is, without an adapter)", src);
    if (r->qat.enabled)
        return pt_fail(e, "%s: [draft] enabled with [qat] enabled is not supported (the target is frozen: give "
                       "model.init the QAT checkpoint)", src);
    if (r->distill.enabled)
        return pt_fail(e, "%s: [draft] enabled with [distill] enabled is not supported (the draft learns from "
                       "the data's response tokens)", src);
    if (r->train.mode != TRAIN_MODE_SFT)
        return pt_fail(e, "%s: [draft] needs train.mode = sft (its blocks start at response tokens), not %s", src,
                       train_mode_name(r->train.mode));
    if (r->draft.ce_weight == 0 && r->draft.kl_weight == 0)
        return pt_fail(e, "%s: [draft] ce_weight and kl_weight are both 0: the draft's loss would be nothing", src);
    return 0;
}

// train.mode = grpo, onpolicy_distill: [rl]'s values against the batch, and what they cannot be combined with.
static int rl_check(const Recipe *r, const char *src, PtError *e) {
    if (r->train.mode == TRAIN_MODE_GRPO && r->distill.enabled)
        return pt_fail(e, "%s: [distill] with train.mode = grpo is not supported (the loss is the rewards' policy "
                          "gradient)", src);
    if (r->train.mode == TRAIN_MODE_GRPO && r->rl.group < 2)
        return pt_fail(e, "%s: [rl] group = %d: GRPO compares each completion with the others of its prompt, so a "
                          "group needs at least 2", src, r->rl.group);
    if (r->train.mode == TRAIN_MODE_ONPOLICY && r->distill.source != DISTILL_FORWARD)
        return pt_fail(e, "%s: [distill] source = topk with train.mode = onpolicy_distill: the teacher scores the "
                          "model's own completions as they are sampled, so it runs its forward (source = forward)", src);
    if (r->train.mode == TRAIN_MODE_ONPOLICY && r->distill.kd_weight != 1.0f)
        return pt_fail(e, "%s: [distill] kd_weight = %g with train.mode = onpolicy_distill: the loss is the KL alone "
                          "(a sampled completion is no target to learn)", src, (double)r->distill.kd_weight);
    if (r->train.mode == TRAIN_MODE_ONPOLICY && r->rl.updates_per_rollout != 1)
        return pt_fail(e, "%s: [rl] updates_per_rollout = %d with train.mode = onpolicy_distill is not supported: each "
                          "step distils on the completions it samples", src, r->rl.updates_per_rollout);
    if (!r->rl.prompts && r->train.micro_batch % r->rl.group)
        return pt_fail(e, "%s: [train] micro_batch (%d) is not a multiple of [rl] group (%d): a micro-batch holds "
                          "whole groups, one completion a row (or set [rl] prompts)", src, r->train.micro_batch,
                       r->rl.group);
    if (r->rl.max_new >= r->train.seq_len)
        return pt_fail(e, "%s: [rl] max_new (%d) leaves no room for a prompt in [train] seq_len (%d)", src,
                       r->rl.max_new, r->train.seq_len);
    return 0;
}

int recipe_load(Recipe *r, const char *path, int n_sets, char **sets, PtError *e) {
    recipe_defaults(r);
    if (path && load_file(r, path, e)) return -1;
    for (int i = 0; i < n_sets; i++)
        if (apply_set(r, sets[i], e)) return -1;
    const char *src = path ? path : "recipe";
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &KEYS[i];
        if (k->required && !((const char *)r + k->offset)[0])
            return pt_fail(e, "%s: [%s] %s is missing (required: %s)", src, k->section, k->key, k->help);
    }
    if (r->train.steps > 0 && r->optim.warmup > r->train.steps)
        return pt_fail(e, "%s: [optim] warmup (%ld) is longer than [train] steps (%ld)", src, r->optim.warmup,
                       r->train.steps);
    if (r->qat.freeze_codes_step >= 0 && !r->qat.enabled)
        return pt_fail(e, "%s: [qat] freeze_codes_step (%ld) needs [qat] enabled = 1", src, r->qat.freeze_codes_step);
    if (r->qat.freeze_codes_step >= 0 && r->qat.freeze_codes_step < r->qat.start_step)
        return pt_fail(e, "%s: [qat] freeze_codes_step (%ld) is before [qat] start_step (%ld); codes can only be "
                       "frozen once fake-quant runs", src, r->qat.freeze_codes_step, r->qat.start_step);
    if (lora_check(r, src, e) || draft_check(r, src, e)) return -1;
    if (r->train.mode == TRAIN_MODE_DPO && r->distill.enabled)
        return pt_fail(e, "%s: [distill] with train.mode = dpo is not supported (a preference loss compares whole "
                       "responses; distillation matches next-token distributions)", src);
    if (samples_rollouts(r) && rl_check(r, src, e)) return -1;
    if (r->preference.loss == PREF_IPO && r->preference.label_smoothing > 0)
        return pt_fail(e, "%s: [preference] label_smoothing (%g) has no meaning for loss = ipo", src,
                       (double)r->preference.label_smoothing);
    if (r->distill.enabled && r->train.mode == TRAIN_MODE_CHOICE)
        return pt_fail(e, "%s: [distill] distils next-token distributions; train.mode = choice trains the decision "
                       "head's scores, which a teacher does not give", src);
    DataSpec data;   // [data] train and val, [train] best_by: their syntax and what they combine with
    if (data_spec_parse(&data, r->data.train, r->data.val, r->train.best_by, src, e)) return -1;
    const int rc = data_combinations_check(&data, r, src, e);
    data_spec_free(&data);
    if (rc) return -1;
    if (!r->train.run_dir[0]) default_run_dir(r, path);
    return 0;
}

// ---- writing ----

// Shortest text that parses back (strtod, then to float) to exactly x.
static void format_float(float x, char *out, size_t cap) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(out, cap, "%.*g", prec, (double)x);
        if ((float)strtod(out, NULL) == x) return;
    }
}

static void format_value(const KeySpec *k, const Recipe *r, char *out, size_t cap) {
    const void *field = (const char *)r + k->offset;
    switch (k->type) {
    case KT_INT: snprintf(out, cap, "%d", *(const int *)field); break;
    case KT_LONG: snprintf(out, cap, "%ld", *(const long *)field); break;
    case KT_FLOAT: format_float(*(const float *)field, out, cap); break;
    case KT_BOOL: snprintf(out, cap, "%d", *(const int *)field != 0); break;
    case KT_CHOICE: choice_name(k->choices, *(const int *)field, out, cap); break;
    case KT_STR: {
        const char *s = field;
        // quotes keep an empty value visible and protect a leading '"' or ';'
        // and spaces at either end (inih trims them)
        size_t n = strlen(s);
        int quote = n == 0 || s[0] == '"' || s[0] == ';' || s[0] == ' ' || s[0] == '\t' || s[n - 1] == ' ' ||
                    s[n - 1] == '\t';
        snprintf(out, cap, quote ? "\"%s\"" : "%s", s);
        break;
    }
    }
}

void recipe_write(const Recipe *r, FILE *f) {
    fprintf(f, "# pocket train recipe, resolved: every key with the value in effect.\n");
    char value[RECIPE_STR + 8];
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &KEYS[i];
        if (i == 0 || strcmp(KEYS[i - 1].section, k->section) != 0) fprintf(f, "\n[%s]\n", k->section);
        format_value(k, r, value, sizeof value);
        fprintf(f, "# %s\n%s = %s\n", k->help, k->key, value);
    }
}

void recipe_help(FILE *f) {
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &KEYS[i];
        if (i == 0 || strcmp(KEYS[i - 1].section, k->section) != 0)
            fprintf(f, "%s  [%s]\n", i ? "\n" : "", k->section);
        const char *def = k->required ? "(required)" : k->def[0] ? k->def : "\"\"";
        const char *kind = k->choices ? "; one of " : k->range ? "; range " : k->type == KT_BOOL ? "; " : "";
        const char *allowed = k->choices ? k->choices : k->range ? k->range : k->type == KT_BOOL ? "0 or 1" : "";
        fprintf(f, "    %-15s %-11s %s%s%s\n", k->key, def, k->help, kind, allowed);
    }
}

const char *train_mode_name(int mode) {
    static const char *const names[TRAIN_MODE_COUNT] = {"cpt", "sft", "choice", "dpo", "grpo", "onpolicy_distill"};
    return mode >= 0 && mode < TRAIN_MODE_COUNT ? names[mode] : "?";
}

void recipe_model_options(const Recipe *r, ModelOptions *o) {
    o->recompute = r->train.recompute;
    o->matmul = r->train.matmul == TRAIN_MATMUL_BF16 ? MATMUL_BF16 : MATMUL_FP32;
    o->a16 = r->qat.a16;
}

void recipe_adamw(const Recipe *r, AdamWConfig *c) {
    c->lr = r->optim.lr;
    c->beta1 = r->optim.beta1;
    c->beta2 = r->optim.beta2;
    c->eps = r->optim.eps;
    c->weight_decay = r->optim.weight_decay;
    c->grad_clip = r->optim.grad_clip;
}

void recipe_schedule(const Recipe *r, long total_steps, Schedule *s) {
    s->kind = r->optim.schedule;
    s->warmup = r->optim.warmup;
    s->total = total_steps;
    s->min_lr_ratio = r->optim.min_lr_ratio;
    s->decay_fraction = r->optim.decay_fraction;
}

void recipe_qat(const Recipe *r, QatRunConfig *c) {
    c->spec = (QuantSpec){r->qat.group, r->qat.symmetric};
    c->quant_embedding = r->qat.quant_embedding;
    c->start_step = r->qat.start_step;
    c->init = r->qat.init;
    c->learn_scales = r->qat.learn_scales;
    c->scale_lr = r->qat.scale_lr;
    c->freeze_codes_step = r->qat.freeze_codes_step;
}

int recipe_lora(const Recipe *r, LoraConfig *c, const char *where, PtError *e) {
    c->rank = r->lora.rank;
    c->alpha = r->lora.alpha;
    c->dropout = r->lora.dropout;
    return lora_targets_parse(r->lora.targets, &c->targets, where, e);
}

void recipe_preference(const Recipe *r, PrefLoss *l) {
    *l = (PrefLoss){r->preference.loss, r->preference.beta, r->preference.label_smoothing, r->preference.simpo_gamma,
                    r->preference.sft_weight};
}

void recipe_grpo_loss(const Recipe *r, GrpoLoss *l) {
    *l = (GrpoLoss){r->rl.epsilon, r->rl.epsilon_high, r->rl.beta, r->rl.loss_type};
}
