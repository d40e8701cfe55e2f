// data_spec.c: the values of [data] train, [data] val and [train] best_by (data_spec.h).
#include "data_spec.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { DATA_SPEC_ENTRY_MAX = 1024 };   // one entry of a list

// Entry `index` (from 0) of a comma-separated list, spaces around it trimmed,
// into out (cap bytes; longer entries are cut, which the callers refuse by
// their own limits); 0 when the list has no such entry.
static int list_entry(const char *list, int index, char *out, size_t cap) {
    const char *at = list;
    for (int i = 0; i < index; i++) {
        at = strchr(at, ',');
        if (!at) return 0;
        at++;
    }
    size_t n = strcspn(at, ",");
    while (n && isspace((unsigned char)*at)) at++, n--;
    while (n && isspace((unsigned char)at[n - 1])) n--;
    snprintf(out, cap, "%.*s", (int)n, at);
    return 1;
}

static int list_count(const char *list) {
    int n = 1;
    for (const char *c = list; *c; c++) n += *c == ',';
    return n;
}

// A set's name: letters, digits, '_' and '-', as metrics keys and labels use it.
static int valid_name(const char *s) {
    if (!*s || strlen(s) >= VAL_NAME_MAX) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
    return 1;
}

// [data] val: PATH, or NAME:PATH, ... (the name before the first ':').
static int parse_val(DataSpec *s, const char *value, const char *key, PtError *e) {
    if (!value[strspn(value, " \t")]) return 0;
    const int n = list_count(value);
    if (n > VAL_MAX_SETS) return pt_fail(e, "%s: %d validation sets, at most %d", key, n, VAL_MAX_SETS);
    char entry[DATA_SPEC_ENTRY_MAX];
    for (int k = 0; k < n; k++) {
        list_entry(value, k, entry, sizeof entry);
        ValEntry *v = &s->val[k];
        char *colon = strchr(entry, ':');
        if (!*entry) return pt_fail(e, "%s: entry %d is empty (a stray comma?)", key, k + 1);
        if (!colon && n > 1)
            return pt_fail(e, "%s: entry %d ('%s') has no name: several sets are each NAME:PATH", key, k + 1, entry);
        if (!colon) {
            snprintf(v->name, sizeof v->name, "val");
            v->path = xstrdup(entry);
            s->n_val = 1;
            return 0;
        }
        *colon = 0;
        char *path = colon + 1;
        while (isspace((unsigned char)*path)) path++;
        for (char *end = colon; end > entry && isspace((unsigned char)end[-1]); *--end = 0) {}
        if (!valid_name(entry))
            return pt_fail(e, "%s: '%s' is not a validation set's name (1 to %d letters, digits, '_' or '-')", key,
                           entry, VAL_NAME_MAX - 1);
        if (!*path) return pt_fail(e, "%s: the set '%s' has no path after its ':'", key, entry);
        for (int i = 0; i < k; i++)
            if (!strcmp(s->val[i].name, entry)) return pt_fail(e, "%s: the name '%s' is used twice", key, entry);
        snprintf(v->name, sizeof v->name, "%s", entry);
        v->path = xstrdup(path);
        s->n_val = k + 1;
    }
    s->val_named = 1;
    return 0;
}

static int val_index(const DataSpec *s, const char *name) {
    for (int k = 0; k < s->n_val; k++)
        if (!strcmp(s->val[k].name, name)) return k;
    return -1;
}

// [train] best_by: "" (the first set), sum, NAME, or NAME:WEIGHT, ...
static int parse_best_by(DataSpec *s, const char *value, const char *key, PtError *e) {
    memset(s->best_weight, 0, sizeof s->best_weight);
    if (!value[0]) {
        s->best_weight[0] = 1;
        return 0;
    }
    if (!s->n_val) return pt_fail(e, "%s: '%s' chooses among validation sets, but [data] val names none", key, value);
    if (!strcmp(value, "sum")) {
        for (int k = 0; k < s->n_val; k++) s->best_weight[k] = 1;
        return 0;
    }
    char entry[DATA_SPEC_ENTRY_MAX], names[VAL_MAX_SETS * (VAL_NAME_MAX + 2)] = "";
    for (int k = 0; k < s->n_val; k++) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "", s->val[k].name);
    double sum = 0;
    int seen[VAL_MAX_SETS] = {0};
    const int n = list_count(value);
    for (int i = 0; i < n; i++) {
        list_entry(value, i, entry, sizeof entry);
        char *colon = strchr(entry, ':'), *end = NULL;
        double w = 1;
        if (colon) {
            *colon = 0;
            w = strtod(colon + 1, &end);
            if (end == colon + 1 || *end || !isfinite(w))
                return pt_fail(e, "%s: the weight '%s' of %s is not a number", key, colon + 1, entry);
            if (w < 0) return pt_fail(e, "%s: the weight %s of %s is negative", key, colon + 1, entry);
        } else if (n > 1) {
            return pt_fail(e, "%s: %s has no weight: a sum of several sets is NAME:WEIGHT, ...", key, entry);
        }
        const int k = val_index(s, entry);
        if (k < 0) return pt_fail(e, "%s: '%s' is not a [data] val set (the sets: %s)", key, entry, names);
        if (seen[k]++) return pt_fail(e, "%s: %s is named twice", key, entry);
        s->best_weight[k] = w;
        sum += w;
    }
    if (sum <= 0) return pt_fail(e, "%s: every weight is zero", key);
    return 0;
}

int data_spec_parse(DataSpec *s, const char *train, const char *val, const char *best_by, const char *src,
                    PtError *e) {
    memset(s, 0, sizeof *s);
    char key[sizeof e->msg];
    snprintf(key, sizeof key, "%s: [data] train", src);
    int rc = mix_parse(train, key, &s->train, &s->n_train, e);
    snprintf(key, sizeof key, "%s: [data] val", src);
    if (rc == 0) rc = parse_val(s, val, key, e);
    snprintf(key, sizeof key, "%s: [train] best_by", src);
    if (rc == 0) rc = parse_best_by(s, best_by, key, e);
    if (rc) data_spec_free(s);
    return rc;
}

void data_spec_free(DataSpec *s) {
    mix_entries_free(s->train, s->n_train);
    for (int k = 0; k < s->n_val; k++) free(s->val[k].path);
    memset(s, 0, sizeof *s);
}
