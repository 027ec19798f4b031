/*
 * The rank grid: how world ranks map to (tp, cp, dp, pp) coordinates and which
 * ranks form each process group. The rank order lists dimensions fastest-varying
 * first; the default tp-cp-dp-pp keeps a tensor-parallel group on consecutive ranks,
 * hence inside one node (Megatron-LM's initialize_model_parallel uses the same
 * arrangement). The runtime builds its communicators from these groups, so the
 * planner and the runtime agree on them by construction.
 */
#include "grid.h"

#include <stdlib.h>

static const char *const group_names[PT_GROUP_COUNT] = {"tp", "cp", "dp", "pp", "dp*cp",
                                                        "tp*cp", "cp_a2a", "ep", "etp",
                                                        "edp"};

const char *pt_group_name(pt_group_kind g) { return group_names[g]; }

void pt_grid_init(pt_grid *g, const pt_layout *l)
{
    g->size[PT_DIM_TP] = l->tp;
    g->size[PT_DIM_CP] = l->cp;
    g->size[PT_DIM_DP] = l->dp;
    g->size[PT_DIM_PP] = l->pp;
    int a2a = pt_layout_a2a(l);
    g->cp_a2a = a2a >= 1 && l->cp % a2a == 0 ? a2a : 1;
    int64_t fold = (int64_t)l->tp * l->cp * l->dp, e = (int64_t)l->ep * l->etp;
    bool folds = l->ep >= 1 && l->etp >= 1 && fold % e == 0;
    g->ep = folds ? l->ep : 1;
    g->etp = folds ? l->etp : 1;
    g->edp = (int)(fold / ((int64_t)g->ep * g->etp));
    int64_t stride = 1;
    for (int i = 0; i < PT_NDIM; i++) {
        g->order[i] = l->order[i];
        g->stride[l->order[i]] = (int)stride;
        stride *= g->size[l->order[i]];
    }
    g->world = stride;
}

void pt_grid_coords(const pt_grid *g, int64_t rank, int coords[PT_NDIM])
{
    for (int d = 0; d < PT_NDIM; d++)
        coords[d] = (int)((rank / g->stride[d]) % g->size[d]);
}

int64_t pt_grid_rank(const pt_grid *g, const int coords[PT_NDIM])
{
    int64_t r = 0;
    for (int d = 0; d < PT_NDIM; d++)
        r += (int64_t)coords[d] * g->stride[d];
    return r;
}

/* The dimensions a group spans: one, or two for the combined groups. */
static int group_dims(pt_group_kind kind, pt_dim dims[2])
{
    switch (kind) {
    case PT_GROUP_TP: dims[0] = PT_DIM_TP; return 1;
    case PT_GROUP_CP: dims[0] = PT_DIM_CP; return 1;
    case PT_GROUP_DP: dims[0] = PT_DIM_DP; return 1;
    case PT_GROUP_PP: dims[0] = PT_DIM_PP; return 1;
    case PT_GROUP_CPA2A: dims[0] = PT_DIM_CP; return 1; /* cut to cp_a2a: group_members */
    /* dp varies faster than cp inside the combined group, so that with cp = 1 it is
     * exactly the dp group. */
    case PT_GROUP_DPCP: dims[0] = PT_DIM_DP; dims[1] = PT_DIM_CP; return 2;
    default: dims[0] = PT_DIM_TP; dims[1] = PT_DIM_CP; return 2;
    }
}

int pt_grid_group_size(const pt_grid *g, pt_group_kind kind)
{
    pt_dim dims[2];
    int n = group_dims(kind, dims);
    if (kind == PT_GROUP_CPA2A)
        return g->cp_a2a;
    if (kind == PT_GROUP_EP)
        return g->ep;
    if (kind == PT_GROUP_ETP)
        return g->etp;
    if (kind == PT_GROUP_EDP)
        return g->edp;
    return n == 1 ? g->size[dims[0]] : g->size[dims[0]] * g->size[dims[1]];
}

static int cmp_rank(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A rank's place among its pipeline stage's tp·cp·dp ranks: its tp, cp and dp
 * coordinates as one number, nested as the rank order nests them (the fastest first),
 * so that consecutive places are the closest ranks. */
static int64_t stage_place(const pt_grid *g, const int coords[PT_NDIM])
{
    int64_t place = 0, step = 1;
    for (int i = 0; i < PT_NDIM; i++) {
        pt_dim d = g->order[i];
        if (d == PT_DIM_PP)
            continue;
        place += coords[d] * step;
        step *= g->size[d];
    }
    return place;
}

static void stage_coords(const pt_grid *g, int64_t place, int coords[PT_NDIM])
{
    for (int i = 0; i < PT_NDIM; i++) {
        pt_dim d = g->order[i];
        if (d == PT_DIM_PP)
            continue;
        coords[d] = (int)(place % g->size[d]);
        place /= g->size[d];
    }
}

/* The experts' groups: the place is etp + etp·(ep + ep·edp); a group varies one. */
static int expert_members(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t *ranks)
{
    int coords[PT_NDIM];
    pt_grid_coords(g, rank, coords);
    int64_t place = stage_place(g, coords);
    int64_t e_t = place % g->etp, e_p = place / g->etp % g->ep,
            e_d = place / ((int64_t)g->etp * g->ep);
    int size = pt_grid_group_size(g, kind);
    for (int i = 0; i < size; i++) {
        int64_t t = kind == PT_GROUP_ETP ? i : e_t, p = kind == PT_GROUP_EP ? i : e_p,
                d = kind == PT_GROUP_EDP ? i : e_d;
        stage_coords(g, t + g->etp * (p + (int64_t)g->ep * d), coords);
        ranks[i] = pt_grid_rank(g, coords);
    }
    return size;
}

/* The members of rank's group of `kind` into ranks[], in grid order; their count. */
static int group_members(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t *ranks)
{
    if (kind == PT_GROUP_EP || kind == PT_GROUP_ETP || kind == PT_GROUP_EDP)
        return expert_members(g, kind, rank, ranks);
    pt_dim dims[2];
    int n = group_dims(kind, dims);
    int coords[PT_NDIM];
    pt_grid_coords(g, rank, coords);
    int inner = g->size[dims[0]], outer = n == 2 ? g->size[dims[1]] : 1, first = 0;
    if (kind == PT_GROUP_CPA2A) { /* the cp_a2a-sized run of cp coordinates holding rank */
        inner = g->cp_a2a;
        first = coords[PT_DIM_CP] / inner * inner;
    }
    int count = 0;
    for (int o = 0; o < outer; o++) {
        if (n == 2)
            coords[dims[1]] = o;
        for (int i = 0; i < inner; i++) {
            coords[dims[0]] = first + i;
            ranks[count++] = pt_grid_rank(g, coords);
        }
    }
    return count;
}

int pt_grid_group(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t *ranks)
{
    int count = group_members(g, kind, rank, ranks);
    qsort(ranks, (size_t)count, sizeof *ranks, cmp_rank);
    for (int i = 0; i < count; i++)
        if (ranks[i] == rank)
            return i;
    return -1; /* unreachable: rank is always a member of its own group */
}

int pt_grid_group_below(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t limit,
                        int64_t *ranks)
{
    int count = group_members(g, kind, rank, ranks), n = 0;
    for (int i = 0; i < count; i++)
        n += ranks[i] < limit;
    return n;
}

int64_t pt_grid_cp_ring_peer(const pt_grid *g, int64_t rank, int dir)
{
    int coords[PT_NDIM];
    pt_grid_coords(g, rank, coords);
    int u = g->cp_a2a, groups = g->size[PT_DIM_CP] / u, cr = coords[PT_DIM_CP];
    coords[PT_DIM_CP] = ((cr / u + dir) % groups + groups) % groups * u + cr % u;
    return pt_grid_rank(g, coords);
}

bool pt_grid_group_crosses_nodes(const pt_grid *g, pt_group_kind kind, int devices_per_node)
{
    int size = pt_grid_group_size(g, kind);
    if (size == 1)
        return false;
    int64_t *ranks = malloc((size_t)size * sizeof *ranks);
    if (!ranks)
        return true; /* out of memory: answer the cautious way */
    bool crosses = false;
    /* Every group is visited from its smallest member; checking the groups of all
     * ranks is O(world·size), which stays small for one layout. */
    for (int64_t r = 0; r < g->world && !crosses; r++) {
        pt_grid_group(g, kind, r, ranks);
        if (ranks[0] != r)
            continue;
        crosses = ranks[0] / devices_per_node != ranks[size - 1] / devices_per_node;
    }
    free(ranks);
    return crosses;
}
