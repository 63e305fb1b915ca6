"""Schemathesis hooks of the conformance run (``test_conformance.py``): the check that one user never sees
another's items.

Loaded by the schemathesis command line through ``SCHEMATHESIS_HOOKS``; the other user's id and secrets (its
device token, push tokens, update token) come in ``SIGHTSCREEN_OTHER_USER_SECRETS`` as a JSON list. Every
answer the generated requests get, whatever their status, must contain none of them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis

SECRETS: list[str] = json.loads(os.environ.get("SIGHTSCREEN_OTHER_USER_SECRETS", "[]"))


@schemathesis.check
def no_other_users_items(ctx: Any, response: Any, case: Any) -> None:
    """No answer to the token's user names another user or carries another user's tokens."""
    text = response.text if isinstance(response.text, str) else ""
    leaked = [s for s in SECRETS if s and s in text]
    if leaked:
        raise AssertionError(f"an answer carries another user's items: {[s[:12] for s in leaked]}")
