"""The warm pytest worker's program: runs inside a sandbox, forks one fresh pytest per run (never imported).

`inhabit.sandbox.warm` starts it as a service of the sandbox's supervisor (`supervisor_prog.py`)
with the interpreter and the start-up environment a cold `python -m pytest` of the run would
get, minus the workspace (cwd "/", no `''` on sys.path, no PYTHONPATH), and sends it over its
own control socket (inherited as fd `argv[1]`, no path): this text, then the supervisor program's
text, then a marshal'd config `{"workspace": path}`. Standard library only, Python 3.8+.

Warm-up: imports pytest, its built-in plugins and every `pytest11` entry-point plugin whose module
lies outside the workspace (found by the path finder before it is imported: nothing of the
workspace runs here), as pytest's own start would, which also fills importlib.metadata's caches.
If a module of the workspace got imported all the same (an editable install's import hook), it
says `X <why>` and exits: that sandbox runs its tests cold. Then it runs the supervisor's own
loop (`main`): per request an exec-init E (subreaper, kills and reaps the run's whole subtree
before it reports, the same code as the supervisor's) whose command C is a fork of this process
set up as a fresh `python -m pytest` / `pytest` (see `_child`), not a new interpreter.

Per request, E first checks that no module this worker imported would be shadowed in the cold
run by a file or folder of the same name in the run's first import path entry (the cwd for
`-m`, the script's folder) or its PYTHONPATH, nor a `sitecustomize` in PYTHONPATH: then it
answers `F <id> <why>` and the host runs that test run cold.

Protects against: a later run learning an earlier run's secrets or state (no run's key or files
ever reach this process; each run is a fork that exits), code under test changing this process
(non-dumpable like PID 1, so no ptrace, /proc/<pid>/mem or /proc/<pid>/fd; no fd of its channel
survives into C; modules it imports later come from the read-only environment), a run seeing
the worker's channel (closed in C before any code of the run). Does not protect against: a
sandboxed process killing or stopping it (same uid): the host then restarts it once, or runs
cold; what a cold run would not either.
"""

import marshal
import os
import sys

PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_CHILD_SUBREAPER = 4, 15, 36
_CTL = globals()["_ctl"]  # the bootstrap's control socket
_SUP = {"__name__": "inhabit_supervisor"}
exec(_CTL.recv(1 << 20), _SUP)
_CFG = marshal.loads(_CTL.recv(1 << 16))
_SUP["_prctl"](PR_SET_DUMPABLE, 0)  # before anything else lands in memory
_SUP["_prctl"](PR_SET_CHILD_SUBREAPER, 1)  # a killed E's orphans come here and are swept

_REST = list(sys.path)  # the bootstrap removed sys.path[0]; PYTHONPATH is unset here
_WS = os.path.realpath(_CFG["workspace"])


def _inside(path):
    if not path:
        return False
    path = os.path.realpath(path)
    return path == _WS or path.startswith(_WS + os.sep)


def _warm_up():
    """Import what `pytest` imports before it reads the workspace; the reason not to serve, or None."""
    import importlib
    import importlib.machinery
    import importlib.metadata

    for entry in _REST:
        if _inside(entry or "."):
            return "the workspace is on the interpreter's own import path"
    import _pytest.config
    import pytest  # noqa: F401

    for name in _pytest.config.default_plugins:
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != "pytest11":
                continue
            top = ep.value.split(":")[0].split(".")[0].strip()
            spec = importlib.machinery.PathFinder.find_spec(top)
            where = (spec.origin if spec else None) or ""
            if (
                spec is None
                or _inside(where)
                or any(_inside(p) for p in spec.submodule_search_locations or ())
            ):
                continue  # not found the plain way, or the workspace's: the run imports it itself
            try:
                ep.load()
            except Exception:  # the run will fail the same way on its own
                pass
    for mod in list(sys.modules.values()):
        if _inside(getattr(mod, "__file__", None) or ""):
            return "a module of the workspace was imported at warm-up: " + mod.__name__
    return None


def _top_level():
    """The top-level names of the modules loaded from files here (what a run could shadow)."""
    return sorted({n.split(".")[0] for n, m in sys.modules.items() if getattr(m, "__file__", None)})


def _shadowed(dirs):
    """A file or folder in `dirs` that a cold run would import in place of one loaded here."""
    import importlib.machinery

    suffixes = importlib.machinery.all_suffixes()
    for d in dirs:
        try:
            names = set(os.listdir(d or "."))
        except OSError:
            continue
        for name in _TOP:
            folder = name in names and os.path.isdir(os.path.join(d, name))
            if folder or any(name + s in names for s in suffixes):
                return f"{os.path.join(d, name)} shadows {name}"
    return None


def _spawn(req, fds):
    """E's `_spawn` (see supervisor_prog): fork C; or answer F and end when this run must be cold."""
    _CTL.send(b"A %d 0" % req["id"])  # taken: from here on, a lost run is a run that ran
    _SUP["_prepare"](req)
    warm = req["warm"]
    cwd = os.getcwd()
    first = cwd if warm["script"] is None else os.path.dirname(os.path.realpath(warm["script"]))
    pythonpath = [os.path.join(cwd, p) for p in warm["pythonpath"]]
    why = _shadowed([first, *pythonpath])
    for d in pythonpath:
        if why is None and any(os.path.exists(os.path.join(d, "sitecustomize" + s)) for s in (".py", ".pyc")):
            why = "sitecustomize in PYTHONPATH"
    if why is not None:
        _CTL.send(b"F %d %s" % (req["id"], why.encode(errors="replace")[:300]))
        os._exit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(req, fds, first, warm)
    return pid


def _child(req, fds, first, warm):
    """C, and its child G: become what `sh -c "python -m pytest ARGS"` (or the `pytest` script)
    would be at its start: C the shell, G the interpreter."""
    import signal

    code = 1
    try:
        os.setsid()  # C's own session, as each exec's command has
        stdin = fds[0] if req["stdin"] else os.open("/dev/null", os.O_RDONLY)
        for i, fd in enumerate((stdin, fds[-2], fds[-1])):
            os.dup2(fd, i)
        _CTL.detach()  # its fd number will be reused: the object must never close it
        os.closerange(3, 1 << 20)  # every fd but 0-2: the channel, the pipes' copies
        for s in _SUP["_sigdef"]():
            try:
                signal.signal(s, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts up
        for s in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(s, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        _SUP["_prctl"](PR_SET_DUMPABLE, 1)  # a fresh process of this uid is dumpable
        _SUP["_prctl"](PR_SET_NAME, b"sh")
        # As in a cold run, the test process is not its session's leader: that is the shell
        # which started it (here C, which waits for it and exits as a shell would).
        pid = os.fork()
        if pid:
            while True:
                got, status = os.waitpid(pid, 0)
                if got == pid:
                    break
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)
        _SUP["_prctl"](PR_SET_NAME, os.path.basename(req["argv"][0]).encode()[:15])
        os.environ.clear()
        os.environ.update(req["env"])
        # PYTHONPATH's entries as the interpreter makes them: relative ones joined to the cwd.
        sys.path[:] = [first, *(os.path.join(os.getcwd(), p) for p in warm["pythonpath"]), *_REST]
        sys.argv[:] = list(req["argv"])
        # Nothing a run does reaches this process, so its state (warnings filters, caches) is
        # what the cold run has after the same imports; but `random` was seeded once, at import.
        if "random" in sys.modules:
            sys.modules["random"].seed()
        import types

        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
    except BaseException:
        os._exit(code)
    try:
        if warm["script"] is None:
            import runpy

            sys.argv[0] = "-m"  # argv is [python, ARGS]; runpy puts pytest/__main__.py here
            runpy._run_module_as_main("pytest")
        else:
            with open(warm["script"], "rb") as f:
                source = f.read()
            main.__file__ = warm["script"]
            exec(compile(source, warm["script"], "exec"), main.__dict__)
        code = 0
    except SystemExit as e:
        code = _exit_status(e.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    _finish(code)


def _exit_status(value):
    """What the interpreter exits with for SystemExit(value)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    try:
        sys.stderr.write(str(value) + "\n")
    except Exception:
        pass
    return 1


def _finish(code):
    """The interpreter's own exit: wait for non-daemon threads, atexit, flush; then end."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            code = code or 120
    os._exit(code)


_WHY = _warm_up()
if _WHY is not None:
    _CTL.send(b"X 0 " + _WHY.encode(errors="replace")[:300])
    os._exit(0)
_TOP = _top_level()
_SUP["_spawn"] = _spawn
_SUP["main"](_CTL)
