"""``python -m lenbench.leaderboard``: the console script ``lenbench-leaderboard``."""

from lenbench.leaderboard.document import main

if __name__ == "__main__":
    raise SystemExit(main())
