"""Entry point: `python -m ccm.doctor --cluster NAME --region R --stack STACK [--before-deploy] [--json]`."""

import sys

from ccm.doctor.cli import main

sys.exit(main())
