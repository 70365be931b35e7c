"""``python -m warpsched`` is the ``warpsched`` command."""
import sys

from .cli import main

sys.exit(main())
