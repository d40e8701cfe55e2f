// recipe.h: INI training recipes for `pocket train`.
//
//     [model]  init, tokenizer
//     [data]   train, val
//     [train]  mode, micro_batch, seq_len, grad_accum, steps, tokens, epochs, ...
//     [optim]  lr, beta1, beta2, eps, weight_decay, grad_clip, schedule, ...
//     [qat]    W4A16 quantization-aware training
//     [lora]   a LoRA / QLoRA adapter trained on a frozen base
//     [distill] distillation from a teacher's next-token distributions
//     [draft]  a DFlash speculative draft trained against the frozen int4 model
//     [preference] the preference loss of train.mode = dpo
//     [rl]         the rollouts, rewards and loss of train.mode = grpo (the rollouts of onpolicy_distill)
//
// The key table in recipe.c is the one place the keys are listed: it drives
// parsing, --set overrides, validation, `--help` and the resolved recipe the
// run writes. Adding a key or a section is adding rows there (and the field
// here).
//
// File syntax (libinih): `[section]`, `key = value`, comments on their own
// line starting with '#' or ';', or after a value as " ; comment". A value may
// be wrapped in double quotes (needed for an empty string or one starting with
// '"' or ';'). Lines are at most 197 characters, string values at most
// RECIPE_STR - 1. Each key may appear once per file. Relative paths stay as
// written: they are relative to the directory `pocket train` runs in.
#pragma once
#include <stdio.h>
#include "../util/util.h"
#include "../model/model.h"
#include "../model/grpo.h"
#include "../model/preference.h"
#include "../qat/qat.h"
#include "schedule.h"

#define RECIPE_STR 180   // string fields; "key = \"value\"" still fits inih's line

enum { TRAIN_MODE_CPT, TRAIN_MODE_SFT, TRAIN_MODE_CHOICE, TRAIN_MODE_DPO, TRAIN_MODE_GRPO, TRAIN_MODE_ONPOLICY,
       TRAIN_MODE_COUNT };
enum { TRAIN_MATMUL_FP32, TRAIN_MATMUL_BF16 };
enum { GRAD_REDUCE_FP32, GRAD_REDUCE_BF16 };
enum { NCCL_AUTO, NCCL_ALWAYS };
enum { LORA_BASE_FP32, LORA_BASE_INT4 };
enum { DISTILL_FORWARD, DISTILL_TOPK };

typedef struct {
    struct {
        char init[RECIPE_STR];        // checkpoint path or preset name (required)
        char tokenizer[RECIPE_STR];   // tokenizer.json for a preset; "" = none
    } model;
    struct {
        char train[RECIPE_STR];       // token dataset .h5, or a mixture PATH:WEIGHT, ... (required; run_data.h)
        char val[RECIPE_STR];         // "" = no evaluation; PATH, or NAME:PATH, ... (run_data.h)
    } data;
    struct {
        int mode;                     // TRAIN_MODE_*
        int choice_token;             // choice: the head's lm_head row; 0 = the model's, else chosen (choice_train.h)
        int micro_batch, seq_len, grad_accum;
        long steps;                   // 0 = derive from tokens / epochs
        long tokens;                  // 0 = derive from epochs
        float epochs;                 // passes over the train set when steps = tokens = 0
        long stop_after;              // stop (and save) once this many updates are done; 0 = at the end
        long eval_interval;           // 0 = never
        char best_by[RECIPE_STR];     // best.h5's figure: "" (the first val set), NAME, sum, NAME:WEIGHT, ...
        int eval_batches;
        long save_interval;           // 0 = only at the end
        int keep_last;
        long seed;
        int threads;                  // 0 = all cores
        char run_dir[RECIPE_STR];     // resolved: never empty after recipe_load
        int max_bad_steps;
        char sample_prompt[RECIPE_STR];   // "" = no samples
        int sample_tokens;
        int doc_mask;                 // 0/1
        int recompute;                // 0/1: activation recompute (ModelOptions)
        int matmul;                   // TRAIN_MATMUL_*: fp32, bf16 (ModelOptions)
        float comm_timeout;           // seconds a rank waits for another (dist/comm.h)
        char device[RECIPE_STR];      // cpu, cuda, cuda:N (train/devices.h)
        int grad_reduce;              // GRAD_REDUCE_*: the gradient sum's type over NCCL
        int nccl;                     // NCCL_*: when the collectives go through NCCL
    } train;
    struct {
        float lr, beta1, beta2, eps, weight_decay, grad_clip;
        int schedule;                 // SCHED_* (schedule.h)
        long warmup;
        float min_lr_ratio, decay_fraction;
    } optim;
    struct {
        int enabled, group, symmetric, quant_embedding;
        int init;                     // QAT_INIT_* (qat/qat.h): rtn, mse
        int learn_scales;
        float scale_lr;
        long start_step;
        long freeze_codes_step;       // -1 = never; else codes frozen from this update on
        int a16;                      // A16_* (model/int4_grid.h): off, bf16, fp16
    } qat;
    struct {
        int enabled, rank;
        float alpha, dropout;
        char targets[RECIPE_STR];     // "q,k,v,o" (model/lora.h)
        int init;                     // LORA_INIT_* (model/lora.h): peft, gaussian
        int base;                     // LORA_BASE_*: the frozen base is the fp32 weights or the int4 model
    } lora;
    struct {
        int enabled;
        char teacher[RECIPE_STR];     // teacher checkpoint; "" = model.init (the run's starting weights)
        float kd_weight;              // loss = (1 - kd_weight) CE + kd_weight T^2 KL
        float temperature;
        int source;                   // DISTILL_*: a teacher forward each step, or top-k from the dataset
    } distill;
    struct {
        int enabled, layers, block;
        char target_layers[RECIPE_STR];   // "3,14,25"; "" = draft_layers_default of min(3, L) layers
        int mask_token;               // -1 = the target's pad_id, else its eos_id, else 0
        int d_ff;                     // 0 = the target's
        int anchors;                  // blocks drawn per training sequence
        float loss_decay;             // block position i weighs exp(-(i-1)/loss_decay)
        float ce_weight, kl_weight;   // a row's loss: ce_weight CE + kl_weight KL(target || draft)
        int vocab;                    // tokens the draft proposes (draft_pick_vocab); 0 = all
    } draft;
    struct {
        int loss;                     // PrefLossKind (model/preference.h): sigmoid, robust, ipo, simpo
        float beta, label_smoothing, simpo_gamma, sft_weight;
    } preference;
    struct {
        int group;                    // completions sampled per prompt
        int prompts;                  // prompts a micro-batch; 0: micro_batch / group, one completion a row
        int max_new;                  // new tokens per completion at most
        float temperature, top_p;     // sampling (model/generate.h)
        int top_k;
        float epsilon, epsilon_high;  // the ratio's clip range [1 - epsilon, 1 + epsilon_high]
        float beta;                   // the KL penalty to model.init; 0: none
        int scale;                    // GrpoScale (model/grpo.h): group, batch, none
        int loss_type;                // GrpoNorm: grpo (per completion), bnpo (per token)
        char rewards[RECIPE_STR];     // reward.h's rewards, separated by ';'
        float reward_timeout;         // seconds a reward program may take per completion
        int updates_per_rollout;      // optimizer steps over each rollout (GRPO); 1: strictly on-policy
    } rl;
} Recipe;

// Defaults, then the file at `path` (NULL: none), then the --set overrides
// ("section.key=value", later ones win), then validation. run_dir left empty
// becomes "runs/<recipe file name without extension>". On error returns -1
// with one line naming the file and line (or the --set argument), the
// [section] key and the problem; r is then unspecified.
int recipe_load(Recipe *r, const char *path, int n_sets, char **sets, PtError *e);
// Every key at its default (required strings empty, run_dir empty).
void recipe_defaults(Recipe *r);
// The resolved recipe as INI: every section and key with a help comment;
// recipe_load reads it back to an identical struct.
void recipe_write(const Recipe *r, FILE *f);
// All sections and keys with default, allowed values and help (for --help;
// the caller prints its own heading).
void recipe_help(FILE *f);

const char *train_mode_name(int mode);   // "cpt", "sft", "choice", "dpo", "grpo", "onpolicy_distill"
// What a recipe asks for, in the terms of the parts that run it: the
// model's numerics, the optimizer, the schedule (the trainer supplies the
// total number of updates once it has derived it) and the QAT run.
void recipe_model_options(const Recipe *r, ModelOptions *o);
void recipe_adamw(const Recipe *r, AdamWConfig *c);
void recipe_schedule(const Recipe *r, long total_steps, Schedule *s);
void recipe_qat(const Recipe *r, QatRunConfig *c);
// [preference] as the loss of model/preference.h.
void recipe_preference(const Recipe *r, PrefLoss *l);
// [rl] as model/grpo.h's loss.
void recipe_grpo_loss(const Recipe *r, GrpoLoss *l);
// [lora] as an adapter configuration; fails on targets it cannot parse
// (messages start with `where`). recipe_load has checked it.
int recipe_lora(const Recipe *r, LoraConfig *c, const char *where, PtError *e);
