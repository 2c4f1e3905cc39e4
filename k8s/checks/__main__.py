"""`python -m k8s.checks`: the same as `python k8s/check.py`."""

import sys

from k8s.checks.cli import main

sys.exit(main())
