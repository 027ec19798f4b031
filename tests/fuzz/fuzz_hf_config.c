/*
 * Fuzzes the Hugging Face config.json reader (pt_hf_open: runtime/hf.c) on the input
 * written as config.json of a temporary folder, beside a model.safetensors that holds
 * valid tensors of two tiny models, a GPT-2 and a LLaMA (written once with pt_st_write,
 * its bytes copied into each folder). The folder is opened against both models. A
 * config it accepts fits one of them only, and every parameter of that model reads
 * through the source: the embedding's rows past the file's vocabulary zero, every
 * other element one of the file's; a refusal names config.json or the tensor at fault
 * in this folder.
 */
#include "fuzz.h"
#include "hf_internal.h"

enum { GPT2_VOCAB = 190, GPT2_POSITIONS = 10, LLAMA_VOCAB = 90 }; /* the file's */

static pt_model gpt2_spec(void)
{
    pt_model m = {.layers = 2, .hidden = 8, .heads = 2, .kv_heads = 2, .ffn = 32, .vocab = 200,
                  .seq = 6, .norm = PT_NORM_LAYERNORM, .act = PT_ACT_GELU,
                  .pos = PT_POS_LEARNED, .tied_embeddings = true, .bias = true};
    snprintf(m.name, sizeof m.name, "fuzz-gpt2");
    return m;
}

static pt_model llama_spec(void)
{
    pt_model m = {.layers = 2, .hidden = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .vocab = 100,
                  .seq = 8, .norm = PT_NORM_RMSNORM, .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE};
    snprintf(m.name, sizeof m.name, "fuzz-llama");
    return m;
}

/* How model m's tensors are named and shaped in the file. */
static hf_layout layout_of(const pt_model *m)
{
    if (m->pos == PT_POS_LEARNED)
        return (hf_layout){HF_GPT2, "transformer.", GPT2_VOCAB, GPT2_POSITIONS};
    return (hf_layout){HF_LLAMA, "", LLAMA_VOCAB, 0};
}

/* Element i of every tensor in the file: never zero, exact in F16 and BF16. */
static float value_of(int64_t i) { return (float)(1 + i % 7) / 8.0f; }

/* ---- The file, built once --------------------------------------------------------------- */

typedef struct {
    pt_st_tensor t[64];
    int n;
} tensor_set;

/* Adds the file's tensors of model m (c_attn once for q, k and v), in a mix of dtypes. */
static void add_tensors(tensor_set *s, const pt_model *m)
{
    hf_layout l = layout_of(m);
    char(*names)[48];
    int n;
    pt_err err;
    if (hf_param_names(m, &names, &n, &err))
        abort();
    static const char *const dtypes[] = {"F32", "BF16", "F16"};
    for (int i = 0; i < n; i++) {
        hf_map mp;
        if (hf_map_of(m, &l, names[i], &mp, &err))
            abort();
        if (mp.parts != 1) /* neither model has a tensor of several parts */
            abort();
        const hf_part *p = &mp.part[0];
        bool seen = false;
        for (int j = 0; j < s->n; j++)
            seen = seen || !strcmp(s->t[j].name, p->hf);
        if (seen)
            continue;
        if (s->n == (int)(sizeof s->t / sizeof s->t[0]))
            abort();
        pt_st_tensor *t = &s->t[s->n++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", p->hf);
        snprintf(t->dtype, sizeof t->dtype, "%s", dtypes[s->n % 3]);
        t->ndim = p->ndim;
        t->shape[0] = p->shape[0];
        t->shape[1] = p->shape[1];
        int64_t count = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
        bool f32 = s->n % 3 == 0;
        t->bytes = (size_t)count * (f32 ? 4 : 2);
        unsigned char *raw = malloc(t->bytes);
        if (!raw)
            abort();
        for (int64_t e = 0; e < count; e++) {
            float v = value_of(e);
            uint16_t h = !strcmp(t->dtype, "BF16") ? hf_f32_to_bf16(v) : hf_f32_to_f16(v);
            memcpy(raw + e * (f32 ? 4 : 2), f32 ? (const void *)&v : (const void *)&h,
                   f32 ? 4 : 2);
        }
        t->data = raw;
    }
    free(names);
}

static unsigned char *file_bytes;
static size_t file_size;

/* model.safetensors of both models, written with pt_st_write and read back into
 * file_bytes (kept for every input). */
static void make_file(void)
{
    pt_model gpt2 = gpt2_spec(), llama = llama_spec();
    tensor_set s = {.n = 0};
    add_tensors(&s, &gpt2);
    add_tensors(&s, &llama);
    char dir[64] = "/tmp/ptfuzz-XXXXXX", path[96];
    if (!mkdtemp(dir))
        abort();
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    pt_err err;
    if (pt_st_write(path, s.t, s.n, NULL, NULL, 0, &err)) {
        fprintf(stderr, "fuzz_hf_config: %s\n", err.msg);
        abort();
    }
    for (int i = 0; i < s.n; i++)
        free((void *)s.t[i].data);
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0 || (file_size = (size_t)ftell(f)) == 0 ||
        fseek(f, 0, SEEK_SET) != 0 || !(file_bytes = malloc(file_size)) ||
        fread(file_bytes, 1, file_size, f) != file_size)
        abort();
    fclose(f);
    unlink(path);
    rmdir(dir);
}

/* ---- Each input ------------------------------------------------------------------------- */

/* Every parameter of m, read whole through src, then the embedding again in two parts. */
static void read_all(pt_wsrc *src, const pt_model *m)
{
    hf_layout l = layout_of(m);
    char(*names)[48];
    int n;
    pt_err err;
    FUZZ_CHECK(hf_param_names(m, &names, &n, &err) == 0);
    int64_t vocab = pt_vocab_padded(m, 1);
    float *buf = malloc((size_t)(vocab * m->hidden) * sizeof *buf);
    if (!buf)
        abort();
    for (int i = 0; i < n; i++) {
        hf_map mp;
        FUZZ_CHECK(hf_map_of(m, &l, names[i], &mp, &err) == 0);
        bool emb = mp.ours_shape[0] < 0;
        int64_t shape[2] = {emb ? vocab : mp.ours_shape[0], mp.ours_shape[1]};
        int64_t cols = mp.ours_ndim == 2 ? shape[1] : 1, count = shape[0] * cols;
        FUZZ_CHECK(count <= vocab * m->hidden);
        FUZZ_CHECK(src->read(src, names[i], mp.ours_ndim, shape, 0, count, buf, &err) == 0);
        for (int64_t e = 0; e < count; e++) {
            bool zero = emb && e / cols >= l.vocab;
            FUZZ_CHECK(zero ? buf[e] == 0.0f : buf[e] >= 0.125f && buf[e] <= 0.875f);
            FUZZ_CHECK(!emb || zero || buf[e] == value_of(e));
        }
        if (emb) { /* a part from the middle of a row onwards */
            int64_t lo = count / 2 + 3;
            FUZZ_CHECK(src->read(src, names[i], 2, shape, lo, count - lo, buf, &err) == 0);
            for (int64_t e = lo; e < count; e++)
                FUZZ_CHECK(buf[e - lo] == (e / cols >= l.vocab ? 0.0f : value_of(e)));
        }
    }
    free(buf);
    free(names);
}

/* Opens dir for model m: true when it is accepted (and reads), else the message names
 * the folder's config.json or a tensor of its model.safetensors. */
static bool open_as(const char *dir, const pt_model *m)
{
    pt_wsrc *src = (pt_wsrc *)&src;
    pt_err err = {{0}};
    if (pt_hf_open(dir, m, &src, &err) == 0) {
        FUZZ_CHECK(src != NULL);
        read_all(src, m);
        src->close(src);
        return true;
    }
    char config[96], weights[96];
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    FUZZ_CHECK(src == NULL);
    FUZZ_CHECK(strstr(err.msg, config) ||
               (strstr(err.msg, weights) && strstr(err.msg, "tensor '")));
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!file_bytes)
        make_file();
    char dir[64] = "/tmp/ptfuzz-XXXXXX", path[96];
    if (!mkdtemp(dir))
        abort();
    fuzz_put(dir, "config.json", data, size);
    fuzz_put(dir, "model.safetensors", file_bytes, file_size);
    pt_model gpt2 = gpt2_spec(), llama = llama_spec();
    bool as_gpt2 = open_as(dir, &gpt2), as_llama = open_as(dir, &llama);
    FUZZ_CHECK(!(as_gpt2 && as_llama)); /* model_type names one family */
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
