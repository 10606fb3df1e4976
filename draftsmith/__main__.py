import sys

from .framework.cli.main import main

sys.exit(main())
