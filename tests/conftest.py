"""Suite-wide settings."""

from __future__ import annotations

import os

from devstack.aws_faithful import ENV_SG_RELEASE

# AWS keeps a deleted load balancer's security group in use for minutes (the devstack's default hold is 120 s):
# the suite shortens it to a second, which still makes every delete take the controller's retry path once.
os.environ.setdefault(ENV_SG_RELEASE, "1")
