import sys

from pilot.cli import main

sys.exit(main())
