"""``python -m pacore_emulator``: serve until stopped (see :func:`pacore_emulator.process.main`)."""

import sys

from pacore_emulator.process import main

sys.exit(main())
