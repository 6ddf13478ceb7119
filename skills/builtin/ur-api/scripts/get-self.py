"""ur-api get-self: the platform's record of the calling user (with tenant)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import urapi as common  # noqa: E402

common.need_settings()
body = sys.argv[1] if len(sys.argv) > 1 else '{"withTenant":true}'
try:
    status, text = common.call("POST", "/api/v1/system/user/self/get-one", body)
except OSError as e:
    print("ur-api: the platform cannot be reached: %s" % e, file=sys.stderr)
    sys.exit(1)
print(text)
sys.exit(0 if 200 <= status < 300 else 1)
