"""`python -m fastmmeval ...`, like `python -m lmms_eval ...`."""

import sys

from fastmmeval.cli import main

sys.exit(main())
