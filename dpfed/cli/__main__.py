"""``python -m dpfed.cli``: the same as the ``dpfed`` command."""
import sys

from dpfed.cli import main

sys.exit(main())
