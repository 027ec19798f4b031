/*
 * Tests of safetensors files and checkpoint directories (runtime/safetensors.c,
 * runtime/checkpoint.c): round trips of every kind of tensor and metadata, the
 * written bytes against the format's rules, each kind of damaged file refused with
 * the file and tensor named, and a checkpoint replacing the previous one only when
 * the new one is complete. argv[1] is a scratch folder.
 */
#include "check.h"
#include "runtime.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether AddressSanitizer is on (GCC says so with a macro, clang with a feature). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

static char scratch[3072];

static const char *in_scratch(char *buf, const char *name)
{
    snprintf(buf, 4096, "%s/%s", scratch, name);
    return buf;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

/* A hand-made safetensors file: header length `len_field` (the header's own length
 * when < 0), the header text, then `data_bytes` zero bytes. */
static void write_raw(const char *path, const char *header, int64_t len_field, size_t data_bytes)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp)
        return;
    uint64_t n = len_field < 0 ? strlen(header) : (uint64_t)len_field;
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i) & 0xff), fp);
    fputs(header, fp);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0, fp);
    fclose(fp);
}

/* ---- Round trip -------------------------------------------------------------------- */

typedef struct {
    float f32[6];
    uint16_t bf16[4];
    int64_t i64;
    uint8_t u8[5];
    double f64[2];
    int8_t boolean[3];
} sample_data;

static int sample_tensors(const sample_data *d, pt_st_tensor *t)
{
    memset(t, 0, 7 * sizeof *t);
    t[0] = (pt_st_tensor){"wte", "F32", 2, {2, 3}, d->f32, sizeof d->f32};
    t[1] = (pt_st_tensor){"ln.bias", "BF16", 1, {4}, d->bf16, sizeof d->bf16};
    t[2] = (pt_st_tensor){"step", "I64", 0, {0}, &d->i64, sizeof d->i64};
    t[3] = (pt_st_tensor){"bytes", "U8", 1, {5}, d->u8, sizeof d->u8};
    t[4] = (pt_st_tensor){"empty", "I32", 2, {0, 3}, NULL, 0};
    t[5] = (pt_st_tensor){"rng", "F64", 2, {1, 2}, d->f64, sizeof d->f64};
    t[6] = (pt_st_tensor){"mask", "BOOL", 1, {3}, d->boolean, sizeof d->boolean};
    return 7;
}

static const char *const meta_keys[] = {"format", "layout"};
static const char *const meta_values[] = {"pt", "tp2-pp1-dp1"};

static void test_round_trip(void)
{
    char path[4096];
    pt_err err = {{0}};
    sample_data d = {{1, -2, 3.5f, 4, 5, 6}, {0x3f80, 0x4000, 0xbf80, 0}, -1234567890123,
                     {1, 2, 3, 4, 255}, {0.1, -2e300}, {1, 0, 1}};
    pt_st_tensor t[7];
    int n = sample_tensors(&d, t);
    in_scratch(path, "round.safetensors");
    CHECK_INT(pt_st_write(path, t, n, meta_keys, meta_values, 2, &err), 0);

    pt_st_file *f = NULL;
    CHECK_INT(pt_st_open(path, &f, &err), 0);
    if (!f) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK_INT(pt_st_count(f), n);
    for (int i = 0; i < n && i < pt_st_count(f); i++) {
        const pt_st_tensor *r = pt_st_at(f, i);
        CHECK(strcmp(r->name, t[i].name) == 0);
        CHECK(strcmp(r->dtype, t[i].dtype) == 0);
        CHECK_INT(r->ndim, t[i].ndim);
        for (int k = 0; k < r->ndim; k++)
            CHECK_INT(r->shape[k], t[i].shape[k]);
        CHECK_INT(r->bytes, t[i].bytes);
        CHECK(r->bytes == 0 || memcmp(r->data, t[i].data, r->bytes) == 0);
    }
    CHECK(pt_st_at(f, n) == NULL);
    CHECK(pt_st_at(f, -1) == NULL);
    CHECK(strcmp(pt_st_meta(f, "layout"), "tp2-pp1-dp1") == 0);
    CHECK(strcmp(pt_st_meta(f, "format"), "pt") == 0);
    CHECK(pt_st_meta(f, "nothing") == NULL);
    /* The F32 tensor comes first, so its data are aligned in memory. */
    CHECK((uintptr_t)pt_st_at(f, 0)->data % 8 == 0);
    pt_st_close(f);

    /* No metadata and no tensors is a valid (empty) file too. */
    in_scratch(path, "empty.safetensors");
    CHECK_INT(pt_st_write(path, NULL, 0, NULL, NULL, 0, &err), 0);
    CHECK_INT(pt_st_open(path, &f, &err), 0);
    if (f) {
        CHECK_INT(pt_st_count(f), 0);
        CHECK(pt_st_meta(f, "format") == NULL);
        pt_st_close(f);
    }
}

/* ---- The bytes on disk against the format ------------------------------------------ */

static unsigned char *slurp(const char *path, long *size)
{
    *size = file_size(path);
    FILE *fp = fopen(path, "rb");
    if (!fp || *size < 0) {
        if (fp)
            fclose(fp);
        return NULL;
    }
    unsigned char *buf = malloc((size_t)*size + 1);
    if (buf && fread(buf, 1, (size_t)*size, fp) != (size_t)*size) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    return buf;
}

/* Header length field, 8-byte padding with spaces, offsets contiguous in the order
 * written and covering the data exactly. */
static void check_layout(const unsigned char *buf, long size, const pt_st_tensor *t, int n)
{
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | buf[i];
    CHECK(len + 8 <= (uint64_t)size);
    CHECK_INT(len % 8, 0);
    CHECK(buf[8] == '{');
    json_error_t je;
    json_t *h = json_loadb((const char *)buf + 8, len, 0, &je);
    CHECK(json_is_object(h));
    CHECK(json_is_object(json_object_get(h, "__metadata__")));
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object_get(h, t[i].name), *off = json_object_get(e, "data_offsets");
        CHECK_INT(json_integer_value(json_array_get(off, 0)), at);
        at += (int64_t)t[i].bytes;
        CHECK_INT(json_integer_value(json_array_get(off, 1)), at);
        CHECK(strcmp(json_string_value(json_object_get(e, "dtype")), t[i].dtype) == 0);
        CHECK_INT(json_array_size(json_object_get(e, "shape")), t[i].ndim);
    }
    CHECK_INT((int64_t)len + 8 + at, size);
    json_decref(h);
    /* The padding after the JSON text is spaces. */
    long end = 8 + (long)len;
    while (end > 8 && buf[end - 1] == ' ')
        end--;
    CHECK(buf[end - 1] == '}');
    CHECK(8 + (long)len - end < 8);
}

/* An independent reader, when python3 is there: the format parsed with the standard
 * library, and with Hugging Face's package if it is installed (it is not required). */
static const char *const py_check =
    "import json, struct, sys\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "h = json.loads(b[8:8 + n])\n"
    "h.pop('__metadata__', None)\n"
    "spans = sorted(tuple(v['data_offsets']) for v in h.values())\n"
    "at = 0\n"
    "for s, e in spans:\n"
    "    assert s == at, (s, at)\n"
    "    at = e\n"
    "assert 8 + n + at == len(b)\n"
    "try:\n"
    "    import numpy\n"
    "    from safetensors import safe_open\n"
    "except ImportError:\n"
    "    sys.exit(0)\n"
    "with safe_open(sys.argv[1], framework='numpy') as f:\n"
    "    assert f.get_tensor('wte').shape == (2, 3)\n";

static void check_with_python(const char *path)
{
    char script[4096], cmd[9000];
    if (system("python3 -c 'pass' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_checkpoint: python3 not found, independent check skipped\n");
        return;
    }
    write_text(in_scratch(script, "check_st.py"), py_check);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, path);
    CHECK_INT(system(cmd), 0);
    remove(script);
}

static void test_format(void)
{
    char path[4096];
    pt_err err = {{0}};
    sample_data d = {{0}, {0}, 0, {0}, {0}, {0}};
    pt_st_tensor t[7];
    int n = sample_tensors(&d, t);
    in_scratch(path, "format.safetensors");
    CHECK_INT(pt_st_write(path, t, n, meta_keys, meta_values, 2, &err), 0);
    long size;
    unsigned char *buf = slurp(path, &size);
    CHECK(buf != NULL && size >= 8);
    if (buf && size >= 8)
        check_layout(buf, size, t, n);
    free(buf);

    /* Only F32 and U8 tensors for the Python reader (numpy has no bfloat16). */
    in_scratch(path, "numpy.safetensors");
    pt_st_tensor np[2] = {t[0], t[3]};
    CHECK_INT(pt_st_write(path, np, 2, meta_keys, meta_values, 2, &err), 0);
    check_with_python(path);
}

/* ---- Refused writes ---------------------------------------------------------------- */

static void test_write_errors(void)
{
    char path[4096], tmp[4200];
    pt_err err = {{0}};
    float x[6] = {0};
    pt_st_tensor t[2] = {{"a", "F32", 2, {2, 3}, x, sizeof x}, {"a", "F32", 1, {6}, x, sizeof x}};
    in_scratch(path, "bad_write.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());

    CHECK_INT(pt_st_write(path, t, 2, NULL, NULL, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "bad_write.safetensors: tensor 'a': appears twice");
    t[1] = (pt_st_tensor){"b", "F32", 2, {2, 2}, x, sizeof x};
    CHECK_INT(pt_st_write(path, t, 2, NULL, NULL, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'b': 24 bytes do not match shape (2, 2) of F32 (16 bytes)");
    t[1] = (pt_st_tensor){"b", "F31", 1, {6}, x, sizeof x};
    CHECK_INT(pt_st_write(path, t, 2, NULL, NULL, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'b': unknown dtype 'F31'");
    t[1] = (pt_st_tensor){"b", "F32", 1, {-6}, x, sizeof x};
    CHECK_INT(pt_st_write(path, t, 2, NULL, NULL, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'b': invalid shape (-6)");
    const char *keys[2] = {"k", "k"}, *values[2] = {"1", "2"};
    CHECK_INT(pt_st_write(path, t, 1, keys, values, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "metadata key 'k' appears twice");
    CHECK(!exists(path) && !exists(tmp));

    in_scratch(path, "no/such/dir/x.safetensors");
    CHECK_INT(pt_st_write(path, t, 1, NULL, NULL, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot write");
    CHECK_STR_HAS(err.msg, "No such file or directory");
}

/* ---- Damaged files ----------------------------------------------------------------- */

/* Opens a file that must be refused with a message containing `want`. */
static void check_refused(const char *path, const char *want)
{
    pt_err err = {{0}};
    pt_st_file *f = (pt_st_file *)&err;
    CHECK_INT(pt_st_open(path, &f, &err), -1);
    CHECK(f == NULL);
    CHECK_STR_HAS(err.msg, want);
}

/* A hand-made header with `data` zero bytes after it, expected to be refused. */
static void check_raw(const char *header, size_t data, const char *want)
{
    char path[4096];
    in_scratch(path, "model.safetensors");
    write_raw(path, header, -1, data);
    check_refused(path, want);
}

static void test_truncated(void)
{
    char path[4096], cut[4096];
    pt_err err = {{0}};
    float x[4] = {1, 2, 3, 4};
    pt_st_tensor t[2] = {{"a", "F32", 1, {2}, x, 8}, {"b", "F32", 1, {2}, x + 2, 8}};
    in_scratch(path, "whole.safetensors");
    CHECK_INT(pt_st_write(path, t, 2, NULL, NULL, 0, &err), 0);
    long size;
    unsigned char *buf = slurp(path, &size);
    CHECK(buf != NULL);
    if (!buf)
        return;
    FILE *fp = fopen(in_scratch(cut, "cut.safetensors"), "wb");
    fwrite(buf, 1, (size_t)size - 3, fp);
    fclose(fp);
    check_refused(cut, "cut.safetensors: tensor 'b': data_offsets [8, 16] run past the end of "
                       "the data (13 bytes): truncated file?");
    fp = fopen(cut, "wb");
    fwrite(buf, 1, 20, fp);
    fclose(fp);
    check_refused(cut, "cut.safetensors: header length");
    check_refused(cut, "is larger than the rest of the file (12 bytes)");
    fp = fopen(cut, "wb");
    fwrite(buf, 1, 5, fp);
    fclose(fp);
    check_refused(cut, "cut.safetensors: truncated file: 5 bytes");
    free(buf);
    check_refused(in_scratch(cut, "missing.safetensors"),
                  "cannot read '" );
    check_refused(cut, "missing.safetensors': No such file or directory");
    check_refused(scratch, "Is a directory"); /* pt_in_open's word for a folder */
}

static void test_damaged(void)
{
    char path[4096];
    in_scratch(path, "model.safetensors");
    write_raw(path, "{}      ", 1000, 16);
    check_refused(path, "model.safetensors: header length 1000 is larger than the rest of the "
                        "file (24 bytes)");
    check_raw("{\"a\": nope}", 0, "model.safetensors: the header is not valid JSON");
    check_raw("[1, 2]", 0, "model.safetensors: the header is not a JSON object");
    check_raw("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
              "model.safetensors: tensor 'a': unknown dtype 'F33'");
    check_raw("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
              "tensor 'a': 'dtype' missing or not a string");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
              "tensor 'a': 'shape' missing or not an array of integers");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
              "tensor 'a': 5 dimensions (at most 4 supported)");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
              "tensor 'a': 'data_offsets' missing or not two integers");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
              "tensor 'a': data_offsets [8, 0] do not match shape (2) of F32 (8 bytes)");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8,
              "tensor 'a': data_offsets [-8, 0] are negative");
    check_raw("{\"a\":3}", 0, "tensor 'a': expected an object");
    check_raw("{\"wte\":{\"dtype\":\"F32\",\"shape\":[5,6],\"data_offsets\":[0,100]}}", 100,
              "model.safetensors: tensor 'wte': data_offsets [0, 100] do not match shape "
              "(5, 6) of F32 (120 bytes)");
    check_raw("{\"wte\":{\"dtype\":\"F32\",\"shape\":[-5,6],\"data_offsets\":[0,120]}}", 120,
              "model.safetensors: tensor 'wte': shape (-5, 6) has a negative dimension");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
              "model.safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20,
              "model.safetensors: tensor 'b': data_offsets [12, 20] leave a hole: bytes "
              "[8, 12) belong to no tensor");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
              "model.safetensors: bytes [8, 12) at the end of the data belong to no tensor");
    check_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
              "tensor 'a': data_offsets [4, 12] leave a hole: bytes [0, 4)");
    check_raw("{\"__metadata__\":{\"k\":1}}", 0, "model.safetensors: metadata 'k' is not a "
              "string");
    check_raw("{\"__metadata__\":[]}", 0, "'__metadata__' is not an object");
    check_raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
              "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
              "the header is not valid JSON: duplicate object key");
}

/* ---- Large files: the header is checked before any data are read ---------------------- */

/* A sparse file of 8 GiB (no disk blocks behind its data) with `header` at its start. */
static int write_sparse(const char *path, const char *header)
{
    write_raw(path, header, -1, 0);
    return truncate(path, (off_t)8 << 30);
}

/* pt_st_open(path) in a child process whose heap is capped at 256 MiB (RLIMIT_DATA
 * counts malloc's mmaps since Linux 4.7): a reader that allocated or read the 8 GiB
 * before refusing the header fails there with "out of memory" instead of the refusal.
 * The child's message comes back through a pipe into msg. Under AddressSanitizer,
 * whose shadow memory the cap would break, the cap is left off. */
static void open_capped(const char *path, char *msg, size_t cap)
{
    int fd[2];
    msg[0] = '\0';
    CHECK_INT(pipe(fd), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
#if !TEST_ASAN
        struct rlimit rl = {256 << 20, 256 << 20};
        setrlimit(RLIMIT_DATA, &rl);
#endif
        pt_err err = {{0}};
        pt_st_file *f = NULL;
        if (pt_st_open(path, &f, &err) == 0)
            snprintf(err.msg, sizeof err.msg, "opened");
        pt_st_close(f);
        ssize_t w = write(fd[1], err.msg, strlen(err.msg));
        _exit(w < 0);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], msg, cap - 1);
    msg[got > 0 ? got : 0] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
}

static void test_large(void)
{
    char path[4096], msg[512];
    in_scratch(path, "sparse.safetensors");
    /* Valid JSON, a bad field: refused naming the file, tensor and field, not after
     * reading 8 GiB. */
    if (write_sparse(path, "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}")
        == 0) {
        open_capped(path, msg, sizeof msg);
        CHECK_STR_HAS(msg, "sparse.safetensors: tensor 'a': unknown dtype 'F33'");
    }
    /* Sizes that disagree with the file's (8 GiB of data, 4 GiB declared). */
    if (write_sparse(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296],"
                           "\"data_offsets\":[0,4294967296]}}") == 0) {
        open_capped(path, msg, sizeof msg);
        CHECK_STR_HAS(msg, "sparse.safetensors: bytes [4294967296, 8589934");
        CHECK_STR_HAS(msg, "at the end of the data belong to no tensor");
    }
    /* A corrupt header. */
    if (write_sparse(path, "{\"a\": nope}") == 0) {
        open_capped(path, msg, sizeof msg);
        CHECK_STR_HAS(msg, "sparse.safetensors: the header is not valid JSON");
    }
    unlink(path);
    /* Offsets beyond the end of a small file: the declared 8 GiB are never allocated. */
    in_scratch(path, "short.safetensors");
    write_raw(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8589934592],"
                    "\"data_offsets\":[0,8589934592]}}", -1, 16);
    open_capped(path, msg, sizeof msg);
    CHECK_STR_HAS(msg, "short.safetensors: tensor 'a': data_offsets [0, 8589934592] run past "
                       "the end of the data (16 bytes)");
    unlink(path);
}

/* ---- Looking tensors up ------------------------------------------------------------ */

static void test_get(void)
{
    char path[4096];
    pt_err err = {{0}};
    float x[6] = {0};
    pt_st_tensor t = {"w", "F32", 2, {2, 3}, x, sizeof x};
    in_scratch(path, "get.safetensors");
    CHECK_INT(pt_st_write(path, &t, 1, NULL, NULL, 0, &err), 0);
    pt_st_file *f = NULL;
    CHECK_INT(pt_st_open(path, &f, &err), 0);
    if (!f)
        return;
    const pt_st_tensor *r = NULL;
    const int64_t good[2] = {2, 3}, bad[3] = {3, 2, 1};
    CHECK_INT(pt_st_get(f, "w", "F32", 2, good, &r, &err), 0);
    CHECK(r == pt_st_at(f, 0));
    CHECK_INT(pt_st_get(f, "w", NULL, -1, NULL, &r, &err), 0);
    CHECK_INT(pt_st_get(f, "w", NULL, 2, NULL, &r, &err), 0);
    CHECK_INT(pt_st_get(f, "w", NULL, -1, bad, &r, &err), 0);
    CHECK_INT(pt_st_get(f, "v", "F32", 2, good, &r, &err), -1);
    CHECK_STR_HAS(err.msg, "get.safetensors: no tensor 'v'");
    CHECK_INT(pt_st_get(f, "w", "BF16", 2, good, &r, &err), -1);
    CHECK_STR_HAS(err.msg, "get.safetensors: tensor 'w': dtype F32 in the file, BF16 expected");
    CHECK_INT(pt_st_get(f, "w", "F32", 2, bad, &r, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'w': shape (2, 3) in the file, (3, 2) expected");
    CHECK_INT(pt_st_get(f, "w", "F32", 3, bad, &r, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'w': shape (2, 3) in the file, (3, 2, 1) expected");
    CHECK_INT(pt_st_get(f, "w", "F32", 3, NULL, &r, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'w': 2 dimensions in the file, 3 expected");
    pt_st_close(f);
    pt_st_close(NULL);
}

/* ---- Files written in pieces ------------------------------------------------------- */

/* pt_st_create lays out a file of zeros that pwrite fills at the offsets a header-only
 * open reads back; pt_st_read reads ranges from the file or from memory alike. */
static void test_pieces(void)
{
    char path[4096];
    pt_err err = {{0}};
    in_scratch(path, "pieces.safetensors");
    pt_st_tensor t[2] = {{"a", "F32", 2, {2, 3}, NULL, 24}, {"b.exp_avg", "F32", 1, {4}, NULL, 16}};
    const char *keys[] = {"format"}, *vals[] = {"pt"};
    CHECK_INT(pt_st_create(path, t, 2, keys, vals, 1, &err), 0);
    pt_st_file *f = NULL;
    CHECK_INT(pt_st_open_header(path, &f, &err), 0);
    if (!f)
        return;
    const pt_st_tensor *a = NULL, *b = NULL;
    CHECK_INT(pt_st_get(f, "a", "F32", 2, NULL, &a, &err), 0);
    CHECK_INT(pt_st_get(f, "b.exp_avg", "F32", 1, NULL, &b, &err), 0);
    CHECK(a && b && a->data == NULL);
    CHECK(strcmp(pt_st_meta(f, "format"), "pt") == 0);
    int64_t at = pt_st_file_offset(f, b);
    CHECK(at > 0 && at % 8 == 0 && pt_st_file_offset(f, a) + 24 == at);
    FILE *w = fopen(path, "r+b");
    float piece[2] = {1.5f, -2.0f}, got[4] = {9, 9, 9, 9};
    CHECK(w && fseek(w, (long)(at + 8), SEEK_SET) == 0 && fwrite(piece, 4, 2, w) == 2);
    if (w)
        fclose(w);
    CHECK_INT(pt_st_read(f, b, 0, 16, got, &err), 0);
    CHECK(got[0] == 0 && got[1] == 0 && got[2] == 1.5f && got[3] == -2.0f);
    CHECK_INT(pt_st_read(f, b, 8, 12, got, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'b.exp_avg': bytes [8, +12) are outside its 16");
    pt_st_close(f);
    /* the same file read whole: the same values through pt_st_read */
    CHECK_INT(pt_st_open(path, &f, &err), 0);
    if (f && pt_st_get(f, "b.exp_avg", NULL, -1, NULL, &b, &err) == 0) {
        CHECK_INT(pt_st_read(f, b, 8, 8, got, &err), 0);
        CHECK(got[0] == 1.5f && got[1] == -2.0f);
    }
    pt_st_close(f);
    /* a damaged list is refused before anything is written */
    pt_st_tensor bad = {"c", "F32", 1, {3}, NULL, 16};
    char other[4096];
    in_scratch(other, "pieces_bad.safetensors");
    CHECK_INT(pt_st_create(other, &bad, 1, NULL, NULL, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "tensor 'c': 16 bytes do not match shape (3)");
    CHECK(!exists(other));
}

/* ---- meta.json --------------------------------------------------------------------- */

static pt_ckpt_meta sample_meta(int64_t step)
{
    pt_ckpt_meta m = {0};
    pt_err err;
    snprintf(m.layout, sizeof m.layout, "tp2-pp2-dp1-1f1b");
    m.step = step;
    m.data_pos = step * 32;
    snprintf(m.config_hash, sizeof m.config_hash, "0123456789abcdef");
    snprintf(m.plan_hash, sizeof m.plan_hash, "fedcba9876543210");
    m.world = 4;
    CHECK_INT(pt_model_get("gpt2-124m", &m.model, &err), 0);
    pt_run_opts_default(&m.run, &m.model);
    m.run.seed = 18446744073709551615ull; /* the largest: travels as a string */
    snprintf(m.run.data, sizeof m.run.data, "tokens.bin");
    m.global_batch = 32;
    snprintf(m.precision, sizeof m.precision, "bf16");
    m.train_tokens = 123456;
    return m;
}

static void test_meta(void)
{
    char dir[4096], path[4200];
    pt_err err = {{0}};
    in_scratch(dir, "meta_dir");
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    remove(path);
    pt_ckpt_meta m = sample_meta(7), r;
    CHECK_INT(pt_ckpt_meta_read(dir, &r, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot read '");
    CHECK_STR_HAS(err.msg, "meta_dir/meta.json'");
    CHECK_INT(pt_ckpt_meta_write(dir, &m, &err), 0);
    memset(&r, 0xff, sizeof r);
    CHECK_INT(pt_ckpt_meta_read(dir, &r, &err), 0);
    CHECK_INT(r.format_version, 2);
    CHECK(strcmp(r.layout, m.layout) == 0);
    CHECK_INT(r.step, 7);
    CHECK_INT(r.data_pos, 224);
    CHECK(strcmp(r.config_hash, m.config_hash) == 0);
    CHECK(strcmp(r.plan_hash, m.plan_hash) == 0);
    CHECK_INT(r.world, 4);
    CHECK(strcmp(r.model.name, "gpt2-124m") == 0 && r.model.hidden == m.model.hidden &&
          r.model.layers == m.model.layers && r.model.vocab == m.model.vocab);
    CHECK(r.run.seed == m.run.seed && r.run.lr == m.run.lr && r.run.steps == m.run.steps);
    CHECK(strcmp(r.run.data, "tokens.bin") == 0 && strcmp(r.precision, "bf16") == 0);
    CHECK_INT(r.global_batch, 32);
    CHECK_INT(r.train_tokens, 123456);
    CHECK(r.created_at[0] != '\0');

    pt_ckpt_meta bad = m;
    bad.world = 0;
    CHECK_INT(pt_ckpt_meta_write(dir, &bad, &err), -1);
    CHECK_STR_HAS(err.msg, "field 'world' = 0: expected 1 to 1073741824");
    bad = m;
    snprintf(bad.config_hash, sizeof bad.config_hash, "xyz");
    CHECK_INT(pt_ckpt_meta_write(dir, &bad, &err), -1);
    CHECK_STR_HAS(err.msg, "field 'config_hash'");
    in_scratch(path, "no/such/dir");
    CHECK_INT(pt_ckpt_meta_write(path, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot write '");
}

/* meta.json with `text` must be refused with a message containing `want`. */
static void check_bad_meta(const char *dir, const char *text, const char *want)
{
    char path[4200];
    pt_err err = {{0}};
    pt_ckpt_meta m;
    snprintf(path, sizeof path, "%s/meta.json", dir);
    write_text(path, text);
    CHECK_INT(pt_ckpt_meta_read(dir, &m, &err), -1);
    CHECK_STR_HAS(err.msg, want);
}

/* A valid meta.json's text with `from` replaced by `to`. */
static void check_bad_edit(const char *dir, const char *good, const char *from, const char *to,
                           const char *want)
{
    const char *at = strstr(good, from);
    CHECK(at != NULL);
    if (!at)
        return;
    char text[16384];
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, to, at + strlen(from));
    check_bad_meta(dir, text, want);
}

static void test_bad_meta(void)
{
    char dir[4096], path[4200];
    pt_err err = {{0}};
    in_scratch(dir, "meta_dir");
    mkdir(dir, 0777);
    pt_ckpt_meta m = sample_meta(3);
    CHECK_INT(pt_ckpt_meta_write(dir, &m, &err), 0);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    char good[16384] = "";
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(good, 1, sizeof good - 1, fp) : 0;
    good[n] = '\0';
    if (fp)
        fclose(fp);
    check_bad_meta(dir, "{\"format_version\": 1,", "meta.json:1:");
    check_bad_meta(dir, "[]", "meta.json");
    check_bad_edit(dir, good, "\"format_version\": 2", "\"format_version\": 1",
                   "format_version 1 is not the one this build reads (2): a checkpoint of an "
                   "older ptrun");
    check_bad_edit(dir, good, "\"format_version\": 2", "\"format_version\": 3",
                   "format_version 3 is not the one this build reads (2)");
    check_bad_edit(dir, good, "\"format_version\": 2,", "", "missing field 'format_version'");
    check_bad_edit(dir, good, "\"step\": 3", "\"step\": \"3\"", "'step'");
    check_bad_edit(dir, good, "\"step\": 3", "\"step\": -3", "field 'step' = -3: expected at "
                   "least 0");
    check_bad_edit(dir, good, "\"data_pos\": 96", "\"data_pos\": 1.5", "'data_pos'");
    check_bad_edit(dir, good, "\"world\": 4", "\"world\": 0", "field 'world' = 0");
    check_bad_edit(dir, good, "\"0123456789abcdef\"", "\"xyz\"",
                   "field 'config_hash' = \"xyz\": expected 1 to 16 hexadecimal digits");
    check_bad_edit(dir, good, "\"layout\"", "\"wrold\"", "'wrold'");
    check_bad_edit(dir, good, "\"hidden\": 768", "\"hidden\": \"768\"", "hidden");
    check_bad_edit(dir, good, "\"seed\": \"18446744073709551615\"", "\"seed\": \"-1\"",
                   "field 'training.seed' = \"-1\": expected a decimal unsigned 64-bit integer");
    check_bad_edit(dir, good, "\"seed\": \"18446744073709551615\"", "\"seed\": \"18446744073709551616\"",
                   "training.seed");
    check_bad_edit(dir, good, "\"global_batch\": 32", "\"global_batch\": 0", "global_batch");
    check_bad_edit(dir, good, "\"training\"", "\"trainign\"", "'trainign'");
}

/* Every number against what it can mean: data_pos counts the samples the steps read
 * (one at least, 2^32 at most a step), step is within the run's steps, the counters
 * within a plan's limits. Refused on reading with the file, field and value named, and
 * on writing. */
static void test_meta_ranges(void)
{
    char dir[4096], path[4200];
    pt_err err = {{0}};
    in_scratch(dir, "meta_ranges");
    mkdir(dir, 0777);
    pt_ckpt_meta m = sample_meta(3), r;
    CHECK_INT(pt_ckpt_meta_write(dir, &m, &err), 0);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    char good[16384] = "";
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(good, 1, sizeof good - 1, fp) : 0;
    good[n] = '\0';
    if (fp)
        fclose(fp);
    /* the corrupt data position that once hung ptrun (2^63 - 11) */
    check_bad_edit(dir, good, "\"data_pos\": 96", "\"data_pos\": 9223372036854775797",
                   "meta_ranges/meta.json: data_pos 9223372036854775797 is beyond what step 3 "
                   "can have read (at most 12884901888: 4294967296 samples a step");
    check_bad_edit(dir, good, "\"data_pos\": 96", "\"data_pos\": 12884901889",
                   "data_pos 12884901889 is beyond what step 3");
    check_bad_edit(dir, good, "\"data_pos\": 96", "\"data_pos\": 2",
                   "meta_ranges/meta.json: data_pos 2 is below step 3: each step reads one "
                   "sample at least");
    check_bad_edit(dir, good, "\"step\": 3", "\"step\": 51",
                   "field 'step' = 51: expected 0 to the run's training.steps, 50");
    check_bad_edit(dir, good, "\"steps\": 50", "\"steps\": 1099511627777",
                   "field 'training.steps' = 1099511627777: expected 1 to 1099511627776");
    check_bad_edit(dir, good, "\"warmup_steps\": 10", "\"warmup_steps\": 1099511627777",
                   "field 'training.warmup_steps' = 1099511627777");
    check_bad_edit(dir, good, "\"global_batch\": 32", "\"global_batch\": 1073741825",
                   "field 'training.global_batch' = 1073741825: expected 1 to 1073741824");
    check_bad_edit(dir, good, "\"world\": 4", "\"world\": 1073741825",
                   "field 'world' = 1073741825: expected 1 to 1073741824");
    check_bad_edit(dir, good, "\"train_tokens\": 123456", "\"train_tokens\": -1",
                   "field 'train_tokens' = -1: expected at least 0");
    check_bad_edit(dir, good, "\"dropout\": 0.0", "\"dropout\": 1.0",
                   "field 'training.dropout' = 1: expected 0 to 0.99");
    check_bad_edit(dir, good, "\"lr\": 0.0005", "\"lr\": -0.0005",
                   "field 'training.lr' = -0.0006: expected 0 to 1000");
    check_bad_edit(dir, good, "\"grad_clip\": 1.0", "\"grad_clip\": 1e300",
                   "field 'training.grad_clip' = 1e+300: expected 0 to 1e+09");
    /* the bounds themselves are accepted */
    pt_ckpt_meta edge = m;
    edge.data_pos = 3 * (INT64_C(1) << 32);
    CHECK_INT(pt_ckpt_meta_write(dir, &edge, &err), 0);
    CHECK_INT(pt_ckpt_meta_read(dir, &r, &err), 0);
    CHECK_INT(r.data_pos, 3 * (INT64_C(1) << 32));
    edge.data_pos = edge.step = 50;
    CHECK_INT(pt_ckpt_meta_write(dir, &edge, &err), 0);
    CHECK_INT(pt_ckpt_meta_read(dir, &r, &err), 0);
    /* and a step of 2^31 or more may have read any position int64 holds */
    edge.run.steps = edge.step = INT64_C(1) << 40;
    edge.data_pos = INT64_MAX;
    CHECK_INT(pt_ckpt_meta_write(dir, &edge, &err), 0);
    CHECK_INT(pt_ckpt_meta_read(dir, &r, &err), 0);
    CHECK(r.data_pos == INT64_MAX);
    /* nothing out of range is written either */
    pt_ckpt_meta bad = m;
    bad.data_pos = 9223372036854775797;
    CHECK_INT(pt_ckpt_meta_write(dir, &bad, &err), -1);
    CHECK_STR_HAS(err.msg, "data_pos 9223372036854775797 is beyond what step 3 can have read");
    bad = m;
    bad.step = 60;
    bad.data_pos = 60 * 32;
    CHECK_INT(pt_ckpt_meta_write(dir, &bad, &err), -1);
    CHECK_STR_HAS(err.msg, "field 'step' = 60: expected 0 to the run's training.steps, 50");
}

/* ---- Step folders ---------------------------------------------------------------------- */

/* Writes a checkpoint of `step` into tmp: meta.json and a model shard. */
static void fill_checkpoint(const char *tmp, int64_t step)
{
    char path[4200];
    pt_err err = {{0}};
    pt_ckpt_meta m = sample_meta(step);
    float w[2] = {(float)step, 0};
    pt_st_tensor t = {"w", "F32", 1, {2}, w, sizeof w};
    snprintf(path, sizeof path, "%s/model-00001-of-00001.safetensors", tmp);
    CHECK_INT(pt_st_write(path, &t, 1, NULL, NULL, 0, &err), 0);
    CHECK_INT(pt_ckpt_meta_write(tmp, &m, &err), 0);
}

static int64_t checkpoint_step(const char *dir)
{
    pt_ckpt_meta m;
    pt_err err = {{0}};
    return pt_ckpt_meta_read(dir, &m, &err) == 0 ? m.step : -1;
}

/* The step folder of `step` in dir. */
static const char *step_dir(char *buf, const char *dir, int64_t step)
{
    snprintf(buf, 4400, "%s/step_%08lld", dir, (long long)step);
    return buf;
}

/* Names in folder `parent`, other than . and .. */
static int count_entries(const char *parent)
{
    DIR *d = opendir(parent);
    int n = 0;
    const struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

static int64_t tracker_step(const char *dir)
{
    char path[4400], text[32] = "";
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return atoll(text);
}

/* Begins, fills and commits the checkpoint of `step` in dir. */
static int save_step(const char *dir, int64_t step, int keep)
{
    char tmp[4400];
    pt_err err = {{0}};
    if (pt_ckpt_begin(dir, step, tmp, sizeof tmp, &err) != 0)
        return -1;
    fill_checkpoint(tmp, step);
    return pt_ckpt_commit(tmp, dir, keep, &err);
}

static void test_replace(void)
{
    char dir[4096], tmp[4400], stale[4500], path[4400];
    pt_err err = {{0}};
    in_scratch(dir, "ckpt_steps");

    /* the folder is made; the step lands under its name; the tracker names it */
    CHECK_INT(pt_ckpt_begin(dir, 1, tmp, sizeof tmp, &err), 0);
    CHECK_STR_HAS(tmp, "ckpt_steps/step_00000001.tmp-");
    fill_checkpoint(tmp, 1);
    CHECK(!exists(step_dir(path, dir, 1)));
    CHECK_INT(pt_ckpt_commit(tmp, dir, 2, &err), 0);
    CHECK_INT(checkpoint_step(step_dir(path, dir, 1)), 1);
    CHECK_INT(tracker_step(dir), 1);
    CHECK(!exists(tmp));

    /* an abandoned one leaves nothing; an incomplete one is refused */
    CHECK_INT(pt_ckpt_begin(dir, 2, tmp, sizeof tmp, &err), 0);
    fill_checkpoint(tmp, 2);
    pt_ckpt_abort(tmp);
    CHECK(!exists(tmp));
    CHECK_INT(pt_ckpt_begin(dir, 2, tmp, sizeof tmp, &err), 0);
    CHECK_INT(pt_ckpt_commit(tmp, dir, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "it has no meta.json this build reads, so it is not a complete "
                           "checkpoint");
    CHECK_INT(tracker_step(dir), 1);

    /* a stale temporary of ours is cleared by begin, one with other files refused */
    snprintf(stale, sizeof stale, "%s/model-00001-of-00002.safetensors", tmp);
    write_text(stale, "x");
    CHECK_INT(pt_ckpt_begin(dir, 2, tmp, sizeof tmp, &err), 0);
    CHECK_INT(count_entries(tmp), 0);
    snprintf(stale, sizeof stale, "%s/notes.txt", tmp);
    write_text(stale, "mine");
    CHECK_INT(pt_ckpt_begin(dir, 2, tmp, sizeof tmp, &err), -1);
    CHECK_STR_HAS(err.msg, "is not a checkpoint's temporary folder: refusing to remove it");
    pt_ckpt_abort(tmp); /* not ours: stays */
    CHECK(exists(stale));
    unlink(stale);
    rmdir(tmp);

    /* the same step again replaces it (through "dir/") */
    char slash[4200];
    snprintf(slash, sizeof slash, "%s/", dir);
    CHECK_INT(pt_ckpt_begin(slash, 1, tmp, sizeof tmp, &err), 0);
    fill_checkpoint(tmp, 1);
    CHECK_INT(pt_ckpt_commit(tmp, slash, 2, &err), 0);
    CHECK_INT(checkpoint_step(step_dir(path, dir, 1)), 1);
    CHECK_INT(count_entries(dir), 2); /* step_00000001 and the tracker */

    /* a step folder holding something else is not ours: not replaced, not removed */
    char inner[4500];
    snprintf(inner, sizeof inner, "%s/inner", step_dir(path, dir, 1));
    mkdir(inner, 0777);
    CHECK_INT(pt_ckpt_begin(dir, 1, tmp, sizeof tmp, &err), 0);
    fill_checkpoint(tmp, 1);
    CHECK_INT(pt_ckpt_commit(tmp, dir, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "step_00000001' exists and is not a checkpoint written by ptrun");
    CHECK(exists(inner));
    pt_ckpt_abort(tmp);
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "holds '");
    CHECK_STR_HAS(err.msg, "step_00000001', which is not a checkpoint written by ptrun");
    rmdir(inner);
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), 0);

    char small[8];
    CHECK_INT(pt_ckpt_begin(dir, 3, small, sizeof small, &err), -1);
    CHECK_STR_HAS(err.msg, "too small");
    CHECK_INT(pt_ckpt_begin(dir, -1, tmp, sizeof tmp, &err), -1);
    CHECK_STR_HAS(err.msg, "checkpoint of step -1?");
}

/* ---- Folders that are not ours ----------------------------------------------------------- */

static void test_not_ours(void)
{
    char parent[4096], dir[4200], file[4300];
    pt_err err = {{0}};
    in_scratch(parent, "ckpt_foreign");
    mkdir(parent, 0777);
    snprintf(dir, sizeof dir, "%s/data", parent);

    /* absent, or an empty folder: fine */
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), 0);
    mkdir(dir, 0777);
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), 0);
    CHECK_INT(pt_ckpt_check_target(dir, 0, &err), -1);
    CHECK_STR_HAS(err.msg, "keep 0 checkpoints? at least 1");
    /* a folder of the user's, even one with a model shard: refused, kept */
    snprintf(file, sizeof file, "%s/model-00001-of-00001.safetensors", dir);
    write_text(file, "the user's");
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "ckpt_foreign/data' holds '");
    CHECK_STR_HAS(err.msg, "which is not a checkpoint written by ptrun");
    CHECK_INT(file_size(file), 10);
    unlink(file);
    /* a checkpoint of the older format (a meta.json at the top) */
    snprintf(file, sizeof file, "%s/meta.json", dir);
    write_text(file, "{\"format_version\": 1}");
    CHECK_INT(pt_ckpt_check_target(dir, 1, &err), -1);
    CHECK_STR_HAS(err.msg, "holds a meta.json: it is one checkpoint");
    pt_ckpt_meta m;
    char found[4400];
    CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "format_version 1 is not the one this build reads");
    unlink(file);
    rmdir(dir);
    /* a file */
    write_text(dir, "a file");
    CHECK_INT(pt_ckpt_check_target(dir, 1, &err), -1);
    CHECK_STR_HAS(err.msg, "data' exists and is not a folder");
    CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "not a folder");
    unlink(dir);
    CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "No such file or directory");

    /* pt_path_writable: a probe in the folder, nothing left behind */
    CHECK_INT(pt_path_writable(dir, &err), 0);
    CHECK_INT(count_entries(parent), 0);
    snprintf(file, sizeof file, "%s/no/such/folder/ck", parent);
    CHECK_INT(pt_path_writable(file, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot write '");
    CHECK_STR_HAS(err.msg, "no/such/folder/ck': its folder '");
    CHECK_INT(pt_ckpt_check_target(file, 1, &err), -1);
    CHECK_STR_HAS(err.msg, "no/such/folder/ck");
    if (geteuid() != 0) { /* root writes anywhere */
        chmod(parent, 0555);
        CHECK_INT(pt_path_writable(dir, &err), -1);
        CHECK_STR_HAS(err.msg, "Permission denied");
        chmod(parent, 0777);
    }
}

/* ---- Keeping several, finding the newest, orphans ---------------------------------------- */

/* The step of the checkpoint pt_ckpt_find picks for dir, -1 when none. */
static int64_t found_step(const char *dir, int64_t below, char *where)
{
    pt_ckpt_meta m;
    pt_err err = {{0}};
    char path[4400];
    if (pt_ckpt_find(dir, "0123456789abcdef", below, path, sizeof path, &m, &err) != 0)
        return -1;
    if (where)
        strcpy(where, path);
    return m.step;
}

static void test_keep(void)
{
    char dir[4096], path[4400];
    pt_err err = {{0}};
    in_scratch(dir, "ckpt_keep");
    for (int step = 10; step <= 40; step += 10)
        CHECK_INT(save_step(dir, step, 3), 0);
    /* the newest three and the tracker */
    CHECK(!exists(step_dir(path, dir, 10)));
    CHECK_INT(checkpoint_step(step_dir(path, dir, 20)), 20);
    CHECK_INT(checkpoint_step(step_dir(path, dir, 40)), 40);
    CHECK_INT(count_entries(dir), 4);
    CHECK_INT(found_step(dir, -1, NULL), 40);
    /* a step folder itself */
    CHECK_INT(found_step(step_dir(path, dir, 30), -1, NULL), 30);
    CHECK_INT(found_step(step_dir(path, dir, 30), 30, NULL), -1);
    /* the newest before a step: what a rollback takes */
    CHECK_INT(found_step(dir, 40, path), 30);
    CHECK_STR_HAS(path, "step_00000030");
    CHECK_INT(found_step(dir, 30, NULL), 20);
    CHECK_INT(found_step(dir, 20, NULL), -1);
    pt_ckpt_meta m;
    CHECK_INT(pt_ckpt_find(dir, NULL, 20, path, sizeof path, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "no complete checkpoint from before step 20");
    /* a resume from step 20 saving step 25: the later ones stay (not ours to judge),
     * the tracker names 25, the older ones beyond keep go */
    CHECK_INT(save_step(dir, 25, 2), 0);
    CHECK_INT(tracker_step(dir), 25);
    CHECK_INT(found_step(dir, -1, NULL), 25);
    CHECK(exists(step_dir(path, dir, 20)) && exists(step_dir(path, dir, 30)) &&
          exists(step_dir(path, dir, 40)));
    CHECK_INT(save_step(dir, 26, 1), 0);
    CHECK(!exists(step_dir(path, dir, 20)) && !exists(step_dir(path, dir, 25)));
    CHECK_INT(found_step(dir, -1, NULL), 26);
    /* a tracker naming a step that is gone: the newest complete one */
    char meta[4500];
    snprintf(meta, sizeof meta, "%s/meta.json", step_dir(path, dir, 26));
    unlink(meta);
    CHECK_INT(found_step(dir, -1, NULL), 40);
}

/* A kill at each point of a commit leaves a state on disk; from each, --resume
 * (pt_ckpt_find) takes the newest complete checkpoint, and the next commit removes the
 * orphans that are ours and keeps everything else. */
static void test_interrupted(void)
{
    char dir[4096], tmp[4400], old[4400], path[4400];
    pt_err err = {{0}};
    in_scratch(dir, "ckpt_killed");
    CHECK_INT(save_step(dir, 1, 2), 0);
    /* a pid no process has (above the kernel's pid_max limit of 2^22) */
    snprintf(tmp, sizeof tmp, "%s/step_00000002.tmp-99999999", dir);
    snprintf(old, sizeof old, "%s/step_00000001.old-99999999", dir);
    mkdir(tmp, 0777);
    CHECK_INT(found_step(dir, -1, NULL), 1); /* an incomplete temporary is not taken */
    fill_checkpoint(tmp, 2);
    /* killed after the files, before the rename: the tracker still names 1, which is
     * complete, so 1 is taken (the step-2 files were never committed) */
    CHECK_INT(found_step(dir, -1, NULL), 1);
    /* killed between the rename and the tracker: the tracker's step is complete */
    CHECK_INT(rename(tmp, step_dir(path, dir, 2)), 0);
    CHECK_INT(found_step(dir, -1, NULL), 1);
    /* the tracker's step half-removed (meta.json goes first): the newest complete */
    char meta[4500];
    snprintf(meta, sizeof meta, "%s/meta.json", step_dir(path, dir, 1));
    unlink(meta);
    CHECK_INT(found_step(dir, -1, NULL), 2);
    /* orphans of dead processes: incomplete or not newer ones go at the next commit; a
     * newer complete one, a live process's and anything not ours stay */
    char orphan[4400], alien[4400], live[4400], newer[4400], note[4500], half[4500];
    snprintf(orphan, sizeof orphan, "%s/step_00000003.tmp-99999998", dir);
    mkdir(orphan, 0777);
    snprintf(half, sizeof half, "%s/optim-00001-of-00001.safetensors.tmp-12", orphan);
    write_text(half, "half");
    snprintf(newer, sizeof newer, "%s/step_00000009.tmp-99999997", dir);
    mkdir(newer, 0777);
    fill_checkpoint(newer, 9);
    mkdir(old, 0777);
    fill_checkpoint(old, 1);
    snprintf(alien, sizeof alien, "%s/step_00000004.tmp-99999996", dir);
    mkdir(alien, 0777);
    snprintf(note, sizeof note, "%s/notes.txt", alien);
    write_text(note, "not ours");
    snprintf(live, sizeof live, "%s/step_00000005.tmp-1", dir); /* pid 1 is alive */
    mkdir(live, 0777);
    CHECK_INT(save_step(dir, 3, 5), 0);
    CHECK(!exists(orphan));
    CHECK(!exists(old));
    CHECK(exists(newer));
    CHECK(exists(note));
    CHECK(exists(live));
    CHECK_INT(tracker_step(dir), 3);
    /* ptrun refuses to write beside the folder that is not ours */
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "step_00000004.tmp-99999996");
    unlink(note);
    rmdir(alien);
    rmdir(live);
}

/* The newest step folder's meta.json damaged: refused with its own error and the way
 * to resume from the one before on purpose, never passed over in silence; a folder
 * without its meta.json (half removed) is incomplete and passed over. */
static void test_damaged_newest(void)
{
    char dir[4096], path[4400], meta[4500], found[4400];
    pt_err err = {{0}};
    pt_ckpt_meta m;
    in_scratch(dir, "ckpt_damaged");
    for (int step = 10; step <= 30; step += 10)
        CHECK_INT(save_step(dir, step, 3), 0);
    snprintf(meta, sizeof meta, "%s/meta.json", step_dir(path, dir, 30));
    write_text(meta, "{\"format_version\": 2, \"step\": ");
    CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "ckpt_damaged/step_00000030/meta.json:");
    CHECK_STR_HAS(err.msg, "; it is the newest checkpoint in '");
    CHECK_STR_HAS(err.msg, "ckpt_damaged': repair or remove it, or resume from an older one "
                           "by naming it: --resume ");
    CHECK_STR_HAS(err.msg, "ckpt_damaged/step_00000020 (step 20)");
    /* so named, it loads; a rollback to before step 30 takes it too */
    CHECK_INT(found_step(step_dir(path, dir, 20), -1, NULL), 20);
    CHECK_INT(found_step(dir, 30, NULL), 20);
    /* a meta.json that says another step than its folder's name is damaged too */
    pt_ckpt_meta other = sample_meta(25);
    CHECK_INT(pt_ckpt_meta_write(step_dir(path, dir, 30), &other, &err), 0);
    CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "step_00000030/meta.json: field 'step' = 25, but its folder is the "
                           "checkpoint of step 30; it is the newest checkpoint");
    /* so is one out of range (the data position of ptrun's hang) */
    other = sample_meta(30);
    CHECK_INT(pt_ckpt_meta_write(step_dir(path, dir, 30), &other, &err), 0);
    CHECK_INT(found_step(dir, -1, NULL), 30);
    FILE *fp = fopen(meta, "rb");
    char text[16384] = "", edited[16400];
    size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    text[n] = '\0';
    if (fp)
        fclose(fp);
    const char *at = strstr(text, "\"data_pos\": 960");
    CHECK(at != NULL);
    if (at) {
        snprintf(edited, sizeof edited, "%.*s\"data_pos\": 9223372036854775797%s",
                 (int)(at - text), text, at + strlen("\"data_pos\": 960"));
        write_text(meta, edited);
        CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
        CHECK_STR_HAS(err.msg, "data_pos 9223372036854775797 is beyond what step 30 can have "
                               "read");
    }
    /* half removed (meta.json goes first): incomplete, the one before is taken */
    unlink(meta);
    CHECK_INT(found_step(dir, -1, NULL), 20);
    /* every one damaged: none to name */
    for (int step = 10; step <= 30; step += 10) {
        snprintf(meta, sizeof meta, "%s/meta.json", step_dir(path, dir, step));
        write_text(meta, "[]");
    }
    CHECK_INT(pt_ckpt_find(dir, NULL, -1, found, sizeof found, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "step_00000030/meta.json");
    CHECK_STR_HAS(err.msg, "repair or remove it, there is no complete one before it");
}

/* Temporaries of files written atomically (pt_file_write_atomic): PATH.tmp-<pid>, and
 * PATH.tmp-<pid>.<6 letters or digits>; the tracker's of a process that is gone are
 * removed at the next commit, any other name is not ours. */
static void test_tmp_names(void)
{
    char dir[4096], path[4400], tmp[4400], file[4500];
    pt_err err = {{0}};
    in_scratch(dir, "ckpt_tmpnames");
    CHECK_INT(save_step(dir, 1, 2), 0);
    const char *ours[] = {"latest_checkpointed_iteration.txt.tmp-99999999.aB3xY9",
                          "latest_checkpointed_iteration.txt.tmp-99999998",
                          "latest_checkpointed_iteration.txt.tmp-1.Zz0000"}; /* pid 1 lives */
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ours[i]);
        write_text(path, "1\n");
    }
    snprintf(tmp, sizeof tmp, "%s/step_00000002.tmp-99999997", dir);
    mkdir(tmp, 0777);
    snprintf(file, sizeof file, "%s/meta.json.tmp-99999997.Qw3rT6", tmp);
    write_text(file, "{");
    snprintf(file, sizeof file, "%s/model.safetensors.index.json.tmp-99999997", tmp);
    write_text(file, "{");
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), 0);
    const char *alien[] = {"latest_checkpointed_iteration.txt.tmp-99999999.abc",
                           "latest_checkpointed_iteration.txt.tmp-99999999.abcdefg",
                           "latest_checkpointed_iteration.txt.tmp-.abcdef",
                           "latest_checkpointed_iteration.txt.tmp-12.ab-def",
                           "latest_checkpointed_iteration.txt.tmp-12abcdef"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, alien[i]);
        write_text(path, "1\n");
        CHECK_INT(pt_ckpt_check_target(dir, 2, &err), -1);
        CHECK_STR_HAS(err.msg, alien[i]);
        unlink(path);
    }
    snprintf(file, sizeof file, "%s/meta.json.tmp-5.abc", tmp);
    write_text(file, "{");
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "step_00000002.tmp-99999997', which is not a checkpoint");
    unlink(file);
    /* the next commit removes the dead processes' temporaries, the live one's stays */
    CHECK_INT(save_step(dir, 3, 2), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ours[i]);
        CHECK_INT(exists(path), i == 2);
    }
    CHECK(!exists(tmp));
    snprintf(path, sizeof path, "%s/%s", dir, ours[2]);
    unlink(path);
}

/* The text of a lock file: "pid P host H". */
static void lock_text(const char *dir, long pid, char *want, size_t cap)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(want, cap, "pid %ld host %s\n", pid, host);
    (void)dir;
}

/* One writer per checkpoint folder: the lock file names its holder, a second taker is
 * refused naming the holder, the lock goes with its process (kill -9 too). */
static void test_lock(void)
{
    char dir[4096], lock[4400], want[400], msg[9000], got[400] = "";
    pt_err err = {{0}};
    pt_ckpt_hold h, h2;
    in_scratch(dir, "ckpt_locked");
    snprintf(lock, sizeof lock, "%s/lock", dir);
    CHECK_INT(pt_ckpt_lock(dir, &h, &err), 0);
    CHECK(h.fd >= 0 && h.made_dir);
    lock_text(dir, (long)getpid(), want, sizeof want);
    FILE *fp = fopen(lock, "r");
    size_t n = fp ? fread(got, 1, sizeof got - 1, fp) : 0;
    got[n] = '\0';
    if (fp)
        fclose(fp);
    CHECK(strcmp(got, want) == 0);
    /* another open of the file, as another process makes: refused, naming the holder */
    CHECK_INT(pt_ckpt_lock(dir, &h2, &err), -1);
    CHECK(h2.fd == -1);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(msg, sizeof msg, "checkpoint folder '%s' is in use by ptrun pid %ld on host %s "
             "(lock file %s): one run writes a folder at a time", dir, (long)getpid(), host, lock);
    CHECK_STR_HAS(err.msg, msg);
    CHECK(exists(lock)); /* the refused one removes nothing */
    /* the folder with its lock file is a checkpoint folder; find passes the file over */
    CHECK_INT(pt_ckpt_check_target(dir, 2, &err), 0);
    CHECK_INT(save_step(dir, 1, 2), 0);
    CHECK_INT(found_step(dir, -1, NULL), 1);
    pt_ckpt_unlock(&h);
    CHECK(exists(lock)); /* it holds a checkpoint: the folder stays */
    CHECK_INT(pt_ckpt_lock(dir, &h, &err), 0);
    pt_ckpt_unlock(&h);
    pt_ckpt_unlock(&h); /* twice: nothing */

    /* a holder killed with SIGKILL: its lock file stays, its lock does not */
    int fd[2];
    CHECK_INT(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        pt_ckpt_hold mine;
        pt_err e;
        char ok = pt_ckpt_lock(dir, &mine, &e) == 0 ? 'y' : 'n';
        if (write(fd[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    char ok = 0;
    CHECK(read(fd[0], &ok, 1) == 1 && ok == 'y');
    close(fd[0]);
    close(fd[1]);
    CHECK_INT(pt_ckpt_lock(dir, &h2, &err), -1);
    snprintf(msg, sizeof msg, "in use by ptrun pid %ld on host ", (long)pid);
    CHECK_STR_HAS(err.msg, msg);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK_INT(pt_ckpt_lock(dir, &h, &err), 0);
    fp = fopen(lock, "r");
    n = fp ? fread(got, 1, sizeof got - 1, fp) : 0;
    got[n] = '\0';
    if (fp)
        fclose(fp);
    CHECK(strcmp(got, want) == 0);
    pt_ckpt_unlock(&h);

    /* a folder it made and wrote nothing into goes again */
    char fresh[4096];
    in_scratch(fresh, "ckpt_lock_fresh");
    CHECK_INT(pt_ckpt_lock(fresh, &h, &err), 0);
    pt_ckpt_unlock(&h);
    CHECK(!exists(fresh));
    /* a lock that is not a plain file is not ours */
    mkdir(fresh, 0777);
    snprintf(lock, sizeof lock, "%s/lock", fresh);
    mkdir(lock, 0777);
    CHECK_INT(pt_ckpt_check_target(fresh, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "ckpt_lock_fresh/lock', which is not a checkpoint written by ptrun");
    CHECK_INT(pt_ckpt_lock(fresh, &h, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot open the lock file '");
    CHECK(exists(lock));
    rmdir(lock);
    rmdir(fresh);
}

int main(int argc, char **argv)
{
    /* Not "test_checkpoint": that is the name of this program in the build folder. */
    snprintf(scratch, sizeof scratch, "%s/checkpoint_scratch", argc > 1 ? argv[1] : ".");
    /* a fresh folder every run: the states an interrupted commit leaves are built in it,
     * and a checkpoint kept from an earlier run would be found instead */
    char clear[3200];
    snprintf(clear, sizeof clear, "rm -rf '%s'", scratch);
    if (system(clear) != 0)
        fprintf(stderr, "test_checkpoint: cannot clear '%s'\n", scratch);
    if (mkdir(scratch, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "test_checkpoint: cannot create '%s': %s\n", scratch, strerror(errno));
        return 1;
    }
    test_round_trip();
    test_format();
    test_write_errors();
    test_truncated();
    test_damaged();
    test_large();
    test_get();
    test_pieces();
    test_meta();
    test_bad_meta();
    test_meta_ranges();
    test_replace();
    test_not_ours();
    test_keep();
    test_interrupted();
    test_damaged_newest();
    test_tmp_names();
    test_lock();
    return pt_check_result();
}
