import sys

from draftsmith.framework.cli import main

sys.exit(main())
