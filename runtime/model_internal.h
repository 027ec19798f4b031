/*
 * Internal to runtime/: the activation slots and gradient scratch of a model, shared
 * by model.c (which allocates parameters) and layer.c (which executes the op lists).
 */
#ifndef PT_RT_MODEL_INTERNAL_H
#define PT_RT_MODEL_INTERNAL_H

#include "runtime.h"

/* What one transformer layer keeps of a micro-batch; T = b·s tokens. With full
 * recomputation every layer's views point at one shared set, rebuilt in backward. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (T, h) [act], (T), (T) */
    float *q, *k, *v;                 /* (b, s, a/t, d), (b, s, k/t, d) x2 [act] */
    float *att, *lse;                 /* (b, s, a/t, d) [act], (b, a/t, s) */
    float *x2;                        /* (T, h) [act] residual stream after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *gate, *up, *act;           /* (T, f/t) [act] each; gate only with SwiGLU */
} pt_layer_acts;

struct pt_acts {
    void *mem;                        /* one backend allocation for all of the below */
    int32_t *tokens, *targets;        /* (T) in backend memory */
    float **x;                        /* [L+1] (T, h) [act] residual stream between layers */
    pt_layer_acts *layer;             /* [L] */
    float *lnf, *lnf_mean, *lnf_rstd; /* final norm */
    float *logits;                    /* (T, v/t) [act]; dlogits after a training forward */
    float *losses;                    /* (T) fp32 */
};

/* Gradient scratch, reused by every layer and micro-batch. */
typedef struct {
    void *mem;
    float *dres;                      /* (T, h) gradient of the residual stream */
    float *dln;                       /* (T, h) gradient of a norm's output */
    float *dq, *dk, *dv, *dqr, *dkr;  /* attention inputs, before and after RoPE */
    float *datt;                      /* (T, h/t) */
    float *dgate, *dup, *dact;        /* (T, f/t) */
} pt_scratch;

int pt_net_alloc_runtime(pt_net *n, const pt_plan *p, int slots, pt_err *err);
void pt_net_free_runtime(pt_net *n);

#endif
