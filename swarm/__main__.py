import sys

from swarm.cli import main

sys.exit(main())
