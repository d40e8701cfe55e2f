#include "config.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int L, H, nh, nkv, hd, F, V, max_seq, tied, qk_norm;
    float theta;
    const char *type;
} Preset;

// Tiny presets run in milliseconds; their odd sizes (head_dim != H/heads,
// F not a multiple of 8) catch shape bugs that square sizes hide.
static const Preset PRESETS[] = {
    {"pocket-0.3b", 28, 896, 14, 2, 64, 2560, 65536, 40960, 1, 1, 1e6f, "qwen3"},
    {"tiny",        2,  64,  4,  2, 16, 160,  512,   256,   1, 1, 1e4f, "qwen3"},
    {"tiny-untied", 3,  48,  6,  2, 12, 100,  512,   256,   0, 1, 1e4f, "qwen3"},
    {"tiny-llama",  2,  64,  4,  4, 16, 128,  512,   256,   0, 0, 1e4f, "llama"},
};

const char *config_preset_names(void) { return "pocket-0.3b, tiny, tiny-untied, tiny-llama"; }

int config_preset(ModelConfig *c, const char *name, PtError *e) {
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++) {
        const Preset *p = &PRESETS[i];
        if (strcmp(p->name, name) != 0) continue;
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", p->name);
        snprintf(c->model_type, sizeof c->model_type, "%s", p->type);
        c->n_layer = p->L;
        c->d_model = p->H;
        c->n_head = p->nh;
        c->n_kv_head = p->nkv;
        c->head_dim = p->hd;
        c->d_ff = p->F;
        c->vocab_size = p->V;
        c->max_seq = p->max_seq;
        c->rope_theta = p->theta;
        c->norm_eps = 1e-6f;
        c->init_std = 0.02f;
        c->tied_embeddings = p->tied;
        c->qk_norm = p->qk_norm;
        c->bos_id = -1;
        // Pocket layout: 26 added tokens at the top of the vocabulary,
        // <|endoftext|> = pad first, <|im_end|> = eos third.
        c->pad_id = p->V - 26;
        c->eos_id = p->V - 24;
        return config_validate(c, name, e);
    }
    return pt_fail(e, "unknown model preset '%s' (known: %s)", name, config_preset_names());
}

static int get_int(json_t *root, const char *key, int *out, int required, const char *src, PtError *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return pt_fail(e, "%s: missing key \"%s\"", src, key);
        return 0;
    }
    if (json_is_array(v) && json_array_size(v) > 0) v = json_array_get(v, 0);  // eos lists
    if (!json_is_integer(v)) return pt_fail(e, "%s: key \"%s\" is not an integer", src, key);
    json_int_t x = json_integer_value(v);
    if (x < -1 || x > 1 << 30) return pt_fail(e, "%s: key \"%s\" = %lld is out of range", src, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int get_float(json_t *root, const char *key, float *out, const char *src, PtError *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return pt_fail(e, "%s: key \"%s\" is not a number", src, key);
    *out = (float)json_number_value(v);
    if (!isfinite(*out)) return pt_fail(e, "%s: key \"%s\" = %g is past the float32 range", src, key, json_number_value(v));
    return 0;
}

static int get_bool(json_t *root, const char *key, int *out, const char *src, PtError *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return pt_fail(e, "%s: key \"%s\" is not true/false", src, key);
    *out = json_is_true(v);
    return 0;
}

int config_from_hf_json(ModelConfig *c, const char *json_text, const char *src, PtError *e) {
    json_error_t je;
    json_t *root = json_loads(json_text, 0, &je);
    if (!root) return pt_fail(e, "%s:%d:%d: not valid JSON: %s", src, je.line, je.column, je.text);
    int rc = -1;
    if (!json_is_object(root)) { pt_fail(e, "%s: top level is not a JSON object", src); goto out; }
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "hf");
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt)) { pt_fail(e, "%s: missing key \"model_type\"", src); goto out; }
    const char *type = json_string_value(mt);
    if (strcmp(type, "qwen3") == 0) {
        c->qk_norm = 1;
    } else if (strcmp(type, "llama") == 0) {
        c->qk_norm = 0;
    } else {
        pt_fail(e, "%s: model_type \"%s\" is not supported (supported: qwen3, llama)", src, type);
        goto out;
    }
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    c->tied_embeddings = 0;   // the transformers class default
    c->rope_theta = 10000.0f;
    c->norm_eps = 1e-6f;
    c->init_std = 0.02f;
    c->max_seq = 32768;
    c->bos_id = c->eos_id = c->pad_id = -1;
    c->n_kv_head = -1;
    c->head_dim = -1;
    if (get_int(root, "num_hidden_layers", &c->n_layer, 1, src, e) ||
        get_int(root, "hidden_size", &c->d_model, 1, src, e) ||
        get_int(root, "num_attention_heads", &c->n_head, 1, src, e) ||
        get_int(root, "num_key_value_heads", &c->n_kv_head, 0, src, e) ||
        get_int(root, "head_dim", &c->head_dim, 0, src, e) ||
        get_int(root, "intermediate_size", &c->d_ff, 1, src, e) ||
        get_int(root, "vocab_size", &c->vocab_size, 1, src, e) ||
        get_int(root, "max_position_embeddings", &c->max_seq, 0, src, e) ||
        get_int(root, "bos_token_id", &c->bos_id, 0, src, e) ||
        get_int(root, "eos_token_id", &c->eos_id, 0, src, e) ||
        get_int(root, "pad_token_id", &c->pad_id, 0, src, e) ||
        get_int(root, "pocket_choice_token_id", &c->choice_id, 0, src, e) ||
        get_float(root, "rms_norm_eps", &c->norm_eps, src, e) ||
        get_float(root, "initializer_range", &c->init_std, src, e) ||
        get_float(root, "rope_theta", &c->rope_theta, src, e) ||
        get_bool(root, "tie_word_embeddings", &c->tied_embeddings, src, e))
        goto out;
    json_t *rp = json_object_get(root, "rope_parameters");
    if (json_is_object(rp)) {
        json_t *rt = json_object_get(rp, "rope_type");
        if (json_is_string(rt) && strcmp(json_string_value(rt), "default") != 0) {
            pt_fail(e, "%s: rope_type \"%s\" is not supported (only default)", src, json_string_value(rt));
            goto out;
        }
        if (get_float(rp, "rope_theta", &c->rope_theta, src, e)) goto out;
    }
    json_t *rs = json_object_get(root, "rope_scaling");
    if (rs && !json_is_null(rs)) {
        json_t *rt = json_object_get(rs, "rope_type");
        if (!rt) rt = json_object_get(rs, "type");
        if (!json_is_string(rt) || strcmp(json_string_value(rt), "default") != 0) {
            pt_fail(e, "%s: rope_scaling is not supported", src);
            goto out;
        }
    }
    int flag = 0;
    if (get_bool(root, "attention_bias", &flag, src, e)) goto out;
    if (flag) { pt_fail(e, "%s: attention_bias=true is not supported", src); goto out; }
    if (get_bool(root, "use_sliding_window", &flag, src, e)) goto out;
    if (flag) { pt_fail(e, "%s: use_sliding_window=true is not supported", src); goto out; }
    if (get_bool(root, "mlp_bias", &flag, src, e)) goto out;
    if (flag) { pt_fail(e, "%s: mlp_bias=true is not supported", src); goto out; }
    json_t *act = json_object_get(root, "hidden_act");
    if (json_is_string(act) && strcmp(json_string_value(act), "silu") != 0) {
        pt_fail(e, "%s: hidden_act \"%s\" is not supported (only silu)", src, json_string_value(act));
        goto out;
    }
    if (c->n_kv_head < 0) c->n_kv_head = c->n_head;
    if (c->head_dim < 0 && c->n_head > 0) c->head_dim = c->d_model / c->n_head;
    rc = config_validate(c, src, e);
out:
    json_decref(root);
    return rc;
}

int config_load(ModelConfig *c, const char *preset_or_path, PtError *e) {
    if (!path_exists(preset_or_path)) return config_preset(c, preset_or_path, e);
    char *path = path_is_dir(preset_or_path) ? path_join(preset_or_path, "config.json")
                                             : xstrdup(preset_or_path);
    uint8_t *text;
    size_t len;
    int rc = read_whole_file(path, &text, &len, e);
    if (rc == 0) {
        rc = config_from_hf_json(c, (const char *)text, path, e);
        free(text);
    }
    free(path);
    return rc;
}

int config_validate(const ModelConfig *c, const char *src, PtError *e) {
    if (c->n_layer < 1 || c->n_layer > 256) return pt_fail(e, "%s: num_hidden_layers %d out of range 1..256", src, c->n_layer);
    if (c->d_model < 1) return pt_fail(e, "%s: hidden_size %d must be positive", src, c->d_model);
    if (c->n_head < 1 || c->n_kv_head < 1) return pt_fail(e, "%s: head counts must be positive", src);
    if (c->n_head % c->n_kv_head) return pt_fail(e, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", src, c->n_head, c->n_kv_head);
    if (c->head_dim < 2 || c->head_dim % 2) return pt_fail(e, "%s: head_dim %d must be even and >= 2 (RoPE rotates halves)", src, c->head_dim);
    if (c->d_ff < 1) return pt_fail(e, "%s: intermediate_size %d must be positive", src, c->d_ff);
    if (c->vocab_size < 2) return pt_fail(e, "%s: vocab_size %d too small", src, c->vocab_size);
    if (c->max_seq < 1) return pt_fail(e, "%s: max_position_embeddings %d must be positive", src, c->max_seq);
    if (!(c->norm_eps > 0) || !(c->rope_theta > 1)) return pt_fail(e, "%s: rms_norm_eps and rope_theta must be positive", src);
    // Finite, or the config.json written back would lose them (JSON has no infinity).
    if (!isfinite(c->norm_eps) || !isfinite(c->rope_theta) || !isfinite(c->init_std))
        return pt_fail(e, "%s: rms_norm_eps %g, rope_theta %g and initializer_range %g must be finite", src,
                       c->norm_eps, c->rope_theta, c->init_std);
    if (c->eos_id >= c->vocab_size || c->pad_id >= c->vocab_size || c->bos_id >= c->vocab_size)
        return pt_fail(e, "%s: a special token id is >= vocab_size %d", src, c->vocab_size);
    if (c->choice_id < 0 || c->choice_id >= c->vocab_size)
        return pt_fail(e, "%s: the decision head's row %d is outside the vocabulary [1, %d)", src, c->choice_id,
                       c->vocab_size);
    // Every size is below 2^30, but their products are not: the count (in double, exact far past the bound)
    // is held under CONFIG_MAX_PARAMS, so no tensor size or offset computed from the config can overflow.
    double H = c->d_model, q = (double)c->n_head * c->head_dim, kv = (double)c->n_kv_head * c->head_dim;
    double params = c->n_layer * (2 * H + 2 * H * q + 2 * H * kv + 3 * H * c->d_ff + 2.0 * c->head_dim) + H +
                    2.0 * c->vocab_size * H;
    if (params > CONFIG_MAX_PARAMS)
        return pt_fail(e, "%s: the sizes describe %.3g parameters, more than the %.3g this program handles", src,
                       params, (double)CONFIG_MAX_PARAMS);
    return 0;
}

// The shortest decimal that reads back as the same float, as a double, so
// config.json says 1e-06 rather than 9.9999999747524271e-07.
static json_t *json_float(float x) {
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

char *config_to_hf_json(const ModelConfig *c) {
    json_t *o = json_object();
    int qwen = strcmp(c->model_type, "llama") != 0;
    json_object_set_new(o, "architectures", json_pack("[s]", qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM"));
    json_object_set_new(o, "model_type", json_string(qwen ? "qwen3" : "llama"));
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "hidden_size", json_integer(c->d_model));
    json_object_set_new(o, "initializer_range", json_float(c->init_std));
    json_object_set_new(o, "intermediate_size", json_integer(c->d_ff));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_seq));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_head));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layer));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_head));
    json_object_set_new(o, "rms_norm_eps", json_float(c->norm_eps));
    json_object_set_new(o, "rope_theta", json_float(c->rope_theta));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied_embeddings));
    json_object_set_new(o, "use_cache", json_true());
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    if (!qwen) json_object_set_new(o, "mlp_bias", json_false());
    if (c->bos_id >= 0) json_object_set_new(o, "bos_token_id", json_integer(c->bos_id));
    if (c->eos_id >= 0) json_object_set_new(o, "eos_token_id", json_integer(c->eos_id));
    if (c->pad_id >= 0) json_object_set_new(o, "pad_token_id", json_integer(c->pad_id));
    // The decision head (model/choice_head.h): the score is this token's logit.
    if (c->choice_id > 0) json_object_set_new(o, "pocket_choice_token_id", json_integer(c->choice_id));
    json_object_set_new(o, "torch_dtype", json_string("float32"));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(o);
    if (!s) die("out of memory serialising config.json");
    return s;
}

void config_print(const ModelConfig *c, FILE *f) {
    fprintf(f, "model %s (%s): layers %d, hidden %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, "
               "max_seq %d, rope_theta %g, eps %g, %s, qk_norm %s, params %.2fM\n",
            c->name, c->model_type, c->n_layer, c->d_model, c->n_head, c->n_kv_head, c->head_dim,
            c->d_ff, c->vocab_size, c->max_seq, c->rope_theta, c->norm_eps,
            c->tied_embeddings ? "tied" : "untied", c->qk_norm ? "on" : "off",
            config_param_count(c) / 1e6);
    if (c->choice_id > 0) fprintf(f, "decision head (Dec): lm_head row %d\n", c->choice_id);
}

size_t config_param_count(const ModelConfig *c) {
    size_t H = c->d_model, q = (size_t)c->n_head * c->head_dim, kv = (size_t)c->n_kv_head * c->head_dim;
    size_t layer = 2 * H + H * q * 2 + H * kv * 2 + 3 * H * (size_t)c->d_ff;
    if (c->qk_norm) layer += 2 * (size_t)c->head_dim;
    size_t emb = (size_t)c->vocab_size * H;
    return c->n_layer * layer + H + emb * (c->tied_embeddings ? 1 : 2);
}

double config_train_flops_per_token(const ModelConfig *c, int T) {
    double H = c->d_model, q = (double)c->n_head * c->head_dim, kv = (double)c->n_kv_head * c->head_dim;
    double matmul_params = c->n_layer * (2 * H * q + 2 * H * kv + 3 * H * c->d_ff) + (double)c->vocab_size * H;
    double attn = 12.0 * c->n_layer * c->n_head * c->head_dim * (double)T;   // PaLM appendix B
    return 6.0 * matmul_params + attn;
}
