"""`python -m localspec` and the `localspec` command."""

import signal


def main() -> None:
    """Run the command line. Importing the commands takes a moment: Ctrl-C then ends it quietly too."""
    try:
        from .cli import main as run_command
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    try:
        run_command()
    finally:
        _done_with_signals()


def _done_with_signals() -> None:
    """The command has ended: a Ctrl-C (or a SIGTERM or SIGHUP a command raises as one) in the instant before the
    process exits is ignored, not raised inside the objects Python frees then ("Exception ignored in ...
    __del__", a traceback, and the command's status lost)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) not in (signal.SIG_DFL, signal.SIG_IGN):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


if __name__ == "__main__":
    main()
