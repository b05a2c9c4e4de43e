"""`python -m persalign.cli ARGS...` is `persalign ARGS...`."""

import sys

from persalign.cli.commands import main

sys.exit(main())
