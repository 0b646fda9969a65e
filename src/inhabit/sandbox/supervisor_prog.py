"""The program that runs as PID 1 of a bwrap sandbox and starts each exec's command (never imported).

`inhabit.sandbox.supervisor` sends this file's text over the control socket to `python3 -I -S -c`
inside the sandbox, so it uses the standard library only, runs on Python 3.8+, imports nothing of
inhabit and writes no file. It imports only modules built in C (`_socket`, `_signal`, `_ctypes`,
`marshal`...): `socket`, `signal`, `json` and `ctypes` would triple its start-up time (enum and re).
It must stay small: read it whole before changing it.

Control channel: an AF_UNIX SOCK_SEQPACKET socket inherited as fd `argv[1]` (no path, so nothing
in the sandbox's filesystem names it), close-on-exec here, so no command inherits it. This process
makes itself non-dumpable, so a sandboxed process (same uid, no capabilities) cannot open
/proc/1/fd/*, read /proc/1/mem nor ptrace it; as PID 1 of its pid namespace it receives no signal
from inside but the SIGCHLD it handles (which only makes it reap). Its children share that.

Per request (a marshal'd dict `{"id", "argv", "env", "cwd", "rlimits", "stdin"}`) with the fds (stdin or none, stdout, stderr):
fork an exec-init E (child subreaper), which spawns the command C (own session, the fds as 0-2,
default signals, the exec's rlimits) and waits for it. When C exits, E kills whatever C left
(everything orphaned below a subreaper reparents to it: setsid, double fork), reaps it, and only
then reports C's wait status (`R id status`): nothing started by an exec outlives it. `{"kill": id}` SIGKILLs that
E; a killed E's processes reparent here, and any child of this process that is not a live E is
killed on sight, so a lost E (killed from inside, e.g. `kill -9 -1`) leaves nothing either and
is reported as `L id`. `{"id", "service": 1, "argv", "env"}` with one fd starts a service (see
`_start_service`; reply `S id 0`): the warm pytest worker, which runs this same program's loop
with its own `_spawn`. Replies are plain ASCII, so the host never unmarshals what comes from here.
"""

import _ctypes
import _signal as signal
import _socket
import marshal
import os
import resource
import select
import sys
import time

PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_CHILD_SUBREAPER = 4, 15, 36


_PRCTL = []


def _prctl(option, value):
    if not _PRCTL:  # looked up once, before the first fork
        _PRCTL.append(_ctypes.dlsym(_ctypes.dlopen(None), "prctl"))
    if _ctypes.call_function(_PRCTL[0], (option, value, 0, 0, 0)) != 0:
        raise OSError(f"prctl({option}) failed")


def _children(ppid):
    """Pids whose parent is `ppid` (no /proc/*/children on every kernel: scan stat)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/" + entry + "/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(b")", 1)[1].split()[1]) == ppid:
                found.append(int(entry))
    return found


def _reap():
    """Reap every exited child; returns {pid: wait status}."""
    done = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = status


def _which(name, path):
    """What the shell would run for `name`: (path, None), or (None, (exit code, its message))."""
    if "/" in name:
        return name, None
    denied = False
    for d in path.split(":"):
        p = (d or ".") + "/" + name
        if os.path.isfile(p):
            if os.access(p, os.X_OK):
                return p, None
            denied = True
    return None, (126, "Permission denied") if denied else (127, "not found")


def _prepare(req):
    """C's working directory and rlimits, set on E first (E uses next to no CPU time itself, and
    may only lower its limits, as C would). The warm pytest worker's E uses it too."""
    os.chdir(req["cwd"])
    for what, soft, hard in req["rlimits"]:  # hard None: keep it (it may only go down)
        try:
            resource.setrlimit(what, (soft, resource.getrlimit(what)[1] if hard is None else hard))
        except (ValueError, OSError):
            pass


def _sigdef():
    return [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


def _spawn(req, fds):
    """Start the command C; returns its pid, or the wait status of a command that could not start.

    posix_spawn (a vfork: no copy of this process): a new session, the exec's pipes as 0-2, every
    signal default and none blocked."""
    _prepare(req)
    stdin = fds[0] if req["stdin"] else os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    argv, env = req["argv"], req["env"]
    path, failed = _which(argv[0], env.get("PATH", "/usr/bin:/bin"))
    if path is not None:
        dup2 = os.POSIX_SPAWN_DUP2
        kw = {
            "file_actions": [(dup2, stdin, 0), (dup2, fds[-2], 1), (dup2, fds[-1], 2)],
            "setsid": True,
            "setsigmask": (),
            "setsigdef": _sigdef(),
        }
        try:
            return os.posix_spawn(path, argv, env, **kw)
        except OSError as e:
            if e.errno == 8:  # ENOEXEC: no #! line, so the shell runs it as a script (as dash does)
                try:
                    return os.posix_spawn("/bin/sh", ["/bin/sh", path, *argv[1:]], env, **kw)
                except OSError:
                    pass
            failed = (127, "not found") if e.errno == 2 else (126, "Permission denied")
    os.write(fds[-1], f"sh: 1: {argv[0]}: {failed[1]}\n".encode())
    return -(failed[0] << 8)  # a wait status, negative so as not to look like a pid


def _start_service(req, fds):
    """Start a service S (the warm pytest worker, see `inhabit.sandbox.warm`): a child of this
    process that belongs to no exec, so it outlives them; it ends when its channel closes, when
    something kills it, or with this process (the namespace). Its channel, fds[0], becomes its
    fd whose number is appended to its argv; 0-2 are /dev/null. Returns its pid."""
    path, failed = _which(req["argv"][0], req["env"].get("PATH", "/usr/bin:/bin"))
    if path is None:
        raise OSError(failed[1])
    null = "/dev/null"
    os.set_inheritable(fds[0], True)  # closed here right after: no later child inherits it
    return os.posix_spawn(
        path,
        [*req["argv"], str(fds[0])],
        req["env"],
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0),
        ],
        setsid=True,
        setsigmask=(),
        setsigdef=_sigdef(),
    )


def _say_signal(stderr, status):
    """What the one-bwrap-per-exec path's init shell (dash) says when its command dies of a signal."""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) not in (signal.SIGINT, signal.SIGPIPE):
        text = signal.strsignal(os.WTERMSIG(status)) or f"Signal {os.WTERMSIG(status)}"
        try:
            os.write(stderr, (text + (" (core dumped)" if os.WCOREDUMP(status) else "") + "\n").encode())
        except OSError:
            pass


def _exec_init(ctl, req, fds):
    """In the forked child E: run the command, kill what it left, report its status."""
    signal.set_wakeup_fd(-1)  # the supervisor's; E waits by blocking
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_NAME, b"init")  # not `python3` (`pkill python3` spares it), nor a tell
        try:
            pid = _spawn(req, fds)
        except OSError as e:  # e.g. the process limit
            ctl.send(b"E %d %s" % (req["id"], str(e).encode()))
            os._exit(0)
        for fd in fds[:-1]:
            os.close(fd)
        status = None if pid > 0 else -pid
        while status is None:
            got, st = os.waitpid(-1, 0)
            if got == pid:
                status = st
        _say_signal(fds[-1], status)
        os.close(fds[-1])
        while True:  # orphans of C are our children now; each round kills one more level
            try:
                got = os.waitpid(-1, os.WNOHANG)[0]
            except ChildProcessError:
                break  # none left (the common case, without a scan of /proc)
            if got == 0:
                for child in _children(os.getpid()):
                    try:
                        os.kill(child, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.0005)  # killed, not yet dead
        ctl.send(b"R %d %d" % (req["id"], status))
        os._exit(0)
    finally:
        os._exit(1)  # not reported: the supervisor reports this exec as lost


def main(ctl):
    """Serve requests on the control socket `ctl` until the host closes it."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_IGN)
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_NAME, b"init")
    os.set_inheritable(ctl.fileno(), False)
    for name in os.listdir("/proc/self/fd"):  # e.g. the user namespace fd bwrap was given
        if int(name) > 2 and int(name) != ctl.fileno():
            try:
                os.close(int(name))
            except OSError:
                pass
    wake_r, wake_w = os.pipe()
    for w in (wake_r, wake_w):
        os.set_blocking(w, False)
        os.set_inheritable(w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    inits = {}  # E's pid -> request id
    services = set()  # pids of live services (see _start_service)
    ctl.send(b"ready")
    while True:
        ready = select.select([ctl, wake_r], [], [])[0]
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        if ctl in ready:
            msg, anc, _, _ = ctl.recvmsg(4 << 20, _socket.CMSG_SPACE(4 * 3))
            if not msg:  # the host closed the channel: the sandbox is closing
                for pid in services:  # reaped here, so their CPU time is counted as ours
                    try:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                    except OSError:
                        pass
                return
            fds = []
            for level, kind, data in anc:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    fds += [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data), 4)]
            for f in fds:
                os.set_inheritable(f, False)
            req = marshal.loads(msg)
            if "kill" in req:
                for pid, rid in inits.items():
                    if rid == req["kill"]:
                        os.kill(pid, signal.SIGKILL)
            elif req.get("service"):
                try:
                    services.add(_start_service(req, fds))
                    ctl.send(b"S %d 0" % req["id"])
                except OSError as e:
                    ctl.send(b"E %d %s" % (req["id"], str(e).encode()))
                for f in fds:
                    os.close(f)
            else:
                try:
                    pid = os.fork()
                except OSError as e:  # e.g. the process limit
                    for f in fds:
                        os.close(f)
                    ctl.send(b"E %d %s" % (req["id"], str(e).encode()))
                    continue
                if pid == 0:
                    _exec_init(ctl, req, fds)
                inits[pid] = req["id"]
                for f in fds:
                    os.close(f)
        lost = []
        reaped = _reap()
        ended = [p for p in reaped if p in services]  # a service died: what it left dies too
        services.difference_update(ended)
        _collect(inits, reaped, lost)
        if lost or ended:
            _sweep(inits, lost, services)
        for rid in lost:  # E was killed (by the host's kill or from inside) before it reported
            ctl.send(b"L %d" % rid)


def _collect(inits, reaped, lost):
    """Forget the Es among `reaped`; the ids of those that exited without reporting go to `lost`."""
    for pid, status in reaped.items():
        rid = inits.pop(pid, None)
        if rid is not None and status != 0:
            lost.append(rid)


def _sweep(inits, lost, services=()):
    """Kill every child of ours that is not a live E or service (what a killed E or service
    left), until none is left."""
    while True:
        strays = [p for p in _children(os.getpid()) if p not in inits and p not in services]
        if not strays:
            return
        for p in strays:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.0005)  # killed, maybe not yet dead
        _collect(inits, _reap(), lost)


# Run by the bootstrap (`BOOTSTRAP` in inhabit.sandbox.supervisor), which received this text on the
# control socket and holds that socket as `_ctl`.
if __name__ == "__main__":
    main(globals()["_ctl"])
