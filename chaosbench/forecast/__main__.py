"""`python -m chaosbench.forecast ...` is `chaosbench forecast ...`."""
import sys

from chaosbench.forecast.cli import main

sys.exit(main())
