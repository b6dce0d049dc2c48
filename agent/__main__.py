import sys

from agent.agent import main

sys.exit(main(sys.argv[1:]))
