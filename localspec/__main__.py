"""`python -m localspec` and the `localspec` command."""


def main() -> None:
    """Run the command line. Importing the commands takes a moment: Ctrl-C then ends it quietly too."""
    try:
        from .cli import main as run_command
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    run_command()


if __name__ == "__main__":
    main()
