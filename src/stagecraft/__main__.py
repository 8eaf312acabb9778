"""`python -m stagecraft inspect ...`: see `stagecraft.cli`."""
from __future__ import annotations

import sys

from stagecraft.cli import main

if __name__ == "__main__":
  sys.exit(main())
