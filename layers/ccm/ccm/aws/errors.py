"""The drivers' name for ccm.errors (the one reader of an AWS error's code and message, shared with the runtimes
and controllers, which must not import ccm.aws)."""

from __future__ import annotations

from ccm.errors import error_code as error_code
from ccm.errors import error_message as error_message
from ccm.errors import error_text as error_text
from ccm.errors import response_error_code as response_error_code
