// h5_child.c: libhdf5 work done in a bounded child process (see h5_in_child
// in h5.h). libhdf5 1.10 crashes, loops or overruns its heap on some crafted
// files; whatever it does to a child's memory, this process's stays sound.
#include "h5.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CHILD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHILD_SANITIZED 1
#endif
#endif
#ifdef CHILD_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

// A structure walk takes milliseconds; a chunk index of a few GB about a second.
#define CHILD_CPU_BASE_S 0.3
#define CHILD_CPU_S_PER_GB 10.0
#define CHILD_AS_BYTES ((rlim_t)4 << 30)   // address space over the parent's own

static PT_NORETURN void child(double cpu_s, H5ChildWork work, void *ctx, int out) {
    int null = open("/dev/null", O_RDWR);   // libhdf5 or a sanitizer must not talk on our stderr
    if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
    }
    // A crash must end the child, whoever (a test framework, a sanitizer) set handlers in the parent
    const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPROF};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) signal(fatal[i], SIG_DFL);
#ifdef CHILD_SANITIZED
    __sanitizer_set_death_callback(NULL);   // a fuzzer's: it would save the input as the parent's crash
#endif
    struct itimerval cpu = {{0, 0}, {(time_t)cpu_s, (suseconds_t)((cpu_s - (double)(time_t)cpu_s) * 1e6)}};
    setitimer(ITIMER_PROF, &cpu, NULL);   // past it the child dies of SIGPROF
#ifndef CHILD_SANITIZED   // (a sanitizer's shadow memory needs the whole address space)
    long pages = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (statm && fscanf(statm, "%ld", &pages) == 1) {
        struct rlimit as = {CHILD_AS_BYTES + (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE), 0};
        as.rlim_max = as.rlim_cur;
        setrlimit(RLIMIT_AS, &as);
    }
    if (statm) fclose(statm);
#endif
    _exit(work(ctx, out) ? H5_CHILD_REFUSED : 0);   // no atexit handlers: they are the parent's
}

int h5_child_write(int out, const void *data, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t k = write(out, (const char *)data + done, n - done);
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

int h5_in_child(const char *path, const char *doing, H5ChildWork work, void *ctx, char **out, size_t *len,
                size_t cap, PtError *e) {
    *out = NULL;
    *len = 0;
    int64_t bytes = file_size(path);
    double cpu_s = CHILD_CPU_BASE_S + CHILD_CPU_S_PER_GB * (double)(bytes > 0 ? bytes : 0) / 1e9;
    double wall_s = 60 + 20 * cpu_s;   // for a child that waits (slow storage, a stopped process)
    int fds[2];
    if (pipe(fds) != 0) return pt_fail(e, "%s: cannot start %s: pipe: %s", path, doing, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return pt_fail(e, "%s: cannot start %s: fork: %s", path, doing, strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        child(cpu_s, work, ctx, fds[1]);
    }
    close(fds[1]);
    size_t room = 256;
    char *buf = xmalloc(room, "child output");
    double deadline = now_seconds() + wall_s;
    int timed_out = 0, too_long = 0;
    for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        double left = deadline - now_seconds();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;   // EINTR or not yet
        if (*len + 1 == room) {
            if (room > cap) {
                too_long = 1;
                break;
            }
            buf = realloc(buf, room *= 2);
            if (!buf) die("out of memory (child output)");
        }
        ssize_t n = read(fds[0], buf + *len, room - 1 - *len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        *len += (size_t)n;
    }
    buf[*len] = 0;
    close(fds[0]);
    if (timed_out || too_long) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    int rc = -1;
    if (timed_out) pt_fail(e, "%s: libhdf5 gave no answer %s in %.0f s", path, doing, wall_s);
    else if (too_long) pt_fail(e, "%s: libhdf5 gave more than %zu bytes %s (damaged?)", path, cap, doing);
    else if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == H5_CHILD_REFUSED))
        rc = WEXITSTATUS(status) == 0 ? 0 : 1;
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPROF)
        pt_fail(e, "%s: libhdf5 did not finish %s in %.1f s of CPU (damaged: it loops?)", path, doing, cpu_s);
    else if (WIFSIGNALED(status))
        pt_fail(e, "%s: libhdf5 crashed %s (%s; damaged?)", path, doing, strsignal(WTERMSIG(status)));
    else   // a sanitizer in the child reports a memory error by its exit status
        pt_fail(e, "%s: libhdf5 crashed %s (exit status %d; damaged?)", path, doing, WEXITSTATUS(status));
    if (rc < 0) {
        free(buf);
        *len = 0;
    } else {
        *out = buf;
    }
    return rc;
}
