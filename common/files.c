/*
 * Opening files as a tool must: an input never waits for ever (a FIFO nobody writes),
 * and an output never destroys what is there. Every file a tool writes
 * (a plan, a timeline, a trace, a token file, a checkpoint's meta.json, a safetensors
 * file) goes through pt_out_open / pt_out_commit.
 *
 * What a path names decides how it is written:
 *   - a regular file, or nothing yet: a temporary beside it, written whole, flushed,
 *     then renamed over it, so a reader sees the old file or the new one, never half;
 *   - a symbolic link: the link is followed (to its final target, also when that does
 *     not exist yet) and the target is written as above, beside the target; the link
 *     stays a link;
 *   - a character device or a FIFO (/dev/null, a terminal, a named pipe): written in
 *     place; renaming over it would replace the device node with a file;
 *   - /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the descriptor this process
 *     already has open, written in place (through those names a regular file is the
 *     shell's redirection, which must not be replaced either);
 *   - a folder, a block device or a socket: refused.
 * A temporary is created with O_CREAT | O_EXCL | O_NOFOLLOW under a name no other
 * process uses (PATH.tmp-<pid>.<six random letters or digits>), so a file or link
 * planted there is never written through; a path too long for such a name is refused
 * rather than cut short.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { LINK_HOPS = 40 }; /* as the kernel's own limit (ELOOP, path_resolution(7)) */

/* The descriptor a /dev/stdout-like name stands for, or -1 when path is not one. */
static int named_fd(const char *path)
{
    if (!strcmp(path, "/dev/stdout"))
        return 1;
    if (!strcmp(path, "/dev/stderr"))
        return 2;
    const char *prefixes[] = {"/dev/fd/", "/proc/self/fd/"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(path, prefixes[i], n) != 0 || !path[n])
            continue;
        char *end;
        long fd = strtol(path + n, &end, 10);
        if (*end == 0 && fd >= 0 && fd <= INT_MAX && path[n] >= '0' && path[n] <= '9')
            return (int)fd;
    }
    return -1;
}

/* The folder part of path ("." when it has none), malloc'd. */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Follows symbolic links from path to the name that is not one (which need not exist),
 * or to a descriptor's name (/proc/self/fd/N, whose "link" may be no path at all);
 * malloc'd, NULL with err filled when a link cannot be read or the chain loops. */
static char *follow_links(const char *path, pt_err *err)
{
    char *cur = strdup(path);
    for (int hop = 0; cur && hop <= LINK_HOPS; hop++) {
        struct stat st;
        if (named_fd(cur) >= 0 || lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode))
            return cur;
        char link[PATH_MAX];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) {
            pt_err_set(err, "cannot write '%s': reading the link '%s': %s", path, cur,
                       strerror(errno));
            free(cur);
            return NULL;
        }
        link[n] = 0;
        char *next;
        if (link[0] == '/') {
            next = strdup(link);
        } else { /* relative to the folder holding the link */
            char *dir = folder_of(cur);
            next = dir ? malloc(strlen(dir) + 1 + (size_t)n + 1) : NULL;
            if (next)
                sprintf(next, "%s/%s", dir, link);
            free(dir);
        }
        free(cur);
        cur = next;
    }
    if (cur)
        pt_err_set(err, "cannot write '%s': too many symbolic links", path);
    else
        pt_err_set(err, "cannot write '%s': out of memory", path);
    free(cur);
    return NULL;
}

/* Six letters or digits that differ between calls and processes (the same alphabet as
 * mkstemp(3)'s XXXXXX), from the clock, the pid and the attempt; a clash with an
 * existing name is caught by O_EXCL and retried with the next attempt. */
static void random_suffix(char out[7], unsigned attempt)
{
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30) ^
                           ((unsigned long long)getpid() << 16) ^
                           ((attempt + 1ULL) * 0x9e3779b97f4a7c15ULL);
    for (int i = 0; i < 6; i++) {
        x ^= x >> 33; /* splitmix64's finaliser: every input bit reaches every output */
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        out[i] = abc[x % (sizeof abc - 1)];
    }
    out[6] = 0;
}

/* Creates the temporary beside o->target with the mode of the file it replaces (when
 * `replaces`; else 0666 less the umask, as for any new file). */
static int open_temporary(pt_out *o, bool replaces, mode_t mode, pt_err *err)
{
    const char *slash = strrchr(o->target, '/');
    const char *base = slash ? slash + 1 : o->target;
    char pid[24];
    int pid_len = snprintf(pid, sizeof pid, "%ld", (long)getpid());
    size_t name_len = strlen(base) + strlen(".tmp-") + (size_t)pid_len + 7;
    size_t path_len = strlen(o->target) + name_len - strlen(base);
    if (name_len > NAME_MAX || path_len >= PATH_MAX)
        return pt_err_set(err, "cannot write '%s': the name is too long to make a temporary "
                               "file beside it (at most %d bytes for the name, %d for the path)",
                          o->path, NAME_MAX - (int)(name_len - strlen(base)),
                          PATH_MAX - 1 - (int)(name_len - strlen(base)));
    o->tmp = malloc(path_len + 1);
    if (!o->tmp)
        return pt_err_set(err, "cannot write '%s': out of memory", o->path);
    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 100; attempt++) {
        char suffix[7];
        random_suffix(suffix, (unsigned)attempt);
        snprintf(o->tmp, path_len + 1, "%s.tmp-%s.%s", o->target, pid, suffix);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  replaces ? mode : 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        return pt_err_set(err, "cannot write '%s': %s", o->path, strerror(e));
    }
    if (replaces)
        (void)fchmod(fd, mode); /* the umask may have cleared bits of the replaced file's */
    if (!(o->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        return pt_err_set(err, "cannot write '%s': %s", o->path, strerror(e));
    }
    return 0;
}

/* Opens a descriptor this process holds (/dev/stdout and its kind) for writing. */
static int open_named_fd(pt_out *o, int fd, pt_err *err)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY)
        return pt_err_set(err, "cannot write '%s': descriptor %d is not open for writing",
                          o->path, fd);
    fflush(fd == 1 ? stdout : fd == 2 ? stderr : NULL);
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (copy < 0 || !(o->f = fdopen(copy, "wb"))) {
        int e = errno;
        if (copy >= 0)
            close(copy);
        return pt_err_set(err, "cannot write '%s': %s", o->path, strerror(e));
    }
    return 0;
}

/* Opens a character device or a FIFO where it is. A FIFO nobody reads is refused
 * (opening it for writing would wait for a reader for ever). */
static int open_in_place(pt_out *o, bool fifo, pt_err *err)
{
    int fd = open(o->target, O_WRONLY | O_NOCTTY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
    if (fd < 0 && fifo && errno == ENXIO)
        return pt_err_set(err, "cannot write '%s': it is a FIFO and no process reads it",
                          o->path);
    if (fd < 0)
        return pt_err_set(err, "cannot write '%s': %s", o->path, strerror(errno));
    if (fifo)
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (!(o->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        return pt_err_set(err, "cannot write '%s': %s", o->path, strerror(e));
    }
    return 0;
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a folder" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
                                                                                : "not a file";
}

int pt_out_open(pt_out *o, const char *path, pt_err *err)
{
    *o = (pt_out){.path = path};
    if (!path || !path[0])
        return pt_err_set(err, "an output path is empty");
    if (!(o->target = follow_links(path, err)))
        return -1;
    struct stat st;
    int rc, fd = named_fd(o->target);
    if (fd >= 0) {
        rc = open_named_fd(o, fd, err);
    } else if (stat(o->target, &st) != 0) {
        rc = errno == ENOENT ? open_temporary(o, false, 0, err)
                             : pt_err_set(err, "cannot write '%s': %s", path, strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
        rc = open_temporary(o, true, st.st_mode & 07777, err);
    } else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        rc = open_in_place(o, S_ISFIFO(st.st_mode), err);
    } else {
        rc = pt_err_set(err, "cannot write '%s': it is %s, not a file; nothing was written",
                        path, kind_of(st.st_mode));
    }
    if (rc) {
        free(o->target);
        o->target = NULL;
    }
    return rc;
}

int pt_out_commit(pt_out *o, bool sync, pt_err *err)
{
    if (!o->f)
        return pt_err_set(err, "cannot write '%s': not open", o->path ? o->path : "?");
    errno = 0;
    bool ok = fflush(o->f) == 0; /* first: a failing flush says why (errno) */
    ok = !ferror(o->f) && ok;
    ok = ok && (!sync || !o->tmp || fsync(fileno(o->f)) == 0);
    int e = errno;
    if (fclose(o->f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    o->f = NULL;
    if (ok && o->tmp && rename(o->tmp, o->target) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok && o->tmp)
        unlink(o->tmp);
    if (!ok)
        pt_err_set(err, "cannot write '%s': %s", o->path, e ? strerror(e) : "write error");
    free(o->tmp);
    free(o->target);
    o->tmp = o->target = NULL;
    return ok ? 0 : -1;
}

void pt_out_discard(pt_out *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    free(o->target);
    *o = (pt_out){0};
}

int pt_out_fail(pt_out *o, int e, pt_err *err)
{
    const char *path = o->path ? o->path : "?";
    pt_err_set(err, "cannot write '%s': %s", path, e ? strerror(e) : "write error");
    pt_out_discard(o);
    return -1;
}

int pt_file_write_atomic(const char *path, const char *text, size_t n, pt_err *err)
{
    pt_out o;
    if (pt_out_open(&o, path, err))
        return -1;
    if (n && fwrite(text, 1, n, o.f) != n)
        return pt_out_fail(&o, errno, err);
    return pt_out_commit(&o, true, err);
}

int pt_stdout_check(const char *tool)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    int e = errno ? errno : EIO;
    fprintf(stderr, "%s: cannot write the standard output: %s\n", tool, strerror(e));
    return -1;
}

FILE *pt_in_open(const char *path, bool regular_only, pt_err *err)
{
    /* O_NONBLOCK where only a regular file will do: opening a FIFO for reading would
     * otherwise wait for a writer, perhaps for ever. A stream input waits, as cat(1)
     * would: without a writer yet, a non-blocking read would see the end at once. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | (regular_only ? O_NONBLOCK : 0));
    if (fd < 0) {
        pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *bad = NULL;
    if (fstat(fd, &st) != 0)
        bad = strerror(errno);
    else if (S_ISDIR(st.st_mode))
        bad = strerror(EISDIR);
    else if (regular_only && !S_ISREG(st.st_mode))
        bad = S_ISFIFO(st.st_mode) ? "it is a FIFO or pipe; this input must be a regular file "
                                     "(its size is read first)"
                                   : "not a regular file";
    FILE *f = NULL;
    if (!bad) {
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        if (!(f = fdopen(fd, "rb")))
            bad = strerror(errno);
    }
    if (bad) {
        close(fd);
        pt_err_set(err, "cannot read '%s': %s", path, bad);
    }
    return f;
}
