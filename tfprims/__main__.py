"""``python -m tfprims inspect ...``: the same as the ``tfprims`` console script."""

import sys

from tfprims.cli import main

if __name__ == "__main__":
  sys.exit(main())
