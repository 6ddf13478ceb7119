"""ur-api check: the settings, the token's time left, whether the platform answers."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import urapi as common  # noqa: E402

common.need_settings()
base, token = common.settings()
c = common.claims(token) or {}
out = {"baseUrl": base, "token": bool(token), "subject": c.get("sub"),
       "tenant": c.get("tenant"), "expiresIn": int(c.get("exp", 0) - time.time())}
try:
    status, _ = common.call("GET", "/")
    out["reachable"] = True
    out["status"] = status
except OSError as e:
    out["reachable"] = False
    out["error"] = str(e)
print(json.dumps(out))
sys.exit(0 if out["reachable"] else 1)
