import sys

from pilot.agent.agent import main

sys.exit(main(sys.argv[1:]))
