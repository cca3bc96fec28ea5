"""Start the job, stream its output, forward signals, never leave a process behind.

``Supervisor`` runs one argv (a list; never a shell) and supervises it:

* **Process layout.** The child (torchrun, or an ``srun`` that runs torchrun) is
  started in a new session, so a Ctrl-C typed at ckptctl's terminal reaches
  ckptctl only, and ckptctl decides what the job gets. torchrun (torch >= 2.x,
  checked on 2.13) starts every worker in a session of its own, so signalling
  torchrun's process group does not reach the workers: the supervisor keeps a
  table of the job's descendants (``/proc``, or ``ps`` elsewhere), refreshed
  while the job runs, so it can still find workers whose torchrun has died.
* **Output.** stdout and stderr of the whole job are merged into one pipe; every
  line goes, as it arrives, to the log file (flushed per line, so ``tail -f``
  works) and to ``on_output`` (the console sink), then to ``on_line``.
* **Stopping.** ``stop()`` (any thread), ``on_line`` returning ``True``, or a
  SIGINT/SIGTERM/SIGHUP received by ckptctl sends SIGTERM to torchrun's process
  group; torchrun then sends SIGTERM to its workers and waits for them. After
  ``stop_grace_s`` the supervisor SIGKILLs torchrun and every live descendant.
  A second signal to ckptctl skips the rest of the grace period.
* **Leftovers.** When torchrun has exited, any descendant still alive (an orphaned
  worker, a stray helper process) gets SIGTERM, then SIGKILL after the grace.

Signal handlers can only be installed from the main thread: called from another
thread, the supervisor does not forward signals (the caller then owns them and
can call ``stop()``). If ckptctl itself is SIGKILLed nothing can be forwarded,
and the job runs on without its console.

The parts live by responsibility: ``jobtree`` (the job's processes and how they
are signalled), ``launch_result`` (``LaunchResult``, ``LaunchError``, the log
file) and here the ``Supervisor``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import IO, Any

from ckptctl.adapters.jobtree import (
    _JobTree,
    _pipe_holders,
    _Proc,
    _signal_group,
    _signal_pid,
    _still_running,
)
from ckptctl.adapters.launch_result import LaunchError, LaunchResult, _iso, _utcnow
from ckptctl.core.launch.plan import signal_name, signal_of

__all__ = [
    "FORWARDED_SIGNALS",
    "LineFn",
    "OutputFn",
    "Supervisor",
    "run_supervised",
]

#: The console sink: one line of job output, without its newline.
OutputFn = Callable[[str], None]
#: Sees every line after the sink; returns True to stop the job (SIGTERM, then SIGKILL).
LineFn = Callable[[str], bool]

#: Signals ckptctl forwards to the job (as SIGTERM) while it supervises one.
FORWARDED_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

# A line longer than this is delivered in pieces (a runaway progress bar must not eat memory).
_MAX_LINE_BYTES = 1 << 20
# After the child exits, how long to wait for the last output before looking for
# whoever else still holds the pipe.
_EOF_WAIT_S = 1.0
_EOF = object()


# -- the supervisor ---------------------------------------------------------------------------------


class Supervisor:
    """Run one job to the end; see the module docstring. One ``run()`` per instance."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        log_path: str | None = None,
        on_output: OutputFn | None = None,
        on_line: LineFn | None = None,
        on_start: Callable[[Supervisor], None] | None = None,
        stop_grace_s: float = 60.0,
        forward_signals: bool = True,
        ignore_hangup: bool = False,
        poll_s: float = 0.1,
        tree_refresh_s: float = 0.5,
    ) -> None:
        """
        ``env`` is added to ckptctl's environment. ``on_output`` gets every line
        (the console); ``on_line`` too, afterwards, until it first returns True
        (then the job is stopped). ``on_start`` is called once the child runs
        (``supervisor.pid`` is set). ``forward_signals`` installs SIGINT/SIGTERM/
        SIGHUP handlers for the duration of ``run()`` (main thread only).
        ``ignore_hangup``: a SIGHUP (the operator's terminal went away) is ignored
        instead of stopping the job (``recover``: a healthy resumed job must not die
        with an ssh session; the console copy of its output just stops).
        """
        if not argv:
            raise ValueError("empty argv")
        self.argv = tuple(argv)
        self.env = dict(env or {})
        self.cwd = cwd
        self.log_path = log_path
        self.on_output = on_output
        self.on_line = on_line
        self.on_start = on_start
        self.stop_grace_s = stop_grace_s
        self.forward_signals = forward_signals
        self.ignore_hangup = ignore_hangup
        self.poll_s = poll_s
        self.tree_refresh_s = tree_refresh_s

        self._proc: subprocess.Popen[bytes] | None = None
        self._tree: _JobTree | None = None
        self._ran = False
        self._stop_reason: str | None = None
        self._term_at: float | None = None
        self._kill_now = False
        self._killed = False
        self._interrupted_by: int | None = None
        self._stopped_by_callback = False
        self._callback_error: BaseException | None = None
        self._notes: list[str] = []
        self._log: IO[bytes] | None = None

    # -- public --------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The child's pid once started."""
        return self._proc.pid if self._proc is not None else None

    def stop(self, reason: str = "stop requested") -> None:
        """Ask the job to stop: SIGTERM now, SIGKILL after ``stop_grace_s``. Any thread; idempotent."""
        if self._stop_reason is not None:
            return
        self._stop_reason = reason
        self._term_at = time.monotonic()
        self._send_term()

    def run(self) -> LaunchResult:
        """Start the job, supervise it to its end, and return how it ended.

        Raises ``LaunchError`` when it cannot start. If a callback raises, the
        job is stopped (and waited for) before the exception propagates.
        """
        if self._ran:
            raise RuntimeError("a Supervisor runs once")
        self._ran = True
        previous = self._install_handlers()
        try:
            return self._run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self._log is not None:
                self._log.close()

    # -- internals -------------------------------------------------------------------------------

    def _send_term(self) -> None:
        # Called from the signal handler too: touch no shared containers here.
        proc = self._proc
        if proc is not None and proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupted_by is None:
            self._interrupted_by = signum
            self.stop(f"ckptctl received {signal_name(signum)}")
        else:
            self._kill_now = True  # a second signal: no more grace

    def _install_handlers(self) -> dict[int, Any]:
        if not self.forward_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for sig in FORWARDED_SIGNALS:
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN:
                continue  # nohup / a background job: the user asked for this signal to be ignored
            previous[sig] = current
            hangup = getattr(signal, "SIGHUP", None)
            signal.signal(sig, signal.SIG_IGN if self.ignore_hangup and sig == hangup else self._on_signal)
        return previous

    def _log_write(self, data: bytes) -> None:
        if self._log is None:
            return
        try:
            self._log.write(data)
            self._log.flush()
        except (OSError, ValueError) as e:
            self._notes.append(f"writing the log {self.log_path} failed, log incomplete: {e}")
            log, self._log = self._log, None
            with contextlib.suppress(OSError, ValueError):
                log.close()

    def _reader(self, pipe: IO[bytes], lines: queue.Queue[object]) -> None:
        try:
            for raw in iter(lambda: pipe.readline(_MAX_LINE_BYTES), b""):
                self._log_write(raw)
                lines.put(raw)
        except (OSError, ValueError):
            pass
        finally:
            lines.put(_EOF)

    def _handle(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if self.on_output is not None:
            try:
                self.on_output(line)
            except OSError as e:
                # The console went away (closed pipe, hung-up terminal): the job and its
                # log carry on; only the console copy stops.
                self._notes.append(f"console output stopped: {e}")
                self.on_output = None
            except Exception as e:
                self._fail_callback(e, "on_output")
        if self.on_line is not None and not self._stopped_by_callback and self._callback_error is None:
            try:
                wants_stop = self.on_line(line)
            except Exception as e:
                self._fail_callback(e, "on_line")
                return
            if wants_stop:
                self._stopped_by_callback = True
                self.stop("stop requested by the line callback")

    def _fail_callback(self, e: BaseException, which: str) -> None:
        if self._callback_error is None:
            self._callback_error = e
            self.stop(f"{which} callback raised {type(e).__name__}")

    def _kill_everything(self) -> None:
        self._killed = True
        proc, tree = self._proc, self._tree
        if proc is None or tree is None:
            return
        if proc.poll() is None:
            tree.refresh()
            _signal_group(proc.pid, signal.SIGKILL)
        for p in tree.alive():
            _signal_group(p.pgid, signal.SIGKILL)
            _signal_pid(p.pid, signal.SIGKILL)

    def _run(self) -> LaunchResult:
        if self.log_path is not None:
            try:
                self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in run()
            except OSError as e:
                raise LaunchError(f"cannot open the log file {self.log_path}: {e.strerror or e}") from e
        try:
            proc = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as e:
            self._log_write(
                f"# ckptctl launch: cannot start {json.dumps(list(self.argv))}: {e.strerror or e}\n".encode()
            )
            raise LaunchError(
                f"cannot start {self.argv[0]!r}: {e.strerror or e}",
                hint="check launch.torchrun in ckptctl.yaml (the launcher command)",
            ) from e
        started = _utcnow()
        self._proc = proc
        self._tree = tree = _JobTree(proc.pid)
        if self._stop_reason is not None:  # a signal arrived while starting
            self._term_at = time.monotonic()
            self._send_term()
        self._log_write(
            f"# ckptctl launch: started {_iso(started)} pid {proc.pid}\n"
            f"# ckptctl launch: argv {json.dumps(list(self.argv))}\n".encode()
        )
        assert proc.stdout is not None  # PIPE above
        lines: queue.Queue[object] = queue.Queue()
        reader = threading.Thread(target=self._reader, args=(proc.stdout, lines), name="ckptctl-launch-reader", daemon=True)
        reader.start()
        try:
            if self.on_start is not None:
                self.on_start(self)
            self._supervise(proc, tree, lines)
        except BaseException:
            # ckptctl itself is failing (KeyboardInterrupt without forwarding, a bug):
            # do not leave the job running without its supervisor.
            self.stop("ckptctl failed while supervising")
            self._wait_blocking(proc)
            raise
        finally:
            orphans = self._reap_leftovers(tree.alive)
            reader.join(timeout=_EOF_WAIT_S)
            if reader.is_alive():
                # A process the table never saw (a daemon that detached between two
                # looks) still holds the pipe: find it by the pipe itself.
                holders = _pipe_holders(proc.stdout.fileno())
                orphans += self._reap_leftovers(lambda: _still_running(holders))
                reader.join(timeout=_EOF_WAIT_S)
            self._drain(lines)
            if reader.is_alive():
                # Closing the pipe under the blocked reader could hang; leave the daemon thread be.
                self._notes.append("an unknown process still holds the job's output pipe; stopped reading")
            else:
                proc.stdout.close()
        ended = _utcnow()
        rc = proc.returncode
        assert rc is not None
        footer = f"# ckptctl launch: ended {_iso(ended)} returncode {rc}"
        if rc < 0:
            footer += f" ({signal_name(-rc)})"
        if self._stop_reason:
            footer += f"; stopped: {self._stop_reason}"
        self._log_write((footer + "\n").encode())
        if self._callback_error is not None:
            raise self._callback_error
        return LaunchResult(
            argv=self.argv,
            pid=proc.pid,
            returncode=rc,
            signal=signal_of(rc),
            log_path=self.log_path,
            started=started,
            ended=ended,
            stopped_by_callback=self._stopped_by_callback,
            interrupted_by=self._interrupted_by,
            stop_reason=self._stop_reason,
            killed=self._killed,
            orphans_killed=orphans,
            notes=tuple(self._notes),
        )

    def _drain(self, lines: queue.Queue[object]) -> bool:
        """Handle every queued line; True when the end of output was among them."""
        eof = False
        while True:
            try:
                item = lines.get_nowait()
            except queue.Empty:
                return eof
            if item is _EOF:
                eof = True
            elif isinstance(item, bytes):
                self._handle(item)

    def _supervise(self, proc: subprocess.Popen[bytes], tree: _JobTree, lines: queue.Queue[object]) -> None:
        eof = False
        exited_at: float | None = None
        refreshed_at = 0.0
        while True:
            try:
                item = lines.get(timeout=self.poll_s)
            except queue.Empty:
                item = None
            if item is _EOF:
                eof = True
            elif isinstance(item, bytes):
                self._handle(item)
            eof = self._drain(lines) or eof
            now = time.monotonic()
            running = proc.poll() is None
            if running and now - refreshed_at >= self.tree_refresh_s:
                tree.refresh()
                refreshed_at = now
            if running and not self._killed and (
                self._kill_now or (self._term_at is not None and now - self._term_at >= self.stop_grace_s)
            ):
                self._kill_everything()
            if not running:
                if eof:
                    return
                exited_at = exited_at if exited_at is not None else now
                if now - exited_at >= _EOF_WAIT_S:
                    return  # a leftover descendant holds the pipe: _reap_leftovers ends it

    def _wait_blocking(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            self._kill_everything()
            proc.wait()

    def _reap_leftovers(self, alive_now: Callable[[], list[_Proc]]) -> tuple[int, ...]:
        """End job processes that outlived the child: SIGTERM, then SIGKILL after the grace."""
        alive = alive_now()
        if not alive:
            return ()
        pids = tuple(sorted(p.pid for p in alive))
        self._notes.append(f"{len(pids)} process(es) of the job outlived it and were ended: {list(pids)}")
        for p in alive:
            _signal_group(p.pgid, signal.SIGTERM)
            _signal_pid(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + (0 if self._kill_now else self.stop_grace_s)
        while alive and time.monotonic() < deadline and not self._kill_now:
            time.sleep(self.poll_s)
            alive = alive_now()
        for p in alive:
            _signal_group(p.pgid, signal.SIGKILL)
            _signal_pid(p.pid, signal.SIGKILL)
            self._killed = True
        return pids



def run_supervised(argv: Sequence[str], **kwargs: Any) -> LaunchResult:
    """``Supervisor(argv, **kwargs).run()``."""
    return Supervisor(argv, **kwargs).run()
