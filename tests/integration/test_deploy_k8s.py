"""deploy/k8s/ and the Helm chart deploy/helm/sandbox, checked offline:
every manifest against Kubernetes' API (npm kubernetes-models: its schemas'
validate() for required fields and types, and its TypeScript interfaces
through tsc for fields the API does not have), the chart rendered by a Go
text/template renderer of the functions it uses (tests/integration/helmrender,
standard library only), then what sandboxd needs checked on both: the
minimum securityContext, probes on /healthz and /readyz, the state directory
on a volume, resources above the daemon's aggregate caps, every reference
(Secret, ConfigMap, ServiceAccount, Service selector, named port) resolved,
the chart and the plain manifests alike, and the ConfigMap's sandboxd.yaml
accepted by the real daemon. Broken manifests and values must be caught."""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import ServeDaemon, Suite, check, go_env, npm_clients  # noqa: E402

S = Suite("deploy_k8s")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
K8S = os.path.join(ROOT, "deploy", "k8s")
CHART = os.path.join(ROOT, "deploy", "helm", "sandbox")
CHECKER = os.path.join(HERE, "deploy_k8s_check.mjs")
TMP = tempfile.mkdtemp(prefix="sbx-k8s-")
RENDER = os.path.join(TMP, "helmrender")
NODE24, _CLIENTS = npm_clients()
CACHE = os.path.dirname(os.path.dirname(_CLIENTS))
MODULES = os.path.join(CACHE, "deploy", "node_modules")
TSC = os.path.join(CACHE, "tools", "node_modules", "typescript", "bin", "tsc")
# What a sandbox needs of its pod (docs/fleet.md; the systemd unit's set).
CAPS = {"SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "MKNOD"}
TOKEN = "k8s-config-check-token-0123456789"


def node(*args):
    p = subprocess.run([NODE24, CHECKER] + list(args), capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, SBX_DEPLOY_MODULES=MODULES))
    return p


def yaml_docs(*files):
    p = node("tojson", *files)
    check(p.returncode == 0, "YAML parses", p.stderr)
    return json.loads(p.stdout)


def kube_check(*files):
    """(documents, errors) of kubernetes-models' validate() and tsc."""
    p = node("check", TSC, *files)
    check(p.returncode == 0, "the checker ran", p.stderr)
    r = json.loads(p.stdout)
    return r["docs"], r["errors"]


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def render(**values):
    """The chart rendered with its values.yaml and these overrides (top-level
    keys replaced): (returncode, rendered text or the error)."""
    v = yaml_docs(os.path.join(CHART, "values.yaml"))[0]
    v.update(values)
    chart = yaml_docs(os.path.join(CHART, "Chart.yaml"))[0]
    ctx = {"values": v, "chart": chart, "release": {"name": "fleet", "namespace": "sandbox"}}
    p = subprocess.run([RENDER, CHART], input=json.dumps(ctx), capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout if p.returncode == 0 else p.stderr


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def needs(docs):
    """What sandboxd needs of its manifests; raises AssertionError naming the
    first thing missing."""
    k = by_kind(docs)
    ds = (k.get("DaemonSet") or k.get("StatefulSet") or [None])[0]
    check(ds is not None, "a DaemonSet (or StatefulSet)", list(k))
    ns = ds["metadata"].get("namespace")
    for d in docs:
        if d["kind"] != "Namespace":
            check(d["metadata"].get("namespace") == ns, "one namespace for all", d["metadata"])
    pod = ds["spec"]["template"]
    spec = pod["spec"]
    check(ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(),
          "the selector matches the pod's labels", ds["spec"])
    (c,) = [c for c in spec["containers"] if c["name"] == "sandboxd"]
    sc = c.get("securityContext", {})
    check(not sc.get("privileged"), "not privileged", sc)
    check(sc.get("runAsUser") == 0, "root (ids mapping, cgroups)", sc)
    check(sc["capabilities"]["drop"] == ["ALL"], "drops ALL", sc)
    check(set(sc["capabilities"]["add"]) == CAPS, "adds exactly %s" % sorted(CAPS), sc)
    sp = sc.get("seccompProfile") or spec.get("securityContext", {}).get("seccompProfile") or {}
    check(sp.get("type") in ("Unconfined", "Localhost"),
          "seccomp Unconfined or a profile (the default refuses pivot_root)", sp)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        g = c[probe]["httpGet"]
        check(g["path"] == path and (g["port"] in ports or g["port"] in ports.values()),
              "%s on %s" % (probe, path), c[probe])
    args = c["args"]
    state = args[args.index("--state-dir") + 1]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    check(state in mounts, "the state dir %s on a volume" % state, mounts)
    vols = {v["name"]: v for v in spec["volumes"]}
    sv = vols[mounts[state]]
    check("hostPath" in sv or "persistentVolumeClaim" in sv or "ephemeral" in sv,
          "the state volume outlives the container", sv)
    cfg = args[args.index("--config") + 1]
    cv = vols[mounts[os.path.dirname(cfg)]]
    cms = {d["metadata"]["name"]: d for d in k.get("ConfigMap", [])}
    check(cv["configMap"]["name"] in cms, "the config's ConfigMap exists", cv)
    check(os.path.basename(cfg) in cms[cv["configMap"]["name"]]["data"], "it holds " + cfg)
    secrets = {d["metadata"]["name"]: d for d in k.get("Secret", [])}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["name"] in secrets:
            s = secrets[ref["name"]]
            check(ref["key"] in s.get("data", {}) or ref["key"] in s.get("stringData", {}),
                  "the Secret holds " + ref["key"], s)
    sas = {d["metadata"]["name"] for d in k.get("ServiceAccount", [])}
    check(spec.get("serviceAccountName") in sas, "the ServiceAccount exists", sas)
    res = c["resources"]
    check(res.get("requests") and res.get("limits", {}).get("memory"), "requests and limits", res)
    (svc,) = k["Service"]
    check(svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items(),
          "the Service selects the pods", svc["spec"])
    for p in svc["spec"]["ports"]:
        check(p["targetPort"] in ports or p["targetPort"] in ports.values(),
              "the Service's target port exists", p)
    return ds, c, cms[cv["configMap"]["name"]]["data"][os.path.basename(cfg)]


def gib(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 1e3, "M": 1e6, "G": 1e9,
             "g": 1 << 30, "m": 1 << 20}
    for u, f in units.items():
        if str(q).endswith(u):
            return float(str(q)[:-len(u)]) * f
    return float(q)


def builds_the_renderer_offline():
    p = subprocess.run(["go", "build", "-o", RENDER, "."], cwd=os.path.join(HERE, "helmrender"),
                       env=go_env(TMP), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and os.path.exists(RENDER), "go build (standard library only)", p)


PLAIN = {}


def manifests_are_valid_kubernetes():
    files = sorted(os.path.join(K8S, f) for f in os.listdir(K8S) if f.endswith(".yaml"))
    docs, errors = kube_check(*files)
    check(errors == [], "kubernetes-models: no error", errors)
    kinds = sorted(d["kind"] for d in docs)
    check(kinds == ["ConfigMap", "DaemonSet", "Namespace", "Secret", "Service",
                    "ServiceAccount"], "the six kinds", kinds)
    ns = by_kind(docs)["Namespace"][0]
    check(ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "privileged",
          "the namespace admits the pod (Pod Security: privileged)", ns)
    PLAIN["docs"] = docs
    ds, c, config = needs(docs)
    PLAIN["container"], PLAIN["config"] = c, config


def broken_manifests_are_caught():
    text = open(os.path.join(K8S, "daemonset.yaml")).read()
    for what, bad in (("a misspelt field", text.replace("securityContext:", "securityContex:")),
                      ("a missing container name", text.replace("- name: sandboxd\n          image",
                                                                "- image")),
                      ("a port as text", text.replace("containerPort: 8080",
                                                      'containerPort: "8080"')),
                      ("a bad enum", text.replace("protocol: TCP", "protocol: TPC"))):
        check(bad != text, "the mutation applies: " + what)
        _, errors = kube_check(write("bad.yaml", bad))
        check(errors, what + " is reported", bad[:0])
    # What sandboxd needs: a valid manifest can still miss it.
    for what, mutate in (
            ("a capability less", lambda c: c["securityContext"]["capabilities"]["add"].remove(
                "SYS_ADMIN")),
            ("the runtime's default seccomp", lambda c: c["securityContext"].update(
                seccompProfile={"type": "RuntimeDefault"})),
            ("no readiness on /readyz", lambda c: c["readinessProbe"]["httpGet"].update(
                path="/healthz")),
            ("the state dir on the container's layer", lambda c: c.update(volumeMounts=[
                m for m in c["volumeMounts"] if m["mountPath"] != "/var/lib/sandbox"]))):
        docs = copy.deepcopy(PLAIN["docs"])
        ds = by_kind(docs)["DaemonSet"][0]
        mutate(ds["spec"]["template"]["spec"]["containers"][0])
        try:
            needs(docs)
        except AssertionError:
            continue
        raise AssertionError(what + ": not caught")


def config_is_accepted_by_sandboxd():
    """The ConfigMap's sandboxd.yaml, loaded by the real daemon (the
    listen address and the caps overridden by flags, for this machine)."""
    for label, config in (("deploy/k8s", PLAIN["config"]), ("chart", RENDERED.get("config"))):
        check(config, label + ": a config")
        path = write("sandboxd-%s.yaml" % label.replace("/", "-"), config)
        d = ServeDaemon(os.path.join(TMP, "state-" + label.replace("/", "-")), TOKEN, config=path)
        d.start()
        try:
            st, b, _ = d.req("GET", "/readyz", token=None)
            check(st == 200, label + ": ready with its config", (st, b))
        finally:
            d.stop()
    # The pod's limits stay above the caps of all its sandboxes together.
    c = PLAIN["container"]
    cfg = yaml_docs(write("cfg.yaml", PLAIN["config"]))[0]["sandbox"]
    check(gib(c["resources"]["limits"]["memory"]) > gib(cfg["total_memory"]),
          "memory limit above total_memory", (c["resources"], cfg))
    check(float(c["resources"]["limits"]["cpu"]) >= float(cfg["total_cpu"]),
          "cpu limit at or above total_cpu", (c["resources"], cfg))


RENDERED = {}


def chart_renders_valid_kubernetes():
    rc, out = render(apiToken="a-token-for-the-test")
    check(rc == 0, "rendered", out)
    path = write("rendered.yaml", out)
    docs, errors = kube_check(path)
    check(errors == [], "kubernetes-models: no error", errors)
    kinds = sorted(d["kind"] for d in docs)
    check(kinds == ["ConfigMap", "DaemonSet", "Secret", "Service", "ServiceAccount"],
          "the chart's five kinds (the namespace is the release's)", kinds)
    ds, c, config = needs(docs)
    RENDERED["config"] = config
    secret = by_kind(docs)["Secret"][0]
    check(secret["data"]["api-token"] == "YS10b2tlbi1mb3ItdGhlLXRlc3Q=", "the token, base64",
          secret)
    # The chart and the plain manifests do not drift apart.
    p = PLAIN["container"]
    for key in ("args", "ports", "livenessProbe", "readinessProbe", "securityContext",
                "resources", "volumeMounts", "image", "imagePullPolicy"):
        check(c[key] == p[key], "chart and deploy/k8s agree on " + key, (c[key], p[key]))
    check(yaml_docs(write("a.yaml", config)) == yaml_docs(write("b.yaml", PLAIN["config"])),
          "the same sandboxd.yaml", (config, PLAIN["config"]))


def chart_values_are_honoured():
    rc, out = render()
    check(rc != 0 and "apiToken" in out, "no token: render fails naming apiToken", (rc, out))
    rc, out = render(existingSecret="ops-token", nodeSelector={"sandbox/node": "yes"},
                     tolerations=[{"key": "sandbox", "operator": "Exists",
                                   "effect": "NoSchedule"}],
                     image={"repository": "registry.example/sandbox", "tag": "",
                            "pullPolicy": "Always"},
                     seccompProfile={"type": "Localhost",
                                     "localhostProfile": "profiles/sandboxd.json"})
    check(rc == 0, "rendered", out)
    docs, errors = kube_check(write("rendered2.yaml", out))
    check(errors == [], "kubernetes-models: no error", errors)
    k = by_kind(docs)
    check("Secret" not in k, "an existing Secret: none made", list(k))
    spec = k["DaemonSet"][0]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    check(c["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "ops-token", "the existing Secret",
          c["env"])
    check(spec["nodeSelector"] == {"sandbox/node": "yes"} and
          spec["tolerations"][0]["key"] == "sandbox", "nodeSelector and tolerations", spec)
    check(c["image"] == "registry.example/sandbox:dev", "the tag defaults to appVersion",
          c["image"])
    check(c["securityContext"]["seccompProfile"] == {
        "type": "Localhost", "localhostProfile": "profiles/sandboxd.json"}, "a seccomp profile",
        c["securityContext"])
    # A value of the wrong type reaches the checker, which says so.
    rc, out = render(apiToken="t", terminationGracePeriodSeconds="thirty")
    check(rc == 0, "rendered", out)
    _, errors = kube_check(write("rendered3.yaml", out))
    check(any("terminationGracePeriodSeconds" in e for e in errors), "a bad value is caught",
          errors)


try:
    for fn in (builds_the_renderer_offline, manifests_are_valid_kubernetes,
               broken_manifests_are_caught, chart_renders_valid_kubernetes,
               config_is_accepted_by_sandboxd, chart_values_are_honoured):
        S.case(fn)
finally:
    shutil.rmtree(TMP, True)
S.finish()
