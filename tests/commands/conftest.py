"""Fixtures of the packages whose commands are tested here: the admin server (``tests.runtime``) for ``ctl``,
the APNs signing key (``tests.apns``) for ``apns-server``."""

from tests.apns.conftest import signing_key
from tests.runtime.conftest import admin

__all__ = ["admin", "signing_key"]
