"""`python -m lab_cli ...`: see `lab_cli.cli`."""

import sys

from lab_cli.cli import main

sys.exit(main())
