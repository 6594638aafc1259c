"""``python -m shooting``: the command line, as ``shooting-codegen``."""

import sys

from shooting.cli import main

if __name__ == "__main__":
    sys.exit(main())
