"""``python -m leasekit.cli``: the same command line as the ``leasekit`` script.

Exits with the code ``main`` returns.
"""

import sys

from . import main

sys.exit(main())
