// reward.c: the built-in rewards and their weighted sum (reward.h).
#include "reward.h"
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[REWARD_KIND_COUNT] = {"exact", "json", "json_fields", "regex", "number",
                                                          "length", "program"};

const char *reward_kind_name(int kind) { return kind >= 0 && kind < REWARD_KIND_COUNT ? kind_names[kind] : "?"; }

void reward_label(const Reward *r, char *out, size_t cap) {
    if (r->kind == REWARD_LENGTH) snprintf(out, cap, "length=%ld", r->length);
    else if (r->arg) snprintf(out, cap, "%s=%s", reward_kind_name(r->kind), r->arg);
    else snprintf(out, cap, "%s", reward_kind_name(r->kind));
}

// s without the spaces at either end: its start, and its length in *n.
static const char *trimmed(const char *s, size_t *n) {
    while (isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
    *n = len;
    return s;
}

static double exact(const char *completion, const char *reference) {
    size_t a, b;
    const char *x = trimmed(completion, &a), *y = trimmed(reference, &b);
    return a == b && !memcmp(x, y, a);
}

// The completion as one JSON value (spaces at either end aside), or NULL.
static json_t *as_json(const char *text) {
    size_t n;
    const char *s = trimmed(text, &n);
    return json_loadb(s, n, JSON_DECODE_ANY, NULL);
}

static double json_fields(const char *completion, json_t *want) {
    json_t *got = as_json(completion);
    double share = 0;
    if (json_is_object(got)) {
        const char *key;
        json_t *value;
        size_t equal = 0;
        json_object_foreach(want, key, value) equal += json_equal(json_object_get(got, key), value);
        share = (double)equal / (double)json_object_size(want);
    }
    json_decref(got);
    return share;
}

// The last number in s (an optional sign, digits, a decimal part, an
// exponent; thousands separators are not read); 0 when there is none.
static int last_number(const char *s, double *out) {
    int found = 0;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p) || (p > s && (isdigit((unsigned char)p[-1]) || p[-1] == '.'))) continue;
        const char *start = p > s && (p[-1] == '-' || p[-1] == '+') ? p - 1 : p;
        char *end;
        *out = strtod(start, &end);
        found = 1;
        p = end - 1;
    }
    return found;
}

static double number(const char *completion, double want) {
    double got;
    return last_number(completion, &got) && fabs(got - want) <= 1e-9 * fmax(1.0, fabs(want));
}

static double regex(const pcre2_code *re, const char *completion) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    const int rc = pcre2_match(re, (PCRE2_SPTR)completion, strlen(completion), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static double length_penalty(long n, long limit) {
    if (n <= limit) return 0;
    const double p = -(double)(n - limit) / (double)limit;
    return p < -1 ? -1 : p;
}

int rewards_add(Rewards *rs, const char *text, const char *where, PtError *e) {
    if (rs->n == REWARD_MAX) return pt_fail(e, "%s: more than %d rewards", where, REWARD_MAX);
    Reward r = {.weight = 1};
    // NAME[=ARG][:WEIGHT]: the weight is what follows the last ':' when it reads as a number.
    char *s = xstrdup(text), *colon = strrchr(s, ':');
    if (colon) {
        char *end;
        const double w = strtod(colon + 1, &end);
        if (end != colon + 1 && *end == 0) {
            if (!isfinite(w)) {
                pt_fail(e, "%s: reward '%s' has the weight %s, not a finite number", where, text, colon + 1);
                free(s);
                return -1;
            }
            r.weight = w;
            *colon = 0;
        }
    }
    char *eq = strchr(s, '=');
    if (eq) *eq = 0;
    for (r.kind = 0; r.kind < REWARD_KIND_COUNT && strcmp(s, kind_names[r.kind]); r.kind++) {}
    int rc = 0;
    const int takes_arg = r.kind == REWARD_REGEX || r.kind == REWARD_LENGTH || r.kind == REWARD_PROGRAM;
    if (r.kind == REWARD_KIND_COUNT)
        rc = pt_fail(e, "%s: unknown reward '%s' (exact, json, json_fields, regex=PATTERN, number, length=TOKENS, "
                        "program=COMMAND)", where, s);
    else if (takes_arg && (!eq || !eq[1]))
        rc = pt_fail(e, "%s: reward %s needs %s=...", where, s, s);
    else if (!takes_arg && eq)
        rc = pt_fail(e, "%s: reward %s takes no argument ('%s')", where, s, text);
    else if (r.kind == REWARD_LENGTH) {
        char *end;
        r.length = strtol(eq + 1, &end, 10);
        if (*end || r.length < 1) rc = pt_fail(e, "%s: length=%s must be a number of tokens >= 1", where, eq + 1);
    } else if (r.kind == REWARD_REGEX) {
        int err;
        PCRE2_SIZE at;
        r.re = pcre2_compile((PCRE2_SPTR)(eq + 1), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &at, NULL);
        if (!r.re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            rc = pt_fail(e, "%s: regex=%s: %s at offset %zu", where, eq + 1, (const char *)msg, (size_t)at);
        }
    }
    if (rc == 0 && takes_arg) r.arg = xstrdup(eq + 1);
    free(s);
    if (rc == 0) rs->r[rs->n++] = r;
    return rc;
}

int rewards_start(Rewards *rs, double timeout_s, PtError *e) {
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].kind == REWARD_PROGRAM && !rs->r[i].program &&
            reward_program_start(&rs->r[i].program, rs->r[i].arg, timeout_s, e))
            return -1;
    return 0;
}

// The reference the check needs, there and parsed: JSON for json_fields, a number for number.
static int reference_of(const Reward *r, const RewardInput *in, json_t **json, double *value, PtError *e) {
    if (!in->reference) return pt_fail(e, "%s: reward %s needs the example's reference answer", in->id,
                                       kind_names[r->kind]);
    if (r->kind == REWARD_JSON_FIELDS) {
        *json = as_json(in->reference);
        if (!json_is_object(*json) || json_object_size(*json) == 0) {
            json_decref(*json);
            return pt_fail(e, "%s: reward json_fields needs a reference that is a JSON object with keys", in->id);
        }
    } else if (r->kind == REWARD_NUMBER && !last_number(in->reference, value))
        return pt_fail(e, "%s: reward number needs a reference with a number in it", in->id);
    return 0;
}

int rewards_score(Rewards *rs, const RewardInput *in, double *values, double *total, PtError *e) {
    *total = 0;
    for (int i = 0; i < rs->n; i++) {
        const Reward *r = &rs->r[i];
        json_t *want = NULL;
        double v = 0, want_number = 0;
        switch (r->kind) {
        case REWARD_EXACT:
            if (reference_of(r, in, NULL, NULL, e)) return -1;
            v = exact(in->completion, in->reference);
            break;
        case REWARD_JSON: {
            json_t *got = as_json(in->completion);
            v = got != NULL;
            json_decref(got);
            break;
        }
        case REWARD_JSON_FIELDS:
            if (reference_of(r, in, &want, NULL, e)) return -1;
            v = json_fields(in->completion, want);
            json_decref(want);
            break;
        case REWARD_REGEX: v = regex(r->re, in->completion); break;
        case REWARD_NUMBER:
            if (reference_of(r, in, NULL, &want_number, e)) return -1;
            v = number(in->completion, want_number);
            break;
        case REWARD_LENGTH: v = length_penalty(in->n_tokens, r->length); break;
        default:
            if (!r->program) return pt_fail(e, "reward program '%s' was not started", r->arg);
            if (reward_program_score(r->program, in->id, in->prompt, in->completion, in->reference, &v, e)) return -1;
        }
        values[i] = v;
        *total += r->weight * v;
    }
    return 0;
}

void rewards_free(Rewards *rs) {
    for (int i = 0; i < rs->n; i++) {
        free(rs->r[i].arg);
        if (rs->r[i].re) pcre2_code_free(rs->r[i].re);
        reward_program_stop(rs->r[i].program);
    }
    rs->n = 0;
}
