"""`python -m tree_search frontier|debias ...`: the same commands as `entmtp search ...`."""

import sys

from tree_search.cli import main

if __name__ == "__main__":
    sys.exit(main())
