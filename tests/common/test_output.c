/*
 * ptcommon's output files (pt_out_open / pt_out_commit): a new file and a replaced one
 * (its mode kept, no temporary left), a symbolic link (and a chain, and one to nothing
 * yet) whose target is written while the link stays, a FIFO written in place or refused
 * when nobody reads it (without waiting), character devices written in place and never
 * replaced (/dev/null; a stand-in of /dev/full made with mknod when allowed), this
 * process's descriptors by their /dev/fd and /proc/self/fd names, folders and sockets
 * refused, a name too long for a temporary refused without touching its neighbours,
 * and a discarded write leaving the old file.
 */
#define _GNU_SOURCE /* mknod, nftw */
#include "check.h"
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

static char scratch[PATH_MAX];

/* scratch/name, in one of four buffers used in turn: hold no result across calls */
static const char *at(const char *name)
{
    static char path[4][2 * PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    if ((size_t)snprintf(path[k], sizeof path[k], "%s/%s", scratch, name) >= sizeof path[k])
        CHECK(!"a scratch path fits");
    return path[k];
}

/* The whole content of path (at most 255 bytes), "" when unreadable. */
static const char *content(const char *path)
{
    static char buf[256];
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

/* How many entries of the scratch folder have ".tmp-" in their name. */
static int temporaries(void)
{
    DIR *d = opendir(scratch);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp-") != NULL;
    if (d)
        closedir(d);
    return n;
}

static int write_text(const char *path, const char *text, pt_err *err)
{
    return pt_file_write_atomic(path, text, strlen(text), err);
}

static void test_regular(void)
{
    pt_err err = {""};
    const char *p = at("plain.json");
    CHECK_INT(write_text(p, "one", &err), 0);
    CHECK(strcmp(content(p), "one") == 0);
    CHECK(chmod(p, 0640) == 0);
    struct stat before, after;
    CHECK(stat(p, &before) == 0);
    CHECK_INT(write_text(p, "two", &err), 0);
    CHECK(strcmp(content(p), "two") == 0);
    CHECK(stat(p, &after) == 0);
    CHECK_INT(after.st_mode & 07777, 0640);      /* the replaced file's mode is kept */
    CHECK(after.st_ino != before.st_ino);        /* a new file renamed over the old */
    CHECK_INT(temporaries(), 0);

    /* a discarded write leaves the old file and no temporary */
    pt_out o;
    CHECK_INT(pt_out_open(&o, p, &err), 0);
    fputs("half", o.f);
    pt_out_discard(&o);
    CHECK(strcmp(content(p), "two") == 0);
    CHECK_INT(temporaries(), 0);

    CHECK_INT(write_text(at("no/such/folder/x.json"), "x", &err), -1);
    CHECK_STR_HAS(err.msg, "no/such/folder/x.json");
    CHECK_INT(write_text("", "x", &err), -1);
    CHECK_STR_HAS(err.msg, "empty");
}

static void test_links(void)
{
    pt_err err = {""};
    const char *target = at("target.json"), *link = at("link.json");
    CHECK_INT(write_text(target, "old", &err), 0);
    CHECK(symlink("target.json", link) == 0); /* relative to the link's folder */
    CHECK_INT(write_text(link, "new", &err), 0);
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(strcmp(content(target), "new") == 0);

    /* a chain ending in a name that does not exist yet: created there */
    CHECK(symlink("link.json", at("chain.json")) == 0);
    CHECK(symlink("sub/made.json", at("dangling.json")) == 0);
    CHECK(mkdir(at("sub"), 0755) == 0);
    CHECK_INT(write_text(at("chain.json"), "chained", &err), 0);
    CHECK(strcmp(content(at("target.json")), "chained") == 0);
    CHECK_INT(write_text(at("dangling.json"), "made", &err), 0);
    CHECK(lstat(at("dangling.json"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(strcmp(content(at("sub/made.json")), "made") == 0);

    /* a loop is refused */
    CHECK(symlink("loop_b", at("loop_a")) == 0);
    CHECK(symlink("loop_a", at("loop_b")) == 0);
    CHECK_INT(write_text(at("loop_a"), "x", &err), -1);
    CHECK_STR_HAS(err.msg, "too many symbolic links");
    CHECK(lstat(at("loop_a"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK_INT(temporaries(), 0);
}

static void test_fifo(void)
{
    pt_err err = {""};
    const char *p = at("fifo");
    CHECK(mkfifo(p, 0600) == 0);
    /* nobody reads: refused at once instead of waiting for a reader */
    CHECK_INT(write_text(p, "x", &err), -1);
    CHECK_STR_HAS(err.msg, "no process reads it");
    int r = open(p, O_RDONLY | O_NONBLOCK);
    CHECK(r >= 0);
    CHECK_INT(write_text(p, "through", &err), 0);
    char buf[16] = "";
    CHECK_INT(read(r, buf, sizeof buf - 1), 7);
    CHECK(strcmp(buf, "through") == 0);
    close(r);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode));
}

static void test_devices(void)
{
    pt_err err = {""};
    struct stat st;
    CHECK_INT(write_text("/dev/null", "gone", &err), 0);
    CHECK(lstat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    /* a link to a device: the device is written, the link stays */
    CHECK(symlink("/dev/null", at("null_link")) == 0);
    CHECK_INT(write_text(at("null_link"), "gone", &err), 0);
    CHECK(lstat(at("null_link"), &st) == 0 && S_ISLNK(st.st_mode));
    /* /dev/full's stand-in (major 1, minor 7; mem(4)): every write fails with ENOSPC,
     * which must be reported, and the node must stay a device */
    const char *full = at("full");
    if (mknod(full, S_IFCHR | 0666, makedev(1, 7)) == 0) {
        CHECK_INT(write_text(full, "x", &err), -1);
        CHECK_STR_HAS(err.msg, "No space left on device");
        CHECK(lstat(full, &st) == 0 && S_ISCHR(st.st_mode));
    } else {
        printf("note: mknod refused (%s): the /dev/full stand-in is not tried\n",
               strerror(errno));
    }
    CHECK_INT(temporaries(), 0);
}

static void test_descriptors(void)
{
    pt_err err = {""};
    int fds[2];
    CHECK(pipe(fds) == 0);
    char name[64];
    snprintf(name, sizeof name, "/dev/fd/%d", fds[1]);
    CHECK_INT(write_text(name, "piped", &err), 0);
    snprintf(name, sizeof name, "/proc/self/fd/%d", fds[1]);
    CHECK_INT(write_text(name, "+more", &err), 0);
    close(fds[1]);
    char buf[32] = "";
    CHECK_INT(read(fds[0], buf, sizeof buf - 1), 10);
    CHECK(strcmp(buf, "piped+more") == 0);
    close(fds[0]);

    /* a regular file open on a descriptor (a shell's "> f"): written through that
     * descriptor, at its offset, the file itself not replaced */
    const char *p = at("redirected");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "head:", 5) == 5);
    struct stat before, after;
    CHECK(fstat(fd, &before) == 0);
    /* through a link, as /dev/stdout is one to /proc/self/fd/1 */
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    CHECK(symlink(name, at("my_stdout")) == 0);
    CHECK_INT(write_text(at("my_stdout"), "body", &err), 0);
    CHECK(stat(p, &after) == 0 && after.st_ino == before.st_ino);
    CHECK(strcmp(content(p), "head:body") == 0);
    close(fd);
    snprintf(name, sizeof name, "/dev/fd/%d", fd); /* closed now */
    CHECK_INT(write_text(name, "x", &err), -1);
    CHECK_STR_HAS(err.msg, name);
}

static void test_refused(void)
{
    pt_err err = {""};
    CHECK(mkdir(at("folder"), 0755) == 0);
    CHECK_INT(write_text(at("folder"), "x", &err), -1);
    CHECK_STR_HAS(err.msg, "is a folder");
    struct stat st;
    CHECK(stat(at("folder"), &st) == 0 && S_ISDIR(st.st_mode));

    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", at("sock"));
    if (strlen(at("sock")) < sizeof a.sun_path && bind(s, (struct sockaddr *)&a, sizeof a) == 0) {
        CHECK_INT(write_text(at("sock"), "x", &err), -1);
        CHECK_STR_HAS(err.msg, "is a socket");
    }
    close(s);

    /* a name that leaves no room for the temporary's suffix: refused, the file beside
     * it (what a truncated temporary name would have hit) untouched */
    char name[NAME_MAX + 1];
    memset(name, 'n', NAME_MAX - 4);
    name[NAME_MAX - 4] = 0;
    char sibling[NAME_MAX + 8];
    snprintf(sibling, sizeof sibling, "%s.tmp", name);
    check_write_file(at(sibling), "keep", 4);
    CHECK_INT(write_text(at(name), "x", &err), -1);
    CHECK_STR_HAS(err.msg, "too long to make a temporary");
    CHECK(strcmp(content(at(sibling)), "keep") == 0);
    CHECK(access(at(name), F_OK) != 0);
    CHECK_INT(temporaries(), 0);
}

static void test_stdout_check(void)
{
    /* /dev/full as stdout: the check reports what plain exit would hide */
    FILE *saved = stdout;
    FILE *full = fopen("/dev/full", "w");
    if (!full) {
        printf("note: no /dev/full: pt_stdout_check's failure is not tried\n");
        return;
    }
    stdout = full;
    fputs("lost", stdout);
    int rc = pt_stdout_check("test_output");
    stdout = saved;
    fclose(full);
    CHECK_INT(rc, -1);
    CHECK_INT(pt_stdout_check("test_output"), 0);
}

static int remove_entry(const char *path, const struct stat *st, int kind, struct FTW *f)
{
    (void)st, (void)kind, (void)f;
    return remove(path);
}

int main(int argc, char **argv)
{
    snprintf(scratch, sizeof scratch, "%s/test_output_%ld", argc > 1 ? argv[1] : ".",
             (long)getpid());
    CHECK(mkdir(scratch, 0755) == 0);
    test_regular();
    test_links();
    test_fifo();
    test_devices();
    test_descriptors();
    test_refused();
    test_stdout_check();
    if (!pt_check_failures) /* kept for a look when something failed */
        CHECK(nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
    return pt_check_result();
}
