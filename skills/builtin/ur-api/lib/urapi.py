"""Shared by the ur-api actions: the platform's address and token, one call."""
import base64
import json
import os
import sys
import urllib.error
import urllib.request


def settings():
    base = os.environ.get("UR_BASE_URL", "").rstrip("/")
    token = os.environ.get("UR_TOKEN", "")
    return base, token


def claims(token):
    """The token's payload (not verified here: the platform does that)."""
    try:
        part = token.split(".")[1]
        part += "=" * (-len(part) % 4)
        return json.loads(base64.urlsafe_b64decode(part))
    except (IndexError, ValueError):
        return None


def call(method, path, body=None, timeout=20):
    """(status, text) of one request to the platform with the token."""
    base, token = settings()
    data = None if body is None else body.encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def need_settings():
    base, token = settings()
    if not base or not token:
        print("ur-api: UR_BASE_URL and UR_TOKEN must be set (the daemon's "
              "skills.ur_base_url)", file=sys.stderr)
        sys.exit(2)
