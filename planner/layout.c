/*
 * The layout space: one parallel layout (tp, sp, pp, vp, cp, dp, ZeRO stage,
 * micro-batching, recomputation, schedule and rank order), its string form as users
 * type it on the command line, and the validity rules that reject a layout, each
 * with a named reason. The enumeration (enum.c) and ptplan's --explain both read
 * the rules from pt_layout_check, so a rule is written once.
 */
#include "grid.h"
#include "internal.h"
#include "specjson.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- Names ------------------------------------------------------------------- */

const char *const pt_recompute_names[PT_RECOMPUTE_COUNT] = {"none", "selective", "full"};
const char *const pt_schedule_names[PT_SCHED_COUNT] = {"afab", "1f1b", "interleaved"};
static const char *const dim_names[PT_NDIM] = {"tp", "cp", "dp", "pp"};
const char *const pt_dp_overlap_names[PT_DPO_COUNT] = {"none", "last", "backward"};
const char *const pt_cp_comm_names[PT_CPC_COUNT] = {"p2p", "all_gather", "a2a", "a2a+p2p"};
const char *const pt_compress_names[PT_COMPRESS_COUNT] = {"none", "bf16", "powersgd"};
const char *const pt_moe_dispatch_names[PT_MOED_COUNT] = {"alltoall", "allgather", "flex"};

const char *pt_moe_dispatch_name(pt_moe_dispatch k)
{
    return (unsigned)k < PT_MOED_COUNT ? pt_moe_dispatch_names[k] : "?";
}

int pt_layout_edp(const pt_layout *l)
{
    int64_t fold = (int64_t)l->tp * l->cp * l->dp, e = (int64_t)l->ep * l->etp;
    return e >= 1 && fold % e == 0 ? (int)(fold / e) : 1;
}

const char *pt_recompute_name(pt_recompute r) { return pt_recompute_names[r]; }

const char *const pt_rmod_names[PT_RMOD_COUNT] = {"core_attn", "layernorm", "mlp", "moe_act",
                                                  "moe"};
const char *pt_rmod_name(pt_rmod r) { return pt_rmod_names[r]; }

void pt_join_names(unsigned mask, int count, const char *const *names, const char *sep,
                   char *buf, size_t n)
{
    size_t used = 0;
    if (n)
        buf[0] = '\0';
    for (int k = 0; k < count && used < n; k++)
        if ((mask >> k) & 1u) {
            int w = snprintf(buf + used, n - used, "%s%s", used ? sep : "", names[k]);
            used += w > 0 ? (size_t)w : 0;
        }
}

void pt_join_all_names(int count, const char *const *names, char *buf, size_t n)
{
    pt_join_names((1u << count) - 1, count, names, ", ", buf, n);
}

void pt_rmod_choices(char *buf, size_t n)
{
    pt_join_all_names(PT_RMOD_COUNT, pt_rmod_names, buf, n);
}

bool pt_layout_recomputes(const pt_layout *l, pt_rmod r)
{
    if (l->recompute != PT_RECOMPUTE_SELECTIVE)
        return false;
    if (!l->recompute_modules)
        return r == PT_RMOD_CORE_ATTN;
    return (l->recompute_modules >> r) & 1u;
}

void pt_layout_recompute_text(const pt_layout *l, char *buf, size_t n)
{
    if (l->recompute != PT_RECOMPUTE_SELECTIVE || !l->recompute_modules) {
        snprintf(buf, n, "%s", pt_recompute_names[l->recompute]);
        return;
    }
    pt_join_names(l->recompute_modules, PT_RMOD_COUNT, pt_rmod_names, "+", buf, n);
}

int pt_layout_parse_recompute(const char *val, pt_layout *l, pt_err *err)
{
    for (int i = 0; i < PT_RECOMPUTE_COUNT; i++)
        if (strcmp(val, pt_recompute_names[i]) == 0) {
            l->recompute = (pt_recompute)i;
            l->recompute_modules = 0;
            return 0;
        }
    unsigned set = 0;
    const char *p = val;
    while (*p) {
        size_t len = strcspn(p, "+");
        int r = 0;
        while (r < PT_RMOD_COUNT &&
               !(strlen(pt_rmod_names[r]) == len && strncmp(p, pt_rmod_names[r], len) == 0))
            r++;
        if (r == PT_RMOD_COUNT || (set >> r) & 1u) {
            char settings[64], choices[64];
            pt_join_all_names(PT_RECOMPUTE_COUNT, pt_recompute_names, settings, sizeof settings);
            pt_rmod_choices(choices, sizeof choices);
            return pt_err_set(err, "layout: recompute=%s: expected %s, or modules joined by "
                                   "'+', each once, of %s (Megatron-Core's --recompute-modules, "
                                   "e.g. recompute=layernorm+moe_act)",
                              val, settings, choices);
        }
        set |= 1u << r;
        p += len;
        if (*p == '+' && !p[1])
            return pt_err_set(err, "layout: recompute=%s: a module name after the last '+'",
                              val);
        if (*p == '+')
            p++;
    }
    if (!set)
        return pt_err_set(err, "layout: recompute is empty: expected none, selective, full "
                               "or a list of modules");
    l->recompute = PT_RECOMPUTE_SELECTIVE;
    l->recompute_modules = set;
    return 0;
}
const char *pt_schedule_name(pt_schedule s) { return pt_schedule_names[s]; }
const char *pt_dim_name(pt_dim d) { return dim_names[d]; }
const char *pt_dp_overlap_name(pt_dp_overlap o) { return pt_dp_overlap_names[o]; }
int pt_layout_a2a(const pt_layout *l)
{
    return l->cp_comm == PT_CPC_A2A ? l->cp : l->cp_comm == PT_CPC_A2A_P2P ? l->cp_a2a : 1;
}

const char *pt_cp_comm_name(pt_cp_comm k)
{
    return (unsigned)k < PT_CPC_COUNT ? pt_cp_comm_names[k] : "?";
}
const char *pt_compress_name(pt_compress c) { return pt_compress_names[c]; }

static const struct {
    const char *key;
    const char *text;
} reject_info[PT_REJECT_COUNT] = {
    [PT_REJECT_WORLD] = {"world", "tp*cp*pp*dp differs from the world size"},
    [PT_REJECT_HEADS_TP] = {"heads_tp", "attention heads not divisible by tp"},
    [PT_REJECT_KV_HEADS_TP] = {"kv_heads_tp", "KV heads neither divisible by tp nor dividing it"},
    [PT_REJECT_FFN_TP] = {"ffn_tp", "FFN size not divisible by tp"},
    [PT_REJECT_LAYERS_PP] = {"layers_pp", "layers not divisible by pp*vp"},
    [PT_REJECT_SEQ_CP] = {"seq_cp", "sequence not divisible by 2*cp (causal load balancing)"},
    [PT_REJECT_SEQ_SP] = {"seq_sp", "sequence/cp not divisible by tp (sequence parallelism)"},
    [PT_REJECT_CP_COMM_NO_CP] = {"cp_comm_no_cp", "cp_comm other than p2p with cp = 1"},
    [PT_REJECT_CP_A2A] = {"cp_a2a", "cp_a2a does not divide cp, or cp_comm does not use it"},
    [PT_REJECT_HEADS_CP_A2A] = {"heads_cp_a2a",
                                "heads per tp rank not divisible by the all-to-all degree"},
    [PT_REJECT_KV_HEADS_CP_A2A] = {"kv_heads_cp_a2a",
                                   "KV heads per tp rank neither divisible by nor dividing "
                                   "the all-to-all degree"},
    [PT_REJECT_EP_DENSE] = {"ep_dense", "ep or etp > 1 on a model without experts"},
    [PT_REJECT_EP_FOLD] = {"ep_fold", "ep*etp does not divide tp*cp*dp (parallel folding)"},
    [PT_REJECT_EXPERTS_EP] = {"experts_ep", "experts not divisible by ep"},
    [PT_REJECT_EXPERT_FFN_ETP] = {"expert_ffn_etp", "an expert's FFN size not divisible by etp"},
    [PT_REJECT_MOE_SP] = {"moe_sp", "experts with tp > 1 need sequence parallelism"},
    [PT_REJECT_BATCH_DP] = {"batch_dp", "global batch not divisible by mbs*dp"},
    [PT_REJECT_TP_SPANS_NODES] = {"tp_spans_nodes",
                                  "a tensor-parallel group spans NVLink domains"},
    [PT_REJECT_SP_WITHOUT_TP] = {"sp_without_tp", "sequence parallelism needs tp > 1"},
    [PT_REJECT_OVERLAP_WITHOUT_SP] = {"overlap_without_sp",
                                      "tp_overlap needs sequence parallelism"},
    [PT_REJECT_VP_WITHOUT_PP] = {"vp_without_pp", "virtual stages need pp > 1"},
    [PT_REJECT_SCHEDULE_VP] = {"schedule_vp", "interleaved schedule if and only if vp > 1"},
    [PT_REJECT_INTERLEAVED_MICRO] = {"interleaved_micro",
                                     "interleaving needs micro-batches a multiple of pp"},
    [PT_REJECT_ZERO_NO_DP] = {"zero_no_dp", "ZeRO stage > 0 with dp*cp = 1 shards nothing"},
    [PT_REJECT_ZERO_PP] = {"zero_pp", "ZeRO stage 2/3 with pipeline parallelism"},
    [PT_REJECT_UNEVEN_SPLIT] = {"uneven_split",
                                "first_layers/last_layers leave no valid split of the layers"},
    [PT_REJECT_PIPELINE_LAYOUT] = {"pipeline_layout",
                                   "the pipeline layout does not fit the model's layers or pp"},
    [PT_REJECT_COMPRESS_ZERO] = {"compress_zero", "gradient compression with ZeRO stage 2/3"},
    [PT_REJECT_COMPRESS_NO_DP] = {"compress_no_dp",
                                  "gradient compression with dp*cp = 1 compresses nothing"},
    [PT_REJECT_SCHEDULE_SIZE] = {"schedule_size",
                                 "pp*vp*micro-batches above 2^24: the batch is far too large"},
    [PT_REJECT_BAD_VALUE] = {"bad_value", "a size below 1 or ZeRO stage outside 0..3"},
};

const char *pt_reject_name(pt_reject r) { return reject_info[r].key; }
const char *pt_reject_describe(pt_reject r) { return reject_info[r].text; }

/* ---- Defaults and rank order ------------------------------------------------- */

void pt_layout_default(pt_layout *l)
{
    *l = (pt_layout){.tp = 1, .cp = 1, .pp = 1, .dp = 1, .vp = 1, .sp = false, .zero = 0,
                     .cp_comm = PT_CPC_P2P, .cp_a2a = 0, .ep = 1, .etp = 1,
                     .moe_dispatch = PT_MOED_ALLTOALL,
                     .mbs = 1, .n_micro = 1, .recompute = PT_RECOMPUTE_NONE,
                     .dp_overlap = PT_DPO_LAST, .powersgd_rank = PT_POWERSGD_RANK,
                     .powersgd_start = PT_POWERSGD_START,
                     .schedule = PT_SCHED_1F1B,
                     .order = {PT_DIM_TP, PT_DIM_CP, PT_DIM_DP, PT_DIM_PP}};
}

int64_t pt_layout_world(const pt_layout *l)
{
    int64_t dims[] = {l->tp, l->cp, l->pp, l->dp}, world;
    return pt_prod64(dims, 4, &world) ? world : -1;
}

int pt_order_parse(const char *text, pt_dim order[PT_NDIM], pt_err *err)
{
    bool seen[PT_NDIM] = {false};
    const char *p = text;
    for (int i = 0; i < PT_NDIM; i++) {
        int d = 0;
        while (d < PT_NDIM && strncmp(p, dim_names[d], 2) != 0)
            d++;
        if (d == PT_NDIM || seen[d] || (p[2] != (i + 1 < PT_NDIM ? '-' : '\0')))
            return pt_err_set(err, "bad rank order '%s': expected the four dimensions tp, "
                                   "cp, dp, pp once each, joined by '-' (e.g. tp-cp-dp-pp)",
                              text);
        seen[d] = true;
        order[i] = (pt_dim)d;
        p += 3;
    }
    return 0;
}

void pt_order_format(const pt_dim order[PT_NDIM], char *buf, size_t n)
{
    snprintf(buf, n, "%s-%s-%s-%s", dim_names[order[0]], dim_names[order[1]],
             dim_names[order[2]], dim_names[order[3]]);
}

void pt_layout_format(const pt_layout *l, char *buf, size_t n)
{
    char order[32], recompute[64];
    pt_order_format(l->order, order, sizeof order);
    pt_layout_recompute_text(l, recompute, sizeof recompute);
    snprintf(buf, n,
             "tp=%d,sp=%d,pp=%d,vp=%d,cp=%d,dp=%d,zero=%d,mbs=%lld,recompute=%s,"
             "schedule=%s,order=%s",
             l->tp, l->sp ? 1 : 0, l->pp, l->vp, l->cp, l->dp, l->zero, (long long)l->mbs,
             recompute, pt_schedule_names[l->schedule], order);
    /* The keys below are written only when they differ from the default, so that
     * layout strings from before they existed stay canonical. */
    size_t used = strlen(buf);
#define APPEND(...)                                                             \
    do {                                                                        \
        int w_ = snprintf(buf + used, n > used ? n - used : 0, __VA_ARGS__);    \
        used += w_ > 0 ? (size_t)w_ : 0;                                        \
    } while (0)
    if (l->tp_overlap)
        APPEND(",tp_overlap=1");
    if (l->dp_overlap != PT_DPO_LAST)
        APPEND(",dp_overlap=%s", pt_dp_overlap_names[l->dp_overlap]);
    if (l->param_overlap)
        APPEND(",param_overlap=1");
    if (l->first_layers)
        APPEND(",first_layers=%lld", (long long)l->first_layers);
    if (l->last_layers)
        APPEND(",last_layers=%lld", (long long)l->last_layers);
    if (l->pipe.n) {
        char pipe[PT_PIPE_TEXT_MAX];
        pt_pipe_format(&l->pipe, pipe, sizeof pipe);
        APPEND(",pipeline=%s", pipe);
    }
    if (l->compress != PT_COMPRESS_NONE)
        APPEND(",compress=%s", pt_compress_names[l->compress]);
    if (l->cp_comm != PT_CPC_P2P)
        APPEND(",cp_comm=%s", pt_cp_comm_name(l->cp_comm));
    if (l->cp_comm == PT_CPC_A2A_P2P)
        APPEND(",cp_a2a=%d", l->cp_a2a);
    if (l->ep > 1)
        APPEND(",ep=%d", l->ep);
    if (l->etp > 1)
        APPEND(",etp=%d", l->etp);
    if (l->moe_dispatch != PT_MOED_ALLTOALL)
        APPEND(",moe_dispatch=%s", pt_moe_dispatch_name(l->moe_dispatch));
    if (l->compress == PT_COMPRESS_POWERSGD)
        APPEND(",powersgd_rank=%d,powersgd_start=%lld", l->powersgd_rank,
               (long long)l->powersgd_start);
#undef APPEND
}

/* ---- Parsing ----------------------------------------------------------------- */

enum { K_TP, K_SP, K_PP, K_VP, K_CP, K_DP, K_ZERO, K_MBS, K_RECOMPUTE, K_SCHEDULE,
       K_ORDER, K_TP_OVERLAP, K_DP_OVERLAP, K_PARAM_OVERLAP, K_FIRST_LAYERS, K_LAST_LAYERS,
       K_COMPRESS, K_POWERSGD_RANK, K_POWERSGD_START, K_PIPELINE, K_CP_COMM, K_CP_A2A,
       K_EP, K_ETP, K_MOE_DISPATCH, K_COUNT };
static const char *const layout_keys[K_COUNT] = {
    "tp", "sp", "pp", "vp", "cp", "dp", "zero", "mbs", "recompute", "schedule", "order",
    "tp_overlap", "dp_overlap", "param_overlap", "first_layers", "last_layers", "compress",
    "powersgd_rank", "powersgd_start", "pipeline", "cp_comm", "cp_a2a", "ep", "etp",
    "moe_dispatch"};

static int parse_int(const char *key, const char *val, int64_t lo, int64_t hi, int64_t *out,
                     pt_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (!*val || *end || errno || v < lo || v > hi)
        return pt_err_set(err, "layout: %s=%s: expected an integer from %lld to %lld", key,
                          val, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

static int parse_name(const char *key, const char *val, const char *const *names, int count,
                      int *out, pt_err *err)
{
    for (int i = 0; i < count; i++)
        if (strcmp(val, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char choices[128] = "";
    for (int i = 0; i < count; i++) {
        strncat(choices, names[i], sizeof choices - strlen(choices) - 1);
        if (i + 1 < count)
            strncat(choices, ", ", sizeof choices - strlen(choices) - 1);
    }
    return pt_err_set(err, "layout: %s=%s: expected one of %s", key, val, choices);
}

/* Sets one key of l from its text value. */
static int layout_set(pt_layout *l, int key, const char *val, pt_err *err)
{
    /* at most 2^20 ranks per dimension; their product is checked (pt_layout_world) */
    const int64_t max_size = 1 << 20;
    int64_t v = 0;
    int e = 0;
    switch (key) {
    case K_TP: case K_PP: case K_VP: case K_CP: case K_DP: case K_EP: case K_ETP:
        if (parse_int(layout_keys[key], val, 1, max_size, &v, err))
            return -1;
        *(key == K_TP ? &l->tp : key == K_PP ? &l->pp : key == K_VP ? &l->vp
          : key == K_CP ? &l->cp : key == K_EP ? &l->ep : key == K_ETP ? &l->etp
          : &l->dp) = (int)v;
        return 0;
    case K_MOE_DISPATCH:
        if (parse_name("moe_dispatch", val, pt_moe_dispatch_names, PT_MOED_COUNT, &e, err))
            return -1;
        l->moe_dispatch = (pt_moe_dispatch)e;
        return 0;
    case K_SP:
        if (parse_int("sp", val, 0, 1, &v, err))
            return -1;
        l->sp = v == 1;
        return 0;
    case K_TP_OVERLAP:
        if (parse_int("tp_overlap", val, 0, 1, &v, err))
            return -1;
        l->tp_overlap = v == 1;
        return 0;
    case K_PARAM_OVERLAP:
        if (parse_int("param_overlap", val, 0, 1, &v, err))
            return -1;
        l->param_overlap = v == 1;
        return 0;
    case K_DP_OVERLAP:
        if (parse_name("dp_overlap", val, pt_dp_overlap_names, PT_DPO_COUNT, &e, err))
            return -1;
        l->dp_overlap = (pt_dp_overlap)e;
        return 0;
    case K_FIRST_LAYERS: case K_LAST_LAYERS:
        /* 0 is the even split; a model has at most 2^16 layers (model.c) */
        if (parse_int(layout_keys[key], val, 0, max_size, &v, err))
            return -1;
        *(key == K_FIRST_LAYERS ? &l->first_layers : &l->last_layers) = v;
        return 0;
    case K_PIPELINE:
        return pt_pipe_parse(val, &l->pipe, err);
    case K_COMPRESS:
        if (parse_name("compress", val, pt_compress_names, PT_COMPRESS_COUNT, &e, err))
            return -1;
        l->compress = (pt_compress)e;
        return 0;
    case K_CP_COMM:
        if (parse_name("cp_comm", val, pt_cp_comm_names, PT_CPC_COUNT, &e, err))
            return -1;
        l->cp_comm = (pt_cp_comm)e;
        return 0;
    case K_CP_A2A:
        if (parse_int("cp_a2a", val, 1, max_size, &v, err))
            return -1;
        l->cp_a2a = (int)v;
        return 0;
    case K_POWERSGD_RANK:
        if (parse_int("powersgd_rank", val, 1, PT_POWERSGD_MAX_RANK, &v, err))
            return -1;
        l->powersgd_rank = (int)v;
        return 0;
    case K_POWERSGD_START:
        if (parse_int("powersgd_start", val, 0, INT32_MAX, &v, err))
            return -1;
        l->powersgd_start = v;
        return 0;
    case K_ZERO:
        if (parse_int("zero", val, 0, 3, &v, err))
            return -1;
        l->zero = (int)v;
        return 0;
    case K_MBS:
        if (parse_int("mbs", val, 1, max_size, &v, err))
            return -1;
        l->mbs = v;
        return 0;
    case K_RECOMPUTE:
        return pt_layout_parse_recompute(val, l, err);
    case K_SCHEDULE:
        if (parse_name("schedule", val, pt_schedule_names, PT_SCHED_COUNT, &e, err))
            return -1;
        l->schedule = (pt_schedule)e;
        return 0;
    default: /* K_ORDER */
        return pt_order_parse(val, l->order, err);
    }
}

int pt_layout_parse(const char *text, int64_t world, int64_t global_batch, pt_layout *l,
                    pt_err *err)
{
    bool given[K_COUNT] = {false};
    char buf[2048];
    if (strlen(text) >= sizeof buf)
        return pt_err_set(err, "layout string is too long (%zu characters)", strlen(text));
    strcpy(buf, text);
    const char *blank = buf + strspn(buf, " \t");
    if (!*blank)
        return pt_err_set(err, "layout: empty (give key=value pairs separated by commas, "
                               "e.g. tp=2,pp=2)");
    /* items split at every comma, so that an empty one ("tp=2,,pp=2") is seen */
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        /* a pipeline layout's commas are spacing: it runs on to the next key=value */
        if (strncmp(item + strspn(item, " \t"), "pipeline=", 9) == 0)
            while (next && next[1 + strcspn(next + 1, "=,")] != '=')
                next = strchr(next + 1, ',');
        if (next)
            *next++ = '\0';
        item += strspn(item, " \t"); /* blanks around an item are allowed */
        for (size_t n = strlen(item); n > 0 && (item[n - 1] == ' ' || item[n - 1] == '\t');)
            item[--n] = '\0';
        if (!*item)
            return pt_err_set(err, "layout '%s': an empty item (two commas in a row, or one at "
                                   "the start or the end)", text);
        char *eq = strchr(item, '=');
        if (!eq)
            return pt_err_set(err, "layout: '%s' is not key=value", item);
        if (eq == item || isspace((unsigned char)eq[-1]) || isspace((unsigned char)eq[1]))
            return pt_err_set(err, "layout: '%s': write key=value with no blank around '='",
                              item);
        *eq = '\0';
        const char *val = eq + 1;
        int key = 0;
        while (key < K_COUNT && strcmp(item, layout_keys[key]) != 0)
            key++;
        const char *meant = key == K_COUNT ? pt_spec_closest(item, layout_keys, K_COUNT) : NULL;
        if (meant)
            return pt_err_set(err, "layout: unknown key '%s' (did you mean '%s'?)", item, meant);
        if (key == K_COUNT)
            return pt_err_set(err, "layout: unknown key '%s' (known: tp, sp, pp, vp, cp, dp, "
                                   "zero, mbs, recompute, schedule, order, tp_overlap, dp_overlap, "
                                   "param_overlap, first_layers, last_layers, compress, "
                                   "powersgd_rank, powersgd_start, pipeline, cp_comm, cp_a2a, "
                                   "ep, etp, moe_dispatch)",
                              item);
        if (given[key])
            return pt_err_set(err, "layout: key '%s' given twice", item);
        given[key] = true;
        if (layout_set(l, key, val, err))
            return -1;
    }
    if (!given[K_DP] && world > 0) {
        int64_t rest = (int64_t)l->tp * l->cp * l->pp;
        if (world % rest)
            return pt_err_set(err, "layout: tp*cp*pp = %lld does not divide the world size "
                                   "%lld, so dp cannot be derived", (long long)rest,
                              (long long)world);
        l->dp = (int)(world / rest);
    }
    int64_t w = pt_layout_world(l);
    if (w < 0 || w > PT_MAX_WORLD)
        return pt_err_set(err, "layout: tp*cp*pp*dp = %d*%d*%d*%d is more than %lld ranks",
                          l->tp, l->cp, l->pp, l->dp, (long long)PT_MAX_WORLD);
    if (given[K_PIPELINE] && (given[K_FIRST_LAYERS] || given[K_LAST_LAYERS]))
        return pt_err_set(err, "layout: pipeline= and %s both say how the layers are split; "
                               "give one (a pipeline layout says it all)",
                          given[K_FIRST_LAYERS] ? "first_layers" : "last_layers");
    if (given[K_PIPELINE])
        l->first_layers = l->last_layers = 0;
    /* Megatron-Core derives vp from the layout: its stages over pp */
    if (given[K_PIPELINE] && !given[K_VP] && pt_pipe_stages(&l->pipe) % l->pp == 0)
        l->vp = pt_pipe_stages(&l->pipe) / l->pp;
    if (!given[K_SCHEDULE] && l->vp > 1)
        l->schedule = PT_SCHED_INTERLEAVED;
    if ((given[K_POWERSGD_RANK] || given[K_POWERSGD_START]) &&
        l->compress != PT_COMPRESS_POWERSGD)
        return pt_err_set(err, "layout: %s applies only with compress=powersgd (compress=%s)",
                          given[K_POWERSGD_RANK] ? "powersgd_rank" : "powersgd_start",
                          pt_compress_names[l->compress]);
    if (given[K_CP_A2A] && l->cp_comm != PT_CPC_A2A_P2P)
        return pt_err_set(err, "layout: cp_a2a applies only with cp_comm=a2a+p2p (cp_comm=%s%s)",
                          pt_cp_comm_names[l->cp_comm],
                          l->cp_comm == PT_CPC_A2A ? ", whose all-to-all spans all of cp" : "");
    if (l->cp_comm == PT_CPC_A2A_P2P && !given[K_CP_A2A] && given[K_CP_COMM])
        return pt_err_set(err, "layout: cp_comm=a2a+p2p needs cp_a2a=N, the size of the "
                               "all-to-all groups inside cp (Megatron-Core's "
                               "--hierarchical-context-parallel-sizes N cp/N)");
    if (l->cp_comm != PT_CPC_A2A_P2P)
        l->cp_a2a = 0;
    if (global_batch > 0)
        l->n_micro = global_batch / ((int64_t)l->mbs * l->dp);
    return 0;
}

/* ---- Layers per pipeline stage (pt_stage_layers: planner/pipeline.c) ----------- */

/* Whether first_layers/last_layers give a valid split; if not, and why is not NULL,
 * one line on what is wrong with the numbers. Only asked when one of them is set. */
static bool split_ok(const pt_model *m, const pt_layout *l, char *why, size_t n)
{
    int64_t L = m->layers, p = l->pp, vp = l->vp, F = l->first_layers, Z = l->last_layers;
    char dummy[8], given[96];
    if (!why) {
        why = dummy;
        n = sizeof dummy;
    }
    if (F > 0 && Z > 0)
        snprintf(given, sizeof given, "first_layers = %lld, last_layers = %lld", (long long)F,
                 (long long)Z);
    else
        snprintf(given, sizeof given, "%s = %lld", F > 0 ? "first_layers" : "last_layers",
                 (long long)(F > 0 ? F : Z));
    if (p == 1) {
        snprintf(why, n, "%s needs pp > 1: with pp = 1 one stage holds all %lld layers", given,
                 (long long)L);
        return false;
    }
    if (F % vp || Z % vp) {
        snprintf(why, n, "%s (%lld) is not divisible by vp (%lld): a stage's layers divide "
                 "evenly over its vp chunks", F % vp ? "first_layers" : "last_layers",
                 (long long)(F % vp ? F : Z), (long long)vp);
        return false;
    }
    int64_t others = p - (F > 0) - (Z > 0), rest = L - F - Z;
    const char *who = F > 0 && Z > 0 ? "middle stages"
                      : p == 2       ? (F > 0 ? "last stage" : "first stage")
                      : F > 0        ? "middle and last stages"
                                     : "first and middle stages";
    if (others == 0) { /* pp = 2 with both given */
        if (rest == 0)
            return true;
        snprintf(why, n, "first_layers + last_layers = %lld + %lld = %lld, but with pp = 2 "
                 "they must add up to the model's %lld layers", (long long)F, (long long)Z,
                 (long long)(F + Z), (long long)L);
        return false;
    }
    if (rest < others * vp) {
        snprintf(why, n, "%s leave%s %lld of the %lld layers for the %lld %s, whose %lld "
                 "chunks need at least one layer each", given, F > 0 && Z > 0 ? "" : "s",
                 (long long)rest, (long long)L, (long long)others, who,
                 (long long)(others * vp));
        return false;
    }
    if (rest % others) {
        snprintf(why, n, "the %lld layers that %s leave%s do not divide evenly over the %lld "
                 "%s", (long long)rest, given, F > 0 && Z > 0 ? "" : "s", (long long)others,
                 who);
        return false;
    }
    if ((rest / others) % vp) {
        snprintf(why, n, "the %s hold %lld layers each, not divisible by vp (%lld)", who,
                 (long long)(rest / others), (long long)vp);
        return false;
    }
    return true;
}

/* ---- Validity rules ---------------------------------------------------------- */

/* Whether a tensor-parallel group has ranks in two NVLink domains of `nvlink_domain`
 * devices (pt_cluster_nvlink_domain: a node, or a GB200 NVL72 rack of 18 nodes).
 * Under the default order (tp fastest) the groups are consecutive blocks of t ranks,
 * so one crosses a domain's end exactly when t does not divide the domain and the
 * ranks reach past the first domain; other orders ask the grid, which knows the
 * strides. */
bool pt_layout_tp_spans_nodes(const pt_layout *l, int nvlink_domain)
{
    if (l->tp == 1)
        return false;
    if (l->order[0] == PT_DIM_TP) {
        int64_t world = pt_layout_world(l); /* < 0: beyond 2^63, past any domain */
        return nvlink_domain % l->tp != 0 && (world < 0 || world > nvlink_domain);
    }
    pt_grid g;
    pt_grid_init(&g, l);
    return pt_grid_group_crosses_nodes(&g, PT_GROUP_TP, nvlink_domain);
}

int pt_layout_check(const pt_model *m, const pt_cluster *c, int64_t global_batch,
                    const pt_layout *l, uint32_t *mask)
{
    return pt_layout_check_spans(m, c, global_batch, l, -1, mask);
}

int pt_layout_check_spans(const pt_model *m, const pt_cluster *c, int64_t global_batch,
                          const pt_layout *l, int tp_spans, uint32_t *mask)
{
    uint32_t bad = 0;
#define RULE(cond, reason) \
    if (cond)              \
    bad |= 1u << (reason)
    if (l->tp < 1 || l->cp < 1 || l->pp < 1 || l->dp < 1 || l->vp < 1 || l->mbs < 1 ||
        l->vp > PT_CHUNK_MAX ||
        l->zero < 0 || l->zero > 3 || l->first_layers < 0 || l->last_layers < 0 ||
        l->pipe.n < 0 || l->pipe.n > PT_PIPE_RUNS || l->cp_comm < 0 ||
        l->cp_comm >= PT_CPC_COUNT || l->cp_a2a < 0 || l->ep < 1 || l->etp < 1 ||
        l->moe_dispatch < 0 || l->moe_dispatch >= PT_MOED_COUNT ||
        l->compress < 0 || l->compress >= PT_COMPRESS_COUNT || l->powersgd_start < 0 ||
        (l->compress == PT_COMPRESS_POWERSGD &&
         (l->powersgd_rank < 1 || l->powersgd_rank > PT_POWERSGD_MAX_RANK))) {
        bad |= 1u << PT_REJECT_BAD_VALUE;
        if (mask)
            *mask = bad;
        return 1;
    }
    RULE(c && pt_layout_world(l) != pt_cluster_world(c), PT_REJECT_WORLD);
    RULE(m->heads % l->tp, PT_REJECT_HEADS_TP);
    /* fewer KV heads than tp: each is replicated over tp/k ranks (Megatron-LM) */
    RULE(m->kv_heads % l->tp && l->tp % m->kv_heads, PT_REJECT_KV_HEADS_TP);
    RULE(m->ffn % l->tp || (m->moe.shared_experts * m->moe.shared_ffn) % l->tp,
         PT_REJECT_FFN_TP);
    /* Parallel folding (Megatron-Core): the experts' etp·ep·edp grid lies over the same
     * tp·cp·dp ranks of a pipeline stage as attention's. */
    bool moe = m->moe.experts > 0;
    RULE(!moe && (l->ep > 1 || l->etp > 1), PT_REJECT_EP_DENSE);
    RULE(((int64_t)l->tp * l->cp * l->dp) % ((int64_t)l->ep * l->etp), PT_REJECT_EP_FOLD);
    RULE(moe && m->moe.experts % l->ep, PT_REJECT_EXPERTS_EP);
    RULE(moe && m->moe.expert_ffn % l->etp, PT_REJECT_EXPERT_FFN_ETP);
    /* Megatron-Core warns without it (megatron/core/model_parallel_config.py: "When
     * using expert parallelism and tensor parallelism for training, sequence parallelism
     * must be used"); with it each token reaches the router on one rank of its tp group,
     * not as t copies, which is what the op lists and the dispatch count. */
    RULE(moe && l->tp > 1 && !l->sp, PT_REJECT_MOE_SP);
    bool uneven = l->first_layers > 0 || l->last_layers > 0, piped = l->pipe.n > 0;
    RULE(!uneven && !piped && m->layers % ((int64_t)l->pp * l->vp), PT_REJECT_LAYERS_PP);
    RULE(uneven && !piped && !split_ok(m, l, NULL, 0), PT_REJECT_UNEVEN_SPLIT);
    RULE(piped && (uneven || !pt_pipe_split_ok(m, l, NULL, 0)), PT_REJECT_PIPELINE_LAYOUT);
    RULE(l->cp > 1 && m->seq % (2 * (int64_t)l->cp), PT_REJECT_SEQ_CP);
    RULE(l->sp && (m->seq % l->cp || (m->seq / l->cp) % l->tp), PT_REJECT_SEQ_SP);
    RULE(l->cp_comm != PT_CPC_P2P && l->cp == 1, PT_REJECT_CP_COMM_NO_CP);
    RULE(l->cp_comm == PT_CPC_A2A_P2P ? l->cp_a2a < 1 || l->cp % l->cp_a2a : l->cp_a2a != 0,
         PT_REJECT_CP_A2A);
    int a2a = pt_layout_a2a(l);
    /* The all-to-all hands each rank a/(t·u) query heads; KV heads go the same way, or,
     * fewer than u, are replicated to u/(k/t) ranks each, as tp replicates them. */
    RULE(a2a > 1 && (m->heads / l->tp) % a2a, PT_REJECT_HEADS_CP_A2A);
    int64_t kv_local = pt_kv_heads_rank(m, l->tp);
    RULE(a2a > 1 && kv_local % a2a && a2a % kv_local,
         PT_REJECT_KV_HEADS_CP_A2A);
    RULE(global_batch % (l->mbs * l->dp), PT_REJECT_BATCH_DP);
    if (c && tp_spans < 0)
        tp_spans = pt_layout_tp_spans_nodes(l, pt_cluster_nvlink_domain(c));
    RULE(c && tp_spans > 0, PT_REJECT_TP_SPANS_NODES);
    RULE(l->sp && l->tp == 1, PT_REJECT_SP_WITHOUT_TP);
    RULE(l->tp_overlap && !l->sp, PT_REJECT_OVERLAP_WITHOUT_SP);
    RULE(l->vp > 1 && l->pp == 1, PT_REJECT_VP_WITHOUT_PP);
    RULE((l->schedule == PT_SCHED_INTERLEAVED) != (l->vp > 1), PT_REJECT_SCHEDULE_VP);
    /* Megatron-LM's interleaved 1F1B assigns micro-batches to chunks in groups of p
     * (Narayanan et al. 2021, Sec. 2.2), so the count must be a multiple of p. */
    RULE(l->schedule == PT_SCHED_INTERLEAVED && l->pp > 1 && l->n_micro % l->pp,
         PT_REJECT_INTERLEAVED_MICRO);
    RULE(l->zero > 0 && (int64_t)l->dp * l->cp == 1, PT_REJECT_ZERO_NO_DP);
    /* DeepSpeed refuses ZeRO-2/3 with its pipeline engine: partitioned gradients
     * would be reduced for every micro-batch instead of once per step. */
    RULE(l->zero >= 2 && l->pp > 1, PT_REJECT_ZERO_PP);
    /* compression rides on the ZeRO 0/1 gradient buckets; ZeRO 2/3 reduce-scatter
     * layer segments (runtime/zero.c), which it does not cover */
    RULE(l->compress != PT_COMPRESS_NONE && l->zero >= 2, PT_REJECT_COMPRESS_ZERO);
    RULE(l->compress != PT_COMPRESS_NONE && (int64_t)l->dp * l->cp == 1,
         PT_REJECT_COMPRESS_NO_DP);
    RULE((double)l->pp * l->vp * (double)l->n_micro > (double)PT_MAX_SCHED_PAIRS,
         PT_REJECT_SCHEDULE_SIZE);
#undef RULE
    if (mask)
        *mask = bad;
    return __builtin_popcount(bad);
}

void pt_reject_explain(pt_reject r, const pt_model *m, const pt_cluster *c,
                       int64_t global_batch, const pt_layout *l, char *buf, size_t n)
{
    long long L = m->layers, s = m->seq;
    switch (r) {
    case PT_REJECT_WORLD:
        if (pt_layout_world(l) < 0)
            snprintf(buf, n, "tp*cp*pp*dp = %d*%d*%d*%d is more than 2^63 ranks, but the "
                     "cluster has %lld", l->tp, l->cp, l->pp, l->dp,
                     c ? (long long)pt_cluster_world(c) : 0LL);
        else
            snprintf(buf, n, "tp*cp*pp*dp = %d*%d*%d*%d = %lld, but the cluster has %lld ranks",
                     l->tp, l->cp, l->pp, l->dp, (long long)pt_layout_world(l),
                     c ? (long long)pt_cluster_world(c) : 0LL);
        break;
    case PT_REJECT_HEADS_TP:
        snprintf(buf, n, "attention heads (%lld) are not divisible by tp (%d)",
                 (long long)m->heads, l->tp);
        break;
    case PT_REJECT_KV_HEADS_TP:
        snprintf(buf, n, "KV heads (%lld) are neither divisible by tp (%d) nor a divisor of it",
                 (long long)m->kv_heads, l->tp);
        break;
    case PT_REJECT_FFN_TP:
        if (m->ffn % l->tp == 0)
            snprintf(buf, n, "the shared experts' FFN size (%lld x %lld) is not divisible by "
                     "tp (%d)", (long long)m->moe.shared_experts, (long long)m->moe.shared_ffn,
                     l->tp);
        else
            snprintf(buf, n, "FFN size (%lld) is not divisible by tp (%d)", (long long)m->ffn,
                     l->tp);
        break;
    case PT_REJECT_EP_DENSE:
        snprintf(buf, n, "ep = %d, etp = %d: model %s has no experts to split", l->ep, l->etp,
                 m->name);
        break;
    case PT_REJECT_EP_FOLD:
        snprintf(buf, n, "ep*etp = %d*%d does not divide tp*cp*dp = %d*%d*%d, the ranks of a "
                 "pipeline stage the experts are folded over", l->ep, l->etp, l->tp, l->cp,
                 l->dp);
        break;
    case PT_REJECT_EXPERTS_EP:
        snprintf(buf, n, "experts (%lld) are not divisible by ep (%d)",
                 (long long)m->moe.experts, l->ep);
        break;
    case PT_REJECT_EXPERT_FFN_ETP:
        snprintf(buf, n, "an expert's FFN size (%lld) is not divisible by etp (%d)",
                 (long long)m->moe.expert_ffn, l->etp);
        break;
    case PT_REJECT_MOE_SP:
        snprintf(buf, n, "tp = %d without sp: a model with experts needs sequence "
                 "parallelism with tp > 1 (sp=1), as Megatron-Core requires", l->tp);
        break;
    case PT_REJECT_LAYERS_PP:
        snprintf(buf, n, "layers (%lld) are not divisible by pp*vp = %d*%d", L, l->pp, l->vp);
        break;
    case PT_REJECT_SEQ_CP:
        snprintf(buf, n, "sequence (%lld) is not divisible by 2*cp = %lld", s,
                 2 * (long long)l->cp);
        break;
    case PT_REJECT_SEQ_SP:
        snprintf(buf, n, "sequence per cp rank (%lld/%d) is not divisible by tp (%d)", s,
                 l->cp, l->tp);
        break;
    case PT_REJECT_CP_COMM_NO_CP:
        snprintf(buf, n, "cp_comm=%s with cp = 1: there is no context parallelism to "
                 "communicate", pt_cp_comm_name(l->cp_comm));
        break;
    case PT_REJECT_CP_A2A:
        if (l->cp_comm == PT_CPC_A2A_P2P)
            snprintf(buf, n, "cp_a2a = %d does not divide cp = %d", l->cp_a2a, l->cp);
        else
            snprintf(buf, n, "cp_a2a = %d applies only with cp_comm=a2a+p2p (cp_comm=%s)",
                     l->cp_a2a, pt_cp_comm_name(l->cp_comm));
        break;
    case PT_REJECT_HEADS_CP_A2A:
        snprintf(buf, n, "heads per tp rank (%lld/%d) are not divisible by the all-to-all "
                 "degree %d (cp_comm=%s)", (long long)m->heads, l->tp, pt_layout_a2a(l),
                 pt_cp_comm_name(l->cp_comm));
        break;
    case PT_REJECT_KV_HEADS_CP_A2A:
        snprintf(buf, n, "KV heads per tp rank (%lld) are neither divisible by nor a divisor "
                 "of the all-to-all degree %d (cp_comm=%s)",
                 (long long)pt_kv_heads_rank(m, l->tp), pt_layout_a2a(l),
                 pt_cp_comm_name(l->cp_comm));
        break;
    case PT_REJECT_BATCH_DP:
        snprintf(buf, n, "global batch (%lld) is not divisible by mbs*dp = %lld*%d",
                 (long long)global_batch, (long long)l->mbs, l->dp);
        break;
    case PT_REJECT_TP_SPANS_NODES: {
        int domain = c ? pt_cluster_nvlink_domain(c) : 0, dpn = c ? c->devices_per_node : 0;
        if (domain == dpn)
            snprintf(buf, n, "a tp group of %d ranks spans NVLink domains of %d devices "
                     "(one node each)", l->tp, domain);
        else
            snprintf(buf, n, "a tp group of %d ranks spans NVLink domains of %d devices "
                     "(%d nodes of %d each)", l->tp, domain, dpn > 0 ? domain / dpn : 0, dpn);
        break;
    }
    case PT_REJECT_SP_WITHOUT_TP:
        snprintf(buf, n, "sp=1 needs tp > 1 (tp = %d)", l->tp);
        break;
    case PT_REJECT_OVERLAP_WITHOUT_SP:
        snprintf(buf, n, "tp_overlap=1 overlaps sequence-parallel all-gathers: it needs sp=1 "
                 "(Megatron-LM's rule)");
        break;
    case PT_REJECT_VP_WITHOUT_PP:
        snprintf(buf, n, "vp = %d needs pp > 1 (pp = %d)", l->vp, l->pp);
        break;
    case PT_REJECT_SCHEDULE_VP:
        snprintf(buf, n, "schedule %s with vp = %d: the interleaved schedule is used exactly "
                 "when vp > 1", pt_schedule_names[l->schedule], l->vp);
        break;
    case PT_REJECT_INTERLEAVED_MICRO:
        snprintf(buf, n, "micro-batches per step (%lld) are not a multiple of pp (%d)",
                 (long long)l->n_micro, l->pp);
        break;
    case PT_REJECT_ZERO_NO_DP:
        snprintf(buf, n, "zero = %d with dp*cp = %lld: there is nothing to shard over",
                 l->zero, (long long)l->dp * l->cp);
        break;
    case PT_REJECT_ZERO_PP:
        snprintf(buf, n, "zero = %d with pp = %d: ZeRO 2/3 would reduce gradients every "
                 "micro-batch; use zero <= 1 with pipelining", l->zero, l->pp);
        break;
    case PT_REJECT_COMPRESS_ZERO:
        snprintf(buf, n, "compress=%s with zero = %d: compression applies to the ZeRO 0/1 "
                 "gradient buckets; use zero <= 1 or compress=none", pt_compress_names[l->compress],
                 l->zero);
        break;
    case PT_REJECT_COMPRESS_NO_DP:
        snprintf(buf, n, "compress=%s with dp*cp = %lld: no gradient is reduced over data "
                 "parallelism, so there is nothing to compress", pt_compress_names[l->compress],
                 (long long)l->dp * l->cp);
        break;
    case PT_REJECT_SCHEDULE_SIZE:
        snprintf(buf, n, "pp*vp*n_micro = %d*%d*%lld (micro-batches of %lld sequences) is "
                 "above %lld; a global batch of %lld sequences is far beyond any run "
                 "(was it meant in tokens? --global-batch 8M)", l->pp, l->vp,
                 (long long)l->n_micro, (long long)l->mbs, (long long)PT_MAX_SCHED_PAIRS,
                 (long long)global_batch);
        break;
    case PT_REJECT_PIPELINE_LAYOUT:
        if (l->first_layers || l->last_layers)
            snprintf(buf, n, "a pipeline layout with first_layers/last_layers: give one");
        else if (pt_pipe_split_ok(m, l, buf, n))
            snprintf(buf, n, "the pipeline layout splits the %lld layers validly", L);
        break;
    case PT_REJECT_UNEVEN_SPLIT:
        if (split_ok(m, l, buf, n))
            snprintf(buf, n, "first_layers = %lld, last_layers = %lld split the %lld layers "
                     "validly", (long long)l->first_layers, (long long)l->last_layers, L);
        break;
    default:
        snprintf(buf, n, "sizes must be at least 1, vp at most %d, zero within 0..3, "
                 "first_layers, last_layers and powersgd_start at least 0, powersgd_rank "
                 "within 1..%d", PT_CHUNK_MAX, PT_POWERSGD_MAX_RANK);
        break;
    }
}
