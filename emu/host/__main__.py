"""`python -m emu.host`: the host doctor (emu.host.doctor)."""

import sys

from emu.host.doctor import main

sys.exit(main(sys.argv[1:]))
