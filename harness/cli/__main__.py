"""``python -m harness.cli``: the ``kern`` command without its console script (the device
scripts in bench/ and the tests start it so)."""
import sys

from . import main

sys.exit(main())
