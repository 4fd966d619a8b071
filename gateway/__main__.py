import sys

from gateway.process.cli import main

sys.exit(main())
