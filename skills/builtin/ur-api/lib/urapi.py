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


def opener():
    """Through the sandbox's egress proxy when it has one, whatever NO_PROXY
    says (the platform may be one of the operator's internal targets)."""
    for k in ("no_proxy", "NO_PROXY"):
        os.environ.pop(k, None)
    proxies = {k: os.environ[v] for k, v in (("http", "http_proxy"), ("https", "https_proxy"))
               if os.environ.get(v)}
    return urllib.request.build_opener(urllib.request.ProxyHandler(proxies))


def call(method, path, body=None, timeout=20):
    """(status, text) of one request to the platform with the token."""
    base, token = settings()
    data = None if body is None else body.encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with opener().open(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def need_settings():
    base, token = settings()
    if not base or not token:
        print("ur-api: UR_BASE_URL and UR_TOKEN must be set (the daemon's "
              "skills.ur_base_url)", file=sys.stderr)
        sys.exit(2)
