// reward_program.c: the user's reward program over two pipes
// (reward_program.h). Writing to a program that has exited must be an error
// of that completion, not a SIGPIPE that ends pocket: SIGPIPE is ignored
// once a program is started (pocket has no use for it; a write then fails
// with EPIPE).
#include "reward_program.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct RewardProgram {
    char *cmd;
    pid_t pid;            // 0 once it has stopped
    int to, from;         // its stdin, its stdout
    double timeout_s;
    char buf[4096];       // what it has written past the last line read
    size_t used;
};

int reward_program_start(RewardProgram **out, const char *cmd, double timeout_s, PtError *e) {
    int in[2], back[2];
    if (pipe(in)) return pt_fail(e, "reward program '%s': cannot make a pipe: %s", cmd, strerror(errno));
    if (pipe(back)) {
        close(in[0]), close(in[1]);
        return pt_fail(e, "reward program '%s': cannot make a pipe: %s", cmd, strerror(errno));
    }
    signal(SIGPIPE, SIG_IGN);
    const pid_t pid = fork();
    if (pid < 0) {
        close(in[0]), close(in[1]), close(back[0]), close(back[1]);
        return pt_fail(e, "reward program '%s': cannot start it: %s", cmd, strerror(errno));
    }
    if (pid == 0) {   // the child: the pipes as stdin and stdout, then the shell
        dup2(in[0], 0);
        dup2(back[1], 1);
        close(in[0]), close(in[1]), close(back[0]), close(back[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(in[0]), close(back[1]);
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
    RewardProgram *p = xcalloc(1, sizeof *p, "reward program");
    *p = (RewardProgram){.cmd = xstrdup(cmd), .pid = pid, .to = in[1], .from = back[0], .timeout_s = timeout_s};
    *out = p;
    return 0;
}

// Ends the program (one that has exited keeps its own status) and says how it ended.
static void reap(RewardProgram *p, char *how, size_t cap) {
    if (p->pid == 0) return;
    kill(p->pid, SIGKILL);
    int status = 0;
    snprintf(how, cap, "has stopped");
    if (waitpid(p->pid, &status, 0) == p->pid) {
        if (WIFEXITED(status)) snprintf(how, cap, "exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status)) snprintf(how, cap, "was ended by signal %d", WTERMSIG(status));
    }
    p->pid = 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// One line of the program's stdout into line (cap bytes, NUL-terminated, no
// newline), waiting at most until `deadline`; 0, or -1 with *why: 'e' end of
// output, 't' time limit, 'l' a line longer than the buffer.
static int read_line(RewardProgram *p, double deadline, char *line, size_t cap, char *why) {
    for (;;) {
        char *nl = memchr(p->buf, '\n', p->used);
        if (nl) {
            const size_t n = (size_t)(nl - p->buf);
            const size_t keep = n < cap ? n : cap - 1;
            memcpy(line, p->buf, keep);
            line[keep] = 0;
            memmove(p->buf, nl + 1, p->used - n - 1);
            p->used -= n + 1;
            return 0;
        }
        if (p->used == sizeof p->buf) return *why = 'l', -1;
        const double left = deadline - now_s();
        if (left <= 0) return *why = 't', -1;
        struct pollfd pfd = {p->from, POLLIN, 0};
        const int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) continue;   // the deadline check above decides
        const ssize_t got = read(p->from, p->buf + p->used, sizeof p->buf - p->used);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return *why = 'e', -1;
        p->used += (size_t)got;
    }
}

// The answer: a number alone, or an object with a number under "reward".
static int parse_answer(const char *line, double *reward) {
    char *end;
    const double v = strtod(line, &end);
    while (*end == ' ' || *end == '\t' || *end == '\r') end++;
    if (end != line && *end == 0) return *reward = v, 0;
    json_t *o = json_loads(line, 0, NULL), *r = o ? json_object_get(o, "reward") : NULL;
    const int ok = json_is_number(r);
    if (ok) *reward = json_number_value(r);
    json_decref(o);
    return ok ? 0 : -1;
}

int reward_program_score(RewardProgram *p, const char *id, const char *prompt, const char *completion,
                         const char *reference, double *reward, PtError *e) {
    char how[64];
    if (p->pid == 0) return pt_fail(e, "reward program '%s' has stopped; completion %s not scored", p->cmd, id);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "prompt", prompt, "completion", completion, "reference",
                          reference ? reference : "");
    if (!o) return pt_fail(e, "completion %s: its text is not valid UTF-8, so it cannot go to reward program '%s'", id,
                           p->cmd);
    char *json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    const size_t n = strlen(json) + 1;   // the line and its newline
    char *text = xmalloc(n + 1, "reward program line");
    memcpy(text, json, n - 1);
    text[n - 1] = '\n', text[n] = 0;
    free(json);
    // Its stdin does not block: a program that stops reading runs into the time limit, not pocket into a write.
    const double deadline = now_s() + p->timeout_s;
    char why = 0;
    for (size_t done = 0; done < n && !why;) {
        const ssize_t w = write(p->to, text + done, n - done);
        if (w >= 0) done += (size_t)w;
        else if (errno == EAGAIN) {
            struct pollfd pfd = {p->to, POLLOUT, 0};
            const double left = deadline - now_s();
            if (left <= 0) why = 't';
            else poll(&pfd, 1, (int)(left * 1000) + 1);
        } else if (errno != EINTR) why = 'e';   // EPIPE: it has exited
    }
    free(text);
    char line[256];
    if (!why) read_line(p, deadline, line, sizeof line, &why);
    if (why) {
        if (why == 't') {
            reap(p, how, sizeof how);
            return pt_fail(e, "reward program '%s' gave no reward for completion %s within %g s (it was stopped)",
                           p->cmd, id, p->timeout_s);
        }
        if (why == 'l') {
            reap(p, how, sizeof how);
            return pt_fail(e, "reward program '%s' answered completion %s with a line of over %zu bytes, not a number",
                           p->cmd, id, sizeof p->buf);
        }
        reap(p, how, sizeof how);
        return pt_fail(e, "reward program '%s' %s before it scored completion %s", p->cmd, how, id);
    }
    // A wrong answer stops it too: the run it serves stops on the first failure.
    if (parse_answer(line, reward)) {
        reap(p, how, sizeof how);
        return pt_fail(e, "reward program '%s' answered completion %s with '%.80s', not a number or {\"reward\": "
                          "number}", p->cmd, id, line);
    }
    if (!isfinite(*reward)) {
        reap(p, how, sizeof how);
        return pt_fail(e, "reward program '%s' answered completion %s with %g, not a finite number", p->cmd, id,
                       *reward);
    }
    return 0;
}

void reward_program_stop(RewardProgram *p) {
    if (!p) return;
    close(p->to);
    for (int i = 0; i < 50 && p->pid; i++) {   // a second for it to see its stdin end
        int status;
        if (waitpid(p->pid, &status, WNOHANG) == p->pid) p->pid = 0;
        else usleep(20000);
    }
    char how[64];
    reap(p, how, sizeof how);
    close(p->from);
    free(p->cmd);
    free(p);
}
