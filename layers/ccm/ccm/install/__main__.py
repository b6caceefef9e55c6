import sys

from ccm.install.cli import main

sys.exit(main())
