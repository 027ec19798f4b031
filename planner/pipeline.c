/*
 * Pipeline layouts: which transformer layers, and where the embedding and the output
 * layer with its loss, each virtual pipeline stage holds. One function answers it for
 * every part of the planner and the runtime (pt_stage_layers); a layout says it in one
 * of three ways, all read here:
 *
 *   - the even split (L/(p·vp) layers per virtual stage);
 *   - first_layers/last_layers, Megatron-Core's decoder_first/last_pipeline_num_layers;
 *   - a pipeline layout in Megatron-Core's notation (--pipeline-model-parallel-layout,
 *     megatron/core/transformer/pipeline_parallel_layer_layout.py and
 *     docs/user-guide/features/pipeline_parallel_layout.md, Megatron-LM d98e8a64):
 *     virtual stages in order (vs = chunk·p + rank) separated by '|', 'E' the
 *     embedding, 't' a transformer layer, 'L' the output layer and the loss, 'x*n' n
 *     copies of x, '(...)*n' n copies of a group, commas only for reading. The
 *     embedding opens the first virtual stage and the loss closes the last, so a
 *     layout is the number of layers of each virtual stage; it is kept as runs of
 *     equal stages, which the balanced splits of the search (the embedding and the
 *     loss counted as a layer each, Megatron-Core's account_for_embedding_in_
 *     pipeline_split and account_for_loss_in_pipeline_split) make too.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parsed layout before it becomes runs: the layers of each stage, and where the
 * embedding, the loss and anything this planner does not model were seen. */
enum { PIPE_MAX_STAGES = 1 << 16, PIPE_MAX_UNITS = (1 << 16) + 2 };

typedef struct {
    int32_t *layers; /* [stages] */
    int stages, cap;
    int64_t units;   /* E, t and L seen, for the bound */
    int e_stage, l_stage, e_count, l_count;
    bool e_after_t, l_before_t; /* 'tE' inside the stage of E, 'Lt' inside the stage of L */
    int m_stage;                /* the first 'm', -1 when none */
    const char *text;
    pt_err *err;
} expand;

static int add_stage(expand *x)
{
    if (x->stages == PIPE_MAX_STAGES)
        return pt_err_set(x->err, "pipeline layout '%s': more than %d virtual stages", x->text,
                          PIPE_MAX_STAGES);
    if (x->stages == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        int32_t *v = realloc(x->layers, (size_t)cap * sizeof *v);
        if (!v)
            return pt_err_set(x->err, "out of memory parsing a pipeline layout");
        x->layers = v;
        x->cap = cap;
    }
    x->layers[x->stages++] = 0;
    return 0;
}

/* One unit of the current (last) stage. */
static int add_unit(expand *x, char u)
{
    if (++x->units > PIPE_MAX_UNITS)
        return pt_err_set(x->err, "pipeline layout '%s': more than %d units (E, t, L)", x->text,
                          PIPE_MAX_UNITS);
    int s = x->stages - 1;
    switch (u) {
    case 'E':
        x->e_count++;
        x->e_stage = s;
        x->e_after_t = x->layers[s] > 0;
        return 0;
    case 'L':
        x->l_count++;
        x->l_stage = s;
        return 0;
    case 't':
        if (x->l_count && x->l_stage == s)
            x->l_before_t = true;
        x->layers[s]++;
        return 0;
    default: /* 'm' */
        if (x->m_stage < 0)
            x->m_stage = s;
        return 0;
    }
}

static bool is_unit(char c)
{
    return c == 'E' || c == 't' || c == 'L' || c == 'm';
}

/* The repetition count after '*' at *p: 1 .. PIPE_MAX_UNITS. */
static int repeat_of(expand *x, const char **p, int64_t *n)
{
    const char *s = *p;
    if (*s != '*')
        return (*n = 1), 0;
    s++;
    if (*s < '0' || *s > '9')
        return pt_err_set(x->err, "pipeline layout '%s': '*' at character %d must be followed "
                          "by a count", x->text, (int)(s - x->text));
    int64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s++ - '0');
        if (v > PIPE_MAX_UNITS)
            return pt_err_set(x->err, "pipeline layout '%s': a count above %d", x->text,
                              PIPE_MAX_UNITS);
    }
    if (v == 0)
        return pt_err_set(x->err, "pipeline layout '%s': a count of 0 at character %d", x->text,
                          (int)(s - x->text));
    *p = s;
    *n = v;
    return 0;
}

/* Reads the items of [p, end) once: units, '|' and groups (which do not nest, as in
 * Megatron-Core, whose pattern for a group is '\(([^)]+)\)\*(\d+)'). */
static int read_items(expand *x, const char *p, const char *end, bool in_group)
{
    while (p < end) {
        char c = *p;
        if (c == ',' || c == ' ') { /* cosmetic, as Megatron-Core reads commas */
            p++;
            continue;
        }
        if (c == '(') {
            if (in_group)
                return pt_err_set(x->err, "pipeline layout '%s': groups do not nest (character "
                                  "%d)", x->text, (int)(p - x->text) + 1);
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close)
                return pt_err_set(x->err, "pipeline layout '%s': '(' at character %d is never "
                                  "closed", x->text, (int)(p - x->text) + 1);
            if (close == p + 1)
                return pt_err_set(x->err, "pipeline layout '%s': an empty group '()'", x->text);
            const char *after = close + 1;
            int64_t n;
            if (*after != '*')
                return pt_err_set(x->err, "pipeline layout '%s': the group ending at character "
                                  "%d needs a count ('(...)*n')", x->text,
                                  (int)(close - x->text) + 1);
            if (repeat_of(x, &after, &n))
                return -1;
            for (int64_t i = 0; i < n; i++)
                if (read_items(x, p + 1, close, true))
                    return -1;
            p = after;
            continue;
        }
        if (c == ')')
            return pt_err_set(x->err, "pipeline layout '%s': ')' at character %d closes no group",
                              x->text, (int)(p - x->text) + 1);
        if (c != '|' && !is_unit(c))
            return pt_err_set(x->err, "pipeline layout '%s': '%c' at character %d is not E "
                              "(embedding), t (transformer layer), L (output layer and loss), "
                              "'|' (next stage), '*n' or '(...)*n'", x->text, c,
                              (int)(p - x->text) + 1);
        p++;
        int64_t n;
        if (repeat_of(x, &p, &n))
            return -1;
        for (int64_t i = 0; i < n; i++)
            if (c == '|' ? add_stage(x) : add_unit(x, c))
                return -1;
    }
    return 0;
}

/* Checks what Megatron-Core's validate_layer_layout checks that does not need the
 * model: one embedding opening the first stage, one loss closing the last. */
static int check_ends(const expand *x)
{
    const char *t = x->text;
    if (x->m_stage >= 0)
        return pt_err_set(x->err, "pipeline layout '%s': 'm' (a multi-token-prediction layer, "
                          "virtual stage %d) is not modelled by ptplan; delete the 'm' and keep "
                          "its '|' to leave that stage empty", t, x->m_stage);
    if (x->e_count != 1 || x->l_count != 1)
        return pt_err_set(x->err, "pipeline layout '%s': the embedding 'E' and the loss 'L' "
                          "must each appear exactly once (E %d times, L %d times)", t,
                          x->e_count, x->l_count);
    if (x->e_stage != 0 || x->e_after_t)
        return pt_err_set(x->err, "pipeline layout '%s': 'E' must come first, at the start of "
                          "virtual stage 0 (it is in stage %d%s)", t, x->e_stage,
                          x->e_after_t ? ", after a layer" : "");
    if (x->l_stage != x->stages - 1 || x->l_before_t)
        return pt_err_set(x->err, "pipeline layout '%s': 'L' must come last, at the end of the "
                          "last virtual stage (%d; it is in stage %d%s)", t, x->stages - 1,
                          x->l_stage, x->l_before_t ? ", before a layer" : "");
    return 0;
}

int pt_pipe_parse(const char *text, pt_pipe *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    expand x = {.m_stage = -1, .text = text, .err = err};
    if (!*text)
        return pt_err_set(err, "pipeline layout: empty (e.g. 'Et*3|(tt|)*14t|tL')");
    int rc = add_stage(&x);
    if (rc == 0)
        rc = read_items(&x, text, text + strlen(text), false);
    if (rc == 0)
        rc = check_ends(&x);
    for (int s = 0; rc == 0 && s < x.stages; s++) {
        pt_pipe_run *r = out->n ? &out->run[out->n - 1] : NULL;
        if (r && r->layers == x.layers[s]) {
            r->stages++;
            continue;
        }
        if (out->n == PT_PIPE_RUNS)
            rc = pt_err_set(err, "pipeline layout '%s': more than %d runs of virtual stages "
                            "with the same number of layers; ptplan keeps at most %d", text,
                            PT_PIPE_RUNS, PT_PIPE_RUNS);
        else
            out->run[out->n++] = (pt_pipe_run){x.layers[s], 1};
    }
    free(x.layers);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

bool pt_pipe_same(const pt_pipe *a, const pt_pipe *b)
{
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->run[i].layers != b->run[i].layers || a->run[i].stages != b->run[i].stages)
            return false;
    return true;
}

int pt_pipe_stages(const pt_pipe *p)
{
    int n = 0;
    for (int i = 0; i < p->n; i++)
        n += p->run[i].stages;
    return n;
}

int64_t pt_pipe_layers(const pt_pipe *p)
{
    int64_t n = 0;
    for (int i = 0; i < p->n; i++)
        n += (int64_t)p->run[i].layers * p->run[i].stages;
    return n;
}

/* Appends to buf like snprintf, keeping *used. */
static void put(char *buf, size_t n, size_t *used, const char *s)
{
    int w = snprintf(buf + *used, n > *used ? n - *used : 0, "%s", s);
    *used += w > 0 ? (size_t)w : 0;
}

/* The units of one stage: "E" opening stage 0, "t" or "t*k", "L" closing the last. */
static void stage_text(int32_t layers, bool first, bool last, char *s, size_t n)
{
    snprintf(s, n, "%s%s%.0d%s", first ? "E" : "", layers == 0 ? "" : layers == 1 ? "t" : "t*",
             layers > 1 ? layers : 0, last ? "L" : "");
}

void pt_pipe_format(const pt_pipe *p, char *buf, size_t n)
{
    size_t used = 0;
    if (n)
        buf[0] = '\0';
    int total = pt_pipe_stages(p), vs = 0;
    for (int i = 0; i < p->n; i++) {
        const pt_pipe_run *r = &p->run[i];
        /* the first and the last stage are written alone (they hold E and L) */
        int32_t k = r->stages;
        while (k > 0) {
            bool first = vs == 0, last = vs == total - 1;
            int32_t same = first || last ? 1 : k - (vs + k == total ? 1 : 0);
            char s[32], item[48];
            stage_text(r->layers, first, last, s, sizeof s);
            if (same > 1)
                snprintf(item, sizeof item, "(%s|)*%d", s, same);
            else
                snprintf(item, sizeof item, "%s%s", s, last ? "" : "|");
            put(buf, n, &used, item);
            vs += same;
            k -= same;
        }
    }
}

/* ---- Layers per virtual stage --------------------------------------------------------- */

/* The layers of each pipeline rank under first_layers/last_layers: [0] the first, [1]
 * each middle one, [2] the last (layout.h states the rule). For a layout the rules
 * reject, the counts are a non-negative estimate: the even split rounds up, a
 * negative share becomes 0. */
static void split_of(const pt_model *m, const pt_layout *l, int64_t rank[3])
{
    int64_t L = m->layers, p = l->pp > 1 ? l->pp : 1;
    int64_t F = l->first_layers, Z = l->last_layers;
    if (p == 1 || (F == 0 && Z == 0)) {
        int64_t even = (L + p - 1) / p;
        rank[0] = rank[1] = rank[2] = even;
        return;
    }
    /* the ranks whose count is not given share what the given ones leave */
    int64_t others = p - (F > 0) - (Z > 0), rest = L - F - Z;
    int64_t share = others > 0 && rest > 0 ? (rest + others - 1) / others : 0;
    rank[0] = F > 0 ? F : share;
    rank[1] = share;
    rank[2] = Z > 0 ? Z : share;
}

/* Layers of one chunk of pipeline rank r. */
static int64_t chunk_of(const int64_t rank[3], const pt_layout *l, int64_t r)
{
    int64_t vp = l->vp > 1 ? l->vp : 1, p = l->pp > 1 ? l->pp : 1;
    int64_t n = r == 0 ? rank[0] : r == p - 1 ? rank[2] : rank[1];
    return (n + vp - 1) / vp;
}

/* Virtual stage vs of a pipeline layout: its layers and the layers before it. Past the
 * layout's end (a layout the rules reject) it holds none. */
static int64_t pipe_stage(const pt_pipe *p, int vs, int64_t *first)
{
    int64_t before = 0;
    for (int i = 0; i < p->n; i++) {
        const pt_pipe_run *r = &p->run[i];
        if (vs < r->stages) {
            *first = before + (int64_t)r->layers * vs;
            return r->layers;
        }
        before += (int64_t)r->layers * r->stages;
        vs -= r->stages;
    }
    *first = before;
    return 0;
}

int64_t pt_stage_layers(const pt_model *m, const pt_layout *l, int vs, int64_t *first)
{
    int64_t at;
    if (l->pipe.n) {
        int64_t n = pipe_stage(&l->pipe, vs, &at);
        if (first)
            *first = at;
        return n;
    }
    int64_t rank[3];
    split_of(m, l, rank);
    int64_t p = l->pp > 1 ? l->pp : 1, r = vs % p, c = vs / p;
    int64_t c0 = chunk_of(rank, l, 0), cm = chunk_of(rank, l, 1 < p - 1 ? 1 : 0),
            cz = chunk_of(rank, l, p - 1);
    /* virtual stages hold consecutive layers: c whole rounds of p stages, then the
     * ranks before r in this round */
    int64_t round = p == 1 ? c0 : c0 + (p - 2) * cm + cz;
    int64_t before = r == 0 ? 0 : c0 + (r - 1) * cm;
    if (first)
        *first = c * round + before;
    return chunk_of(rank, l, r);
}

int64_t pt_rank_layers(const pt_model *m, const pt_layout *l, int r)
{
    int64_t n = 0, vp = l->vp > 1 ? l->vp : 1, p = l->pp > 1 ? l->pp : 1;
    for (int64_t c = 0; c < vp; c++)
        n += pt_stage_layers(m, l, (int)(c * p + r), NULL);
    return n;
}

int64_t pt_stage_params(const pt_model *m, const pt_layout *l, int vs, int64_t *experts)
{
    int64_t first, layers = pt_stage_layers(m, l, vs, &first);
    int64_t moe = pt_model_moe_layers(m, first, layers), V = (int64_t)l->pp * l->vp;
    int64_t n = pt_params_part(m, l->tp, l->pp, layers - moe, vs == 0, vs == V - 1);
    int64_t e = moe * pt_params_experts(m, l->ep, l->etp);
    n += moe * pt_params_moe_layer_dense(m, l->tp) + e;
    if (experts)
        *experts = e;
    return n;
}

int64_t pt_rank_params(const pt_model *m, const pt_layout *l, int r, int64_t *experts)
{
    int64_t n = 0, e = 0, vp = l->vp > 1 ? l->vp : 1, p = l->pp > 1 ? l->pp : 1;
    for (int64_t c = 0; c < vp; c++) {
        int64_t ce;
        n += pt_stage_params(m, l, (int)(c * p + r), &ce);
        e += ce;
    }
    if (experts)
        *experts = e;
    return n;
}

/* Whether m's layers are of more than one kind (pt_model_layer_kind). */
static bool mixed_layers(const pt_model *m)
{
    int64_t n[PT_LAYER_KINDS];
    pt_model_layer_kinds(m, 0, m->layers, n);
    int kinds = 0;
    for (int k = 0; k < PT_LAYER_KINDS; k++)
        kinds += n[k] > 0;
    return kinds > 1;
}

/* Whether two ranges of layers hold as many layers of each kind. */
static bool same_kinds(const pt_model *m, int64_t f1, int64_t n1, int64_t f2, int64_t n2)
{
    int64_t a[PT_LAYER_KINDS], b[PT_LAYER_KINDS];
    pt_model_layer_kinds(m, f1, n1, a);
    pt_model_layer_kinds(m, f2, n2, b);
    for (int k = 0; k < PT_LAYER_KINDS; k++)
        if (a[k] != b[k])
            return false;
    return true;
}

bool pt_pipe_middle_alike(const pt_model *m, const pt_layout *l)
{
    if (!l->pipe.n && !mixed_layers(m))
        return true; /* the rule of first_layers/last_layers treats them alike */
    int p = l->pp, vp = l->vp;
    for (int r = 2; r < p - 1; r++)
        for (int c = 0; c < vp; c++) {
            int64_t f1, fr, n1 = pt_stage_layers(m, l, c * p + 1, &f1),
                            nr = pt_stage_layers(m, l, c * p + r, &fr);
            if (nr != n1 || !same_kinds(m, fr, nr, f1, n1))
                return false;
        }
    return true;
}

bool pt_pipe_balanced(int64_t layers, int pp, int vp, bool embedding, bool loss, pt_pipe *out)
{
    memset(out, 0, sizeof *out);
    int64_t V = (int64_t)pp * vp, units = layers + embedding + loss;
    if (V < 2 || units % V || units / V > INT32_MAX)
        return false;
    int32_t u = (int32_t)(units / V);
    int32_t head = u - (embedding ? 1 : 0), tail = u - (loss ? 1 : 0);
    if (head < 0 || tail < 0)
        return false;
    /* runs of equal stages: the first, the middle ones, the last (merged when equal) */
    int32_t layers_of[3] = {head, u, tail};
    int32_t stages_of[3] = {1, (int32_t)(V - 2), 1};
    for (int i = 0; i < 3; i++) {
        if (!stages_of[i])
            continue;
        if (out->n && out->run[out->n - 1].layers == layers_of[i])
            out->run[out->n - 1].stages += stages_of[i];
        else
            out->run[out->n++] = (pt_pipe_run){layers_of[i], stages_of[i]};
    }
    return true;
}

bool pt_pipe_of_layout(const pt_model *m, const pt_layout *l, pt_pipe *out)
{
    if (l->pipe.n) {
        *out = l->pipe;
        return true;
    }
    memset(out, 0, sizeof *out);
    int V = (l->pp > 1 ? l->pp : 1) * (l->vp > 1 ? l->vp : 1);
    for (int vs = 0; vs < V; vs++) {
        int32_t n = (int32_t)pt_stage_layers(m, l, vs, NULL);
        if (out->n && out->run[out->n - 1].layers == n) {
            out->run[out->n - 1].stages++;
            continue;
        }
        if (out->n == PT_PIPE_RUNS) {
            memset(out, 0, sizeof *out);
            return false;
        }
        out->run[out->n++] = (pt_pipe_run){n, 1};
    }
    return true;
}

/* ---- Validity ------------------------------------------------------------------------ */

bool pt_pipe_split_ok(const pt_model *m, const pt_layout *l, char *why, size_t n)
{
    char dummy[8], text[PT_PIPE_TEXT_MAX];
    if (!why) {
        why = dummy;
        n = sizeof dummy;
    }
    const pt_pipe *p = &l->pipe;
    int64_t V = (int64_t)l->pp * l->vp, stages = pt_pipe_stages(p), layers = pt_pipe_layers(p);
    pt_pipe_format(p, text, sizeof text);
    if (stages != V) {
        if (stages % l->pp)
            snprintf(why, n, "pipeline layout '%s' has %lld virtual stages, not a multiple of "
                     "pp (%d)", text, (long long)stages, l->pp);
        else
            snprintf(why, n, "pipeline layout '%s' has %lld virtual stages, pp = %d with "
                     "vp = %d needs %lld (leave vp out: the layout gives it)", text,
                     (long long)stages, l->pp, l->vp, (long long)V);
        return false;
    }
    if (layers != m->layers) {
        snprintf(why, n, "pipeline layout '%s' holds %lld transformer layers (t), the model "
                 "has %lld", text, (long long)layers, (long long)m->layers);
        return false;
    }
    /* A pipeline rank with no unit in any chunk has no parameters: nothing for its
     * optimizer, buckets or checkpoint, only activations to pass on. */
    for (int r = 0; r < l->pp; r++) {
        bool holds = r == 0 || r == l->pp - 1; /* the embedding, the loss */
        for (int c = 0; c < l->vp && !holds; c++)
            holds = pt_stage_layers(m, l, c * l->pp + r, NULL) > 0;
        if (!holds) {
            snprintf(why, n, "pipeline layout '%s' leaves pipeline rank %d with nothing in "
                     "any of its %d chunk%s: a rank needs a layer, the embedding or the loss",
                     text, r, l->vp, l->vp > 1 ? "s" : "");
            return false;
        }
    }
    return true;
}
