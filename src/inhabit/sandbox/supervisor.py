"""Host side of a bwrap sandbox's supervisor: bwrap starts once, each exec is a fork inside it.

`Supervisor.start` runs bwrap (the caller's argv) with `python3 -I -S -c BOOTSTRAP` as PID 1 of the
sandbox's namespaces, hands it the program in `supervisor_prog.py` (read that docstring for the
inside) over a SOCK_SEQPACKET socketpair, and waits for its "ready". `run` sends one request with
the exec's pipes attached (SCM_RIGHTS) and reads the output here with the same capture, caps and
timeout handling as `runner.run_capped`: the command's stdout/stderr are pipes whose other end this
process holds, exactly as when bwrap was the child.

Protects against: commands outliving their exec (the supervisor's exec-init kills the command's
whole subtree before it reports), commands reaching the control socket (close-on-exec, no path,
PID 1 non-dumpable), a supervisor that stops answering (a timed-out exec whose kill is not
confirmed within `KILL_GRACE_S` takes the whole supervisor down, which ends the pid namespace).
Does not protect against: what a per-exec bwrap would not either (see `inhabit.sandbox.bwrap`).
A request larger than `MAX_REQUEST` bytes (argv + env) raises `RequestTooLarge`: the caller runs
that exec the old way.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import functools
import itertools
import marshal
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from inhabit.errors import SandboxError
from inhabit.sandbox.base import ExecResult
from inhabit.sandbox.runner import _Capture, kill_group

# What PID 1 runs: take the program from the control socket (no file in the sandbox names it).
BOOTSTRAP = "import _socket,sys;_ctl=_socket.socket(fileno=int(sys.argv[1]));exec(_ctl.recv(1<<20))"
MAX_REQUEST = 1 << 20
START_TIMEOUT_S = 60.0
KILL_GRACE_S = 10.0
_FIRST_FD = 10  # above fd 3 (the user namespace bwrap gets) and the launcher shell's 0-9


@functools.lru_cache(maxsize=1)
def program() -> bytes:
    return (Path(__file__).parent / "supervisor_prog.py").read_bytes()


def inner_command(fd: int) -> list[str]:
    """The command bwrap runs as PID 1, given the control socket's fd number."""
    return ["python3", "-I", "-S", "-B", "-c", BOOTSTRAP, str(fd)]


class SupervisorGone(SandboxError):
    """The supervisor could not start or died; `stderr` is what it (or bwrap) last said."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


class RequestTooLarge(SandboxError):
    """The request does not fit one control message: run this exec with its own bwrap."""


class _Pipe(asyncio.Protocol):
    """Feeds one of the exec's output pipes into the shared `_Capture` as fd 1 or 2."""

    def __init__(self, cap: _Capture, fd: int):
        self.cap, self.fd = cap, fd

    def data_received(self, data: bytes) -> None:
        self.cap.pipe_data_received(self.fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.cap.pipe_connection_lost(self.fd, exc)


def exit_code(status: int) -> int:
    """An exec's exit code from its wait status: -N for signal N and, as with bwrap's init shell
    (whose `exit $?` turns a signal into 128+N), also for an exit status of 128+N."""
    code = os.waitstatus_to_exitcode(status)
    return -(code - 128) if 128 < code < 160 else code


class WarmFallback(SandboxError):
    """The warm pytest worker declined this run (`F`): run it cold. The message says why."""


class Channel:
    """The request/reply side of a control socket: the supervisor's, or a warm worker's (which
    runs the supervisor's own loop, see `inhabit.sandbox.warm`)."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self.sock, self.loop = sock, loop
        self._pending: dict[int, asyncio.Future[tuple[str, str]]] = {}
        self._ids = itertools.count(1)
        self.gone: str | None = None  # why it is no longer usable
        self._started: set[int] = set()  # warm runs whose E said "A"
        loop.add_reader(sock.fileno(), self._on_message)

    @property
    def stderr(self) -> str:
        return ""

    @property
    def alive(self) -> bool:
        return self.gone is None

    def _on_message(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as e:
                self._lost(f"control socket error: {e}")
                return
            if not data:
                self._lost("the sandbox supervisor exited")
                return
            # "ready", "R <id> <wait status>", "L <id>" (lost), "E <id> <why>" (could not fork),
            # "S <id> 0" (service started), "F <id> <why>" (warm run declined), "X 0 <why>",
            # "A <id> 0" (a warm run's E started)
            kind, _, rest = data.decode(errors="replace").partition(" ")
            rid, _, value = rest.partition(" ")
            if kind == "A":  # a warm worker's E took the request: the run has started
                self._started.add(int(rid) if rid.isdigit() else 0)
                continue
            fut = self._pending.get(int(rid) if rid.isdigit() else 0)
            if fut is not None and not fut.done():
                fut.set_result((kind, value))

    def _lost(self, why: str) -> None:
        """No more requests: every exec in flight ends as killed."""
        if self.gone is None:
            self.gone = why
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self._ended()
        for fut in self._pending.values():
            if not fut.done():
                with contextlib.suppress(RuntimeError):  # its loop closed (cleanup at exit)
                    fut.set_result(("L", why))

    def _ended(self) -> None:
        """What else ends with the channel."""

    def kill(self) -> None:
        self._lost("killed")

    def _send_kill(self, rid: int) -> None:
        if self.gone is None:
            with contextlib.suppress(OSError):
                self.sock.send(marshal.dumps({"kill": rid}), socket.MSG_DONTWAIT)

    async def run(
        self,
        *,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        rlimits: Sequence[tuple[int, int, int | None]],
        stdin: bytes | None,
        timeout_s: float,
        output_bytes: int,
        warm: Mapping[str, Any] | None = None,
    ) -> ExecResult:
        """One exec: same fields and the same timeout/cap/kill semantics as `run_capped`.
        `warm`: a warm worker's run (see `inhabit.sandbox.warm`); raises WarmFallback when the
        worker declines it."""
        if self.gone is not None:
            raise SupervisorGone(self.gone, self.stderr)
        rid = next(self._ids)
        req = {
            "id": rid,
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd,
            "rlimits": [list(r) for r in rlimits],
            "stdin": stdin is not None,
        }
        if warm is not None:
            req["warm"] = dict(warm)
        msg = marshal.dumps(req, 2)  # basic types only: any Python 3 reads it
        if len(msg) > MAX_REQUEST:
            raise RequestTooLarge(f"request of {len(msg)} bytes")
        loop = self.loop
        start = time.perf_counter()
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        theirs, ours = [out_w, err_w], [out_r, err_r]
        if stdin is not None:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            theirs.insert(0, in_r)
            ours.append(in_w)
        fut = self._pending[rid] = loop.create_future()
        try:
            self.sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
        except OSError as e:
            self._pending.pop(rid, None)
            for f in theirs + ours:
                os.close(f)
            if e.errno in (90, 105):  # EMSGSIZE, ENOBUFS
                raise RequestTooLarge(str(e)) from e
            stderr = self.stderr
            self._lost(f"control socket: {e}")  # the other end is gone (its EOF may not be read yet)
            raise SupervisorGone(f"control socket: {e}", stderr) from e
        for f in theirs:
            with contextlib.suppress(OSError):
                os.close(f)
        cap = _Capture(output_bytes)
        # File objects own our ends from here on (closing one twice is harmless; an fd twice is not).
        files = [os.fdopen(out_r, "rb", 0), os.fdopen(err_r, "rb", 0)]
        if stdin is not None:
            files.append(os.fdopen(in_w, "wb", 0))
        transports: list[asyncio.BaseTransport] = []
        timed_out = False
        try:
            for fd, f in ((1, files[0]), (2, files[1])):
                t, _ = await loop.connect_read_pipe(functools.partial(_Pipe, cap, fd), f)
                transports.append(t)
            if stdin is not None:
                w, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, files[2])
                transports.append(w)
                with contextlib.suppress(OSError, RuntimeError):
                    w.write(stdin)  # type: ignore[attr-defined]
                    w.close()
            try:
                reply = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            except TimeoutError:
                timed_out = True
                self._send_kill(rid)
                try:
                    reply = await asyncio.wait_for(asyncio.shield(fut), KILL_GRACE_S)
                except TimeoutError:
                    self.kill()  # it does not answer: end the whole sandbox namespace
                    reply = fut.result()
            # Nothing of the exec runs any more (its exec-init killed the rest before replying).
            await asyncio.wait([*cap.pipes_closed.values()], timeout=2.0)
        except BaseException:
            self._send_kill(rid)
            raise
        finally:
            self._pending.pop(rid, None)
            for t in transports:
                t.close()
            for f in files:
                with contextlib.suppress(OSError):
                    f.close()
        cap.finish()
        stderr = cap.text(2)
        kind, value = reply
        started = rid in self._started
        self._started.discard(rid)
        if kind == "F":
            raise WarmFallback(value)
        if kind == "L" and warm is not None and not started and not timed_out:
            # The worker died before any E took the request (killed just before): nothing ran.
            raise SupervisorGone(f"the warm worker was gone: {value}")
        if kind == "R":
            code = exit_code(int(value))
        elif kind == "E":  # the supervisor could not fork (e.g. the process limit)
            code = 1
            stderr += f"inhabit: could not start the command: {value}\n"
        else:
            code = -signal.SIGKILL
        return ExecResult(
            exit_code=code,
            stdout=cap.text(1),
            stderr=stderr,
            duration_s=time.perf_counter() - start,
            timed_out=timed_out,
            stdout_truncated=cap.truncated[1],
            stderr_truncated=cap.truncated[2],
            output_order=tuple((fd, n) for fd, n in cap.order),
        )


class Supervisor(Channel):
    """One running supervisor (one bwrap) and the execs in flight through it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_exit: Callable[[int], None],
    ):
        super().__init__(sock, loop)
        self.proc, self._on_exit_cb = proc, on_exit
        self.pgid = proc.pid
        self._stderr = b""
        self.workers: dict[Any, Any] = {}  # warm pytest workers in here (see inhabit.sandbox.warm)
        self.worker_starts: dict[Any, int] = {}  # per worker key
        self.worker_refused: dict[Any, str] = {}  # keys whose worker would not start, and why
        self._exited = loop.create_future()
        self._pidfd = os.pidfd_open(proc.pid)
        loop.add_reader(self._pidfd, self._on_exit)
        assert proc.stderr is not None
        os.set_blocking(proc.stderr.fileno(), False)
        loop.add_reader(proc.stderr.fileno(), self._on_stderr)

    async def start_service(self, argv: Sequence[str], env: Mapping[str, str]) -> socket.socket:
        """Start a service process in the sandbox (see supervisor_prog's `_start_service`); returns
        the host's end of its own control socket."""
        if self.gone is not None:
            raise SupervisorGone(self.gone, self.stderr)
        rid = next(self._ids)
        req = {"id": rid, "service": 1, "argv": list(argv), "env": dict(env)}
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host.set_inheritable(False)
        with contextlib.suppress(OSError):
            host.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_REQUEST)
        fut = self._pending[rid] = self.loop.create_future()
        try:
            msg = marshal.dumps(req, 2)
            self.sock.sendmsg(
                [msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [inside.fileno()]))]
            )
            inside.close()
            kind, value = await asyncio.wait_for(asyncio.shield(fut), START_TIMEOUT_S)
        except BaseException:
            host.close()
            inside.close()
            raise
        finally:
            self._pending.pop(rid, None)
        if kind != "S":
            host.close()
            raise SupervisorGone(f"could not start a service: {value or kind}", self.stderr)
        return host

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        preexec_fn: Callable[[], Any] | None,
        on_start: Callable[[int], None],
        on_exit: Callable[[int], None],
    ) -> Supervisor:
        """Run `argv` + `inner_command(fd)` (bwrap, up to its `--`) and wait for the supervisor."""
        loop = asyncio.get_running_loop()
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fd = fcntl.fcntl(inside.fileno(), fcntl.F_DUPFD_CLOEXEC, _FIRST_FD)
        inside.close()
        with contextlib.suppress(OSError):  # room for a request of MAX_REQUEST bytes
            host.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_REQUEST)
        try:
            proc = subprocess.Popen(
                [*argv, *inner_command(fd)],
                env=dict(env),
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(fd,),
                preexec_fn=preexec_fn,
                start_new_session=True,
            )
        except OSError as e:
            host.close()
            raise SupervisorGone(f"could not start bwrap: {e}") from e
        finally:
            os.close(fd)
        on_start(proc.pid)
        try:
            sup = cls(proc, host, loop, on_exit)
        except OSError as e:  # e.g. no pidfd_open (Linux < 5.3): the caller takes the old path
            kill_group(proc.pid)
            proc.wait()
            on_exit(proc.pid)
            host.close()
            raise SupervisorGone(f"could not watch the supervisor: {e}") from e
        ready = loop.create_future()
        sup._pending[0] = ready
        try:
            host.send(program())
            await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_S)
        except BaseException as e:
            sup.kill()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(sup._exited), 5)
            if isinstance(e, (TimeoutError, OSError)):
                raise SupervisorGone(f"the sandbox supervisor did not start: {e}", sup.stderr) from e
            raise
        if ready.result()[0] != "ready":
            raise SupervisorGone("the sandbox supervisor did not start", sup.stderr)
        return sup

    @property
    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")

    # -- events --------------------------------------------------------------------------------

    def _on_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            data = os.read(self.proc.stderr.fileno(), 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.proc.stderr.fileno())
            return
        self._stderr = (self._stderr + data)[-4096:]

    def _on_exit(self) -> None:
        self.loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._lost("bwrap exited")  # before the wait: its group id stays reserved until then
        self.proc.wait()
        self._on_exit_cb(self.pgid)
        if not self._exited.done():
            self._exited.set_result(None)

    def _ended(self) -> None:
        self.workers.clear()  # they die with the namespace
        kill_group(self.pgid)  # bwrap's own group; the namespace goes with its PID 1

    # -- control -------------------------------------------------------------------------------

    def kill(self) -> None:
        """End it now (SIGKILL to bwrap's group: its PID 1, and so the namespace, dies with it)."""
        self._lost("killed")

    async def stop(self, timeout: float = 5.0) -> bool:
        """Close the channel (the supervisor exits), wait until bwrap is gone; False on timeout."""
        if self.gone is None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), timeout)
            return True
        except TimeoutError:
            self.kill()
            return False
