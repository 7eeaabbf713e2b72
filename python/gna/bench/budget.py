"""A time budget for one benchmark row: a peer whose mask build, compilation or timing runs
longer is cut off, and its row says why, so that one slow peer cannot hold up a whole run."""
import contextlib
import signal
import threading


class BudgetExceeded(Exception):
    """The block ran past its budget."""


@contextlib.contextmanager
def time_budget(seconds, what):
    """Raises BudgetExceeded ("WHAT exceeded its N s budget") in the block once it has run for
    `seconds`. A timer signal (SIGALRM) interrupts Python code; a long call into a C extension
    is cut off when it returns to Python. No budget where seconds <= 0, off a Unix main thread,
    or where a timer of the process is already running."""
    usable = (seconds > 0 and hasattr(signal, "setitimer") and
              threading.current_thread() is threading.main_thread() and
              signal.getitimer(signal.ITIMER_REAL)[0] == 0)
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise BudgetExceeded(f"{what} exceeded its {seconds:g} s budget")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
