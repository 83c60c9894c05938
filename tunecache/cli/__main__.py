"""``python -m tunecache.cli``: the ``tunecache`` command."""

import sys

from tunecache.cli.main import main

sys.exit(main())
