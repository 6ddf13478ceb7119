#!/usr/bin/env python3
"""Write the port-proxy paths of docs/openapi.json.

The router's placeholders take one segment each, so the OpenSandbox port
proxy (src/api/opensandbox/proxy.c) is registered once per path depth and
method: /v1/sandboxes/{id}/proxy/{port}, .../{a}, ... .../{a}/{b}/{c}/{d}/{e}/{f}.
tests/unit/api/test_openapi.c wants each of them documented, so they are
generated here from the same two lists; run it after changing either:

    python3 scripts/openapi-proxy-paths.py
"""
import json
import os

DEPTH = 6  # segments after the port (proxy.c: depths[])
METHODS = ["get", "post", "put", "patch", "delete", "options"]  # proxy.c: methods[]
SEGMENTS = "abcdef"
BASE = "/v1/sandboxes/{id}/proxy/{port}"

doc_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "openapi.json")
with open(doc_path) as f:
    doc = json.load(f)
comp = doc["components"]


def error(description):
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


comp["responses"]["BadGateway"] = error("Nothing answered on that port of the sandbox.")
comp["responses"]["GatewayTimeout"] = error("The sandbox's server sent nothing for 60 s.")
comp["parameters"]["ProxyPort"] = {
    "name": "port", "in": "path", "required": True,
    "schema": {"type": "integer", "minimum": 1, "maximum": 65535},
    "description": "A port on the sandbox's own loopback (44772 is execd, 18080 the egress sidecar)."}

for path in [p for p in doc["paths"] if p.startswith(BASE)]:
    del doc["paths"][path]

responses = {
    "default": {"description": "The sandbox server's answer: its status, headers (less the hop-by-hop ones) and body (at most 16 MiB)."},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"},
    "409": error("The sandbox is not running, or the daemon runs with --net host (the sandbox's loopback is the host's)."),
    "502": {"$ref": "#/components/responses/BadGateway"},
    "504": {"$ref": "#/components/responses/GatewayTimeout"},
}
security = [{"openSandboxKey": []}, {"bearer": []}, {"clawToken": []}]
for depth in range(DEPTH + 1):
    segs = SEGMENTS[:depth]
    path = BASE + "".join("/{%s}" % s for s in segs)
    item = {"parameters": [{"$ref": "#/components/parameters/SandboxId"},
                           {"$ref": "#/components/parameters/ProxyPort"}] +
            [{"name": s, "in": "path", "required": True, "schema": {"type": "string"},
              "description": "Path segment %d after the port." % (i + 1)} for i, s in enumerate(segs)]}
    for m in METHODS:
        op = {"operationId": "proxy%s%d" % (m.capitalize(), depth),
              "summary": "%s to a port of the sandbox, %d path segment%s after it" % (m.upper(), depth, "" if depth == 1 else "s"),
              "description": "Sent on to the port on the sandbox's own loopback with the query and the request's headers (less the hop-by-hop ones); a GET asking to upgrade (WebSocket) that the sandbox's server answers with 101 is answered 101 too, then relayed both ways (docs/opensandbox.md).",
              "security": security, "tags": ["opensandbox-proxy"]}
        if m in ("post", "put", "patch"):
            op["requestBody"] = {"required": False, "content": {"*/*": {"schema": {}}}}
        op["responses"] = responses
        item[m] = op
    doc["paths"][path] = item

with open(doc_path, "w") as f:
    json.dump(doc, f, indent=2, ensure_ascii=False)
    f.write("\n")
