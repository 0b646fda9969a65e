/* The root launcher of bwrap sandboxes (inhabit.sandbox.bwrap_sandbox), in one exec.
 *
 * Run as root by the provider, it does what a shell, nsenter and `env --default-signal` did in
 * three execs before bwrap, in the same order, and then execs bwrap (the rest of its argv):
 *
 *   _launcher [-g FILE]... [-f FD] [-r RES:SOFT:HARD]... [-m NS [-v OWN:VIEW:ALL]] [-u UID:GID]
 *             [-p PID] -- PROGRAM ARGS...
 *
 *   -g FILE           join a cgroup: write this process's pid to FILE (a cgroup.procs file)
 *   -f FD             open /proc/<parent>/fd/FD (the provider's user namespace fd) as fd 3,
 *                     for bwrap's `--userns 3`, as the shell's `exec 3</proc/$PPID/fd/FD` did
 *   -r RES:SOFT:HARD  setrlimit(RES, SOFT, HARD); RES is the resource number, `u` is unlimited
 *   -m NS             enter the mount namespace NS (/proc/<holder>/ns/mnt: the launch namespace)
 *   -v OWN:VIEW:ALL   then, in a private copy of it, show the sandbox's own volume OWN at VIEW
 *                     and detach ALL, the mount point holding every sandbox's volume (below)
 *   -u UID:GID        drop to UID/GID: no supplementary groups, real, effective and saved ids all
 *                     set, which leaves no capabilities (what nsenter's -S/-G and setpriv's
 *                     --reuid/--regid/--clear-groups did)
 *   -p PID            die with PID, the process that started the launcher: after the uid drop,
 *                     set the parent-death signal to SIGKILL and exit if the parent is already
 *                     not PID (it died before the signal was set)
 *
 * Why -p: bwrap's --die-with-parent takes effect only once bwrap runs. A provider killed in the
 * milliseconds before (while the launcher joins cgroups and enters namespaces) left a sandbox
 * running with nobody to stop it. The signal is kept across the exec of bwrap (not set-uid), and
 * must be set after the drop because the kernel clears it on every change of credentials.
 *
 * Why -v: bwrap re-reads its whole mount table after each of its 17 bind steps, and the launch
 * namespace's table holds the volume and overlay of every sandbox in flight (64 mounts with 32 in
 * flight, against ~25 of its own): most of what bwrap read was other sandboxes' mounts. The copy
 * costs one unshare and three mount calls; every mount in it is made a slave first, so nothing
 * done in it reaches the launch namespace or the host. bwrap then binds the sandbox's /tmp, home
 * and workspace from VIEW. The copy ends with bwrap's own process (the sandbox's processes live
 * in bwrap's namespace, made from it).
 *
 * Then every signal disposition is set to default and every signal unblocked (a clean start
 * whatever state inhabit was started in; `env --default-signal` did that only when something
 * was inherited), and PROGRAM is executed with the same environment.
 *
 * Why: a one-shot sandbox (create, one command, close) paid ~3 ms of CPU for the three execs
 * of sh, nsenter and env (dynamic loading and start-up of each), a quarter of what it costs in
 * all; see docs/results.md, "One bwrap per sandbox". Built at install (setup.py) and optional:
 * where it is not built the provider starts bwrap through the shell path as before.
 *
 * Any failure before the exec prints one line starting with "inhabit: could not launch the
 * sandbox" and exits 125, which the provider reads as a launch failure (no command ran).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#define LAUNCH_FAILED 125
#define USERNS_FD 3

#define FAILED "inhabit: could not launch the sandbox: " /* bwrap_sandbox._LAUNCH_FAILED */

static void fail(const char *what, const char *arg) {
    fprintf(stderr, FAILED "%s %s: %s\n", what, arg, strerror(errno));
    exit(LAUNCH_FAILED);
}

static void usage(const char *why) {
    fprintf(stderr, FAILED "%s\n", why);
    exit(LAUNCH_FAILED);
}

/* A non-negative decimal number, or `u` (RLIM_INFINITY where `unlimited` is set). */
static unsigned long long number(const char *s, char **end, int unlimited) {
    if (unlimited && *s == 'u') {
        *end = (char *)s + 1;
        return RLIM_INFINITY;
    }
    if (*s < '0' || *s > '9') usage("a malformed number");
    errno = 0;
    unsigned long long v = strtoull(s, end, 10);
    if (errno) usage("a number out of range");
    return v;
}

static void join_cgroup(const char *file) {
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail("open", file);
    if (write(fd, pid, (size_t)n) != n) fail("write", file);
    if (close(fd) != 0) fail("close", file);
}

static void reopen_userns(const char *arg) {
    char *end;
    unsigned long long fd = number(arg, &end, 0);
    if (*end) usage("-f takes a file descriptor number");
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%llu", (int)getppid(), fd);
    int opened = open(path, O_RDONLY); /* inherited by bwrap, as the shell's `exec 3<` was */
    if (opened < 0) fail("open", path);
    if (opened != USERNS_FD) {
        if (dup2(opened, USERNS_FD) < 0) fail("dup2", path);
        close(opened);
    }
}

static void set_limit(const char *arg) {
    char *end;
    struct rlimit r;
    unsigned long long what = number(arg, &end, 0);
    if (*end != ':') usage("-r takes RES:SOFT:HARD");
    r.rlim_cur = (rlim_t)number(end + 1, &end, 1);
    if (*end != ':') usage("-r takes RES:SOFT:HARD");
    r.rlim_max = (rlim_t)number(end + 1, &end, 1);
    if (*end) usage("-r takes RES:SOFT:HARD");
    if (setrlimit((int)what, &r) != 0) fail("setrlimit", arg);
}

static void enter_namespace(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNS) != 0) {
        fprintf(stderr, FAILED "entering the launch namespace %s: %s\n", path, strerror(errno));
        exit(LAUNCH_FAILED);
    }
    close(fd);
}

/* -v OWN:VIEW:ALL (paths hold no ':', the provider's scratch paths never do). */
static void private_view(char *arg) {
    char *own = arg, *view = strchr(own, ':'), *all = view ? strchr(view + 1, ':') : NULL;
    if (view == NULL || all == NULL) usage("-v takes OWN:VIEW:ALL");
    *view++ = '\0';
    *all++ = '\0';
    if (unshare(CLONE_NEWNS) != 0) fail("unshare", "CLONE_NEWNS");
    /* Slaves only: an unmount in a copy of a shared mount would propagate to its peers. */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) fail("make slave", "/");
    if (mount(own, view, NULL, MS_BIND | MS_REC, NULL) != 0) fail("bind", own);
    if (umount2(all, MNT_DETACH) != 0) fail("detach", all);
}

static void drop_to(const char *arg) {
    char *end;
    unsigned long long uid = number(arg, &end, 0);
    if (*end != ':') usage("-u takes UID:GID");
    unsigned long long gid = number(end + 1, &end, 0);
    if (*end) usage("-u takes UID:GID");
    if (setgroups(0, NULL) != 0 || setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0 ||
        setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) {
        fprintf(stderr, FAILED "dropping to uid %llu, gid %llu: %s\n", uid, gid, strerror(errno));
        exit(LAUNCH_FAILED);
    }
}

static void die_with(const char *arg) {
    char *end;
    unsigned long long parent = number(arg, &end, 0);
    if (*end) usage("-p takes a process id");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl", "PR_SET_PDEATHSIG");
    /* Set after the parent died: no signal will come, and nobody waits for this process. */
    if ((unsigned long long)getppid() != parent) usage("the process that started it has exited");
}

static void clean_signals(void) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    /* SIGKILL, SIGSTOP and the C library's own signals refuse the change: nothing to reset. */
    for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

int main(int argc, char **argv) {
    const char *ns = NULL, *ids = NULL, *parent = NULL;
    char *view = NULL;
    int i = 1;
    /* Steps run in the order given for -g, -f and -r (as the shell's did); -m, -v, -u, -p after. */
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *opt = argv[i];
        if (i + 1 >= argc || opt[0] != '-' || opt[1] == '\0' || opt[2] != '\0') usage("a malformed option");
        const char *arg = argv[++i];
        switch (opt[1]) {
            case 'g': join_cgroup(arg); break;
            case 'f': reopen_userns(arg); break;
            case 'r': set_limit(arg); break;
            case 'm': ns = arg; break;
            case 'v': view = argv[i]; break;
            case 'u': ids = arg; break;
            case 'p': parent = arg; break;
            default: usage("an unknown option");
        }
    }
    if (i + 1 >= argc) usage("no program to run after --");
    if (ns != NULL) enter_namespace(ns);
    if (view != NULL) {
        if (ns == NULL) usage("-v needs -m"); /* the host's own mounts may be shared */
        private_view(view);
    }
    if (ids != NULL) drop_to(ids);
    if (parent != NULL) die_with(parent);
    clean_signals();
    execv(argv[i + 1], &argv[i + 1]);
    fprintf(stderr, FAILED "starting %s: %s\n", argv[i + 1], strerror(errno));
    return LAUNCH_FAILED;
}
