"""``python -m autotune`` and the console script: Ctrl-C is taken over before the command
line's imports (:mod:`autotune.startup`), which take a second or more."""

from __future__ import annotations

from autotune.startup import starting


def main() -> None:
    """Run the command line (a Ctrl-C while it starts up: one line, exit status 130)."""
    starting()
    from autotune.cli.app import main as run

    run()


if __name__ == "__main__":
    main()
