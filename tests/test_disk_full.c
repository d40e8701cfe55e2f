// A disk that fills up while a checkpoint is written: the save fails with one
// line naming the file, leaves neither the file nor its temporary behind, and
// the process goes on (a later save works) and exits cleanly. libhdf5 1.10
// crashed at exit after a failed close; util/h5.c's abort path avoids it.
//
// The full disk is this file's pwrite (libhdf5's sec2 driver finds it before
// libc's) and fallocate (util/h5.c reserves the close's room with it): a write
// or a reservation that would take a temporary output file past `budget` bytes
// fails with ENOSPC, as on a full disk. Every other file is written normally.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../formats/checkpoint.h"
#include "test_fixture_util.h"

static long long budget = -1;   // bytes a temporary output file may hold; -1: no limit

// A temporary output file (util/h5.c writes PATH.tmp.PID and renames it).
static int is_temp_output(int fd) {
    char link[64], target[600];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return 0;
    target[n] = 0;
    return strstr(target, ".tmp.") != NULL;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    if (budget >= 0 && (long long)(at + n) > budget && is_temp_output(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, n, at);
}

int fallocate(int fd, int mode, off_t at, off_t n) {
    static int (*real)(int, int, off_t, off_t);
    if (!real) real = (int (*)(int, int, off_t, off_t))dlsym(RTLD_NEXT, "fallocate");
    if (budget >= 0 && (long long)(at + n) > budget && is_temp_output(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, mode, at, n);
}

static void tiny_bundle(ModelBundle *b) {
    PtError e;
    ModelConfig cfg;
    assert_int_equal(config_preset(&cfg, "tiny", &e), 0);
    bundle_alloc(b, &cfg);
    bundle_init_random(b, 7);
    b->tokenizer_json = xstrdup("{\"model\": {}}");
    b->tokenizer_json_len = strlen(b->tokenizer_json);
}

static int dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *ent;
    int n = 0;
    while (d && (ent = readdir(d)) != NULL) n += ent->d_name[0] != '.';
    if (d) closedir(d);
    return d && n == 0;
}

// In a child, so that the exit (where libhdf5 crashed) is checked too: saves
// at `limit` bytes of room, then with room. The child's exit status says what
// went wrong: 0 all held, 1 the save did not fail, 2 its message, 3 a file
// left behind, 4 the save with room failed, 5 its load differs.
static int save_on_full_disk(long long limit) {
    char dir[] = "/tmp/pocket_full_XXXXXX", path[600];
    if (!mkdtemp(dir)) return -1;
    snprintf(path, sizeof path, "%s/ckpt.h5", dir);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);   // cmocka's handler would report it inside the child
        ModelBundle a, b;
        PtError e;
        tiny_bundle(&a);
        budget = limit;
        if (checkpoint_save(path, &a, &e) == 0) _exit(1);
        if (!strstr(e.msg, path) || strchr(e.msg, '\n')) {
            fprintf(stderr, "message: %s\n", e.msg);
            _exit(2);
        }
        if (!dir_is_empty(dir)) _exit(3);
        budget = -1;
        if (checkpoint_save(path, &a, &e) != 0) _exit(4);
        if (checkpoint_load(path, &b, &e) != 0 ||
            memcmp(a.params, b.params, a.tt.total * sizeof(float)) != 0) _exit(5);
        bundle_free(&b);
        bundle_free(&a);
        exit(0);   // exit, not _exit: libhdf5's exit handler runs
    }
    int status = -1;
    waitpid(pid, &status, 0);
    unlink(path);
    rmdir(dir);
    if (WIFSIGNALED(status)) fprintf(stderr, "limit %lld: killed by signal %d\n", limit, WTERMSIG(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// The disk fills at the start, in the middle of the weights, and in the last
// bytes (the close's metadata flush, which used to fail inside H5Fclose).
static void test_checkpoint_on_a_full_disk(void **s) {
    (void)s;
    ModelBundle a;
    PtError e;
    tiny_bundle(&a);
    char path[] = "/tmp/pocket_full_size_XXXXXX";
    close(mkstemp(path));
    assert_int_equal(checkpoint_save(path, &a, &e), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    unlink(path);
    bundle_free(&a);
    long long size = st.st_size;
    const long long limits[] = {0, 4096, size / 2, size - 512, size - 1};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        fprintf(stderr, "room for %lld of the file's %lld bytes\n", limits[i], size);
        assert_int_equal(save_on_full_disk(limits[i]), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_checkpoint_on_a_full_disk)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
