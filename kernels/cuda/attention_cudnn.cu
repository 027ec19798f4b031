/*
 * Attention through cuDNN's fused flash attention: the graph API of cuDNN 9 driven
 * through its C backend interface (cudnnBackendCreateDescriptor, SetAttribute,
 * Finalize, Execute). This file owns a backend's cuDNN handle and a cache of execution
 * plans, one per shape, mask and direction, built on the first call that needs it. When
 * cuDNN is in use, the table's attention_forward and attention_backward are the two
 * entries at the end of this file: they give cuDNN every call it takes and hand the
 * rest to our own kernels (pt_kcuda_attention_forward/_backward, attention.cu and
 * attention_tc.cu), which stay the reference. backend.cu chooses (PT_KCUDA_ATTN).
 *
 * The graphs. cuDNN's runtime fusion engine recognises scaled dot-product attention
 * written as an operation graph of matmuls, pointwise operations and reductions and
 * runs it as one FlashAttention-2 kernel ("Fused Flash Attention fprop / bprop",
 * cuDNN Backend Developer Guide, Graph API, Specialized Runtime Fusion Engines). The
 * graphs below are the ones cudnn-frontend lowers its sdpa and sdpa_backward nodes to
 * for cuDNN before 9.21 (cudnn-frontend v1.23, include/cudnn_frontend/node/
 * scaled_dot_product_flash_attention.h, CompositeSDPANode and
 * CompositeSDPABackwardNode; softmax.h; diagonal_band_mask.h), read and rewritten in C:
 * the matcher wants that order of operations, those virtual-tensor types and shapes.
 * cuDNN 9.19's dedicated CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD descriptors take no
 * causal mask (it arrives with their SUBGRAPH attribute in 9.21), so they are not used.
 *
 * Tensors are 4-d with explicit strides in cuDNN's (b, h, s, d) order over our
 * row-major (b, s, h, d) buffers: q, out, dout, dq as (b, a, sq, d) with strides
 * (sq·a·d, d, a·d, 1); k and v as (b, kh, skv, d), strides (skv·kh·d, d, kh·d, 1); the
 * first matmul takes K^T, the same buffer seen as (b, kh, d, skv) by swapping the last
 * two strides. Grouped queries (kh < a) are a batch broadcast of the K and V heads,
 * and in the backward a reduction of the per-query-head dK and dV over each group.
 * The scale 1/sqrt(d) is a pass-by-value fp32 tensor (CUDNN_ATTR_TENSOR_IS_BY_VALUE,
 * its host address in the variant pack). The causal mask is generated, not read:
 * row and column indices (pointwise GEN_INDEX, axes 2 and 3), row >= column (CMP_GE)
 * and a select of -inf elsewhere (BINARY_SELECT), the mask of a top-left diagonal.
 *
 * Conventions. cuDNN's softmax statistics are max + log(sum exp(s - max)) of the
 * scaled scores, per (b, h, s_q) row, fp32, natural log: kernels.h's lse exactly, in
 * the same (b, a, sq) layout, so the forward writes lse directly and the backward
 * reads it. Our attention has no dropout; neither has the graph. The backward WRITES
 * dQ, dK and dV: where the caller asks for that (accumulate 0) straight into the
 * gradients; where it accumulates (context parallelism's blocks), into bf16 copies in
 * scratch that one kernel adds into the gradients (fp32 add, one rounding).
 *
 * Which calls cuDNN takes: head dimension a multiple of 8 up to 128; a causal block
 * whose diagonal is aligned (q0 = k0, cuDNN's top-left causal mask), or a block whose
 * keys every query sees (causal with k0 + skv - 1 <= q0, or not causal); not one query
 * and one key (cuDNN's backward refuses s_q = s_kv = 1); every buffer 16-byte aligned
 * (the tensors' declared alignment). Other causal offsets (blocks partly visible, or
 * not at all, where a row that sees no key must give out = 0 and lse = -inf) go to our
 * kernels, as does every shape whose plan cuDNN cannot build. The backward takes only
 * engines without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, and is the graph that
 * cudnn-frontend builds for set_deterministic_algorithm(true) (dQ straight from the
 * last matmul, no fp32 dQ accumulator updated with atomics): kernels.h promises
 * bit-identical results run to run. The one exception, asked for with
 * PT_KCUDA_DETERMINISTIC=0 (backend.cu): the graph with the accumulator, on any engine
 * (backward_graph's accum_dq), the deterministic one where cuDNN builds none.
 *
 * Costs: a plan is built on the first call of its shape (the runtime fusion engine
 * compiles its kernel then; typically a second or so) and kept for the backend's life.
 * Temporaries come from the backend's scratch buffer (pt_kcuda_scratch): the plan's
 * workspace, and in the backward softmax_sum, when it accumulates the written gradients,
 * about the size of dq + dk + dv, and with the accumulator dQ_accum, b·a·sq·d fp32.
 * The deterministic backward's workspace holds dP, b·a·sq·skv
 * bf16: GBs at GPT-2's shapes. Before reserve the buffer grows on the first call of a
 * shape, up to a cap on the workspace (workspace_over_cap); after it (ctx->steady) a
 * call whose temporaries do not fit is declined rather than grown: reserve counts
 * softmax_sum and the written gradients from the shape's heads, kv_heads and head_dim,
 * and the backward's workspace as cudnn-frontend sizes it from attn_batch and attn_seq
 * (backend.cu, scratch_need), or, where that is over an eighth of the device's memory
 * or not free, leaves the workspace out and the backward to our kernels. Every later
 * call does no host synchronisation and no allocation: a variant pack (a host
 * descriptor) and one cudnnBackendExecute on the backend's stream, plus the
 * accumulation in the backward.
 */
#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.cuh"

/* Slots of the plan cache, a hash table (a power of two): a model needs a handful of
 * shapes (its layers share one; context parallelism adds the diagonal and the fully
 * visible blocks; validation may add a batch size), two directions each. */
enum { PLAN_SLOTS = 64, WHY_BYTES = 192, MAX_OPS = 40 };

/* Unique ids of the graphs' non-virtual tensors, the keys of the variant pack;
 * virtual tensors are numbered from UID_VIRTUAL. */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_SOFTMAX_SUM, /* backward: rowsum(dO ∘ O), fp32 in scratch */
    UID_SCALE,       /* by value: 1/sqrt(d) */
    UID_NEG_INF,     /* by value: the masked score */
    UID_ONE,         /* by value: 1 (cudnn-frontend's dropout-scale slot, no dropout) */
    UID_DQ_ACCUM,    /* nondeterministic backward: dQ summed in fp32, in scratch */
    UID_VIRTUAL = 100
};

/* What a plan is for. All ints, compared and hashed as bytes (memset first). */
typedef struct {
    int bwd, b, sq, skv, a, kh, d, causal;
} attn_key;

typedef struct {
    attn_key key;
    int used;                        /* the slot holds an entry */
    int ok;                          /* a plan was built; 0: cuDNN declines the shape */
    int accum_dq;                    /* a backward plan of the graph with dQ_accum */
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t *descs; /* every descriptor the plan was built from, kept
                                      * alive as long as the plan */
    int n_descs;
    int64_t ws_bytes;                /* cuDNN's workspace */
    char why[WHY_BYTES];             /* when !ok: the failure, naming the call */
} attn_plan;

struct pt_kcuda_cudnn {
    cudnnHandle_t handle;            /* on the backend's stream */
    size_t version;                  /* cudnnGetVersion(), e.g. 91900 */
    bool required;                   /* PT_KCUDA_ATTN=cudnn: a declined call is an error */
    bool nondeterministic;           /* PT_KCUDA_DETERMINISTIC=0: the backward may sum dQ
                                      * with atomics (backward_graph's accum_dq) */
    bool told[2];                    /* a decline of the forward, backward was reported */
    bool told_accum;                 /* no dQ_accum plan for a shape was reported */
    attn_plan plans[PLAN_SLOTS];
};

/* ---- Building descriptors ------------------------------------------------------------
 * A graph collects every descriptor it makes (destroyed together, or handed to the
 * plan that needs them) and its operations in order. The first failing call is kept
 * in why, naming the call and the descriptor, with cuDNN's own message; every later
 * step is then a no-op, so a builder reads as a straight list of operations. */

typedef struct {
    cudnnBackendDescriptor_t *descs;
    int n_descs, cap_descs;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int n_ops;
    int64_t next_uid;
    char why[WHY_BYTES];
} graph;

static bool ok(const graph *g) { return g->why[0] == '\0'; }

static void note_failure(char *why, cudnnStatus_t st, const char *call, const char *what)
{
    char last[96] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(why, WHY_BYTES, "%s(%s): %s%s%s", call, what, cudnnGetErrorString(st),
             last[0] ? ": " : "", last);
}

static void fail(graph *g, cudnnStatus_t st, const char *call, const char *what)
{
    if (ok(g))
        note_failure(g->why, st, call, what);
}

static cudnnBackendDescriptor_t make(graph *g, cudnnBackendDescriptorType_t type,
                                     const char *what)
{
    if (!ok(g))
        return NULL;
    if (g->n_descs == g->cap_descs) {
        int cap = g->cap_descs ? 2 * g->cap_descs : 128;
        cudnnBackendDescriptor_t *d =
            (cudnnBackendDescriptor_t *)realloc(g->descs, (size_t)cap * sizeof *d);
        if (!d) {
            snprintf(g->why, WHY_BYTES, "out of host memory for %d cuDNN descriptors", cap);
            return NULL;
        }
        g->descs = d;
        g->cap_descs = cap;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(g, st, "cudnnBackendCreateDescriptor", what);
        return NULL;
    }
    g->descs[g->n_descs++] = d;
    return d;
}

static void set(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *value,
                const char *what)
{
    if (!ok(g) || !d)
        return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS)
        fail(g, st, "cudnnBackendSetAttribute", what);
}

static void finalize(graph *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (!ok(g) || !d)
        return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS)
        fail(g, st, "cudnnBackendFinalize", what);
}

/* One attribute of a descriptor: count values of type at value, what naming it in a
 * failure. A NULL value leaves the attribute unset (an optional operand). */
typedef struct {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t count;
    const void *value;
    const char *what;
} attr;

/* an attribute that names another descriptor, *d: an operation's tensors and its own
 * descriptor (d NULL: an optional operand left unset) */
static attr operand(cudnnBackendAttributeName_t name, const cudnnBackendDescriptor_t *d,
                    const char *what)
{
    attr at = {name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, d, what};
    return at;
}

/* A descriptor of type with the n attributes of at set in order, then finalized: the
 * backend API's create, set and finalize, with what naming the descriptor. */
static cudnnBackendDescriptor_t describe(graph *g, cudnnBackendDescriptorType_t type,
                                         const char *what, const attr *at, int n)
{
    cudnnBackendDescriptor_t d = make(g, type, what);
    for (int i = 0; i < n; i++)
        if (at[i].value)
            set(g, d, at[i].name, at[i].type, at[i].count, at[i].value, at[i].what);
    finalize(g, d, what);
    return d;
}

/* describe over a whole array of attributes */
#define DESCRIBE(g, type, what, at) \
    describe(g, type, what, at, (int)(sizeof(at) / sizeof((at)[0])))

static void destroy_all(cudnnBackendDescriptor_t *descs, int n)
{
    for (int i = n - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(descs[i]);
    free(descs);
}

/* ---- Tensors ------------------------------------------------------------------------- */

typedef struct {
    int64_t dim[4], stride[4];
} shape4;

static shape4 strided(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1,
                      int64_t s2, int64_t s3)
{
    shape4 s;
    s.dim[0] = d0, s.dim[1] = d1, s.dim[2] = d2, s.dim[3] = d3;
    s.stride[0] = s0, s.stride[1] = s1, s.stride[2] = s2, s.stride[3] = s3;
    return s;
}

/* row-major: the layout of every virtual tensor of a given shape */
static shape4 dense(int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return strided(d0, d1, d2, d3, d1 * d2 * d3, d2 * d3, d3, 1);
}

/* uid 0: a virtual tensor (a new uid); by_value: a host scalar in the variant pack.
 * Every tensor declares 16-byte alignment, as cudnn-frontend's default. */
static cudnnBackendDescriptor_t tensor(graph *g, int64_t uid, cudnnDataType_t type, shape4 s,
                                       bool by_value)
{
    bool is_virtual = uid == 0;
    int64_t alignment = 16;
    if (is_virtual)
        uid = g->next_uid++;
    attr at[] = {
        {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type"},
        {CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dim, "tensor dimensions"},
        {CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.stride, "tensor strides"},
        {CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor unique id"},
        {CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment"},
        {CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, is_virtual ? &is_virtual : NULL,
         "tensor is virtual"},
        {CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, by_value ? &by_value : NULL,
         "tensor is by value"}};
    return DESCRIBE(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor", at);
}

static cudnnBackendDescriptor_t virt(graph *g, cudnnDataType_t type, shape4 s)
{
    return tensor(g, 0, type, s, false);
}

/* an fp32 scalar passed by value, broadcast to any shape */
static cudnnBackendDescriptor_t scalar(graph *g, int64_t uid)
{
    return tensor(g, uid, CUDNN_DATA_FLOAT, strided(1, 1, 1, 1, 1, 1, 1, 1), true);
}

/* ---- Operations (appended to the graph in order) ---------------------------------------- */

static void add_op(graph *g, cudnnBackendDescriptor_t op)
{
    if (!ok(g) || !op)
        return;
    if (g->n_ops == MAX_OPS) {
        snprintf(g->why, WHY_BYTES, "more than %d operations in an attention graph", MAX_OPS);
        return;
    }
    g->ops[g->n_ops++] = op;
}

/* y = mode(x, b, t): b is the second input (NULL for unary modes), t the third
 * (BINARY_SELECT's condition: y = t ? x : b); axis only for GEN_INDEX. prec is the
 * pointwise descriptor's math precision. */
static void pointwise(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
    attr pw_at[] = {
        {CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode"},
        {CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec,
         "pointwise math precision"},
        {CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1,
         mode == CUDNN_POINTWISE_GEN_INDEX ? &axis : NULL, "pointwise axis"}};
    cudnnBackendDescriptor_t pw =
        DESCRIBE(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise", pw_at);
    float one = 1.0f;
    attr op_at[] = {
        operand(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &pw,
                "pointwise operation descriptor"),
        operand(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &x, "pointwise x"),
        operand(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b ? &b : NULL, "pointwise b"),
        operand(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t ? &t : NULL, "pointwise t"),
        operand(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &y, "pointwise y"),
        {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1"},
        {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2"}};
    add_op(g, DESCRIBE(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation",
                  op_at));
}

/* y = mode(x, b) in fp32 */
static void pw2(graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
{
    pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, 0);
}

/* c = a · b over the last two dimensions, batched over the first two (broadcast where
 * one side has fewer heads), fp32 accumulation */
static void matmul(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t c)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    attr mm_at[] = {
        {CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul compute type"}};
    cudnnBackendDescriptor_t mm = DESCRIBE(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul", mm_at);
    attr op_at[] = {operand(CUDNN_ATTR_OPERATION_MATMUL_ADESC, &a, "matmul a"),
                    operand(CUDNN_ATTR_OPERATION_MATMUL_BDESC, &b, "matmul b"),
                    operand(CUDNN_ATTR_OPERATION_MATMUL_CDESC, &c, "matmul c"),
                    operand(CUDNN_ATTR_OPERATION_MATMUL_DESC, &mm, "matmul operation descriptor")};
    add_op(g, DESCRIBE(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation", op_at));
}

/* y = reduce(x) over the dimensions where y has extent 1 (or, for the GQA gradients,
 * over each group of query heads), fp32 */
static void reduction(graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    attr red_at[] = {{CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
                      "reduction operator"},
                     {CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp,
                      "reduction compute type"}};
    cudnnBackendDescriptor_t red =
        DESCRIBE(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction", red_at);
    attr op_at[] = {operand(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &x, "reduction x"),
                    operand(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &y, "reduction y"),
                    operand(CUDNN_ATTR_OPERATION_REDUCTION_DESC, &red,
                            "reduction operation descriptor")};
    add_op(g, DESCRIBE(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation",
                  op_at));
}

/* y: the same elements as x under y's dimensions and strides (a transposed view) */
static void reshape(graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    attr op_at[] = {operand(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &x, "reshape x"),
                    operand(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &y, "reshape y")};
    add_op(g, DESCRIBE(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation", op_at));
}

/* ---- The attention graphs --------------------------------------------------------------- */

/* The shapes of one call, in cuDNN's (b, h, s, d) order over our buffers. */
typedef struct {
    shape4 q;      /* q, out, dout, dq: (b, sq, a, d) in memory */
    shape4 kt;     /* K^T (and V^T): (b, skv, kh, d) in memory, last two swapped */
    shape4 k;      /* k, v, dk, dv */
    shape4 scores; /* (b, a, sq, skv), virtual */
    shape4 rows;   /* (b, a, sq, 1): lse's layout, and every per-row statistic */
} attn_shapes;

static attn_shapes shapes_of(const attn_key *k)
{
    int64_t b = k->b, a = k->a, kh = k->kh, sq = k->sq, skv = k->skv, d = k->d;
    attn_shapes s;
    s.q = strided(b, a, sq, d, sq * a * d, d, a * d, 1);
    s.kt = strided(b, kh, d, skv, skv * kh * d, d, 1, kh * d);
    s.k = strided(b, kh, skv, d, skv * kh * d, d, kh * d, 1);
    s.scores = dense(b, a, sq, skv);
    s.rows = strided(b, a, sq, 1, a * sq, sq, 1, 1);
    return s;
}

/* Top-left causal mask on scores x: keeps (row i, column j) where i >= j, -inf
 * elsewhere (cudnn-frontend's diagonal band mask with right bound 0: GEN_INDEX in
 * fp32 arithmetic to int32 indices, CMP_GE in boolean, BINARY_SELECT). */
static cudnnBackendDescriptor_t causal_mask(graph *g, cudnnBackendDescriptor_t x, shape4 s,
                                            cudnnBackendDescriptor_t neg_inf)
{
    cudnnBackendDescriptor_t row = virt(g, CUDNN_DATA_INT32, s);
    cudnnBackendDescriptor_t col = virt(g, CUDNN_DATA_INT32, s);
    cudnnBackendDescriptor_t keep = virt(g, CUDNN_DATA_BOOLEAN, s);
    cudnnBackendDescriptor_t y = virt(g, CUDNN_DATA_FLOAT, s);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, 0);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg_inf, keep, y, 0);
    return y;
}

/* Forward: S = scale · Q K^T, masked; Stats = max + log(sum exp(S - max)) per row;
 * P = exp(S - max) / sum (bf16); O = P V. */
static void forward_graph(graph *g, const attn_key *key)
{
    attn_shapes s = shapes_of(key);
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, CUDNN_DATA_BFLOAT16, s.q, false);
    cudnnBackendDescriptor_t kt = tensor(g, UID_K, CUDNN_DATA_BFLOAT16, s.kt, false);
    cudnnBackendDescriptor_t v = tensor(g, UID_V, CUDNN_DATA_BFLOAT16, s.k, false);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, CUDNN_DATA_BFLOAT16, s.q, false);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, CUDNN_DATA_FLOAT, s.rows, false);
    cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE);

    cudnnBackendDescriptor_t qk = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t sc = virt(g, CUDNN_DATA_FLOAT, s.scores);
    matmul(g, q, kt, qk);
    pw2(g, CUDNN_POINTWISE_MUL, qk, scale, sc);
    if (key->causal)
        sc = causal_mask(g, sc, s.scores, scalar(g, UID_NEG_INF));

    /* the softmax, keeping its statistics (cudnn-frontend's CompositeSoftmaxNode) */
    cudnnBackendDescriptor_t mx = virt(g, CUDNN_DATA_FLOAT, s.rows);
    cudnnBackendDescriptor_t centred = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t e = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t sum = virt(g, CUDNN_DATA_FLOAT, s.rows);
    cudnnBackendDescriptor_t log_sum = virt(g, CUDNN_DATA_FLOAT, s.rows);
    cudnnBackendDescriptor_t p = virt(g, CUDNN_DATA_BFLOAT16, s.scores); /* P·V's A in bf16 */
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, sc, mx);
    pw2(g, CUDNN_POINTWISE_SUB, sc, mx, centred);
    pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centred, NULL, NULL, e, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    pointwise(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, log_sum, 0);
    pw2(g, CUDNN_POINTWISE_ADD, mx, log_sum, stats);
    pw2(g, CUDNN_POINTWISE_DIV, e, sum, p);

    matmul(g, p, v, o);
}

/* dK or dV (b, kh, skv, d) from a product over query heads: written directly for
 * MHA; for GQA the product is per query head (b, a, skv, d) and a reduction sums each
 * group into its KV head. */
static void grad_kv(graph *g, const attn_key *key, cudnnBackendDescriptor_t lhs,
                    cudnnBackendDescriptor_t rhs, cudnnBackendDescriptor_t out)
{
    if (key->a == key->kh) {
        matmul(g, lhs, rhs, out);
        return;
    }
    cudnnBackendDescriptor_t full =
        virt(g, CUDNN_DATA_BFLOAT16, dense(key->b, key->a, key->skv, key->d));
    matmul(g, lhs, rhs, full);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

/* Backward (FlashAttention-2's recomputation from the statistics): with
 * P = exp(scale · Q K^T - Stats), masked, and softmax_sum = rowsum(dO ∘ O):
 * dV = P^T dO; dS = P ∘ (dO V^T - softmax_sum) · scale; dK = dS^T Q; dQ = dS K.
 * accum_dq: dQ = dS K goes into dQ_accum, an fp32 (b, a, sq, d) tensor that the engine
 * sums each key block's share into with atomics, then dQ = identity(dQ_accum): the
 * graph cudnn-frontend builds when determinism is not asked for and dP does not fit
 * its 256 MiB "dP workspace" limit (CompositeSDPABackwardNode, use_dp_workspace
 * false), the backward PyTorch's cuDNN attention runs. Otherwise dQ straight from the
 * matmul (the dP workspace form, forced for determinism). */
static void backward_graph(graph *g, const attn_key *key, bool accum_dq)
{
    attn_shapes s = shapes_of(key);
    int64_t b = key->b, a = key->a, sq = key->sq, skv = key->skv, d = key->d;
    /* P and dS seen transposed, (b, a, skv, sq), as the left operand of dV and dK */
    shape4 scores_t = strided(b, a, skv, sq, a * sq * skv, sq * skv, 1, skv);
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, CUDNN_DATA_BFLOAT16, s.q, false);
    cudnnBackendDescriptor_t kt = tensor(g, UID_K, CUDNN_DATA_BFLOAT16, s.kt, false);
    cudnnBackendDescriptor_t vt = tensor(g, UID_V, CUDNN_DATA_BFLOAT16, s.kt, false);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, CUDNN_DATA_BFLOAT16, s.q, false);
    cudnnBackendDescriptor_t dout = tensor(g, UID_DO, CUDNN_DATA_BFLOAT16, s.q, false);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, CUDNN_DATA_FLOAT, s.rows, false);
    cudnnBackendDescriptor_t dq = tensor(g, UID_DQ, CUDNN_DATA_BFLOAT16, s.q, false);
    cudnnBackendDescriptor_t dk = tensor(g, UID_DK, CUDNN_DATA_BFLOAT16, s.k, false);
    cudnnBackendDescriptor_t dv = tensor(g, UID_DV, CUDNN_DATA_BFLOAT16, s.k, false);
    cudnnBackendDescriptor_t softmax_sum =
        tensor(g, UID_SOFTMAX_SUM, CUDNN_DATA_FLOAT, s.rows, false);
    cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE);
    cudnnBackendDescriptor_t one = scalar(g, UID_ONE);

    /* softmax_sum = rowsum(dO ∘ O) · 1 (the product's layout as cudnn-frontend's) */
    cudnnBackendDescriptor_t dot =
        virt(g, CUDNN_DATA_FLOAT, strided(b, a, sq, d, a * sq * d, sq * d, a * d, 1));
    cudnnBackendDescriptor_t dot_sum = virt(g, CUDNN_DATA_FLOAT, s.rows);
    pw2(g, CUDNN_POINTWISE_MUL, dout, o, dot);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, dot, dot_sum);
    pw2(g, CUDNN_POINTWISE_MUL, dot_sum, one, softmax_sum);

    /* P = exp(scale · Q K^T - Stats), masked before the exponential */
    cudnnBackendDescriptor_t qk = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t sc = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t centred = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t p = virt(g, CUDNN_DATA_FLOAT, s.scores);
    matmul(g, q, kt, qk);
    pw2(g, CUDNN_POINTWISE_MUL, qk, scale, sc);
    pw2(g, CUDNN_POINTWISE_SUB, sc, stats, centred);
    if (key->causal)
        centred = causal_mask(g, centred, s.scores, scalar(g, UID_NEG_INF));
    pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centred, NULL, NULL, p, 0);

    /* dV = P^T dO */
    cudnnBackendDescriptor_t p_t = virt(g, CUDNN_DATA_BFLOAT16, scores_t);
    reshape(g, p, p_t);
    grad_kv(g, key, p_t, dout, dv);

    /* dS = P ∘ (dO V^T - softmax_sum) · scale */
    cudnnBackendDescriptor_t dp = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t dp_c = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t ds_u = virt(g, CUDNN_DATA_FLOAT, s.scores);
    cudnnBackendDescriptor_t ds = virt(g, CUDNN_DATA_FLOAT, s.scores);
    matmul(g, dout, vt, dp);
    pw2(g, CUDNN_POINTWISE_SUB, dp, softmax_sum, dp_c);
    pw2(g, CUDNN_POINTWISE_MUL, dp_c, p, ds_u);
    pw2(g, CUDNN_POINTWISE_MUL, ds_u, scale, ds);

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t ds_t = virt(g, CUDNN_DATA_BFLOAT16, scores_t);
    reshape(g, ds, ds_t);
    grad_kv(g, key, ds_t, q, dk);

    /* dQ = dS K. K is K^T's buffer seen untransposed; the view's type is fp32 as
     * cudnn-frontend leaves it (a virtual tensor takes the intermediate type). */
    cudnnBackendDescriptor_t k = virt(g, CUDNN_DATA_FLOAT, s.k);
    reshape(g, kt, k);
    if (accum_dq) {
        cudnnBackendDescriptor_t acc =
            tensor(g, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, dense(b, a, sq, d), false);
        matmul(g, ds, k, acc);
        pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, NULL, NULL, dq, 0);
    } else {
        matmul(g, ds, k, dq); /* written by the matmul itself: no fp32 accumulator */
    }
}

/* ---- Plans ------------------------------------------------------------------------------
 * The operation graph goes to cuDNN's heuristics (mode A, then the fallback list);
 * the first engine configuration whose execution plan finalizes is the plan, and
 * unless nondeterminism is allowed, the first without the NONDETERMINISTIC numerical
 * note. */

static bool deterministic(graph *g, cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t engine = make(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    if (!engine)
        return false;
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                 &n, notes) != CUDNN_STATUS_SUCCESS)
        return false; /* notes unknown: not taken */
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
            return false;
    return true;
}

/* One heuristics mode: a finalized plan, or NULL with the last refusal in *last. */
static cudnnBackendDescriptor_t plan_from_heuristics(graph *g, cudnnHandle_t handle,
                                                     cudnnBackendDescriptor_t op_graph,
                                                     cudnnBackendHeurMode_t mode,
                                                     bool any_engine, char *last)
{
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &op_graph, "heuristics operation graph");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
        "heuristics mode");
    if (!ok(g))
        return NULL;
    cudnnStatus_t st = cudnnBackendFinalize(heur);
    if (st != CUDNN_STATUS_SUCCESS) {
        note_failure(last, st, "cudnnBackendFinalize", "heuristics");
        return NULL;
    }
    int64_t count = 0;
    st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
        if (st != CUDNN_STATUS_SUCCESS)
            note_failure(last, st, "cudnnBackendGetAttribute", "heuristics result count");
        return NULL;
    }
    cudnnBackendDescriptor_t *cfgs =
        (cudnnBackendDescriptor_t *)calloc((size_t)count, sizeof *cfgs);
    if (!cfgs) {
        snprintf(g->why, WHY_BYTES, "out of host memory for %lld engine configurations",
                 (long long)count);
        return NULL;
    }
    for (int64_t i = 0; i < count; i++)
        cfgs[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
    int64_t got = 0;
    if (ok(g)) {
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
        if (st != CUDNN_STATUS_SUCCESS) {
            note_failure(last, st, "cudnnBackendGetAttribute", "heuristics results");
            got = 0;
        }
    }
    cudnnBackendDescriptor_t plan = NULL;
    for (int64_t i = 0; i < got && ok(g) && !plan; i++) {
        if (!any_engine && !deterministic(g, cfgs[i])) {
            snprintf(last, WHY_BYTES, "heuristics: engine configuration %lld is "
                     "nondeterministic or has no numerical notes", (long long)i);
            continue;
        }
        cudnnBackendDescriptor_t p =
            make(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        set(g, p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
            "execution plan handle");
        set(g, p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &cfgs[i], "execution plan engine configuration");
        if (!ok(g))
            break;
        st = cudnnBackendFinalize(p);
        if (st == CUDNN_STATUS_SUCCESS)
            plan = p;
        else
            note_failure(last, st, "cudnnBackendFinalize", "execution plan");
    }
    free(cfgs);
    return plan;
}

/* The plan of the graph's operations and its workspace; NULL with g->why set. */
static cudnnBackendDescriptor_t plan_graph(graph *g, cudnnHandle_t handle, bool any_engine,
                                           int64_t *ws_bytes)
{
    attr at[] = {{CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
                  "operation graph handle"},
                 {CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops,
                  "operation graph operations"}};
    cudnnBackendDescriptor_t op_graph =
        DESCRIBE(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph", at);
    char last[WHY_BYTES] = "heuristics: no engine configuration";
    cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    cudnnBackendDescriptor_t plan = NULL;
    for (int m = 0; m < 2 && ok(g) && !plan; m++)
        plan = plan_from_heuristics(g, handle, op_graph, modes[m], any_engine, last);
    if (!ok(g))
        return NULL;
    if (!plan) {
        snprintf(g->why, WHY_BYTES, "%s", last);
        return NULL;
    }
    *ws_bytes = 0;
    int64_t n = 0;
    cudnnStatus_t st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &n, ws_bytes);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(g, st, "cudnnBackendGetAttribute", "execution plan workspace size");
        return NULL;
    }
    return plan;
}

/* One try at the plan of p->key: the backward's graph with dQ_accum when accum_dq (any
 * engine then), else the deterministic one. true with the plan in p; false with the
 * failure in why. */
static bool try_plan(pt_kcuda_cudnn *c, attn_plan *p, bool accum_dq, char *why)
{
    graph g;
    memset(&g, 0, sizeof g);
    g.next_uid = UID_VIRTUAL;
    if (p->key.bwd)
        backward_graph(&g, &p->key, accum_dq);
    else
        forward_graph(&g, &p->key);
    int64_t ws = 0;
    cudnnBackendDescriptor_t plan = ok(&g) ? plan_graph(&g, c->handle, accum_dq, &ws) : NULL;
    if (!plan) {
        snprintf(why, WHY_BYTES, "%s", g.why[0] ? g.why : "no plan");
        destroy_all(g.descs, g.n_descs);
        cudaGetLastError(); /* a refused engine's CUDA calls are not our ops' failures */
        return false;
    }
    p->ok = 1;
    p->accum_dq = accum_dq;
    p->plan = plan;
    p->descs = g.descs;
    p->n_descs = g.n_descs;
    p->ws_bytes = ws;
    return true;
}

/* Builds the plan of p->key into p (p->ok, or p->why). A backward with nondeterminism
 * allowed tries the dQ_accum graph first; where cuDNN builds none (said once), the
 * deterministic graph. */
static void build_plan(pt_kernels *kn, attn_plan *p)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    p->ok = 0;
    char why[WHY_BYTES];
    if (p->key.bwd && c->nondeterministic) {
        if (try_plan(c, p, true, why))
            return;
        if (!c->told_accum)
            pt_kcuda_note(kn, "PT_KCUDA_DETERMINISTIC=0: cuDNN built no attention backward "
                          "that sums dQ in fp32 (%s); the deterministic one runs", why);
        c->told_accum = true;
    }
    if (!try_plan(c, p, false, why))
        snprintf(p->why, WHY_BYTES, "%s", why);
}

static uint64_t key_hash(const attn_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The cache's entry for key, built on first use; NULL when the cache is full. */
static attn_plan *plan_for(pt_kernels *kn, const attn_key *key)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    uint64_t h = key_hash(key);
    for (int i = 0; i < PLAN_SLOTS; i++) {
        attn_plan *p = &c->plans[(h + (uint64_t)i) & (PLAN_SLOTS - 1)];
        if (p->used && memcmp(&p->key, key, sizeof *key) == 0)
            return p;
        if (!p->used) {
            p->used = 1;
            p->key = *key;
            build_plan(kn, p);
            return p;
        }
    }
    return NULL;
}

/* ---- Which calls cuDNN takes ------------------------------------------------------------ */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* NULL when cuDNN can take the call, with *key filled; otherwise the reason, written
 * into why. */
static const char *decline(const pt_kcuda_cudnn *c, attn_key *key, int bwd, int b, int sq,
                           int skv, int a, int kh, int d, int q0, int k0, int causal,
                           const void *const *ptrs, int n, char *why)
{
    memset(key, 0, sizeof *key);
    key->bwd = bwd;
    if (b < 1 || sq < 1 || skv < 1 || a < 1 || kh < 1 || a % kh != 0) {
        snprintf(why, WHY_BYTES, "sizes b %d sq %d skv %d a %d kh %d", b, sq, skv, a, kh);
        return why;
    }
    if (d % 8 != 0 || d < 8 || d > 128) {
        snprintf(why, WHY_BYTES, "head dimension %d (this path takes multiples of 8 up to "
                 "128)", d);
        return why;
    }
    if (sq == 1 && skv == 1) {
        snprintf(why, WHY_BYTES, "one query and one key (cuDNN's backward refuses "
                 "s_q = s_kv = 1)");
        return why;
    }
    int mask;
    if (!causal || (int64_t)k0 + skv - 1 <= q0)
        mask = 0; /* every query sees every key */
    else if (q0 == k0)
        mask = 1; /* the top-left diagonal */
    else {
        snprintf(why, WHY_BYTES, "a causal block with query offset %d and key offset %d "
                 "(this path takes q0 = k0, or blocks whose keys all queries see)", q0, k0);
        return why;
    }
    /* cudnn-frontend works around a backward bug of cuDNN <= 9.15 for s_kv % 128 != 0
     * with a padding mask; here such shapes stay with our kernels */
    if (bwd && c->version <= 91500 && skv % 128 != 0) {
        snprintf(why, WHY_BYTES, "skv %d not a multiple of 128 in cuDNN %zu's backward", skv,
                 c->version);
        return why;
    }
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i])) {
            snprintf(why, WHY_BYTES, "a buffer not 16-byte aligned");
            return why;
        }
    key->b = b, key->sq = sq, key->skv = skv;
    key->a = a, key->kh = kh, key->d = d, key->causal = mask;
    return NULL;
}

/* The plan for key, or NULL with the reason (the cache full, or the plan's failure). */
static const char *plan_of(pt_kernels *kn, const attn_key *key, const attn_plan **plan)
{
    attn_plan *p = plan_for(kn, key);
    *plan = p;
    return !p ? "the plan cache is full" : !p->ok ? p->why : NULL;
}

/* After reserve (ctx->steady) no op may grow the scratch buffer: a call that needs
 * more than is held is declined (kernels.h, reserve). NULL when need fits. */
static const char *scratch_short(pt_kernels *kn, size_t need, char *why)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (!ctx->steady || need <= ctx->scratch_bytes)
        return NULL;
    snprintf(why, WHY_BYTES, "needs %zu bytes of scratch, reserve made %zu", need,
             ctx->scratch_bytes);
    return why;
}

/* Before reserve, when cuDNN is not required (our kernels need no workspace), a plan's
 * workspace over ctx->attn_ws_cap (a reason, into why), else NULL: the backward's
 * grows with b·a·s² (backend.cu, cudnn_attn_workspace), 4.3 GB for bench_kernels_cuda's
 * sequence of 8192. After reserve the reserved scratch decides. */
static const char *workspace_over_cap(pt_kernels *kn, int64_t ws, char *why)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (ctx->steady || ctx->cudnn->required || (size_t)ws <= ctx->attn_ws_cap)
        return NULL;
    snprintf(why, WHY_BYTES, "the plan's workspace of %lld MiB is over the %zu MiB allowed "
             "before reserve", (long long)(ws >> 20), ctx->attn_ws_cap >> 20);
    return why;
}

/* A call cuDNN does not take: true when the caller's own kernels should run it; false
 * when cuDNN is required, with the refusal recorded in kn->err. */
static bool refuse(pt_kernels *kn, int bwd, const char *why)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    if (!c->required) {
        /* said once per direction and process: which attention a run trains with is
         * not otherwise visible, and our kernels' speed is not cuDNN's (a decline
         * after reserve, for scratch, can send every later call there) */
        if (!c->told[bwd])
            pt_kcuda_note(kn, "cuDNN declined an attention %s (%s); this project's kernels "
                          "run such calls", bwd ? "backward" : "forward", why);
        c->told[bwd] = true;
        return true;
    }
    pt_kcuda_fail(kn, __FILE__, __LINE__, "PT_KCUDA_ATTN=cudnn: attention %s: %s",
                  bwd ? "backward" : "forward", why);
    return false;
}

/* ---- Execution --------------------------------------------------------------------------- */

static int dnn_check(pt_kernels *kn, cudnnStatus_t st, const char *what, const char *file,
                     int line)
{
    if (st == CUDNN_STATUS_SUCCESS)
        return 0;
    char last[96] = "";
    cudnnGetLastErrorString(last, sizeof last);
    pt_kcuda_fail(kn, file, line, "%s: %s%s%s", what, cudnnGetErrorString(st),
                  last[0] ? ": " : "", last);
    return -1;
}

#define PT_DNN(kn, call) dnn_check((kn), (call), #call, __FILE__, __LINE__)

/* A tensor of the graph and what it is bound to at execution: device memory, or the
 * host address of a by-value scalar. */
typedef struct {
    int64_t uid;
    const void *ptr;
} binding;

enum { MAX_BINDINGS = 16 };

/* Runs the plan on the backend's stream: the variant pack binds each uid to its
 * buffer, and the workspace. */
static void execute(pt_kernels *kn, const attn_plan *p, const binding *bind, int n, void *ws)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    int64_t uids[MAX_BINDINGS];
    void *ptrs[MAX_BINDINGS];
    for (int i = 0; i < n; i++) {
        uids[i] = bind[i].uid;
        ptrs[i] = (void *)bind[i].ptr; /* cuDNN takes void *; inputs are only read */
    }
    cudnnBackendDescriptor_t vp = NULL;
    if (PT_DNN(kn, cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)))
        return;
    if (!PT_DNN(kn, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                             CUDNN_TYPE_INT64, n, uids)) &&
        !PT_DNN(kn, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                             CUDNN_TYPE_VOID_PTR, n, ptrs)) &&
        !PT_DNN(kn, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                             CUDNN_TYPE_VOID_PTR, 1, &ws)) &&
        !PT_DNN(kn, cudnnBackendFinalize(vp)))
        PT_DNN(kn, cudnnBackendExecute(c->handle, p->plan, vp));
    /* the pack's contents went into the launch: nothing queued refers to it */
    cudnnBackendDestroyDescriptor(vp);
}

static size_t round256(int64_t bytes) { return ((size_t)bytes + 255) / 256 * 256; }

/* dq += parts[0, nq), dk += parts[nq, nq + nkv), dv += parts[nq + nkv, nq + 2 nkv): the
 * cuDNN backward's written gradients added into ours (fp32 add, one rounding). */
__global__ void attn_accumulate_kernel(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *parts,
                                       int64_t nq, int64_t nkv)
{
    int64_t n = nq + 2 * nkv;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        bf16 *g = e < nq ? dq + e : e < nq + nkv ? dk + (e - nq) : dv + (e - nq - nkv);
        pt_st(g, pt_ld(g) + pt_ld(parts + e));
    }
}

/* ---- Lifetime ------------------------------------------------------------------------------ */

size_t pt_kcuda_cudnn_version(void) { return cudnnGetVersion(); }

int pt_kcuda_cudnn_init(pt_kernels *kn, bool required, bool nondeterministic)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    size_t version = cudnnGetVersion();
    /* cuDNN 9's graph API; 9.10.0 and 9.10.1 have known SDPA bugs (cudnn-frontend
     * refuses them too) */
    if (version < 90000 || version == 91000 || version == 91001) {
        if (required)
            pt_kcuda_fail(kn, __FILE__, __LINE__, "PT_KCUDA_ATTN=cudnn: cuDNN %zu: need 9.0 "
                          "or newer, not 9.10.0 or 9.10.1", version);
        return required ? -1 : 0;
    }
    cudnnHandle_t handle = NULL;
    cudnnStatus_t st = cudnnCreate(&handle);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetStream(handle, ctx->stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        if (required)
            dnn_check(kn, st, "PT_KCUDA_ATTN=cudnn: cudnnCreate, cudnnSetStream", __FILE__,
                      __LINE__);
        if (handle)
            cudnnDestroy(handle);
        cudaGetLastError(); /* leave no trace of cuDNN's failed CUDA calls for sync() */
        return required ? -1 : 0;
    }
    pt_kcuda_cudnn *c = (pt_kcuda_cudnn *)calloc(1, sizeof *c);
    if (!c) {
        cudnnDestroy(handle);
        pt_kcuda_fail(kn, __FILE__, __LINE__, "out of host memory for cuDNN's plans");
        return -1;
    }
    c->handle = handle;
    c->version = version;
    c->required = required;
    c->nondeterministic = nondeterministic;
    ctx->cudnn = c;
    return 0;
}

void pt_kcuda_cudnn_destroy(pt_kernels *kn)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    if (!c)
        return;
    for (int i = 0; i < PLAN_SLOTS; i++)
        if (c->plans[i].ok)
            destroy_all(c->plans[i].descs, c->plans[i].n_descs);
    cudnnDestroy(c->handle);
    free(c);
    pt_kcuda_ctx(kn)->cudnn = NULL;
}

/* ---- The table's entries ------------------------------------------------------------------ */

void pt_kcuda_cudnn_attention_forward(pt_kernels *kn,
                                      float *out,         /* (b, sq, a, d) [act] */
                                      float *lse,         /* (b, a, sq) fp32 */
                                      const float *q,     /* (b, sq, a, d) [act] */
                                      const float *k,     /* (b, skv, kh, d) [act] */
                                      const float *v,     /* (b, skv, kh, d) [act] */
                                      int b, int sq, int skv, int a, int kh, int d,
                                      int q0, int k0, int causal)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    const void *bufs[] = {out, lse, q, k, v};
    char why[WHY_BYTES];
    attn_key key;
    const attn_plan *p = NULL;
    const char *no = decline(c, &key, 0, b, sq, skv, a, kh, d, q0, k0, causal, bufs, 5, why);
    if (!no)
        no = plan_of(kn, &key, &p);
    if (!no)
        no = workspace_over_cap(kn, p->ws_bytes, why);
    if (!no && p->ws_bytes > 0)
        no = scratch_short(kn, round256(p->ws_bytes), why);
    if (no) {
        if (refuse(kn, 0, no))
            pt_kcuda_attention_forward(kn, out, lse, q, k, v, b, sq, skv, a, kh, d, q0, k0,
                                       causal);
        return;
    }
    void *ws = NULL;
    if (p->ws_bytes > 0 && !(ws = pt_kcuda_scratch(kn, round256(p->ws_bytes))))
        return;
    float scale = 1.0f / sqrtf((float)d);
    float neg_inf = c->version >= 91000 ? -INFINITY : -FLT_MAX; /* older: the lowest */
    binding bind[] = {{UID_Q, q},         {UID_K, k},         {UID_V, v},
                      {UID_O, out},       {UID_STATS, lse},   {UID_SCALE, &scale},
                      {UID_NEG_INF, &neg_inf}}; /* last: only in the causal graph */
    execute(kn, p, bind, key.causal ? 7 : 6, ws);
}

void pt_kcuda_cudnn_attention_backward(pt_kernels *kn,
                                       float *dq,         /* (b, sq, a, d) [act] */
                                       float *dk,         /* (b, skv, kh, d) [act] */
                                       float *dv,         /* (b, skv, kh, d) [act] */
                                       const float *dout, /* (b, sq, a, d) [act] */
                                       const float *q,    /* (b, sq, a, d) [act] */
                                       const float *k,    /* (b, skv, kh, d) [act] */
                                       const float *v,    /* (b, skv, kh, d) [act] */
                                       const float *out,  /* (b, sq, a, d) [act] final */
                                       const float *lse,  /* (b, a, sq) final */
                                       int b, int sq, int skv, int a, int kh, int d,
                                       int q0, int k0, int causal, int accumulate)
{
    pt_kcuda_cudnn *c = pt_kcuda_ctx(kn)->cudnn;
    const void *bufs[] = {dq, dk, dv, dout, q, k, v, out, lse};
    char why[WHY_BYTES];
    attn_key key;
    const attn_plan *p = NULL;
    const char *no = decline(c, &key, 1, b, sq, skv, a, kh, d, q0, k0, causal, bufs, 9, why);
    if (!no)
        no = plan_of(kn, &key, &p);
    /* scratch: cuDNN's workspace | softmax_sum (b, a, sq) fp32 | with the dQ_accum graph,
     * dQ_accum (b, a, sq, d) fp32 | when accumulating, the written dq, dk, dv (bf16) */
    int64_t nq = (int64_t)b * sq * a * d, nkv = (int64_t)b * skv * kh * d;
    size_t ws_bytes = p && p->ok ? round256(p->ws_bytes) : 0;
    size_t sum_bytes = round256((int64_t)b * a * sq * (int64_t)sizeof(float));
    size_t acc_bytes = p && p->ok && p->accum_dq ? round256(nq * (int64_t)sizeof(float)) : 0;
    size_t parts_bytes = accumulate ? (size_t)(nq + 2 * nkv) * sizeof(bf16) : 0;
    size_t need = ws_bytes + sum_bytes + acc_bytes + parts_bytes;
    if (!no)
        no = workspace_over_cap(kn, p->ws_bytes, why);
    if (!no)
        no = scratch_short(kn, need, why);
    if (no) {
        if (refuse(kn, 1, no))
            pt_kcuda_attention_backward(kn, dq, dk, dv, dout, q, k, v, out, lse, b, sq, skv, a,
                                        kh, d, q0, k0, causal, accumulate);
        return;
    }
    unsigned char *scratch = (unsigned char *)pt_kcuda_scratch(kn, need);
    if (!scratch)
        return;
    float *softmax_sum = (float *)(scratch + ws_bytes);
    float *dq_accum = (float *)(scratch + ws_bytes + sum_bytes);
    bf16 *parts = (bf16 *)(scratch + ws_bytes + sum_bytes + acc_bytes);
    /* before cuDNN 9.6.0 the caller zeroes dQ_accum (cudnn-frontend's
     * collect_tensors_in_workspace_node); from it the engine does */
    if (acc_bytes && c->version < 90600)
        pt_kcuda_zero(kn, dq_accum, (size_t)nq * sizeof(float));
    const void *gq = accumulate ? (const void *)parts : dq;
    const void *gk = accumulate ? (const void *)(parts + nq) : dk;
    const void *gv = accumulate ? (const void *)(parts + nq + nkv) : dv;
    float scale = 1.0f / sqrtf((float)d), one = 1.0f;
    float neg_inf = c->version >= 91000 ? -INFINITY : -FLT_MAX;
    binding bind[MAX_BINDINGS] = {{UID_Q, q},
                                  {UID_K, k},
                                  {UID_V, v},
                                  {UID_O, out},
                                  {UID_DO, dout},
                                  {UID_STATS, lse},
                                  {UID_DQ, gq},
                                  {UID_DK, gk},
                                  {UID_DV, gv},
                                  {UID_SOFTMAX_SUM, softmax_sum},
                                  {UID_SCALE, &scale},
                                  {UID_ONE, &one}};
    int n = 12;
    if (p->accum_dq)
        bind[n++] = binding{UID_DQ_ACCUM, dq_accum};
    if (key.causal)
        bind[n++] = binding{UID_NEG_INF, &neg_inf};
    execute(kn, p, bind, n, p->ws_bytes > 0 ? scratch : NULL);
    if (kn->err[0] || !accumulate)
        return;
    int64_t total = nq + 2 * nkv;
    PT_LAUNCH(pt_kcuda_blocks(total, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0,
              pt_kcuda_ctx(kn)->stream, attn_accumulate_kernel)((bf16 *)dq, (bf16 *)dk,
                                                                (bf16 *)dv, parts, nq, nkv);
    PT_LAUNCHED(kn, "attention_backward accumulate (cuDNN)");
}
